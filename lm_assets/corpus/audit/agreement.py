"""The agreement of curation decisions with pages labelled KEEP or DROP by reading them, and text integrity.

Labels are JSON lines: `url, package, lang, label (KEEP|DROP), confidence (high|low), reason`. A
page's outcome comes from the pipeline's own tables, joined on the URL:

- kept: the document is in `curated_shard`'s output;
- drop reason: `stage:reason` of the first table that dropped it (raw, extract, curation) or
  quarantined it;
- survived dedup: the clusters table keeps the document itself (not another copy of it).

Figures, overall and per group (package, language):

- good retention: KEEP pages kept after curation, over KEEP pages;
- junk rejection: DROP pages not kept, over DROP pages;
- balanced accuracy: the mean of the two;
- KEEP originals surviving dedup as themselves: of the KEEP pages kept after curation, the share
  that dedup keeps rather than removing them for another copy (pages the source itself duplicates,
  listed by the caller, left out);
- the rules that dropped KEEP pages, and the DROP pages that were kept.

Text integrity compares each kept document's curated text with its extracted text: whether a
document that had paragraphs (a blank line) still has them, the share of characters curation
removed, and whether Python `def`/`class` lines survive.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import polars as pl

LABELS = ("KEEP", "DROP")
LABEL_SCHEMA = {
    "url": pl.String, "package": pl.String, "lang": pl.String, "label": pl.String,
    "confidence": pl.String, "reason": pl.String,
}
_CODE_LINE = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+\w+", re.M)


def read_labels(path: str | Path) -> pl.DataFrame:
    """Labels from a JSON-lines file; a line without a URL or with another label is an error."""
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not row.get("url") or row.get("label") not in LABELS:
            raise ValueError(f"{path}:{number}: a label needs a url and a label of {LABELS}: {line[:120]}")
        rows.append({key: row.get(key) for key in LABEL_SCHEMA})
    labels = pl.DataFrame(rows, schema=LABEL_SCHEMA)
    duplicated = labels.filter(pl.col("url").is_duplicated())["url"].unique().to_list()
    if duplicated:
        raise ValueError(f"{path}: URLs labelled twice: {duplicated[:5]}")
    return labels


def outcomes(
    raw: pl.DataFrame,
    dropped: pl.DataFrame,
    quarantine: pl.DataFrame,
    curated: pl.DataFrame,
    clusters: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """`url, doc_id, kept, drop_reason, survived_dedup` for every document read.

    `raw`: `doc_id, url` of the read documents; `dropped`: `doc_id, stage, reason` of every stage up
    to curation; `quarantine`: `url, reason`; `curated`: `doc_id` of the kept documents;
    `clusters`: `doc_id, kept` from dedup (None when dedup did not run).
    """
    first_drop = dropped.group_by("doc_id", maintain_order=True).first().select(
        "doc_id", pl.concat_str("stage", pl.lit(":"), "reason").alias("drop_reason")
    )
    table = (
        raw.select("doc_id", "url")
        .join(first_drop, on="doc_id", how="left")
        .with_columns(pl.col("doc_id").is_in(curated["doc_id"].implode()).alias("kept"))
    )
    if clusters is not None:
        table = table.join(
            clusters.select("doc_id", pl.col("kept").alias("survived_dedup")), on="doc_id", how="left"
        )
    else:
        table = table.with_columns(pl.lit(None, dtype=pl.Boolean).alias("survived_dedup"))
    held = quarantine.filter(pl.col("url").is_not_null()).select(
        pl.lit(None, dtype=pl.String).alias("doc_id"),
        "url",
        pl.concat_str(pl.lit("quarantine:"), "reason").alias("drop_reason"),
        pl.lit(False).alias("kept"),
        pl.lit(None, dtype=pl.Boolean).alias("survived_dedup"),
    )
    return pl.concat([table.select(held.columns), held])


def decisions(labels: pl.DataFrame, outcome: pl.DataFrame, natural_duplicates: set[str] = frozenset()) -> pl.DataFrame:
    """Each label with its page's outcome; `found` is False for labels whose URL the crawl lacks.

    `natural_duplicates`: URLs of pages that duplicate another page of the source itself (a crawl's
    truth lists them); only one of such a pair can survive dedup, so they do not count towards the
    share of KEEP pages that dedup keeps as themselves.
    """
    joined = labels.join(outcome.unique("url", keep="first"), on="url", how="left")
    return joined.with_columns(
        pl.col("doc_id").is_not_null().or_(pl.col("drop_reason").is_not_null()).alias("found"),
        pl.col("kept").fill_null(False),
        pl.col("url").is_in(list(natural_duplicates)).alias("natural_duplicate"),
    )


def _ratio(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def decision_figures(table: pl.DataFrame) -> dict:
    """Good retention, junk rejection, balanced accuracy and dedup survival of the found labels."""
    found = table.filter(pl.col("found"))
    keep = found.filter(pl.col("label") == "KEEP")
    drop = found.filter(pl.col("label") == "DROP")
    kept_keep = keep.filter(pl.col("kept"))
    retention = _ratio(kept_keep.height, keep.height)
    rejection = _ratio(drop.filter(~pl.col("kept")).height, drop.height)
    balanced = round((retention + rejection) / 2, 4) if retention is not None and rejection is not None else None
    with_dedup = kept_keep.filter(pl.col("survived_dedup").is_not_null() & ~pl.col("natural_duplicate"))
    return {
        "labels": table.height,
        "found": found.height,
        "keep": keep.height,
        "drop": drop.height,
        "good_retention": retention,
        "junk_rejection": rejection,
        "balanced_accuracy": balanced,
        "keep_survived_dedup": _ratio(with_dedup.filter(pl.col("survived_dedup")).height, with_dedup.height),
        "keep_dropped_by": dict(Counter(keep.filter(~pl.col("kept"))["drop_reason"].fill_null("?").to_list()).most_common()),
    }


def grouped_figures(table: pl.DataFrame, by: str) -> dict[str, dict]:
    return {
        str(key): decision_figures(table.filter(pl.col(by) == key))
        for key in sorted(table[by].drop_nulls().unique().to_list())
    }


def text_integrity(extracted: pl.DataFrame, curated: pl.DataFrame) -> dict:
    """How much of each kept document's extracted text and structure curation left in place."""
    pairs = curated.select("doc_id", pl.col("text").alias("after")).join(
        extracted.select("doc_id", pl.col("text").alias("before")), on="doc_id"
    )
    before, after = pairs["before"].to_list(), pairs["after"].to_list()
    with_paragraphs = [i for i, text in enumerate(before) if "\n\n" in text]
    with_code = [i for i, text in enumerate(before) if _CODE_LINE.search(text)]
    chars_before = sum(map(len, before))
    return {
        "documents": len(before),
        "had_paragraphs": len(with_paragraphs),
        "still_have_paragraphs": _ratio(sum("\n\n" in after[i] for i in with_paragraphs), len(with_paragraphs)),
        "had_code_lines": len(with_code),
        "code_lines_survive": _ratio(
            sum(len(_CODE_LINE.findall(after[i])) >= len(_CODE_LINE.findall(before[i])) for i in with_code),
            len(with_code),
        ),
        "chars_removed_share": round(1 - sum(map(len, after)) / chars_before, 4) if chars_before else None,
    }
