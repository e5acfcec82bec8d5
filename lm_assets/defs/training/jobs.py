"""The training job: one run of the training program, and the checkpoints it saves."""

from lm_assets.defs.common.jobs import workload_job

training_job = workload_job(
    "training_job", "training", ("training_run", "checkpoint"), "Train on the packed dataset and export the checkpoint."
)

JOBS = [training_job]
