"""Lineage over the storage root: from a packed sequence back to documents, URLs and WARC records."""

from __future__ import annotations

import polars as pl

from lm_assets.corpus.audit.lineage import trace
from lm_assets.storage.layout import PACKED_FOLDER, raw_keys
from lm_assets.storage.store import Storage


def documents_of(store: Storage, shards: list[str]) -> pl.DataFrame:
    """`doc_id, url, record_index` of the raw documents of these shards."""
    frames = [
        store.read_parquet(raw_keys(shard)["documents"], columns=["doc_id", "url", "record_index"])
        for shard in shards
    ]
    return pl.concat(frames) if frames else pl.DataFrame(schema={"doc_id": pl.String, "url": pl.String, "record_index": pl.Int64})


def trace_sequence(store: Storage, split: str, index: int) -> pl.DataFrame:
    """`doc_id, shard, url, record_index, seq_offset, length, doc_token_start` for sequence `index` of `split`."""
    with store.local_dir(PACKED_FOLDER, names=["manifest.json", f"{split}_segments.parquet"]) as packed:
        pieces = trace(packed, split, index)
    docs = documents_of(store, pieces["shard"].unique().sort().to_list())
    return (
        pieces.drop("url")
        .join(docs, on="doc_id", how="left", maintain_order="left")
        .select("doc_id", "shard", "url", "record_index", "seq_offset", "length", "doc_token_start")
    )
