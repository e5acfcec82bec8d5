"""Standard errors as lm-evaluation-harness computes them, and the chance band for a sanity check.

- A task's (one subject's) standard error of a mean of 0/1 scores is the sample standard deviation
  (n - 1 in the denominator) over sqrt(n) (`lm_eval.api.metrics.mean_stderr`); NaN when n < 2.
- A group (an MMLU category, all of MMLU, all of C-Eval) reports the size-weighted mean of its
  members and, as its standard error, lm-evaluation-harness's `pooled_sample_stderr`:
  sqrt( sum_i (n_i - 1) * n_i * se_i^2 / (N - k) / N ) over its k members of sizes n_i (N = sum n_i).
  This pools the within-member variances only. MMLU nests it: subjects -> 4 categories -> mmlu.
- `chance_interval(n)`: the central 99.7% of Binomial(n, p) / n with p = 1/n_choices (`binomial_band`),
  the band a model that guesses uniformly stays in; an accuracy above it is evidence of skill. The band
  is exact (binomial quantiles, not p ± 3 standard errors), so it always lies inside [0, 1]; on a few
  questions its top is 1.0, and then no score can be told from guessing.
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


CHANCE_LEVEL = 0.997  # the share of a guesser's scores the chance band holds (as p ± 3 standard errors did)


def binomial_quantile(n: int, p: float, q: float) -> int:
    """The smallest k with P(X <= k) >= q for X ~ Binomial(n, p), summed exactly (in logs, so that large n
    does not underflow)."""
    if p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    cdf = 0.0
    for k in range(n + 1):
        cdf += math.exp(log_n - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p + (n - k) * log_q)
        if cdf >= q - 1e-12:
            return k
    return n


def binomial_band(p: float, n: int, level: float = CHANCE_LEVEL) -> tuple[float, float]:
    """`(low, high)`: the central `level` of the accuracy k/n of n questions each right with probability p,
    from the binomial quantiles at (1 - level)/2 and (1 + level)/2. Exact, so inside [0, 1] for any n and p;
    an accuracy above `high` has probability at most (1 - level)/2 under guessing."""
    if n <= 0:
        raise ValueError("need n > 0")
    if not 0.0 <= p <= 1.0 or not 0.0 < level < 1.0:
        raise ValueError("need 0 <= p <= 1 and 0 < level < 1")
    tail = (1.0 - level) / 2
    return binomial_quantile(n, p, tail) / n, binomial_quantile(n, p, 1.0 - tail) / n


def chance_interval(n_questions: int, n_choices: int = 4, level: float = CHANCE_LEVEL) -> tuple[float, float]:
    """`(low, high)`: where uniform guessing among `n_choices` lands on `n_questions` (`binomial_band`)."""
    if n_questions <= 0 or n_choices < 2:
        raise ValueError("need n_questions > 0 and n_choices >= 2")
    return binomial_band(1.0 / n_choices, n_questions, level)


__all__ = ["CHANCE_LEVEL", "binomial_band", "binomial_quantile", "chance_interval", "mean", "mean_stderr", "pooled_sample_stderr", "sample_stddev"]


def question_blind_chance(
    scored: Sequence[dict], n_choices: int = 4, level: float = CHANCE_LEVEL
) -> tuple[float, float, float]:
    """Expected accuracy, and its exact binomial band (`binomial_band`), of a predictor that ignores the question
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
    return (p, *binomial_band(p, n, level))
