"""Lineage over the storage root: from a packed sequence back to documents, URLs and WARC records."""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl

from lm_assets.corpus.lineage import trace
from lm_assets.corpus.storage import Storage
from lm_assets.layout import PACKED_FOLDER, packed_key, raw_keys


def documents_of(store: Storage, shards: list[str]) -> pl.DataFrame:
    """`doc_id, url, record_index` of the raw documents of these shards."""
    frames = [
        store.read_parquet(raw_keys(shard)["documents"], columns=["doc_id", "url", "record_index"])
        for shard in shards
    ]
    return pl.concat(frames) if frames else pl.DataFrame(schema={"doc_id": pl.String, "url": pl.String, "record_index": pl.Int64})


def trace_sequence(store: Storage, split: str, index: int) -> pl.DataFrame:
    """`doc_id, shard, url, record_index, seq_offset, length, doc_token_start` for sequence `index` of `split`."""
    with tempfile.TemporaryDirectory() as tmp:
        if store.is_s3:
            packed = Path(tmp)
            for name in ("manifest.json", f"{split}_segments.parquet"):
                (packed / name).write_bytes(store.read_bytes(packed_key(name)))
        else:
            packed = store.local_path(PACKED_FOLDER)
        pieces = trace(packed, split, index)
    docs = documents_of(store, pieces["shard"].unique().sort().to_list())
    return (
        pieces.drop("url")
        .join(docs, on="doc_id", how="left", maintain_order="left")
        .select("doc_id", "shard", "url", "record_index", "seq_offset", "length", "doc_token_start")
    )
