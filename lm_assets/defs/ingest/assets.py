"""raw_shard: one landing file, read into normalized documents, with everything else accounted for."""


import json
import time
from pathlib import Path

import dagster as dg
import polars as pl
from pydantic import Field

from lm_assets.corpus.curation.extract import ExtractConfig, extract_html, too_deep
from lm_assets.corpus.ingest.readers import DOCUMENT_SCHEMA, ReaderConfig, ShardReading
from lm_assets.defs.common.config import to_dataclass
from lm_assets.defs.common.partitions import shard_asset
from lm_assets.defs.common.reporting import (
    PREVIEW_DOCS,
    config_hash,
    document_previews,
    drop_metadata,
    length_histogram,
)
from lm_assets.defs.common.resources import LandingResource, StorageResource
from lm_assets.defs.common.stages import DocumentStage, StreamedDocuments, each_shard
from lm_assets.storage.accounting import conservation
from lm_assets.storage.layout import raw_keys, stage_folder
from lm_assets.storage.store import DOCUMENT_ROW_GROUP_ROWS, write_batches

READER_DEFAULTS = ReaderConfig()


class RawShardConfig(dg.Config):
    max_doc_bytes: int = Field(
        default=READER_DEFAULTS.max_doc_bytes,
        description="bytes a record (or a JSONL line, or a Parquet row's text) may hold; larger ones are quarantined "
        "as oversize",
    )
    text_field: str = Field(
        default=READER_DEFAULTS.text_field, description="the JSONL field or Parquet column holding the text"
    )
    url_field: str = Field(
        default=READER_DEFAULTS.url_field,
        description="the JSONL field or Parquet column holding the URL; documents without it have no URL",
    )
    default_charset: str = Field(
        default=READER_DEFAULTS.default_charset,
        description="charset of WARC payloads that declare none (no HTTP header, no `<meta charset>`); one that fails "
        "to decode falls back to detection",
    )


def raw_text_sample(docs: pl.DataFrame) -> pl.DataFrame:
    """The first documents with their text: a record's own text, else all the text of its HTML."""
    sample = docs.head(PREVIEW_DOCS)
    as_text = ExtractConfig(extractor="all_text")

    def shown(text: str | None, html: str | None) -> str:
        if text is not None:
            return text
        if too_deep(html or "", as_text):  # its parse could take minutes
            return f"(not parsed: its elements nest over {as_text.max_depth:,} deep)"
        return extract_html(html or "", as_text)[0]

    return sample.with_columns(pl.Series("text", [shown(*row) for row in zip(sample["text"], sample["html"])],
                                         dtype=pl.String))


# The first stage: its conservation counts the shard's records, so it is the shard's whole account.
RAW_STAGE = DocumentStage("raw", DOCUMENT_SCHEMA, whole_shard=False)


@shard_asset(
    group_name="ingest",
    kinds={"polars", "parquet"},
    check_specs=RAW_STAGE.check_specs(),
    description="Documents read from one landing shard (WARC, WET, JSONL or Parquet); "
    "non-documents dropped and unreadable records quarantined, each with a reason.",
)
def raw_shard(
    context: dg.AssetExecutionContext, config: RawShardConfig, storage: StorageResource, landing: LandingResource
):
    yield from each_shard(context, lambda shard: raw_shard_of(shard, config, storage, landing))


def replacements(batch: pl.DataFrame) -> dict[str, int]:
    """Documents kept with a few undecodable bytes replaced by U+FFFD, and how many characters."""
    return {"docs_with_replaced_chars": int((batch["replaced_chars"] > 0).sum()),
            "replaced_chars": int(batch["replaced_chars"].sum())}  # fmt: skip


def raw_shard_of(shard: str, config: RawShardConfig, storage: StorageResource, landing: LandingResource) -> dg.MaterializeResult:
    store = storage.storage()
    started = time.perf_counter()
    reader_config = to_dataclass(ReaderConfig, config)
    keys = raw_keys(shard)
    seen = StreamedDocuments(DOCUMENT_SCHEMA, length=pl.coalesce("html", "text").str.len_chars(), count=replacements)
    source = landing.storage()
    before = source.file_state(shard)
    with source.local_copy(shard) as path, store.work_folder(stage_folder("raw", shard)) as work:
        size = path.stat().st_size
        reading = ShardReading(path, source=shard, config=reader_config)
        documents = write_batches(seen.watch(reading.batches()), DOCUMENT_SCHEMA, Path(work) / "documents.parquet",
                                  DOCUMENT_ROW_GROUP_ROWS)  # fmt: skip
        shard_read = reading.read.frames()
        # A file still being written is read only in part: nothing of it is published.
        if (after := source.file_state(shard)) != before:
            raise dg.Failure(
                f"landing file {shard} changed while it was read (size {before[0]:,} -> {after[0]:,} bytes, modified "
                f"{after[1] - before[1]:+.3f} s later): nothing was published; run it again once the file is complete "
                "(the landing resource's settle_s, or a <name>.done marker)")
        dropped, quarantine = shard_read.dropped, shard_read.quarantine
        summary = json.dumps({"records": shard_read.records, "bytes": size}).encode()
        store.publish(stage_folder("raw", shard), {"documents.parquet": documents, "dropped.parquet": dropped,
                                                   "quarantine.parquet": quarantine, "summary.json": summary})
    records = json.loads(store.read_bytes(keys["summary"]))["records"]
    account = conservation(records, *(store.row_count(keys[t]) for t in ("documents", "dropped", "quarantine")))
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(store.uri(keys["documents"])),
            "shard_bytes": size,
            "records_in": records,
            "documents_out": seen.rows,
            "dropped": dropped.height,
            "quarantined": quarantine.height,
            "batches": seen.batches,
            "docs_with_replaced_chars": seen.counts["docs_with_replaced_chars"],
            "replaced_chars": seen.counts["replaced_chars"],
            **drop_metadata(dropped, quarantine),
            "payload_length_histogram": length_histogram(seen.lengths()),
            **document_previews(raw_text_sample(seen.first), ["doc_id", "url", "content_type", "text"]),
            "seconds": round(time.perf_counter() - started, 3),
            "config_hash": config_hash(config),
        },
        check_results=RAW_STAGE.check_results(seen.first.head(0), account),
    )
