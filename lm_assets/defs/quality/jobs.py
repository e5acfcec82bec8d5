"""The job that reads the quality labels and trains the quality classifier on them."""

from lm_assets.defs.common.jobs import workload_job

quality_classifier_job = workload_job(
    "quality_classifier_job", "quality", ("quality_labels", "quality_classifier"),
    "Read the quality labels and train the quality classifier on them.",
)

JOBS = [quality_classifier_job]
