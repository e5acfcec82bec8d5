import dagster as dg

from lm_assets.defs.evaluation.assets import (
    ceval_score,
    checkpoint_evaluation_sensor,
    evaluation_job,
    mmlu_score,
    perplexity,
)

defs = dg.Definitions(
    assets=[perplexity, mmlu_score, ceval_score], jobs=[evaluation_job], sensors=[checkpoint_evaluation_sensor]
)
