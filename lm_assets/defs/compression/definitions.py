import dagster as dg
from lm_assets import training

from lm_assets import compression
from lm_assets.defs.common.catalog import EVALUATION_TEAM, TRAINING_TEAM, catalogued, source_version
from lm_assets.defs.compression.assets import compressed_checkpoint
from lm_assets.defs.compression.distillation import distill_run_and_checkpoint
from lm_assets.defs.compression.jobs import compression_job, distill_job, model_card_job
from lm_assets.defs.compression.model_card import model_card, model_card_sensor
from lm_assets.reporting import model_card as card

PROGRAM_VERSION = source_version(training)

defs = dg.Definitions(
    assets=[
        *catalogued([compressed_checkpoint, model_card], EVALUATION_TEAM,
                    {"compressed_checkpoint": source_version(compression), "model_card": source_version(card)}),
        *catalogued([distill_run_and_checkpoint], TRAINING_TEAM,
                    {"distill_run": PROGRAM_VERSION, "distill_checkpoint": PROGRAM_VERSION}),
    ],
    jobs=[compression_job, model_card_job, distill_job],
    sensors=[model_card_sensor],
)
