import dagster as dg

from lm_assets.defs.resources import s3_resource_from_env
from lm_assets.defs.training.assets import TrainingLauncher, training

defs = dg.Definitions(
    assets=[training],
    resources={
        "training_launcher": TrainingLauncher(s3=s3_resource_from_env()),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    },
)
