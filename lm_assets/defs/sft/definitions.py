import dagster as dg
from lm_assets import training

from lm_assets import sft
from lm_assets.defs.common.catalog import TRAINING_TEAM, catalogued, source_version
from lm_assets.defs.sft.assets import (
    dpo_run_and_checkpoint,
    instruction_data,
    preference_data,
    preference_dataset,
    sft_dataset,
    sft_run_and_checkpoint,
)
from lm_assets.defs.sft.jobs import JOBS

SFT_VERSION = source_version(sft)
PROGRAM_VERSION = source_version(training)

defs = dg.Definitions(
    assets=catalogued([instruction_data, preference_data, preference_dataset, sft_dataset, sft_run_and_checkpoint,
                       dpo_run_and_checkpoint], TRAINING_TEAM,
                      {"instruction_data": SFT_VERSION, "preference_data": SFT_VERSION, "preference_dataset": SFT_VERSION, "sft_dataset": SFT_VERSION, "sft_run": PROGRAM_VERSION,
                       "sft_checkpoint": PROGRAM_VERSION, "dpo_run": PROGRAM_VERSION, "dpo_checkpoint": PROGRAM_VERSION}),
    jobs=JOBS,
)
