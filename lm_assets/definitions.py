"""The lm-assets code location: each domain's Definitions (lm_assets/defs/<domain>/definitions.py),
the jobs, sensors and schedule that move shards through them (defs/automation.py), the sensor that
ends runs whose worker died (defs/run_workers.py), and the resources every domain shares."""

import dagster as dg

from lm_assets.defs import automation, run_workers
from lm_assets.defs.compression import definitions as compression_domain
from lm_assets.defs.curation import definitions as curation_domain
from lm_assets.defs.decontam import definitions as decontam_domain
from lm_assets.defs.dedup import definitions as dedup_domain
from lm_assets.defs.evaluation import definitions as evaluation_domain
from lm_assets.defs.ingest import definitions as ingest_domain
from lm_assets.defs.quality import definitions as quality_domain
from lm_assets.defs.sft import definitions as sft_domain
from lm_assets.defs.common.resources import default_resources
from lm_assets.defs.tokens import definitions as tokens_domain
from lm_assets.defs.training import definitions as training_domain

# A list, not a merged Definitions: a code location holds one Definitions object at module scope.
DOMAINS = [
    ingest_domain.defs,
    curation_domain.defs,
    quality_domain.defs,
    dedup_domain.defs,
    decontam_domain.defs,
    tokens_domain.defs,
    training_domain.defs,
    sft_domain.defs,
    evaluation_domain.defs,
    compression_domain.defs,
    automation.defs,
    run_workers.defs,
]
defs = dg.Definitions.merge(
    *DOMAINS,
    dg.Definitions(
        sensors=[automation.automation_condition_sensor([a for domain in DOMAINS for a in domain.assets or []])],
        resources=default_resources(),
        # Shard partitions are small: one process per run beats a process per step. Point this at
        # dagster-k8s's executor (or a run launcher) to scale out.
        executor=dg.in_process_executor,
    ),
)
