"""The curation pipeline: language ID, quality rules, toxicity and PII redaction, in a configurable order."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import polars as pl

from lm_assets.corpus.curation import langid, policy, rules, toxicity
from lm_assets.corpus.curation.histograms import (
    DROPPED,
    KEPT,
    LANG_SCORE,
    QUALITY_SCORE,
    Histogram,
    add_signals,
    quality_histograms,
    score_histogram,
)
from lm_assets.corpus.curation.langid import LangIdConfig, allowed_shares, identify_languages
from lm_assets.corpus.curation.pii import redact_frame
from lm_assets.corpus.curation.policy import (
    DEFAULT_QUALITY_POLICY,
    DISAGREEMENT_EXAMPLES,
    Scorer,
    check_policy,
    decide_quality,
)
from lm_assets.corpus.curation.rules import RulesConfig, apply_rules, preset
from lm_assets.corpus.curation.toxicity import ToxicityConfig, score_toxicity
from lm_assets.corpus.quality.shipped import shipped_classifier
from lm_assets.corpus.stage import SCORED_DROPPED_SCHEMA, StageResult

STEPS = ("langid", "quality", "toxicity", "pii")
# Documents a batch of `curate_batches` holds as `curated_shard` streams a shard.
CURATION_BATCH_ROWS = 2048
# the `stage` a curation drop carries: the filter that dropped it (pii redacts, it drops nothing)
FILTERS = (langid.STAGE, rules.STAGE, policy.STAGE, toxicity.STAGE)


@dataclass
class CurationConfig:
    order: tuple[str, ...] = STEPS
    langid: LangIdConfig = field(default_factory=LangIdConfig)
    quality: RulesConfig = field(default_factory=preset)
    toxicity: ToxicityConfig = field(default_factory=ToxicityConfig)
    # Who decides quality (see quality_policy.py); a policy other than "rules" without a classifier
    # (a QualityClassifier) is decided by the shipped one.
    policy: str = DEFAULT_QUALITY_POLICY
    classifier: Scorer | None = None
    threshold: float | None = None
    # The classifier's cut as a target per language (`*`: the others): see policy.py.
    retention: dict[str, float] | None = None
    keep_rate: dict[str, float] | None = None

    @property
    def uses_classifier(self) -> bool:
        return self.classifier is not None or self.policy != "rules"


def run_step(name: str, docs: pl.DataFrame, config: CurationConfig) -> StageResult:
    if name == "langid":
        return identify_languages(docs, config.langid)
    if name == "quality":
        return apply_rules(docs, config.quality, defer=config.uses_classifier)
    if name == "classifier":
        return decide_quality(docs, config.policy, config.classifier, config.threshold, config.retention, config.keep_rate)
    if name == "toxicity":
        return score_toxicity(docs, config.toxicity)
    if name == "pii":
        return redact_frame(docs, column="text")
    raise ValueError(f"unknown curation step {name!r}; choose from {STEPS}")


def curate(docs: pl.DataFrame, config: CurationConfig | None = None) -> StageResult:
    """Run the steps in `config.order`; a classifier decides right after the quality rules. Stats
    hold, per step, docs in/out, seconds and its own stats. Every document gets a `quality_score`
    column (null where no classifier ran)."""
    return curate_batches([docs], config)


def curate_batches(batches: Iterable[pl.DataFrame], config: CurationConfig | None = None,
                   histograms: dict[str, Histogram] | None = None) -> StageResult:  # fmt: skip
    """`curate` over a shard's documents given in batches, in order: every step judges a document on its
    own, so the kept table is the one of all documents at once, and the dropped table is too (each step's
    drops in document order, step after step). Stats are summed over the batches. A `histograms` dict is
    filled with the binned scores the steps decide on (see `step_histograms`)."""
    run = CurationRun(config, histograms)
    kept = list(run.kept_batches(batches))
    if not kept:
        raise ValueError("curate_batches needs at least one batch (an empty one for an empty shard)")
    return run.result(pl.concat(kept).rechunk())


class CurationRun:
    """`curate_batches` as a stream, for a stage that writes its documents as they come: `kept_batches`
    yields each batch's kept documents; once it is exhausted, `result(kept)` gives the rest: the drops of
    the whole shard and its summed stats."""

    def __init__(self, config: CurationConfig | None = None, histograms: dict[str, Histogram] | None = None):
        self.config, self.steps = planned_steps(config or CurationConfig())
        self.histograms = histograms
        if histograms is not None:
            histograms.update(step_histograms(self.config, self.steps))
        self.dropped: dict[str, list[pl.DataFrame]] = {name: [] for name in self.steps}
        self.stats: list[dict] = []

    def kept_batches(self, batches: Iterable[pl.DataFrame]) -> Iterator[pl.DataFrame]:
        config, histograms = self.config, self.histograms
        for batch in batches:
            docs, batch_stats = batch, {}
            for name in self.steps:
                started = time.perf_counter()
                result = run_step(name, docs, config)
                batch_stats[name] = {
                    "docs_in": docs.height,
                    "docs_out": result.kept.height,
                    "seconds": round(time.perf_counter() - started, 3),
                    **result.stats,
                }
                if histograms is not None:
                    record(histograms, name, result, config)
                drop_columns = [c for c in SCORED_DROPPED_SCHEMA if c in result.dropped.columns]
                self.dropped[name].append(result.dropped.select(drop_columns))
                docs = result.kept
            if "quality_score" not in docs.columns:
                docs = docs.with_columns(pl.lit(None, dtype=pl.Float64).alias("quality_score"))
            if "quality_model" not in docs.columns:
                docs = docs.with_columns(pl.lit(None, dtype=pl.String).alias("quality_model"))
            self.stats.append(batch_stats)
            yield docs

    def result(self, kept: pl.DataFrame) -> StageResult:
        frames = [frame for name in self.steps for frame in self.dropped[name]]
        dropped = pl.concat([pl.DataFrame(schema=SCORED_DROPPED_SCHEMA), *frames], how="diagonal_relaxed")
        return StageResult(kept, dropped.select(list(SCORED_DROPPED_SCHEMA)), merged_stats(self.stats))


def planned_steps(config: CurationConfig) -> tuple[CurationConfig, list[str]]:
    """The config with its classifier (the shipped one when the policy needs one and none is given), and the
    steps to run, checked."""
    check_policy(config.policy)
    unknown = set(config.order) - set(STEPS)
    if unknown:
        raise ValueError(f"unknown curation steps {sorted(unknown)}; choose from {STEPS}")
    if "quality" in config.order and "langid" in config.order and config.order.index("quality") < config.order.index("langid"):
        raise ValueError("the quality rules need the `lang` column: run langid before quality")
    if config.uses_classifier and "quality" not in config.order:
        raise ValueError("a quality classifier decides after the quality step: keep `quality` in the order")
    steps = list(config.order)
    if config.uses_classifier and config.classifier is None and config.policy != "rules":
        config = dataclasses.replace(config, classifier=shipped_classifier()[0])
    if config.uses_classifier:
        steps.insert(steps.index("quality") + 1, "classifier")
    return config, steps


def step_histograms(config: CurationConfig, steps: list[str]) -> dict[str, Histogram]:
    """Empty histograms of what the planned steps decide on: language ID's share of the allowed languages
    (kept or dropped by language ID), each quality signal a threshold rule reads and the classifier's P(KEEP)
    (kept or dropped by the quality decision: the rules, the classifier or both)."""
    planned = []
    if "langid" in steps:
        low, allowed = config.langid.min_score, ", ".join(config.langid.allowed)
        planned.append(score_histogram(LANG_SCORE, f"langid: min_score {low:g} (share in {allowed})",
                                       [("min_score", low)], "language ID"))
    if "quality" in steps:
        planned += quality_histograms(config.quality)
    if "classifier" in steps:
        if config.policy == "rules":
            rule, marks = "classifier: scores only (policy rules)", []
        elif config.threshold is not None:
            rule, marks = f"classifier: below_threshold {config.threshold:g}", [("all", config.threshold)]
        elif config.keep_rate:
            rule = "classifier: below_threshold at keep rate " + ", ".join(
                f"{policy.language_name(lang)} {share:g}" for lang, share in config.keep_rate.items())
            marks = []
        elif config.retention:
            marks = [(policy.language_name(lang), config.classifier.cut_for_retention(lang, share))
                     for lang, share in config.retention.items()]  # fmt: skip
            rule = "classifier: below_threshold at retention " + ", ".join(
                f"{lang} {share:g} ({cut:.3g})" for (lang, cut), share in zip(marks, config.retention.values()))
        else:
            marks = [(policy.language_name(lang), cut) for lang, cut in config.classifier.thresholds.items()]
            rule = "classifier: below_threshold " + ", ".join(f"{lang} {cut:.3g}" for lang, cut in marks)
        planned.append(score_histogram(QUALITY_SCORE, rule, marks, "the classifier"))
    return {histogram.signal: histogram for histogram in planned}


def record(histograms: dict[str, Histogram], step: str, result: StageResult, config: CurationConfig) -> None:
    """Count what `step` kept and dropped of one batch. The quality decision is the quality step's, or with a
    classifier the classifier step's (the quality step then only drops on the hard rules)."""
    if step == "langid":
        histograms[LANG_SCORE].add(allowed_shares(result.kept, config.langid.allowed), KEPT)
        histograms[LANG_SCORE].add(result.dropped["score"], DROPPED)
    if step in ("quality", "classifier"):
        if step == "classifier" or not config.uses_classifier:
            add_signals(histograms, result.kept, KEPT)
        add_signals(histograms, result.dropped, DROPPED)
    if step == "classifier":
        histograms[QUALITY_SCORE].add(result.kept["quality_score"], KEPT)
        histograms[QUALITY_SCORE].add(result.dropped["quality_score"], DROPPED)


