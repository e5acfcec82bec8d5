"""What every per-shard document stage shares: the document tables' contracts, its opening (the
checked shard key and the storage) and its closing (the kept and dropped tables published together,
the standard metadata and checks, whole-shard accounting)."""

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import polars as pl

from lm_assets.corpus.columns import column_description
from lm_assets.corpus.stage import StageResult
from lm_assets.defs.common.partitions import shard_keys
from lm_assets.defs.common.reporting import (
    PREVIEW_DOCS,
    conservation_result,
    drop_metadata,
    non_empty_result,
    schema_result,
    shard_check_spec,
)
from lm_assets.storage.accounting import conservation
from lm_assets.storage.layout import quarantine_key, shard_account, stage_folder, stage_keys

EXTRACTED_SCHEMA = {
    "doc_id": pl.String,
    "url": pl.String,
    "source": pl.String,
    "fetched_at": pl.String,
    "text": pl.String,
    "title": pl.String,
    "lang_hint": pl.String,
    "control_chars_stripped": pl.Int64,
}
CURATED_SCHEMA = {
    **EXTRACTED_SCHEMA,
    "lang": pl.String,
    "lang_score": pl.Float64,
    "tox_max": pl.Float64,
    "tox_frac": pl.Float64,
    "tox_zh_flagged": pl.Float64,
    "quality_score": pl.Float64,
    "quality_model": pl.String,
}


def table_schema(frame: pl.DataFrame) -> dg.TableSchema:
    """The frame's columns, polars types and descriptions, for Dagster's standard `dagster/column_schema`."""
    return dg.TableSchema(columns=[
        dg.TableColumn(name, str(dtype), description=column_description(name)) for name, dtype in frame.schema.items()
    ])


class StreamedDocuments:
    """What a stage shows of the documents it streams out, gathered as they pass: how many, in how many
    batches, the first ones (for previews), each one's `length` (for the histogram) and the sum over the
    batches of what `count(batch)` counts (for the checks)."""

    def __init__(self, schema: dict | None = None, length: pl.Expr = pl.col("text").str.len_chars(),
                 count: Callable[[pl.DataFrame], dict[str, int]] | None = None):  # fmt: skip
        self.rows = self.batches = 0
        self.first = pl.DataFrame(schema=schema or {})
        self.length, self.count = length, count
        self.counts: Counter = Counter()
        self._lengths: list[pl.Series] = []

    def watch(self, batches: Iterator[pl.DataFrame]) -> Iterator[pl.DataFrame]:
        for batch in batches:
            if self.batches == 0:
                self.first = batch.head(PREVIEW_DOCS)
            elif self.first.height < PREVIEW_DOCS:
                self.first = pl.concat([self.first, batch.head(PREVIEW_DOCS - self.first.height)])
            self.rows += batch.height
            self.batches += 1
            self._lengths.append(batch.select(self.length).to_series())
            if self.count is not None:
                self.counts.update(self.count(batch))
            yield batch

    def lengths(self) -> pl.Series:
        return pl.concat(self._lengths) if self._lengths else pl.Series([], dtype=pl.UInt32)


def each_shard(context: dg.AssetExecutionContext, materialize: Callable[[str], dg.MaterializeResult]) -> Iterator:
    """What a per-shard asset yields for the shards of its run. One shard: its result. Several (a backfill
    run, `partitions.SHARDS_PER_RUN` at most): one result for the run, each of whose checks passes when it
    passed on every shard, then each shard's own materialization and check evaluations, so every
    partition keeps its metadata and check results."""
    keys = shard_keys(context)
    if len(keys) == 1:
        yield materialize(keys[0])
        return
    results = {key: materialize(key) for key in keys}
    by_check: dict[str, list[tuple[str, dg.AssetCheckResult]]] = {}
    for key, result in results.items():
        for check in result.check_results or []:
            by_check.setdefault(check.check_name, []).append((key, check))
    summary = []
    for name, items in by_check.items():
        failed = [key for key, check in items if not check.passed]
        blocking = any(check.severity == dg.AssetCheckSeverity.ERROR for key, check in items if not check.passed)
        summary.append(dg.AssetCheckResult(
            check_name=name, passed=not failed,
            severity=dg.AssetCheckSeverity.ERROR if blocking or not failed else dg.AssetCheckSeverity.WARN,
            metadata={"shards": len(items), "failed_shards": ", ".join(failed) or "none"},
        ))
    yield dg.MaterializeResult(metadata={"shards_in_run": len(keys)}, check_results=summary)
    for key, result in results.items():
        yield dg.AssetMaterialization(asset_key=context.asset_key, partition=key, metadata=result.metadata)
        for check in result.check_results or []:
            yield dg.AssetCheckEvaluation(
                asset_key=context.asset_key, check_name=check.check_name, passed=check.passed,
                metadata=check.metadata, severity=check.severity, partition=key,
            )


