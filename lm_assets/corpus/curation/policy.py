"""Who decides quality: the rules, a trained classifier, or both.

Runs right after the quality step, which under a classifier (`defer`) dropped only what fails the
hard rules (a minimum length) and left every other document with the rules' verdict in
`rules_reason`. Each document gets a `quality_score` (P(KEEP), null without a classifier) and the `quality_model` that
scored it (`html`, or `text` for a document read without HTML), and:

- `rules`: drops what the rules drop (stage `rules`, the rule as reason);
- `classifier`: drops what scores below the threshold (stage `classifier`, `below_threshold`);
- `both`: drops what either drops, the rules first.

The classifier's cut in each language is, by default, the one chosen when it was trained. A user can
set it instead as a score for every language (`threshold`), or as a target per language (a `*` entry
for the others): `retention`, the share of good pages to keep, which the classifier's source-out
scores of good pages turn into a cut; or `keep_rate`, the share of the documents to keep, cut at that
quantile of the scores of each batch's documents in that language.

Dropped rows carry the score that dropped them: the failing signal's value (`rules_score`) for a
rule, P(KEEP) for the classifier. The stats list where the rules and the classifier disagree.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import polars as pl

from lm_assets.corpus.curation.rules import STAGE as RULES_STAGE
from lm_assets.corpus.stage import SCORED_DROPPED_SCHEMA, StageResult
from lm_assets.text import base_lang

POLICIES = ("rules", "classifier", "both")
# Who decides quality by default: see docs/curation.md, "Curation defaults, and why".
DEFAULT_QUALITY_POLICY = "classifier"
ANY = "*"  # the threshold of the languages without one of their own
STAGE = "classifier"
DISAGREEMENT_EXAMPLES = 10


def language_name(lang: str) -> str:
    """A threshold's language as people read it: `others` for ANY."""
    return "others" if lang == ANY else lang


class Scorer(Protocol):
    hash: str
    threshold: float
    thresholds: dict[str, float]

    def score_with_models(self, docs: pl.DataFrame) -> tuple[np.ndarray, list[str]]: ...

    def thresholds_for(self, langs: list[str | None], models: list[str] | None = None,
                       kinds: list[str] | None = None) -> np.ndarray: ...

    def page_kinds(self, docs: pl.DataFrame) -> list[str]: ...

    def cut_for_retention(self, lang: str | None, retention: float, model: str = "html") -> float: ...


def check_targets(threshold: float | None, retention: dict | None, keep_rate: dict | None) -> None:
    """At most one way of setting the cut, and every target a share in (0, 1]."""
    given = [name for name, value in (("threshold", threshold), ("retention", retention), ("keep_rate", keep_rate)) if value]
    if len(given) > 1:
        raise ValueError(f"set the classifier's cut one way, not by {' and '.join(given)}")
    for name, target in (("retention", retention), ("keep_rate", keep_rate)):
        for lang, share in (target or {}).items():
            if not 0.0 < share <= 1.0:
                raise ValueError(f"{name} {lang}: a share in (0, 1], not {share}")


def target_share(target: dict[str, float], lang: str) -> float | None:
    return target.get(lang, target.get(ANY))


def classifier_cuts(docs: pl.DataFrame, scores: np.ndarray, models: list[str], classifier: Scorer,
                    threshold: float | None = None, retention: dict[str, float] | None = None,
                    keep_rate: dict[str, float] | None = None) -> tuple[np.ndarray, dict]:  # fmt: skip
    """The cut of each row (by its language, page kind and the model that scored it), and the cut of each
    seen (`en few-links`, `zh (text)`; `*`: the other languages)."""
    langs = [base_lang(lang) or "unknown" for lang in docs["lang"].to_list()]
    if threshold is not None:
        return np.full(docs.height, threshold), {ANY: threshold}
    kinds = classifier.page_kinds(docs)
    cuts, by_language = classifier.thresholds_for(langs, models, kinds), {}
    for lang, model, kind in sorted(set(zip(langs, models, kinds))):
        rows = np.asarray([key == (lang, model, kind) for key in zip(langs, models, kinds)])
        if retention and (share := target_share(retention, lang)) is not None:
            cuts[rows] = classifier.cut_for_retention(lang, share, model)
        elif keep_rate and (share := target_share(keep_rate, lang)) is not None:
            cuts[rows] = float(np.quantile(scores[rows], 1.0 - share)) if share < 1.0 else 0.0
        name = lang + (f" {kind}" if kind else "") + (f" ({model})" if model != "html" else "")
        by_language[name] = float(cuts[rows][0])
    return cuts, by_language


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"unknown quality policy {policy!r}; choose from {POLICIES}")
    return policy


def decide_quality(docs: pl.DataFrame, policy: str, classifier: Scorer | None, threshold: float | None = None,
                   retention: dict[str, float] | None = None, keep_rate: dict[str, float] | None = None) -> StageResult:  # fmt: skip
    """Apply `policy` to documents that carry `rules_reason` (see the module docstring)."""
    check_policy(policy)
    check_targets(threshold, retention, keep_rate)
    if classifier is None and policy != "rules":
        raise ValueError(
            f"quality policy {policy!r} needs a classifier: pass the shipped one (quality_model.shipped_classifier()) "
            "or one trained on your labels"
        )
    if classifier is not None:
        scores, models = classifier.score_with_models(docs)
        cuts, by_language = classifier_cuts(docs, scores, models, classifier, threshold, retention, keep_rate)
    else:
        scores, models = np.full(docs.height, np.nan), [None] * docs.height
        cuts, by_language = np.full(docs.height, np.nan), {}
    scored = docs.with_columns(
        pl.Series("quality_score", scores, dtype=pl.Float64).fill_nan(None),
        pl.Series("quality_model", models, dtype=pl.String),
        pl.Series("_threshold", cuts, dtype=pl.Float64),
    )
    rule_drop = pl.col("rules_reason").is_not_null()
    low = (pl.col("quality_score") < pl.col("_threshold")) if classifier is not None else pl.lit(False)
    if policy == "rules":
        stage, reason = pl.when(rule_drop).then(pl.lit(RULES_STAGE)), pl.when(rule_drop).then(pl.col("rules_reason"))
    elif policy == "classifier":
        stage, reason = pl.when(low).then(pl.lit(STAGE)), pl.when(low).then(pl.lit("below_threshold"))
    else:
        stage = pl.when(rule_drop).then(pl.lit(RULES_STAGE)).when(low).then(pl.lit(STAGE))
        reason = pl.when(rule_drop).then(pl.col("rules_reason")).when(low).then(pl.lit("below_threshold"))
    rule_score = pl.col("rules_score") if "rules_score" in docs.columns else pl.lit(None, dtype=pl.Float64)
    score = pl.when(pl.col("_stage") == RULES_STAGE).then(rule_score).otherwise(pl.col("quality_score"))
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
            "cuts_applied": {lang: round(float(cut), 6) for lang, cut in by_language.items()},
            # Which model scored the documents: the HTML stacker, or the text model for documents read from text.
            "scored_by": {model: models.count(model) for model in sorted(set(models))},
            "cut_by": ("threshold" if threshold is not None else f"retention {retention}" if retention
                       else f"keep_rate {keep_rate}" if keep_rate else "the thresholds chosen in training"),
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
