import dagster as dg

from lm_assets import compression
from lm_assets.defs.common.catalog import EVALUATION_TEAM, catalogued, source_version
from lm_assets.defs.compression.assets import compressed_checkpoint
from lm_assets.defs.compression.jobs import compression_job

defs = dg.Definitions(
    assets=catalogued([compressed_checkpoint], EVALUATION_TEAM, {"compressed_checkpoint": source_version(compression)}),
    jobs=[compression_job],
)