def publish_stage(
    store, stage: str, shard: str, kept: pl.DataFrame | Path, dropped: pl.DataFrame,
    extra: dict[str, bytes] | None = None, quarantine: pl.DataFrame | None = None,
) -> tuple[int, int, int]:
    """Publish a stage's tables (and `extra` files) together; the tables' row counts as stored, for the
    conservation checks: kept, dropped, quarantined (0 for a stage that does not quarantine). `kept` is a
    table, or its parquet file written already by a stage that streams."""
    tables = {"documents.parquet": kept, "dropped.parquet": dropped}
    if quarantine is not None:
        tables["quarantine.parquet"] = quarantine
    store.publish(stage_folder(stage, shard), {**tables, **(extra or {})})
    keys = stage_keys(stage, shard)
    held = store.row_count(quarantine_key(stage, shard)) if quarantine is not None else 0
    return store.row_count(keys["documents"]), store.row_count(keys["dropped"]), held


@dataclass(frozen=True)
class StageCheck:
    """A check of one stage beyond the standard ones: its name, what it asserts, whether it blocks, and
    `decide(kept, facts)` -> (passed, metadata) on the stage's kept documents and what the asset passes
    as `facts`. A check that is not blocking warns."""

    name: str
    description: str
    decide: Callable[[pl.DataFrame, dict], tuple[bool, dict]]
    blocking: bool = False


@dataclass(frozen=True)
class DocumentStage:
    """A per-shard document stage's contract: the asset, the folder its tables are published under, the
    schema its kept table keeps, whether it checks the shard's whole account (stages after extraction
    do) and its own checks. It makes both the check specs and the check results, so every declared
    check gets a result and no result goes undeclared."""

    name: str  # the stage's one name: its asset is `<name>_shard`, its tables are under `<name>/`
    schema: dict
    whole_shard: bool = True
    checks: tuple[StageCheck, ...] = ()
    filters: tuple[str, ...] = ()  # the `stage` its drops may carry; () means the stage's own name

    @property
    def asset(self) -> str:
        return f"{self.name}_shard"

    @property
    def drop_stages(self) -> tuple[str, ...]:
        return self.filters or (self.name,)

    def check_specs(self) -> list[dg.AssetCheckSpec]:
        specs = [
            shard_check_spec("schema", self.asset, "Columns and types match the contract.", blocking=True),
            shard_check_spec("non_empty", self.asset, "The shard kept at least one document (warns)."),
            shard_check_spec("conservation", self.asset, "received = kept + Σ dropped + quarantined.", blocking=True),
        ]
        if self.whole_shard:
            specs.append(shard_check_spec(
                "shard_conservation", self.asset, "Records read = kept + Σ dropped over all stages + quarantined.",
                blocking=True,
            ))
        return specs + [
            shard_check_spec(c.name, self.asset, c.description + ("" if c.blocking else " (warns)"), c.blocking)
            for c in self.checks
        ]

    def check_results(self, kept: pl.DataFrame, account: dict, whole: dict | None = None,
                      facts: dict | None = None) -> list[dg.AssetCheckResult]:  # fmt: skip
        """The results of every check `check_specs` declares: `account` is this stage's conservation
        (`corpus.accounting.conservation`), `whole` the shard's through this stage. A stage that streamed its
        documents out passes none of them (`kept.head(0)`, for the schema); its checks of its own must then
        not need them, and non_empty reads the published count."""
        results = [schema_result("schema", kept, self.schema), non_empty_result("non_empty", account["kept"]),
                   conservation_result("conservation", account)]  # fmt: skip
        if self.whole_shard:
            results.append(conservation_result("shard_conservation", whole))
        for check in self.checks:
            passed, metadata = check.decide(kept, facts or {})
            severity = dg.AssetCheckSeverity.ERROR if check.blocking else dg.AssetCheckSeverity.WARN
            results.append(dg.AssetCheckResult(check_name=check.name, passed=passed, severity=severity, metadata=metadata))
        return results

    def close(self, store, shard: str, docs_in: int, result: StageResult, metadata: dict, facts: dict | None = None,
              extra: dict[str, bytes] | None = None, streamed: Path | None = None) -> dg.MaterializeResult:  # fmt: skip
        """Publish `result` as this stage of `shard` and report it: path, documents in and out, the drops
        by reason, then `metadata`; every declared check's result (its own decided on `facts`). A stage that
        streamed its documents into the parquet file `streamed` passes their first rows as `result.kept`, for
        the schema."""
        strays = set(result.dropped["stage"].unique()) - set(self.drop_stages)
        if strays:
            raise ValueError(f"{self.asset} dropped documents under {sorted(strays)}, not one of {list(self.drop_stages)}")
        documents = result.kept if streamed is None else streamed
        kept, dropped, held = publish_stage(
            store, self.name, shard, documents, result.dropped, extra, result.quarantine
        )
        whole = shard_account(store, shard, through=self.name) if self.whole_shard else None
        return dg.MaterializeResult(
            metadata={
                "path": dg.MetadataValue.path(store.uri(stage_keys(self.name, shard)["documents"])),
                "dagster/row_count": kept,
                "dagster/column_schema": table_schema(result.kept),
                "documents_in": docs_in,
                "documents_out": kept,
                "dropped": result.dropped.height,
                **({"quarantined": result.quarantine.height} if result.quarantine is not None else {}),
                **drop_metadata(result.dropped, *([result.quarantine] if result.quarantine is not None else [])),
                **metadata,
            },
            check_results=self.check_results(result.kept, conservation(docs_in, kept, dropped, held), whole, facts),
        )
