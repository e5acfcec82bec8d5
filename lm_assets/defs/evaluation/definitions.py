import dagster as dg

from lm_assets import evaluation
from lm_assets.defs.common.catalog import EVALUATION_TEAM, catalogued, source_version
from lm_assets.defs.evaluation.assets import (
    ceval_score,
    checkpoint_evaluation_sensor,
    checkpoint_samples,
    continuation_scores,
    human_ratings,
    humaneval_score,
    mmlu_score,
    perplexity,
    position_perplexity,
)
from lm_assets.defs.evaluation.jobs import JOBS
from lm_assets.defs.evaluation.safety import SAFETY_ASSETS
from lm_assets.defs.evaluation.tasks import SCORE_ASSETS, TASK_SCORES, benchmark_suite

EVALUATION_VERSION = source_version(evaluation)

defs = dg.Definitions(
    assets=catalogued(
        [perplexity, position_perplexity, mmlu_score, ceval_score, humaneval_score, continuation_scores, checkpoint_samples,
         human_ratings, *TASK_SCORES, benchmark_suite, *SAFETY_ASSETS],
        EVALUATION_TEAM,
        {"perplexity": EVALUATION_VERSION, "mmlu_score": EVALUATION_VERSION, "ceval_score": EVALUATION_VERSION,
         "humaneval_score": EVALUATION_VERSION, "checkpoint_samples": EVALUATION_VERSION,
         "position_perplexity": EVALUATION_VERSION, "continuation_scores": EVALUATION_VERSION,
         "human_ratings": EVALUATION_VERSION, "benchmark_suite": EVALUATION_VERSION,
         **{name: EVALUATION_VERSION for name in SCORE_ASSETS},
         **{a.key.to_user_string(): EVALUATION_VERSION for a in SAFETY_ASSETS}},
    ),
    jobs=JOBS,
    sensors=[checkpoint_evaluation_sensor],
)
