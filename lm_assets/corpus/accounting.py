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