# Example lists a step's stats cut to their usual length however many batches ran (the classifier's are
# of two kinds, so twice its per-kind count).
EXAMPLE_LISTS = {"disagreement_examples": 2 * DISAGREEMENT_EXAMPLES}
# Numbers that are settings, not counts: the first batch's stand for all (cuts by keep rate vary by batch).
SETTINGS = frozenset({"threshold", "thresholds", "cuts_applied"})


def merged_stats(per_batch: list[dict]) -> dict:
    """The stats of several batches as one: counts and seconds summed, counts by key summed, example
    lists cut to their usual length, `languages_seen` recounted, the rest (model names, thresholds) as the
    first batch gave it."""
    if not per_batch:
        return {}
    if len(per_batch) == 1:
        return per_batch[0]

    def merge(values: list, key: str | None = None):
        first = values[0]
        if key == "languages_seen":
            counts = Counter()
            for pairs in values:
                counts.update(dict(pairs))
            return sorted(counts.items(), key=lambda pair: -pair[1])
        if key in SETTINGS or isinstance(first, bool) or not isinstance(first, (int, float, dict, list)):
            return first
        if isinstance(first, (int, float)):
            total = sum(values)
            return round(total, 3) if key == "seconds" else total
        if isinstance(first, list):
            joined = [item for value in values for item in value]
            return joined[: EXAMPLE_LISTS[key]] if key in EXAMPLE_LISTS else joined
        keys = list(dict.fromkeys(k for value in values for k in value))
        return {k: merge([value[k] for value in values if k in value], k) for k in keys}

    return merge(per_batch)
