"""The lm-assets code location: each domain's Definitions (lm_assets/defs/<domain>/definitions.py),
the jobs, sensor and schedule that move shards through them (defs/automation.py), and the resources
every domain shares."""

import dagster as dg

from lm_assets.defs.automation import defs as automation
from lm_assets.defs.curation.definitions import defs as curation
from lm_assets.defs.dedup.definitions import defs as dedup
from lm_assets.defs.evaluation.definitions import defs as evaluation
from lm_assets.defs.ingest.definitions import defs as ingest
from lm_assets.defs.resources import default_resources
from lm_assets.defs.tokens.definitions import defs as tokens
from lm_assets.defs.training.definitions import defs as training

defs = dg.Definitions.merge(
    ingest,
    curation,
    dedup,
    tokens,
    training,
    evaluation,
    automation,
    dg.Definitions(
        resources=default_resources(),
        # Shard partitions are small: one process per run beats a process per step. Point this at
        # dagster-k8s's executor (or a run launcher) to scale out.
        executor=dg.in_process_executor,
    ),
)
