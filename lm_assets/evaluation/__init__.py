"""Evaluation of trained checkpoints, as lm-evaluation-harness scores them where it has the task: perplexity
overall and by position, MMLU and C-Eval, the zero- and few-shot suite, HumanEval, safety and bias,
continuations scored against the text, samples of fixed prompts and people's ratings of them, on our own
model with a KV-cached `generate`. No Dagster imports (assets call this).

    em = load_model("storage/checkpoints/main/step_00000040/hf")      # our Transformer + SentencePiece
    mmlu = evaluate_mmlu(em, "data/eval/mmlu.zip")                       # 5-shot, test split
    ceval = evaluate_ceval(em, "data/eval/ceval-sample")                 # 5-shot, val split
    ppl = packed_perplexity(em, "storage/packed", "val")
    gen = generate(em.model, [em.encode("The capital of")], 32)          # KV-cached, greedy
    samples = sample_continuations(em)                                   # fixed prompts, greedy and sampled
    low, high = chance_interval(mmlu["overall"]["n"])

Modules:
- `checkpoint`: loading an HF export as our model; `prompts`: the lm-eval prompt formats of MMLU and C-Eval;
  `scoring`: log-likelihoods, batching; `benchmarks`: MMLU and C-Eval end to end and aggregation;
  `subjects`: MMLU's categories, C-Eval's subject names; `stats`: standard errors, the chance band;
- `tasks`: the zero- and few-shot suite (HellaSwag, ARC, PIQA, WinoGrande, BoolQ, CMMLU, XStoryCloze-zh,
  XCOPA-zh), each read from its release's files;
- `perplexity`: on a packed split; `long_text`: held-out documents read whole, perplexity by position and
  continuations scored against the text;
- `generation`: KV-cached decoding; `samples`: continuations of fixed prompts;
- `safety`: refusal of harmful requests and over-refusal of benign ones; `bias`: CrowS-Pairs, BBQ, CBBQ;
- `humaneval`: pass@1 and pass@k; `sandbox`, `sandbox_runner`, `sandbox_judge`, `plain_values`: the
  completion run contained, judged from a process that never runs it;
- `ratings`: people's ratings of samples, compared with the scores.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lm_assets.evaluation.benchmarks import evaluate_ceval, evaluate_mmlu, evaluate_questions, summarize
    from lm_assets.evaluation.checkpoint import EvalModel, build_model, load_model, model_config_from_hf
    from lm_assets.evaluation.generation import Generation, generate
    from lm_assets.evaluation.perplexity import packed_perplexity, token_byte_lengths
    from lm_assets.evaluation.prompts import MCQuestion, ceval_questions, mmlu_questions
    from lm_assets.evaluation.samples import SAMPLE_PROMPTS, SampleSettings, sample_continuations
    from lm_assets.evaluation.scoring import encode_pair, loglikelihood, loglikelihood_tokens, score_questions
    from lm_assets.evaluation.stats import chance_interval, mean_stderr, pooled_sample_stderr
    from lm_assets.evaluation.subjects import CEVAL_SUBJECTS_ZH, MMLU_CATEGORIES, ceval_subject_names

# The submodules that score models import torch; they load on first use of their names, so importing
# a light one (`stats`, `subjects`) or this package does not pull torch in.
_EXPORTS = {
    "evaluate_ceval": "benchmarks", "evaluate_mmlu": "benchmarks", "evaluate_questions": "benchmarks",
    "summarize": "benchmarks",
    "EvalModel": "checkpoint", "build_model": "checkpoint", "load_model": "checkpoint",
    "model_config_from_hf": "checkpoint",
    "Generation": "generation", "generate": "generation",
    "packed_perplexity": "perplexity", "token_byte_lengths": "perplexity",
    "MCQuestion": "prompts", "ceval_questions": "prompts", "mmlu_questions": "prompts",
    "SAMPLE_PROMPTS": "samples", "SampleSettings": "samples", "sample_continuations": "samples",
    "encode_pair": "scoring", "loglikelihood": "scoring", "loglikelihood_tokens": "scoring",
    "score_questions": "scoring",
    "chance_interval": "stats", "mean_stderr": "stats", "pooled_sample_stderr": "stats",
    "CEVAL_SUBJECTS_ZH": "subjects", "MMLU_CATEGORIES": "subjects", "ceval_subject_names": "subjects",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "CEVAL_SUBJECTS_ZH",
    "MMLU_CATEGORIES",
    "SAMPLE_PROMPTS",
    "EvalModel",
    "Generation",
    "MCQuestion",
    "SampleSettings",
    "build_model",
    "ceval_questions",
    "ceval_subject_names",
    "chance_interval",
    "encode_pair",
    "evaluate_ceval",
    "evaluate_mmlu",
    "evaluate_questions",
    "generate",
    "load_model",
    "loglikelihood",
    "loglikelihood_tokens",
    "mean_stderr",
    "mmlu_questions",
    "model_config_from_hf",
    "packed_perplexity",
    "pooled_sample_stderr",
    "sample_continuations",
    "score_questions",
    "summarize",
    "token_byte_lengths",
]
