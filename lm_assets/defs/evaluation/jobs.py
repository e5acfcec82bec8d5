"""The evaluation job: every score and the samples of one checkpoint."""

from lm_assets.defs.common.jobs import stage_job

EVALUATION_ASSET_NAMES = ("perplexity", "position_perplexity", "mmlu_score", "ceval_score", "humaneval_score",
                          "continuation_scores", "checkpoint_samples")

evaluation_job = stage_job(
    "evaluation_job", "evaluation", EVALUATION_ASSET_NAMES,
    "Perplexity (overall and by position), MMLU, C-Eval, HumanEval, scored continuations and samples for one checkpoint.",
)

human_ratings_job = stage_job(
    "human_ratings_job", "evaluation", ("human_ratings",),
    "People's ratings of checkpoints' samples joined back, and their agreement with the automatic scores.",
)

JOBS = [evaluation_job, human_ratings_job]
