"""The evaluation job: every score and the samples of one checkpoint."""

from lm_assets.defs.common.jobs import workload_job

TASK_NAMES = ("hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "boolq", "cmmlu", "xstorycloze_zh", "xcopa_zh")
EVALUATION_ASSET_NAMES = ("perplexity", "position_perplexity", "mmlu_score", "ceval_score", "humaneval_score",
                          "continuation_scores", "checkpoint_samples", *(f"{t}_score" for t in TASK_NAMES),
                          "benchmark_suite", "safety_score", "crows_pairs_score", "bbq_score", "cbbq_score")

evaluation_job = workload_job(
    "evaluation_job", "evaluation", EVALUATION_ASSET_NAMES,
    "Perplexity (overall and by position), MMLU, C-Eval, HumanEval, the zero- and few-shot task suite, safety "
    "(refusal and over-refusal) and bias (CrowS-Pairs, BBQ, CBBQ), scored continuations and samples for one "
    "checkpoint, and its benchmark_suite summary.",
)

human_ratings_job = workload_job(
    "human_ratings_job", "evaluation", ("human_ratings",),
    "People's ratings of checkpoints' samples joined back, and their agreement with the automatic scores.",
)

JOBS = [evaluation_job, human_ratings_job]
