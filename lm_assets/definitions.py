"""The lm-assets code location: each domain's Definitions (lm_assets/defs/<domain>/definitions.py),
the jobs, sensor and schedule that move shards through them (defs/automation.py), and the resources
every domain shares."""

import dagster as dg

from lm_assets.defs import automation
from lm_assets.defs.curation import definitions as curation
from lm_assets.defs.decontam import definitions as decontam
from lm_assets.defs.dedup import definitions as dedup
from lm_assets.defs.evaluation import definitions as evaluation
from lm_assets.defs.ingest import definitions as ingest
from lm_assets.defs.quality import definitions as quality
from lm_assets.defs.common.resources import default_resources
from lm_assets.defs.tokens import definitions as tokens
from lm_assets.defs.training import definitions as training

defs = dg.Definitions.merge(
    ingest.defs,
    curation.defs,
    quality.defs,
    dedup.defs,
    decontam.defs,
    tokens.defs,
    training.defs,
    evaluation.defs,
    automation.defs,
    dg.Definitions(
        resources=default_resources(),
        # Shard partitions are small: one process per run beats a process per step. Point this at
        # dagster-k8s's executor (or a run launcher) to scale out.
        executor=dg.in_process_executor,
    ),
)
