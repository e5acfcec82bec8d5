import dagster as dg
from lm_assets import training

from lm_assets.defs.common.catalog import TRAINING_TEAM, catalogued, source_version
from lm_assets.defs.common.resources import s3_resource_from_env
from lm_assets.defs.training.assets import TrainingLauncher, training_run_and_checkpoint
from lm_assets.defs.training.jobs import JOBS

# The run and its checkpoints are made by the training program, whole.
PROGRAM_VERSION = source_version(training)

defs = dg.Definitions(
    jobs=JOBS,
    assets=catalogued([training_run_and_checkpoint], TRAINING_TEAM, {"training_run": PROGRAM_VERSION, "checkpoint": PROGRAM_VERSION}),
    resources={
        "training_launcher": TrainingLauncher(s3=s3_resource_from_env()),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    },
)
