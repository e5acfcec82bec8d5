"""The uniform shape of a processing stage: kept rows, dropped rows with a reason, and stats."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

DROPPED_SCHEMA = {"doc_id": pl.String, "stage": pl.String, "reason": pl.String}
# Records a stage could not process (unreadable, or over a time budget), with why.
QUARANTINE_SCHEMA = {
    "doc_id": pl.String,
    "source": pl.String,
    "record_index": pl.Int64,
    "byte_offset": pl.Int64,
    "url": pl.String,
    "reason": pl.String,
    "detail": pl.String,
}
# Where a stage drops on a score: the rule's signal, or the classifier's P(KEEP).
SCORED_DROPPED_SCHEMA = DROPPED_SCHEMA | {"score": pl.Float64}


@dataclass
class StageResult:
    """What one stage made of its input.

    `kept` holds the surviving rows (possibly with new columns), `dropped` holds
    `doc_id, stage, reason` for each removed row, `quarantine` (for a stage that can quarantine) the rows
    it could not process, and `stats` holds counters for metadata. Every input row is in exactly one.
    """

    kept: pl.DataFrame
    dropped: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=DROPPED_SCHEMA))
    stats: dict = field(default_factory=dict)
    quarantine: pl.DataFrame | None = None


def split_by_reason(
    df: pl.DataFrame, reason: pl.Expr | str, stage: str, score: pl.Expr | str | None = None
) -> StageResult:
    """Split `df` on a reason column or expression: null reason means kept. With `score` (a column or an
    expression), each dropped row also carries its value as `score`: what dropped it."""
    expr = pl.col(reason) if isinstance(reason, str) else reason
    tagged = df.with_columns(expr.alias("_reason"))
    kept = tagged.filter(pl.col("_reason").is_null()).drop("_reason")
    schema = DROPPED_SCHEMA if score is None else SCORED_DROPPED_SCHEMA
    dropped = tagged.filter(pl.col("_reason").is_not_null()).select(
        pl.col("doc_id"), pl.lit(stage).alias("stage"), pl.col("_reason").alias("reason"),
        *([] if score is None else [(pl.col(score) if isinstance(score, str) else score).alias("score")]),
    )
    return StageResult(kept=kept, dropped=dropped.cast(schema))
