"""Document accounting: every document a stage receives is kept, dropped or quarantined."""

from __future__ import annotations

import polars as pl


def conservation(received: int, kept: int, dropped: int, quarantined: int = 0) -> dict:
    """`received = kept + dropped + quarantined`, with the numbers to show when it fails."""
    accounted = kept + dropped + quarantined
    return {
        "received": received,
        "kept": kept,
        "dropped": dropped,
        "quarantined": quarantined,
        "unaccounted": received - accounted,
        "holds": received == accounted,
    }


def reason_counts(*tables: pl.DataFrame) -> pl.DataFrame:
    """`stage, reason, docs` over dropped and quarantine tables, most frequent first."""
    frames = [
        t.select(
            (pl.col("stage") if "stage" in t.columns else pl.lit("quarantine")).alias("stage"),
            pl.col("reason"),
        )
        for t in tables
        if t.height
    ]
    if not frames:
        return pl.DataFrame(schema={"stage": pl.String, "reason": pl.String, "docs": pl.UInt32})
    return (
        pl.concat(frames)
        .group_by("stage", "reason")
        .agg(pl.len().alias("docs"))
        .sort(["docs", "stage", "reason"], descending=[True, False, False])
    )


DROP_EXAMPLES_PER_REASON = 3


def drop_example_ids(dropped: pl.DataFrame, per_reason: int = DROP_EXAMPLES_PER_REASON) -> pl.Series:
    """The `doc_id`s `drop_examples` shows: the first `per_reason` of each stage and reason. A stage that
    streams needs the text of these documents only."""
    return dropped.group_by("stage", "reason", maintain_order=True).head(per_reason)["doc_id"]


def drop_examples(dropped: pl.DataFrame, docs: pl.DataFrame, per_reason: int = DROP_EXAMPLES_PER_REASON,
                  chars: int = 300) -> pl.DataFrame:  # fmt: skip
    """`stage, reason, score, url, text` for the first `per_reason` documents each reason dropped, with the
    score that dropped them (where the stage records one: a rule's signal, the classifier's P(KEEP)) and
    the first `chars` characters of the text they had: what a rule costs, to read. `docs` holds `doc_id`,
    `url` and `text` of the stage's input."""
    columns = {"stage": pl.String, "reason": pl.String, "score": pl.Float64, "url": pl.String, "text": pl.String}
    if dropped.height == 0:
        return pl.DataFrame(schema=columns)
    score = pl.col("score") if "score" in dropped.columns else pl.lit(None, dtype=pl.Float64).alias("score")
    return (
        dropped.select("doc_id", "stage", "reason", score)
        .join(docs.select("doc_id", "url", "text"), on="doc_id", how="left", maintain_order="left")
        .group_by("stage", "reason", maintain_order=True)
        .head(per_reason)
        .select("stage", "reason", "score", "url", pl.col("text").str.slice(0, chars))
        .sort("stage", "reason", maintain_order=True)
        .cast(columns)
    )


def reason_totals(dropped: pl.DataFrame, known: list[str] = ()) -> dict[str, int]:
    """Documents dropped per `stage:reason`, with 0 for each `known` one that dropped nothing."""
    counts = dict.fromkeys(known, 0)
    if dropped.height:
        keys = dropped.select(pl.concat_str("stage", pl.lit(":"), "reason").alias("key"))["key"]
        for key, n in keys.value_counts().iter_rows():
            counts[key] = int(n)
    return dict(sorted(counts.items()))
