"""MMLU and C-Eval end to end: prompts, scoring, per-subject / per-category / overall results.

`evaluate_mmlu(em, "data/eval/mmlu.zip")` and `evaluate_ceval(em, path)` return a JSON-ready dict:

    {
      "benchmark": "mmlu" | "ceval",
      "split": "test", "num_fewshot": 5, "max_length": 2048,
      "overall":    {"n", "acc", "acc_stderr", "acc_norm", "acc_norm_stderr", "chance_low", "chance_high"},
      "categories": {category: {"n", "subjects", "acc", "acc_stderr", "acc_norm", "acc_norm_stderr"}},
      "subjects":   {subject: {"task", "category", "n", "shots", "acc", "acc_stderr", "acc_norm",
                               "acc_norm_stderr", "truncated"}},
      "truncated": questions whose prompt was cut to max_length,
      "rows", "forward_tokens", "padded_tokens", "batches", "seconds": what the scoring cost,
      "questions": [per-question dicts from `scoring.score_questions`]   (only with details=True)
    }

Aggregation follows lm-evaluation-harness: a group's score is the mean of its members weighted by
their sizes, which is the mean over all its questions (micro average); standard errors are
`stats.mean_stderr` per subject and `stats.pooled_sample_stderr` per group. MMLU's groups nest as in
lm-eval: subjects -> the four categories (`mmlu_stem`, ...) -> `mmlu`. C-Eval's `ceval-valid`
group pools its subjects directly; when a subject mapping supplies categories, per-category results
are added (C-Eval's own grouping, not an lm-eval group). `chance_low`/`chance_high` are
`stats.chance_interval(n)`: an accuracy inside that band is indistinguishable from guessing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import polars as pl

from lm_assets.evaluation.checkpoint import EvalModel
from lm_assets.evaluation.prompts import DEFAULT_FEWSHOT, MCQuestion, ceval_questions, mmlu_questions
from lm_assets.evaluation.scoring import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    BatchStats,
    score_questions,
)
from lm_assets.evaluation.stats import chance_interval, mean, mean_stderr, pooled_sample_stderr
from lm_assets.evaluation.subjects import CEVAL_CATEGORY_ORDER, MMLU_CATEGORIES, MMLU_CATEGORY_ORDER, ceval_subject_names

METRICS = ("acc", "acc_norm")


def _group(members: Mapping[str, dict]) -> dict:
    """Size-weighted mean and pooled standard error over `members` (each with n, metric, metric_stderr)."""
    sizes = [m["n"] for m in members.values()]
    out = {"n": sum(sizes)}
    for metric in METRICS:
        values = [m[metric] for m in members.values()]
        out[metric] = sum(v * n for v, n in zip(values, sizes)) / out["n"]
        out[f"{metric}_stderr"] = pooled_sample_stderr([m[f"{metric}_stderr"] for m in members.values()], sizes)
    return out


def summarize(
    scored: Sequence[dict],
    categories: Mapping[str, str] | None = None,
    category_order: Sequence[str] = (),
    overall_over: str = "categories",
    n_choices: int = 4,
) -> dict:
    """`{"overall", "categories", "subjects"}` from `score_questions` output (see the module docstring).

    `overall_over="categories"` pools the overall standard error over the categories (lm-eval's
    nested `mmlu` group), `"subjects"` over the subjects (lm-eval's `ceval-valid`).
    """
    if not scored:
        raise ValueError("no scored questions to summarize")
    by_subject: dict[str, list[dict]] = {}
    for row in scored:
        by_subject.setdefault(row["subject"], []).append(row)
    subjects: dict[str, dict] = {}
    for subject, rows in by_subject.items():
        entry = {"task": rows[0]["task"], "category": (categories or {}).get(subject), "n": len(rows)}
        for metric in METRICS:
            values = [r[metric] for r in rows]
            entry[metric] = mean(values)
            entry[f"{metric}_stderr"] = mean_stderr(values)
        entry["truncated"] = sum(bool(r["truncated"]) for r in rows)
        subjects[subject] = entry

    groups: dict[str, dict] = {}
    if categories:
        names = list(category_order) + sorted({c for c in categories.values()} - set(category_order))
        for name in names:
            members = {s: e for s, e in subjects.items() if e["category"] == name}
            if members:
                groups[name] = {**_group(members), "subjects": len(members)}
    if overall_over == "categories" and groups and all(e["category"] for e in subjects.values()):
        overall = _group(groups)
    else:
        overall = _group(subjects)
    overall["chance_low"], overall["chance_high"] = chance_interval(overall["n"], n_choices)
    return {"overall": overall, "categories": groups, "subjects": subjects}


def evaluate_questions(
    em: EvalModel,
    questions: Sequence[MCQuestion],
    *,
    categories: Mapping[str, str] | None = None,
    category_order: Sequence[str] = (),
    overall_over: str = "categories",
    details: bool = False,
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Score `questions` and summarize them (the common part of `evaluate_mmlu`/`evaluate_ceval`)."""
    if not questions:
        raise ValueError("no questions to evaluate")
    start = time.perf_counter()
    stats = BatchStats()
    scored = score_questions(em, questions, max_batch_tokens=max_batch_tokens, max_batch_size=max_batch_size,
                             stats=stats, progress=progress)  # fmt: skip
    result = {
        "benchmark": questions[0].benchmark,
        "split": questions[0].split,
        "num_fewshot": max(q.shots for q in questions),
        "max_length": em.max_length,
        **summarize(scored, categories, category_order, overall_over, n_choices=len(questions[0].choices)),
    }
    shots: dict[str, int] = {}
    for q in questions:
        shots[q.subject] = max(shots.get(q.subject, 0), q.shots)
    for subject, entry in result["subjects"].items():
        entry["shots"] = shots[subject]
    result["truncated"] = sum(bool(r["truncated"]) for r in scored)
    result.update(rows=stats.rows, forward_tokens=stats.tokens, padded_tokens=stats.padded_tokens,
                  batches=stats.batches, seconds=time.perf_counter() - start)  # fmt: skip
    if details:
        result["questions"] = scored
    return result


def _limit(questions: list[MCQuestion], limit: int | None) -> list[MCQuestion]:
    """The first `limit` questions of each subject (lm-eval's `--limit`, per task)."""
    if limit is None:
        return questions
    return [q for q in questions if q.index < limit]


def evaluate_mmlu(
    em: EvalModel,
    source: str | os.PathLike | pl.DataFrame = "data/eval/mmlu.zip",
    split: str = "test",
    num_fewshot: int = DEFAULT_FEWSHOT,
    subjects: Iterable[str] | None = None,
    *,
    limit: int | None = None,
    details: bool = False,
    **batching,
) -> dict:
    """MMLU (`mmlu_<subject>` tasks, 5-shot from dev by default) on `split`; see the module docstring.

    `subjects` restricts the subjects (default: all in the data); `limit` scores only the first
    `limit` questions of each subject. `batching`: `max_batch_tokens`, `max_batch_size`, `progress`.
    """
    questions = _limit(mmlu_questions(source, split, num_fewshot, subjects), limit)
    result = evaluate_questions(em, questions, categories=MMLU_CATEGORIES, category_order=MMLU_CATEGORY_ORDER,
                                overall_over="categories", details=details, **batching)  # fmt: skip
    result["num_fewshot"] = num_fewshot
    return result


def evaluate_ceval(
    em: EvalModel,
    source: str | os.PathLike | pl.DataFrame,
    split: str = "val",
    num_fewshot: int = DEFAULT_FEWSHOT,
    subjects: Iterable[str] | None = None,
    subject_names: str | os.PathLike | Mapping | None = None,
    *,
    limit: int | None = None,
    details: bool = False,
    **batching,
) -> dict:
    """C-Eval (`ceval-valid_<subject>` tasks, 5-shot from dev by default) on `split` (val).

    `subject_names`: a dict or JSON file of Chinese names (and optionally categories), see
    `subjects.ceval_subject_names`.
    """
    _, categories = ceval_subject_names(subject_names)
    questions = _limit(ceval_questions(source, split, num_fewshot, subjects, subject_names), limit)
    result = evaluate_questions(em, questions, categories=categories or None, category_order=CEVAL_CATEGORY_ORDER,
                                overall_over="subjects", details=details, **batching)  # fmt: skip
    result["num_fewshot"] = num_fewshot
    return result


__all__ = ["evaluate_ceval", "evaluate_mmlu", "evaluate_questions", "summarize"]
