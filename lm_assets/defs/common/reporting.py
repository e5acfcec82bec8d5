"""Metadata and check results shared by the stage assets."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import warnings
from collections.abc import Collection

import dagster as dg
import polars as pl

from lm_assets.defs.common.partitions import checkpoint_partitions, shard_partitions
from lm_assets.corpus.curation.histograms import number
from lm_assets.corpus.curation.rules import STAGE as RULES_STAGE
from lm_assets.reporting.tables import markdown_table_text, table_cell
from lm_assets.storage.accounting import drop_examples, reason_counts, reason_totals
from lm_assets.storage.layout import parse_checkpoint_key
from lm_assets.text import hard_wrapped

HISTOGRAM_EDGES = (0, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000)
# Previews: this many documents by their opening characters, and the first few in full.
PREVIEW_DOCS, PREVIEW_CHARS = 10, 500
FULL_TEXT_DOCS, FULL_TEXT_MAX_CHARS = 3, 20_000


def config_hash(config: dg.Config) -> str:
    return payload_hash(config.model_dump())


def payload_hash(settings: dict) -> str:
    payload = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def latest_metadata(instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition: str) -> dict | None:
    """The metadata of the partition's latest materialization, or None when none is recorded."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1
    ).records
    mat = records[0].asset_materialization if records else None
    return mat.metadata if mat else None


def run_series(checkpoint: str, scores: dict[str, float | None], unplotted: Collection[str] = ()) -> dict[str, dg.MetadataValue]:
    """Scores as numeric metadata under the checkpoint's run (`main/perplexity`, `sft/perplexity`), at five
    significant digits, and `series`, the run. The Plots tab draws one chart per numeric key across the
    checkpoint partitions, so a key per run keeps each run's checkpoints on a series of their own: a
    fine-tuning checkpoint never reads as the next point of pretraining. The scores named in `unplotted`
    (a standard error, a breakdown whose table is on the page) are recorded under the same key as text, so
    that the page shows them and `series_value` reads them, but no chart is drawn of them."""
    run, _ = parse_checkpoint_key(checkpoint)
    return {
        "series": dg.MetadataValue.text(f"{run}: this run's checkpoints, plotted as {run}/…"),
        **{f"{run}/{name}": (dg.MetadataValue.text(f"{value:.5g}") if name in unplotted
                             else dg.MetadataValue.float(float(f"{value:.5g}")))
           for name, value in scores.items() if value is not None and math.isfinite(value)},
    }


def series_value(metadata: dict | None, checkpoint: str, name: str) -> float | None:
    """The score `name` that `run_series` recorded for `checkpoint` (plotted or not), or None."""
    run, _ = parse_checkpoint_key(checkpoint)
    entry = (metadata or {}).get(f"{run}/{name}")
    if entry is None:
        return None
    try:
        return float(entry.value)
    except (TypeError, ValueError):
        return None


def cut_text(value: float) -> str:
    """A threshold (a cut on a score) as every page writes it, the histograms' captions
    (`corpus.curation.histograms.number`) and curated_shard's classifier_threshold alike: four significant
    digits, 0.3175, 0.5, 50, and 100,000 with separators."""
    return number(value)


def markdown_table(df: pl.DataFrame, max_rows: int = 20) -> dg.MetadataValue:
    return dg.MetadataValue.md(markdown_table_text(df, max_rows))


def length_histogram(lengths: pl.Series, unit: str = "chars") -> dg.MetadataValue:
    counts = []
    for low, high in zip(HISTOGRAM_EDGES, (*HISTOGRAM_EDGES[1:], None)):
        in_bin = lengths >= low if high is None else (lengths >= low) & (lengths < high)
        label = f"≥ {low:,}" if high is None else f"{low:,}–{high:,}"
        counts.append({unit: label, "docs": int(in_bin.sum())})
    return markdown_table(pl.DataFrame(counts))


def document_previews(docs: pl.DataFrame, columns: list[str]) -> dict:
    """`preview`: the first PREVIEW_DOCS documents' `columns`, their `text` cut to PREVIEW_CHARS characters;
    `full_text`: the first FULL_TEXT_DOCS documents whole (up to FULL_TEXT_MAX_CHARS characters each), with
    their line breaks and paragraphs as stored."""
    columns = [c for c in columns if c in docs.columns]
    shown = docs.head(PREVIEW_DOCS).select(
        [pl.col(c).cast(pl.String).str.slice(0, PREVIEW_CHARS) if c == "text" else pl.col(c) for c in columns]
    )
    return {"preview": markdown_table(shown, max_rows=PREVIEW_DOCS), "full_text": full_text(docs, columns)}


