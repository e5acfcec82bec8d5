import dagster as dg

from lm_assets.corpus.ingest import readers
from lm_assets.defs.common.catalog import CORPUS_TEAM, catalogued, source_version
from lm_assets.defs.ingest.assets import raw_shard
from lm_assets.defs.ingest.jobs import JOBS

defs = dg.Definitions(
    assets=catalogued([raw_shard], CORPUS_TEAM, {"raw_shard": source_version(readers)}),
    jobs=JOBS,
)
