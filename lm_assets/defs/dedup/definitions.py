import dagster as dg

from lm_assets.corpus import dedup, minhash
from lm_assets.defs.catalog import CORPUS_TEAM, catalogued, source_version
from lm_assets.defs.dedup.assets import DedupSettings, dedup_clusters, deduplicated_shard, minhash_signatures

defs = dg.Definitions(
    assets=catalogued(
        [minhash_signatures, dedup_clusters, deduplicated_shard],
        CORPUS_TEAM,
        {
            "minhash_signatures": source_version(minhash),
            "dedup_clusters": source_version(dedup, minhash),
            "deduplicated_shard": source_version(dedup),
        },
    ),
    resources={"dedup": DedupSettings()},
)
