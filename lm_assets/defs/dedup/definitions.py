import dagster as dg

from lm_assets.defs.dedup.assets import DedupSettings, dedup_clusters, deduplicated_shard, minhash_signatures

defs = dg.Definitions(assets=[minhash_signatures, dedup_clusters, deduplicated_shard], resources={"dedup": DedupSettings()})
