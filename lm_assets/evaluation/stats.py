"""Standard errors as lm-evaluation-harness computes them, and the chance band for a sanity check.

- A task's (one subject's) standard error of a mean of 0/1 scores is the sample standard deviation
  (n - 1 in the denominator) over sqrt(n) (`lm_eval.api.metrics.mean_stderr`); NaN when n < 2.
- A group (an MMLU category, all of MMLU, all of C-Eval) reports the size-weighted mean of its
  members and, as its standard error, lm-evaluation-harness's `pooled_sample_stderr`:
  sqrt( sum_i (n_i - 1) * n_i * se_i^2 / (N - k) / N ) over its k members of sizes n_i (N = sum n_i).
  This pools the within-member variances only. MMLU nests it: subjects -> 4 categories -> mmlu.
- `chance_interval(n)`: p ± k·sqrt(p(1 - p)/n) with p = 1/n_choices, the band a model that guesses
  uniformly stays in (k = 3: about 99.7% of the time); an accuracy above it is evidence of skill.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if len(values) else math.nan


def sample_stddev(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return math.nan
    mu = mean(values)
    return math.sqrt(sum((x - mu) ** 2 for x in values) / (n - 1))


def mean_stderr(values: Sequence[float]) -> float:
    """Standard error of the mean: sample standard deviation / sqrt(n) (NaN for n < 2)."""
    n = len(values)
    return sample_stddev(values) / math.sqrt(n) if n >= 2 else math.nan


def pooled_sample_stderr(stderrs: Sequence[float], sizes: Sequence[int]) -> float:
    """lm-evaluation-harness's group standard error from its members' standard errors and sizes.

    A member of size 1 (whose own standard error is undefined) adds nothing to the pooled variance.
    """
    if len(stderrs) != len(sizes):
        raise ValueError("stderrs and sizes differ in length")
    total, k = sum(sizes), len(sizes)
    if total - k <= 0:
        return math.nan
    pooled_var = sum((n - 1) * se**2 * n for n, se in zip(sizes, stderrs) if n > 1) / (total - k)
    return math.sqrt(pooled_var / total)


def chance_interval(n_questions: int, n_choices: int = 4, k: float = 3.0) -> tuple[float, float]:
    """`(low, high)` = p ± k·sqrt(p(1-p)/n), p = 1/n_choices: where random guessing lands."""
    if n_questions <= 0 or n_choices < 2:
        raise ValueError("need n_questions > 0 and n_choices >= 2")
    p = 1.0 / n_choices
    half = k * math.sqrt(p * (1.0 - p) / n_questions)
    return p - half, p + half


__all__ = ["chance_interval", "mean", "mean_stderr", "pooled_sample_stderr", "sample_stddev"]


def question_blind_chance(scored: Sequence[dict], n_choices: int = 4, k: float = 3.0) -> tuple[float, float, float]:
    """Expected accuracy, and its ±k standard-error band, of a predictor that ignores the question
    but picks letters as often as this model did: Σ P(pred = c) · P(gold = c).

    A random model is rarely uniform over letters (it leans to one), and MMLU's answers are not
    uniform either (A 23 %, D 27 % of the test set), so this, not 1/n_choices, is its chance level.
    """
    n = len(scored)
    if n == 0:
        raise ValueError("no scored questions")
    pred = [sum(1 for r in scored if r["pred"] == c) / n for c in range(n_choices)]
    gold = [sum(1 for r in scored if r["gold"] == c) / n for c in range(n_choices)]
    p = sum(a * b for a, b in zip(pred, gold))
    half = k * math.sqrt(p * (1 - p) / n)
    return p, max(0.0, p - half), min(1.0, p + half)