def full_text(docs: pl.DataFrame, columns: list[str]) -> dg.MetadataValue:
    if docs.height == 0 or "text" not in docs.columns:
        return dg.MetadataValue.md("_none_")
    blocks = []
    for number, doc in enumerate(docs.head(FULL_TEXT_DOCS).iter_rows(named=True), start=1):
        label = " · ".join(f"{c}: {table_cell(doc[c])}" for c in columns if c != "text" and doc[c] is not None)
        text = doc["text"] or ""
        cut = len(text) - FULL_TEXT_MAX_CHARS
        blocks.append(f"**{number}.** {label} · {len(text):,} characters")
        blocks.append(fenced(text[:FULL_TEXT_MAX_CHARS]))
        if cut > 0:
            blocks.append(f"_{cut:,} more characters not shown_")
    return dg.MetadataValue.md("\n\n".join(blocks))


WRAP_COLUMNS = 96  # what the UI's markdown dialog shows of a monospace line without scrolling


def fenced(text: str, wrap: bool = True) -> str:
    """`text` as a fenced block, its fence longer than any run of tildes inside it; with `wrap`, lines
    wider than the dialog are hard-wrapped, each continuation marked `↪` (`text.hard_wrapped`)."""
    longest = max((len(run) for run in re.findall("~+", text)), default=0)
    fence = "~" * max(3, longest + 1)
    body = hard_wrapped(text, WRAP_COLUMNS) if wrap else text
    return f"{fence}text\n{body}\n{fence}"




def spelled(key: str) -> str:
    """A `stage:reason` as every table, key and line of the metadata spells it: `classifier:below_threshold`,
    `langid:lang:ja`, and a quality rule, whose reason already names its family, by family and rule alone:
    `gopher_quality:min_doc_words`."""
    return key.removeprefix(f"{RULES_STAGE}:")


def spelled_reasons(frame: pl.DataFrame) -> pl.DataFrame:
    """`stage` and `reason` as one `reason` column, spelled as `spelled` spells it."""
    joined = pl.when(pl.col("stage") == RULES_STAGE).then(pl.col("reason")).otherwise(
        pl.concat_str("stage", pl.lit(":"), "reason"))
    return frame.select(joined.alias("reason"), pl.exclude("stage", "reason"))


def drop_metadata(*tables: pl.DataFrame) -> dict:
    return {"drop_reasons": markdown_table(spelled_reasons(reason_counts(*tables)), max_rows=40)}


def drop_audit_metadata(dropped: pl.DataFrame, docs: pl.DataFrame, known_reasons: list[str] = ()) -> dict:
    """A few dropped documents per reason (the score that dropped them, URL, opening text), and per reason
    that dropped something a numeric count under `dropped/<reason>`, so each rule's cost plots across runs;
    the rules that dropped nothing are named in one line, not listed as zeros. A reason is spelled one way
    (`spelled`: `gopher_quality:min_doc_words`, `classifier:below_threshold`) in the keys, the tables and
    the line alike."""
    examples = drop_examples(dropped, docs)
    totals = {spelled(key): n for key, n in reason_totals(dropped, known_reasons).items()}
    idle = sorted(key for key, n in totals.items() if n == 0)
    return {
        "drop_examples": markdown_table(spelled_reasons(examples), max_rows=max(examples.height, 1)),
        **{f"dropped/{key}": n for key, n in totals.items() if n},
        **({"rules_that_dropped_nothing": dg.MetadataValue.text(", ".join(idle))} if idle else {}),
    }


def schema_result(name: str, df: pl.DataFrame, expected: dict) -> dg.AssetCheckResult:
    actual = dict(df.schema)
    missing = {k: str(v) for k, v in expected.items() if k not in actual}
    wrong = {k: f"{actual[k]} (expected {v})" for k, v in expected.items() if k in actual and actual[k] != v}
    return dg.AssetCheckResult(
        check_name=name,
        passed=not missing and not wrong,
        metadata={"missing": json.dumps(missing), "wrong_type": json.dumps(wrong), "columns": len(actual)},
    )


def non_empty_result(name: str, rows: int) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(check_name=name, passed=rows > 0, severity=dg.AssetCheckSeverity.WARN, metadata={"rows": rows})


def conservation_result(name: str, account: dict) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(check_name=name, passed=account["holds"], metadata={k: v for k, v in account.items()})


def partitioned_check_spec(
    partitions_def: dg.PartitionsDefinition, name: str, asset: str, description: str, blocking: bool = False
) -> dg.AssetCheckSpec:
    """A check whose result Dagster keeps per partition, so each shard or checkpoint shows its own status
    and a later passing one cannot hide an earlier failure. Partitioned checks are a preview feature of
    Dagster 1.x (`AssetCheckSpec(partitions_def=...)`); its PreviewWarning at every load is silenced here."""
    with partitioned_checks_allowed():
        return dg.AssetCheckSpec(name, asset=asset, description=description, blocking=blocking, partitions_def=partitions_def)


@contextlib.contextmanager
def partitioned_checks_allowed():
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
        )
        yield


def shard_check_spec(name: str, asset: str, description: str, blocking: bool = False) -> dg.AssetCheckSpec:
    return partitioned_check_spec(shard_partitions, name, asset, description, blocking)


def checkpoint_check_spec(name: str, asset: str, description: str, blocking: bool = False) -> dg.AssetCheckSpec:
    return partitioned_check_spec(checkpoint_partitions, name, asset, description, blocking)

