import dagster as dg

from lm_assets.defs.ingest.assets import raw_shard

defs = dg.Definitions(assets=[raw_shard])
