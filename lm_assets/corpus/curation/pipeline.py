"""The curation pipeline: language ID, quality rules, toxicity and PII redaction, in a configurable order."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import polars as pl

from lm_assets.corpus.curation import langid, policy, rules, toxicity
from lm_assets.corpus.curation.langid import LangIdConfig, identify_languages
from lm_assets.corpus.curation.pii import redact_frame
from lm_assets.corpus.curation.policy import DEFAULT_QUALITY_POLICY, Scorer, check_policy, decide_quality
from lm_assets.corpus.curation.rules import QualityConfig, apply_quality_rules, preset
from lm_assets.corpus.curation.toxicity import ToxicityConfig, score_toxicity
from lm_assets.corpus.quality.shipped import shipped_classifier
from lm_assets.corpus.stage import SCORED_DROPPED_SCHEMA, StageResult

STEPS = ("langid", "quality", "toxicity", "pii")
# the `stage` a curation drop carries: the filter that dropped it (pii redacts, it drops nothing)
FILTERS = (langid.STAGE, rules.STAGE, policy.STAGE, toxicity.STAGE)


@dataclass
class CurationConfig:
    order: tuple[str, ...] = STEPS
    langid: LangIdConfig = field(default_factory=LangIdConfig)
    quality: QualityConfig = field(default_factory=preset)
    toxicity: ToxicityConfig = field(default_factory=ToxicityConfig)
    # Who decides quality (see quality_policy.py); a policy other than "rules" without a classifier
    # (a QualityClassifier) is decided by the shipped one.
    policy: str = DEFAULT_QUALITY_POLICY
    classifier: Scorer | None = None
    threshold: float | None = None

    @property
    def uses_classifier(self) -> bool:
        return self.classifier is not None or self.policy != "rules"


def run_step(name: str, docs: pl.DataFrame, config: CurationConfig) -> StageResult:
    if name == "langid":
        return identify_languages(docs, config.langid)
    if name == "quality":
        return apply_quality_rules(docs, config.quality, defer=config.uses_classifier)
    if name == "classifier":
        return decide_quality(docs, config.policy, config.classifier, config.threshold)
    if name == "toxicity":
        return score_toxicity(docs, config.toxicity)
    if name == "pii":
        return redact_frame(docs, column="text")
    raise ValueError(f"unknown curation step {name!r}; choose from {STEPS}")


def curate(docs: pl.DataFrame, config: CurationConfig | None = None) -> StageResult:
    """Run the steps in `config.order`; a classifier decides right after the quality rules. Stats
    hold, per step, docs in/out, seconds and its own stats. Every document gets a `quality_score`
    (null without a classifier), and every drop a `score` (the rule's signal or the classifier's P(KEEP))."""
    config = config or CurationConfig()
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
    dropped, stats = [], {}
    for name in steps:
        started = time.perf_counter()
        result = run_step(name, docs, config)
        stats[name] = {
            "docs_in": docs.height,
            "docs_out": result.kept.height,
            "seconds": round(time.perf_counter() - started, 3),
            **result.stats,
        }
        dropped.append(result.dropped)
        docs = result.kept
    if "quality_score" not in docs.columns:
        docs = docs.with_columns(pl.lit(None, dtype=pl.Float64).alias("quality_score"))
    all_dropped = pl.concat([pl.DataFrame(schema=SCORED_DROPPED_SCHEMA), *dropped], how="diagonal_relaxed")
    return StageResult(kept=docs, dropped=all_dropped.select(list(SCORED_DROPPED_SCHEMA)), stats=stats)
