"""Who decides quality: the rules, a trained classifier, or both.

Runs right after the quality step, which under a classifier (`defer`) dropped only what fails the
hard rules (a minimum length) and left every other document with the rules' verdict in
`rules_reason`. Each document gets a `quality_score` (P(KEEP), null without a classifier), and:

- `rules`: drops what the rules drop (stage `quality`, the rule as reason);
- `classifier`: drops what scores below the threshold (stage `classifier`, `below_threshold`);
- `both`: drops what either drops, the rules first.

Dropped rows carry the score that dropped them: the failing signal's value (`rules_score`) for a
rule, P(KEEP) for the classifier. The stats list where the rules and the classifier disagree.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import polars as pl

from lm_assets.corpus.stage import SCORED_DROPPED_SCHEMA, StageResult

POLICIES = ("rules", "classifier", "both")
# Who decides quality by default: see the README's "Curation defaults, and why".
DEFAULT_QUALITY_POLICY = "classifier"
ANY = "*"  # the threshold of the languages without one of their own


def language_name(lang: str) -> str:
    """A threshold's language as people read it: `others` for ANY."""
    return "others" if lang == ANY else lang
STAGE = "classifier"
DISAGREEMENT_EXAMPLES = 10


class Scorer(Protocol):
    hash: str
    threshold: float
    thresholds: dict[str, float]

    def score(self, docs: pl.DataFrame) -> np.ndarray: ...

    def thresholds_for(self, langs: list[str | None]) -> np.ndarray: ...


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"unknown quality policy {policy!r}; choose from {POLICIES}")
    return policy


def decide_quality(docs: pl.DataFrame, policy: str, classifier: Scorer | None, threshold: float | None = None) -> StageResult:
    """Apply `policy` to documents that carry `rules_reason` (see the module docstring)."""
    check_policy(policy)
    if classifier is None and policy != "rules":
        raise ValueError(
            f"quality policy {policy!r} needs a classifier: pass the shipped one (quality_model.shipped_classifier()) "
            "or one trained on your labels"
        )
    scores = classifier.score(docs) if classifier is not None else np.full(docs.height, np.nan)
    if classifier is not None:
        # The threshold given applies to every language; unset, each language's trained one.
        cuts = np.full(docs.height, threshold) if threshold is not None else classifier.thresholds_for(docs["lang"].to_list())
    else:
        cuts = np.full(docs.height, np.nan)
    scored = docs.with_columns(
        pl.Series("quality_score", scores, dtype=pl.Float64).fill_nan(None),
        pl.Series("_threshold", cuts, dtype=pl.Float64),
    )
    rule_drop = pl.col("rules_reason").is_not_null()
    low = (pl.col("quality_score") < pl.col("_threshold")) if classifier is not None else pl.lit(False)
    if policy == "rules":
        stage, reason = pl.when(rule_drop).then(pl.lit("quality")), pl.when(rule_drop).then(pl.col("rules_reason"))
    elif policy == "classifier":
        stage, reason = pl.when(low).then(pl.lit(STAGE)), pl.when(low).then(pl.lit("below_threshold"))
    else:
        stage = pl.when(rule_drop).then(pl.lit("quality")).when(low).then(pl.lit(STAGE))
        reason = pl.when(rule_drop).then(pl.col("rules_reason")).when(low).then(pl.lit("below_threshold"))
    rule_score = pl.col("rules_score") if "rules_score" in docs.columns else pl.lit(None, dtype=pl.Float64)
    score = pl.when(pl.col("_stage") == "quality").then(rule_score).otherwise(pl.col("quality_score"))
    tagged = scored.with_columns(stage.alias("_stage"), reason.alias("_reason"))
    kept = tagged.filter(pl.col("_stage").is_null()).drop(
        "_stage", "_reason", "_threshold", "rules_reason", "rules_score", strict=False
    )
    # Dropped rows also carry the signals judged (`q_*`, `quality_score`), for the curation's histograms.
    dropped = tagged.filter(pl.col("_stage").is_not_null()).select(
        "doc_id", pl.col("_stage").alias("stage"), pl.col("_reason").alias("reason"), score.alias("score"),
        pl.col("^q_.*$"), "quality_score",
    ).cast(SCORED_DROPPED_SCHEMA)
    stats = {"policy": policy, "classifier": classifier.hash if classifier is not None else "none"}
    if classifier is not None:
        stats |= {
            "threshold": threshold if threshold is not None else classifier.threshold,
            "thresholds": {ANY: threshold} if threshold is not None else dict(classifier.thresholds),
            **disagreements(scored, low),
        }
    return StageResult(kept=kept, dropped=dropped, stats=stats)


def disagreements(scored: pl.DataFrame, low: pl.Expr) -> dict:
    """Where the rules and the classifier disagree: counts, and a few doc_ids of each kind."""
    verdicts = scored.select("doc_id", "quality_score", "rules_reason", low.alias("low"))
    rules_only = verdicts.filter(pl.col("rules_reason").is_not_null() & ~pl.col("low"))
    classifier_only = verdicts.filter(pl.col("rules_reason").is_null() & pl.col("low"))
    return {
        "rules_drop_classifier_keeps": rules_only.height,
        "classifier_drops_rules_keep": classifier_only.height,
        "disagreement_examples": [
            {"doc_id": row["doc_id"], "score": round(row["quality_score"], 4), "rules": row["rules_reason"] or "keep",
             "classifier": "drop" if row["low"] else "keep"}
            for frame in (rules_only, classifier_only)
            for row in frame.head(DISAGREEMENT_EXAMPLES).iter_rows(named=True)
        ],
    }
