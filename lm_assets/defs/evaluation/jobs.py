"""The evaluation job: every score and the samples of one checkpoint."""

from lm_assets.defs.common.jobs import stage_job

EVALUATION_ASSET_NAMES = ("perplexity", "mmlu_score", "ceval_score", "humaneval_score", "checkpoint_samples")

evaluation_job = stage_job(
    "evaluation_job", "evaluation", EVALUATION_ASSET_NAMES,
    "Perplexity, MMLU, C-Eval, HumanEval and sample continuations for one checkpoint.",
)

JOBS = [evaluation_job]
