"""The lm-assets code location."""

import dagster as dg

from lm_assets.defs.automation import (
    dedup_job,
    deduplicated_shard_job,
    packing_job,
    quality_classifier_job,
    shard_ingest_job,
    curated_shard_job,
    tokenized_shard_job,
    tokenizer_job,
    training_job,
    landing_sensor,
    nightly_curation_refresh,
    shard_curation_job,
)
from lm_assets.defs.curated import curated_shard, curated_with_current_classifier, extracted_shard
from lm_assets.defs.dedup import DedupSettings, dedup_clusters, deduplicated_shard, minhash_signatures
from lm_assets.defs.expectations import curated_expectations
from lm_assets.defs.evaluation import (
    ceval_score,
    checkpoint_evaluation_sensor,
    evaluation_job,
    mmlu_score,
    perplexity,
)
from lm_assets.defs.quality import quality_classifier, quality_labels
from lm_assets.defs.raw import raw_shard
from lm_assets.defs.training import TrainingLauncher, training
from lm_assets.defs.tokens import (
    decontaminated_shard,
    packed_dataset,
    tokenized_shard,
    tokenized_with_current_tokenizer,
    tokenizer,
)
from lm_assets.defs.resources import default_resources, s3_resource_from_env

s3 = s3_resource_from_env()
defs = dg.Definitions(
    assets=[
        raw_shard,
        extracted_shard,
        quality_labels,
        quality_classifier,
        curated_shard,
        minhash_signatures,
        dedup_clusters,
        deduplicated_shard,
        decontaminated_shard,
        tokenizer,
        tokenized_shard,
        packed_dataset,
        training,
        perplexity,
        mmlu_score,
        ceval_score,
    ],
    asset_checks=[curated_expectations, curated_with_current_classifier, tokenized_with_current_tokenizer],
    jobs=[
        shard_curation_job,
        shard_ingest_job,
        quality_classifier_job,
        curated_shard_job,
        dedup_job,
        deduplicated_shard_job,
        tokenizer_job,
        tokenized_shard_job,
        packing_job,
        training_job,
        evaluation_job,
    ],
    sensors=[landing_sensor, checkpoint_evaluation_sensor],
    schedules=[nightly_curation_refresh],
    resources={**default_resources(s3), "dedup": DedupSettings(), "training_launcher": TrainingLauncher(s3=s3)},
    # Shard partitions are small: one process per run beats a process per step. Point this at
    # dagster-k8s's executor (or a run launcher) to scale out.
    executor=dg.in_process_executor,
)
