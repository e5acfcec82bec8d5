"""What every per-shard document stage shares: the document tables' contracts, its opening (the
checked shard key and the storage) and its closing (the kept and dropped tables published together,
the standard metadata and checks, whole-shard accounting)."""

import dagster as dg
import polars as pl

from lm_assets.corpus.accounting import conservation
from lm_assets.corpus.stage import StageResult
from lm_assets.corpus.storage import Storage
from lm_assets.defs.common.partitions import shard_key
from lm_assets.defs.common.reporting import conservation_result, drop_metadata, non_empty_result, schema_result
from lm_assets.layout import shard_account, stage_folder, stage_keys

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
}


def table_schema(frame: pl.DataFrame) -> dg.TableSchema:
    """The frame's columns and polars types, for Dagster's standard `dagster/column_schema`."""
    return dg.TableSchema(columns=[dg.TableColumn(name, str(dtype)) for name, dtype in frame.schema.items()])


def open_stage(context: dg.AssetExecutionContext, storage) -> tuple[str, Storage]:
    """The run's shard key (refused before any I/O when unsafe) and the storage root."""
    return shard_key(context), storage.storage()


def publish_stage(
    store, stage: str, shard: str, kept: pl.DataFrame, dropped: pl.DataFrame, extra: dict[str, bytes] | None = None
) -> tuple[int, int]:
    """Publish a stage's two tables (and `extra` files) together; the tables' row counts as stored, for
    the conservation checks."""
    store.publish(stage_folder(stage, shard), {"documents.parquet": kept, "dropped.parquet": dropped, **(extra or {})})
    keys = stage_keys(stage, shard)
    return store.row_count(keys["documents"]), store.row_count(keys["dropped"])


def close_stage(
    store,
    stage: str,
    shard: str,
    docs_in: int,
    result: StageResult,
    schema: dict,
    metadata: dict,
    checks: list[dg.AssetCheckResult] = (),
    extra: dict[str, bytes] | None = None,
    whole_shard: bool = True,
) -> dg.MaterializeResult:
    """Publish `result` as `stage` of `shard` and report it: path, documents in and out, the drops by
    reason, then `metadata`; the schema, non-empty and conservation checks (and, with `whole_shard`, the
    shard's account through this stage as stored), then `checks`."""
    kept, dropped = publish_stage(store, stage, shard, result.kept, result.dropped, extra)
    account = [conservation_result("shard_conservation", shard_account(store, shard, through=stage))] if whole_shard else []
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(store.uri(stage_keys(stage, shard)["documents"])),
            "dagster/row_count": result.kept.height,
            "dagster/column_schema": table_schema(result.kept),
            "documents_in": docs_in,
            "documents_out": result.kept.height,
            "dropped": result.dropped.height,
            **drop_metadata(result.dropped),
            **metadata,
        },
        check_results=[
            schema_result("schema", result.kept, schema),
            non_empty_result("non_empty", result.kept),
            conservation_result("conservation", conservation(docs_in, kept, dropped)),
            *account,
            *checks,
        ],
    )
