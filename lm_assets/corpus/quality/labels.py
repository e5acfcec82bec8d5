"""Quality labels: pages judged KEEP or DROP (or scored 0-5), read from JSONL files and joined to the
documents they label.

One JSON object per line:

    {"url": "https://...", "label": "KEEP", "confidence": "high", "source": "human", "lang": "en", "reason": "..."}

- `url` or `doc_id` names the document (`doc_id` wins when both are given);
- `label` is KEEP or DROP, or an integer score 0-5 (FineWeb-Edu's scale: 3 and above is KEEP);
- `source` is `human` or the name of the model that annotated; `confidence` high or low; the rest is
  free. A line whose label is null (a sample not labelled yet) is skipped.

When several lines label one document, a person's label beats a model's, and a later file (by name)
beats an earlier one. Lines that cannot be read are rejected with a reason, and labels that match
no document are reported; none is lost.
"""

from __future__ import annotations

import hashlib

import polars as pl

from lm_assets.jsonl import BadLine, json_lines

LABEL_SCHEMA = {
    "file": pl.String,
    "line": pl.Int64,
    "doc_id": pl.String,
    "url": pl.String,
    "label": pl.String,
    "keep": pl.Boolean,
    "confidence": pl.String,
    "source": pl.String,
    "lang": pl.String,
}
REJECTED_SCHEMA = {"file": pl.String, "line": pl.Int64, "reason": pl.String}
KEEP_MIN_SCORE = 3


def _parse_line(obj: object) -> tuple[dict | None, str | None]:
    """One label row, or None with the reason it cannot be one (None, None: an unlabelled line)."""
    if isinstance(obj, BadLine):
        return None, "not UTF-8: " + obj.detail if obj.reason == "not_utf8" else f"not JSON: {obj.detail}"
    if not isinstance(obj, dict):
        return None, "not a JSON object"
    label = obj.get("label")
    if label is None:
        return None, None
    if isinstance(label, bool) or not isinstance(label, (str, int, float)):
        return None, f"label {label!r} is neither KEEP/DROP nor a score 0-5"
    if isinstance(label, str):
        label = label.strip().upper()
        if label not in ("KEEP", "DROP"):
            return None, f"label {label!r} is neither KEEP/DROP nor a score 0-5"
        keep = label == "KEEP"
    else:
        if not 0 <= label <= 5:
            return None, f"score {label} is outside 0-5"
        keep, label = label >= KEEP_MIN_SCORE, str(label)
    doc_id, url = obj.get("doc_id"), obj.get("url")
    if not isinstance(doc_id, str) and not isinstance(url, str):
        return None, "names no document: give `url` or `doc_id`"
    source = obj.get("source")
    return {
        "doc_id": doc_id if isinstance(doc_id, str) else None,
        "url": url if isinstance(url, str) else None,
        "label": label,
        "keep": keep,
        "confidence": str(obj.get("confidence") or "high"),
        "source": str(source) if source else "unknown",
        "lang": obj.get("lang") if isinstance(obj.get("lang"), str) else None,
    }, None


def read_label_file(data: bytes, file: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The label rows of one JSONL file, and the lines rejected with their reason."""
    rows, rejected = [], []
    for number, obj in json_lines(data):
        row, reason = _parse_line(obj)
        if row is not None:
            rows.append({"file": file, "line": number, **row})
        elif reason is not None:
            rejected.append({"file": file, "line": number, "reason": reason})
    return pl.DataFrame(rows, schema=LABEL_SCHEMA), pl.DataFrame(rejected, schema=REJECTED_SCHEMA)


def files_version(files: dict[str, bytes]) -> str:
    """Changes whenever a label file is added, removed or edited."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{hashlib.sha256(files[name]).hexdigest()}\n".encode())
    return digest.hexdigest()[:16]


def match_labels(labels: pl.DataFrame, docs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Join labels to `docs` (doc_id, url, source, text, ...): one example per labelled document (the
    winning label, see the module docstring), and the label rows that match no document."""
    by_id = labels.filter(pl.col("doc_id").is_not_null()).join(
        docs.select("doc_id", pl.col("url").alias("doc_url")), on="doc_id", how="left"
    )
    by_url = labels.filter(pl.col("doc_id").is_null()).drop("doc_id").join(
        docs.select(pl.col("doc_id"), "url"), on="url", how="left"
    )
    joined = pl.concat(
        [by_id.with_columns(pl.coalesce("url", "doc_url").alias("url"), matched=pl.col("doc_url").is_not_null()).drop("doc_url"),
         by_url.with_columns(matched=pl.col("doc_id").is_not_null()).select(by_id.drop("doc_url").columns + ["matched"])],
        how="vertical_relaxed",
    )
    unmatched = joined.filter(~pl.col("matched")).drop("matched").sort("file", "line")
    ranked = joined.filter(pl.col("matched")).with_columns(human=pl.col("source") == "human").sort(
        ["doc_id", "human", "file", "line"], descending=[False, True, True, True]
    )
    winners = ranked.unique("doc_id", keep="first", maintain_order=True).drop("matched", "human", "url")
    examples = winners.rename({"lang": "label_lang"}).join(docs.drop("lang", strict=False), on="doc_id", how="inner")
    return examples.sort("doc_id"), unmatched
