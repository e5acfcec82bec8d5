import dagster as dg

from lm_assets.corpus.dedup import (
    clustering,
    decisions,
    duckdb_session,
    global_dedup,
    incremental,
    minhash,
    ranking,
    sketches,
    union_find,
)
from lm_assets.defs.common.catalog import CORPUS_TEAM, catalogued, source_version
from lm_assets.defs.dedup.assets import (
    DedupSettings,
    dedup_clusters,
    dedup_edges,
    deduplicated_shard,
    minhash_signatures,
)
from lm_assets.defs.dedup.jobs import JOBS

defs = dg.Definitions(
    jobs=JOBS,
    assets=catalogued(
        [minhash_signatures, dedup_edges, dedup_clusters, deduplicated_shard],
        CORPUS_TEAM,
        {
            "minhash_signatures": source_version(minhash, sketches),
            "dedup_edges": source_version(ranking, duckdb_session, global_dedup, minhash),
            "dedup_clusters": source_version(
                global_dedup, incremental, clustering, ranking, union_find, duckdb_session, decisions, minhash
            ),
            "deduplicated_shard": source_version(decisions),
        },
    ),
    resources={"dedup": DedupSettings()},
)
