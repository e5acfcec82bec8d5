"""From a packed training sequence back to the documents (and their URLs) it was built from.

Reads what `packing.write_packed` wrote: `<split>_segments.parquet` (sorted by `seq_index`, so a
lookup reads only the row groups that can hold it), `manifest.json` and `<split>.bin`; over a storage
root, also each document's URL and WARC record (`trace_sequence`), and the documents of the sequences
a spiked training step trained on (`spike_documents`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import polars as pl

from lm_assets.storage.layout import PACKED_FOLDER, raw_keys

TRACE_SCHEMA = {
    "doc_id": pl.String,
    "shard": pl.String,
    "url": pl.String,
    "seq_offset": pl.Int32,
    "length": pl.Int32,
    "doc_token_start": pl.Int64,
}

# doc_id -> url: a frame (or lazy frame, e.g. a scan over every shard's documents.parquet) with
# `doc_id, url`, or a callable taking a list of doc_ids and returning such a frame.
UrlSource = pl.DataFrame | pl.LazyFrame | Callable[[list[str]], pl.DataFrame] | None


def segments_path(packed_dir: str | os.PathLike, split: str) -> Path:
    return Path(packed_dir) / f"{split}_segments.parquet"


def segments(packed_dir: str | os.PathLike, split: str, seq_index: int | Iterable[int]) -> pl.DataFrame:
    """The segments rows of one or more sequences, in `seq_index, seq_offset` order."""
    wanted = [int(seq_index)] if isinstance(seq_index, (int, np.integer)) else [int(i) for i in seq_index]
    return (
        pl.scan_parquet(segments_path(packed_dir, split))
        .filter(pl.col("seq_index").is_in(wanted))
        .sort("seq_index", "seq_offset")
        .collect()
    )


def urls_for(doc_ids: list[str], documents: UrlSource) -> pl.DataFrame:
    """`doc_id, url` for the given ids (ids without a match are absent)."""
    if documents is None or not doc_ids:
        return pl.DataFrame(schema={"doc_id": pl.String, "url": pl.String})
    if callable(documents) and not isinstance(documents, (pl.DataFrame, pl.LazyFrame)):
        frame = documents(doc_ids)
    else:
        frame = documents.lazy().filter(pl.col("doc_id").cast(pl.String).is_in(doc_ids)).collect()
    return frame.select(pl.col("doc_id").cast(pl.String), pl.col("url").cast(pl.String)).unique("doc_id", keep="first")


def trace(packed_dir: str | os.PathLike, split: str, seq_index: int, documents: UrlSource = None) -> pl.DataFrame:
    """The documents in sequence `seq_index` of `split`, one row per piece, in sequence order.

    Columns `doc_id, shard, url, seq_offset, length, doc_token_start`: the sequence's tokens
    `[seq_offset, seq_offset + length)` are the document's tokens
    `[doc_token_start, doc_token_start + length)`. `url` is null when `documents` is not given
    or does not know the doc_id. Positions not covered by a piece hold EOS or padding.
    """
    segs = segments(packed_dir, split, seq_index)
    urls = urls_for(segs["doc_id"].unique().to_list(), documents)
    return segs.join(urls, on="doc_id", how="left", maintain_order="left").select(list(TRACE_SCHEMA)).cast(TRACE_SCHEMA)


def read_sequence(packed_dir: str | os.PathLike, split: str, seq_index: int) -> np.ndarray:
    """The tokens of one packed sequence (a copy, in the manifest's dtype)."""
    manifest = json.loads((Path(packed_dir) / "manifest.json").read_text())
    seq_len = int(manifest["seq_len"])
    n = int(manifest["splits"][split]["sequences"])
    if not 0 <= seq_index < n:
        raise IndexError(f"{split} has {n} sequences, asked for {seq_index}")
    dtype = np.dtype(manifest["dtype"]).newbyteorder("<")
    data = np.memmap(Path(packed_dir) / f"{split}.bin", dtype=dtype, mode="r", shape=(n, seq_len))
    return np.array(data[seq_index])


def locate(packed_dir: str | os.PathLike, doc_id: str, splits: Iterable[str] = ("train", "val")) -> pl.DataFrame:
    """Where a document went: its segments rows in every split, with a `split` column."""
    frames = []
    for split in splits:
        path = segments_path(packed_dir, split)
        if path.exists():
            frames.append(
                pl.scan_parquet(path)
                .filter(pl.col("doc_id") == doc_id)
                .with_columns(pl.lit(split).alias("split"))
                .collect()
            )
    if not frames:
        return pl.DataFrame()
    return pl.concat(frames).sort("split", "copy", "doc_token_start")


def documents_of(store, shards: list[str]) -> pl.DataFrame:
    """`doc_id, url, record_index` of the raw documents of these shards (a `Storage`)."""
    frames = [
        store.read_parquet(raw_keys(shard)["documents"], columns=["doc_id", "url", "record_index"])
        for shard in shards
    ]
    return pl.concat(frames) if frames else pl.DataFrame(schema={"doc_id": pl.String, "url": pl.String, "record_index": pl.Int64})


def trace_sequence(store, split: str, index: int) -> pl.DataFrame:
    """`doc_id, shard, url, record_index, seq_offset, length, doc_token_start` for sequence `index` of `split`."""
    return trace_sequences(store, split, [index]).drop("seq_index")


def trace_sequences(store, split: str, indices: list[int]) -> pl.DataFrame:
    """`trace_sequence` of several sequences at once, with their `seq_index`."""
    with store.local_dir(PACKED_FOLDER, names=["manifest.json", f"{split}_segments.parquet"]) as packed:
        pieces = segments(packed, split, indices)
    docs = documents_of(store, pieces["shard"].unique().sort().to_list())
    return (
        pieces.join(docs, on="doc_id", how="left", maintain_order="left")
        .select("seq_index", "doc_id", "shard", "url", "record_index", "seq_offset", "length", "doc_token_start")
    )


def spike_documents(store, spikes: list[dict]) -> pl.DataFrame:
    """The documents of each sequence a spiked step trained on (`lm_assets.training.forensics`' rows), one row per
    piece: the step, why it spiked, the sequence and its scan, and the document's shard, URL and record."""
    if not spikes:
        return pl.DataFrame()
    rows = pl.DataFrame(spikes)
    frames = []
    for split in rows["split"].unique(maintain_order=True).to_list():
        wanted = rows.filter(pl.col("split") == split)["seq_index"].unique().sort().to_list()
        frames.append(trace_sequences(store, split, wanted).with_columns(pl.lit(split).alias("split")))
    return rows.join(pl.concat(frames), on=["split", "seq_index"], how="left", maintain_order="left")
