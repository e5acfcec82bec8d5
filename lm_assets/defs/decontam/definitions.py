import dagster as dg

from lm_assets.corpus.decontam import contamination
from lm_assets.defs.common.catalog import CORPUS_TEAM, catalogued, source_version
from lm_assets.defs.decontam.assets import decontaminated_shard

defs = dg.Definitions(
    assets=catalogued([decontaminated_shard], CORPUS_TEAM, {"decontaminated_shard": source_version(contamination)}),
)
