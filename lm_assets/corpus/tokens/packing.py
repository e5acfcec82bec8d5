"""Pack tokenized shards into fixed-length training sequences.

Input: per shard a flat token array (`tokens.bin`, little-endian uint16 or uint32, memory-mapped)
and a document index (`doc_id, offset, length`, in tokens) with each document's `source` and
`lang`. Output, per split (`train`, `val`):

- `<split>.bin`: a `[n_seq, seq_len]` array of the token dtype, little-endian, row-major, no header;
- `<split>_segments.parquet`: one row per piece of a document placed in a sequence, sorted by
  `seq_index, seq_offset`, with columns
  `seq_index, seq_offset, length, doc_id, shard, doc_token_start, copy`: the sequence holds the
  document's tokens `[doc_token_start, doc_token_start + length)` at
  `[seq_offset, seq_offset + length)`; `copy` numbers the up-sampled copies of a document from 0.
  A piece never includes the EOS that follows a document, nor padding;
- `manifest.json`: the manifest (inputs and their versions, mixture requested and realized,
  counts, efficiency, dtype, seq_len, seed, ...). It is written last: its presence means the
  files next to it are complete.

Everything is deterministic from the inputs and the config, and independent of the order in which
shards or documents are given: every random choice is a hash of the document id (and the seed),
never a random-number-generator state.

- **Split.** A document is in `val` when `blake2b-64(doc_id) / 2**64 < val_fraction` (the digest
  read as a little-endian integer). The split depends on the document id only, not on the seed or
  the mixture, so changing those never moves a document across it; all copies of a document stay
  in its split.
- **Mixture.** A document's weight is the product of the `source:<name>` and `lang:<code>` weights
  that match it (1 when none does). It appears `floor(w)` times, plus once more with probability
  `w - floor(w)` (a Bernoulli draw hashed from the seed and the doc id).
- **Order.** Document copies are ordered by a hash of (seed, doc id, copy).
- **concat** (the default): copies in that order, each followed by EOS, are concatenated and cut
  every `seq_len` tokens. A document may span sequences (`split_share` in the stats). With
  `drop_last=True` (the default) the final partial sequence is dropped (fewer than `seq_len`
  tokens, counted in `dropped_tail_tokens`; documents that lose tokens there count as
  truncated); with `drop_last=False` it is padded with `pad_id`.
- **bfd** (best-fit decreasing): a document plus its EOS longer than `seq_len` is cut into
  `seq_len` pieces, each filling a sequence of its own, and counted as truncated (its tokens are
  all kept, but the document is no longer whole in one sequence); what is left of it (with its
  EOS) and every document that fits whole are the items, of size `length + 1`, placed by
  best-fit decreasing (`best_fit_decreasing`) into bins of `seq_len`, padded with `pad_id`.
  Nothing is dropped.
- **Shuffle.** Finally each split's sequences are permuted by a hash of (seed, split, sequence
  index).

`pack` computes the layout without reading a token: O(n log n) in the number of document copies
(sorting), plus O(n log seq_len) for bfd's placement. `PackedResult.sequences` and `write_packed`
materialize the tokens, copying each piece once with a memory copy.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from bisect import bisect_left, insort
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from lm_assets.training.primitives import splitmix64, temp_beside

FORMAT = "lm-assets-packed/1"
PACKED_SPLITS = ("train", "val")  # the packed dataset's splits
CURRICULA = ("none", "length", "quality", "perplexity")
STRATEGIES = ("concat", "bfd")
SEGMENT_SCHEMA = {
    "seq_index": pl.Int64,
    "seq_offset": pl.Int32,
    "length": pl.Int32,
    "doc_id": pl.String,
    "shard": pl.String,
    "doc_token_start": pl.Int64,
    "copy": pl.Int32,
}
_U64 = np.uint64
_CHUNK_BYTES = 64 << 20  # output buffer size when materializing


@dataclass(frozen=True)
class PackingConfig:
    """How to pack. See the module docstring for what each choice does.

    - `seq_len`: tokens per sequence (the loader yields `seq_len - 1` input/target pairs per row, so
      2049 fills the 2,048-token context of the model presets).
    - `strategy`: `"concat"` (concatenate-and-chunk: no padding, documents may span sequences) or
      `"bfd"` (best-fit decreasing: documents kept whole when they fit, padding).
    - `val_fraction`: share of documents (by a hash of doc_id) held out for validation.
    - `seed`: drives the mixture's Bernoulli draws, the document order and the sequence shuffle;
      never the split.
    - `mixture`: `{"source:<name>": w, "lang:<code>": w}`; weights multiply, missing ones are 1.
    - `drop_last`: concat only; drop (True) or pad (False) the final partial sequence.

    Defaults: concat wastes no compute on padding and is the usual choice for pretraining (bfd,
    which keeps documents whole, pays for it in padding: report `efficiency`); 1% validation is
    ample at corpus scale (set more for small corpora); dropping the last partial sequence loses
    fewer than `seq_len` tokens and keeps every row full. Token ids follow the tokenizer's
    specials: PAD 0, EOS 3.
    """

    seq_len: int = 2049
    strategy: str = "concat"
    val_fraction: float = 0.01
    seed: int = 0
    eos_id: int = 3
    pad_id: int = 0
    mixture: Mapping[str, float] = field(default_factory=dict)
    drop_last: bool = True
    curriculum: str = "none"  # none | length | quality | perplexity: the train split's sequences scored for an easy-to-hard start
    curriculum_fraction: float = 0.25  # share of the first epoch's positions the curriculum orders

    def __post_init__(self):
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be at least 2, got {self.seq_len}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.eos_id < 0 or self.pad_id < 0:
            raise ValueError("eos_id and pad_id must be non-negative token ids")
        if self.curriculum not in CURRICULA:
            raise ValueError(f"curriculum must be one of {CURRICULA}, got {self.curriculum!r}")
        if not 0.0 < self.curriculum_fraction <= 1.0:
            raise ValueError(f"curriculum_fraction must be in (0, 1], got {self.curriculum_fraction}")
        for key, weight in self.mixture.items():
            kind, sep, value = key.partition(":")
            if not sep or kind not in ("source", "lang") or not value:
                raise ValueError(f"mixture key {key!r} is not 'source:<name>' or 'lang:<code>'")
            if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
                raise ValueError(f"mixture weight for {key!r} must be a finite number >= 0, got {weight!r}")


@dataclass
class ShardTokens:
    """One tokenized shard.

    `tokens` is the shard's flat 1-D token array (an `np.memmap` is fine). `docs` has
    `doc_id, offset, length` (offset and length in tokens) and optionally `source` (defaults to
    the shard name) and `lang` (defaults to null). `version` identifies the input (e.g. token
    count and tokenizer hash) and is copied to the manifest.
    """

    name: str
    tokens: np.ndarray
    docs: pl.DataFrame
    tokenizer_hash: str | None = None
    version: Mapping[str, Any] | None = None

    @classmethod
    def from_files(
        cls,
        name: str,
        tokens_path: str | os.PathLike,
        index: pl.DataFrame | str | os.PathLike,
        sidecar: Mapping[str, Any] | str | os.PathLike,
        documents: pl.DataFrame | None = None,
    ) -> ShardTokens:
        """Memory-map a shard written by the tokenizer stage.

        `index` is the document index (a frame or a parquet path), `sidecar` the JSON sidecar
        (`dtype, byte_order, token_count, documents, tokenizer_hash, vocab_size`; a dict or a
        path). `documents`, when given, supplies `source` and `lang` by doc_id for an index
        without them. With the tokenizer stage's layout (`lm_assets.corpus.tokens.tokenize`):
        `from_files(name, path, index_path(path), sidecar_path(path), documents)`.
        """
        if not isinstance(sidecar, Mapping):
            sidecar = json.loads(Path(sidecar).read_text())
        if not isinstance(index, pl.DataFrame):
            index = pl.read_parquet(index)
        if sidecar.get("byte_order", "little") != "little":
            raise ValueError(f"shard {name!r}: unsupported byte order {sidecar['byte_order']!r}")
        dtype = np.dtype(sidecar["dtype"]).newbyteorder("<")
        count = int(sidecar["token_count"])
        size = os.path.getsize(tokens_path)
        if size != count * dtype.itemsize:
            raise ValueError(
                f"shard {name!r}: {tokens_path} has {size} bytes, the sidecar says {count} {dtype.name} tokens"
            )
        tokens = np.memmap(tokens_path, dtype=dtype, mode="r", shape=(count,)) if count else np.zeros(0, dtype)
        if documents is not None:
            extra = [c for c in ("source", "lang") if c in documents.columns and c not in index.columns]
            if extra:
                index = index.join(
                    documents.select(pl.col("doc_id").cast(pl.String), *extra),
                    on="doc_id",
                    how="left",
                )
        version = {k: sidecar[k] for k in ("token_count", "documents", "tokenizer_hash", "vocab_size") if k in sidecar}
        return cls(name=name, tokens=tokens, docs=index, tokenizer_hash=sidecar.get("tokenizer_hash"), version=version)


# -- hashing ----------------------------------------------------------------------------------


def _seed_key(seed: int, purpose: str) -> np.uint64:
    return _U64(int.from_bytes(hashlib.blake2b(f"{seed}\x00{purpose}".encode(), digest_size=8).digest(), "little"))


def _unit_float(h: np.ndarray) -> np.ndarray:
    """uint64 -> float64 uniform in [0, 1) from the top 53 bits."""
    return (h >> _U64(11)).astype(np.float64) * (1.0 / (1 << 53))


def doc_id_hash(doc_ids: list[str] | pl.Series) -> np.ndarray:
    """blake2b-64 of each doc id (UTF-8), as uint64 read little-endian."""
    ids = doc_ids.to_list() if isinstance(doc_ids, pl.Series) else list(doc_ids)
    raw = b"".join(hashlib.blake2b(d.encode(), digest_size=8).digest() for d in ids)
    return np.frombuffer(raw, dtype="<u8").astype(_U64)


def val_mask(doc_ids: list[str] | pl.Series, val_fraction: float) -> np.ndarray:
    """True for the documents that belong to the validation split."""
    return _unit_float(doc_id_hash(doc_ids)) < val_fraction


# -- layout -----------------------------------------------------------------------------------


@dataclass
class _Layout:
    """Where every token of one split goes, in final (shuffled) sequence order."""

    n_seq: int
    # pieces of documents, sorted by (seq_index, seq_offset)
    seq_index: np.ndarray
    seq_offset: np.ndarray
    length: np.ndarray
    doc_row: np.ndarray  # row in PackedResult.docs
    doc_token_start: np.ndarray
    copy: np.ndarray
    # EOS tokens, sorted by position
    eos_seq: np.ndarray
    eos_offset: np.ndarray
    stats: dict[str, Any]


def _exclusive_cumsum(x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x), dtype=np.int64)
    if len(x) > 1:
        np.cumsum(x[:-1], out=out[1:])
    return out


def _concat_chunks(sizes: np.ndarray, seq_len: int, drop_last: bool):
    """Cut the concatenation of units (each `sizes[k]` tokens, EOS included) into rows."""
    starts = _exclusive_cumsum(sizes)
    total = int(starts[-1] + sizes[-1]) if len(sizes) else 0
    n_rows = total // seq_len if drop_last else -(-total // seq_len)
    first_row = starts // seq_len
    last_row = (starts + sizes - 1) // seq_len
    per_unit = last_row - first_row + 1
    unit = np.repeat(np.arange(len(sizes), dtype=np.int64), per_unit)
    row = first_row[unit] + np.arange(len(unit), dtype=np.int64) - np.repeat(_exclusive_cumsum(per_unit), per_unit)
    begin = np.maximum(starts[unit], row * seq_len)
    end = np.minimum(starts[unit] + sizes[unit], (row + 1) * seq_len)
    keep = row < n_rows
    unit, row, begin, end = unit[keep], row[keep], begin[keep], end[keep]
    stats = {"dropped_tail_tokens": int(max(0, total - n_rows * seq_len))}
    return unit, begin - starts[unit], end - begin, row, begin - row * seq_len, n_rows, stats


def best_fit_decreasing(sizes: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Place items (already sorted by decreasing size, each 1..capacity) into bins of `capacity`.

    Each item goes to the open bin with the least remaining room that still fits it, or opens a
    new bin. Open bins are kept in buckets by remaining room, and the distinct room values in a
    sorted list searched with bisect: O(n log C) per search, where C = `capacity`, plus an O(C)
    memmove when a new room value appears (C is a few thousand, so that is a short memmove), so
    O(n log C) in practice and O(n C) at worst, with n items. Returns (bin, offset) per item and
    the number of bins; ties between bins of equal room go to the most recently filled one.
    """
    n = len(sizes)
    bins = np.empty(n, dtype=np.int64)
    offsets = np.empty(n, dtype=np.int64)
    buckets: list[list[int]] = [[] for _ in range(capacity + 1)]
    rooms: list[int] = []  # sorted distinct remaining rooms that have an open bin
    n_bins = 0
    for i, size in enumerate(sizes.tolist()):
        j = bisect_left(rooms, size)
        if j == len(rooms):
            b, offset, room = n_bins, 0, capacity - size
            n_bins += 1
        else:
            old = rooms[j]
            bucket = buckets[old]
            b = bucket.pop()
            if not bucket:
                del rooms[j]
            offset, room = capacity - old, old - size
        bins[i] = b
        offsets[i] = offset
        if room:
            bucket = buckets[room]
            if not bucket:
                insort(rooms, room)
            bucket.append(b)
    return bins, offsets, n_bins


def _bfd_chunks(sizes: np.ndarray, seq_len: int):
    """Cut units longer than a row into full rows, then best-fit-decreasing the rest."""
    n_full = sizes // seq_len
    rest = sizes % seq_len
    full_unit = np.repeat(np.arange(len(sizes), dtype=np.int64), n_full)
    full_index = np.arange(len(full_unit), dtype=np.int64) - np.repeat(_exclusive_cumsum(n_full), n_full)
    n_full_rows = len(full_unit)
    item_unit = np.flatnonzero(rest > 0)
    item_unit = item_unit[np.argsort(-rest[item_unit], kind="stable")]  # decreasing; ties in seeded order
    item_bin, item_offset, n_bins = best_fit_decreasing(rest[item_unit], seq_len)
    unit = np.concatenate([full_unit, item_unit])
    begin = np.concatenate([full_index * seq_len, n_full[item_unit] * seq_len])
    size = np.concatenate([np.full(n_full_rows, seq_len, dtype=np.int64), rest[item_unit]])
    row = np.concatenate([np.arange(n_full_rows, dtype=np.int64), n_full_rows + item_bin])
    offset = np.concatenate([np.zeros(n_full_rows, dtype=np.int64), item_offset])
    return unit, begin, size, row, offset, n_full_rows + n_bins, {"dropped_tail_tokens": 0}


def _layout(units_row, units_copy, units_len, strategy, seq_len, drop_last, seq_key) -> _Layout:
    sizes = units_len + 1  # each document is followed by EOS
    if strategy == "concat":
        unit, begin, size, row, offset, n_rows, stats = _concat_chunks(sizes, seq_len, drop_last)
    else:
        unit, begin, size, row, offset, n_rows, stats = _bfd_chunks(sizes, seq_len)
    doc_len = units_len[unit]
    piece_len = np.minimum(begin + size, doc_len) - begin  # the chunk without its EOS, if it has one
    has_eos = begin + size == doc_len + 1
    # final order: a seeded permutation of the rows
    order = np.argsort(splitmix64(np.arange(n_rows, dtype=_U64) ^ seq_key), kind="stable")
    final = np.empty(n_rows, dtype=np.int64)
    final[order] = np.arange(n_rows, dtype=np.int64)
    row = final[row] if n_rows else row

    placed = np.bincount(unit, weights=piece_len, minlength=len(units_len)).astype(np.int64)
    n_pieces = np.bincount(unit[piece_len > 0], minlength=len(units_len))
    n_units = len(units_len)
    tokens = int(size.sum())
    total = n_rows * seq_len
    # concat: documents that lost tokens to the dropped tail; bfd: documents cut into pieces
    truncated = int(np.count_nonzero(placed < units_len if strategy == "concat" else sizes > seq_len))
    stats["dropped_units"] = int(np.count_nonzero(placed == 0))
    stats.update(
        {
            "units": n_units,
            "documents": int(np.count_nonzero(np.bincount(units_row))) if n_units else 0,
            "sequences": n_rows,
            "tokens": total,
            "doc_tokens": int(placed.sum()),
            "eos_tokens": int(np.count_nonzero(has_eos)),
            "pad_tokens": total - tokens,
            "efficiency": tokens / total if total else 1.0,
            "split_units": int(np.count_nonzero(n_pieces > 1)),
            "split_share": float(np.count_nonzero(n_pieces > 1) / n_units) if n_units else 0.0,
            "truncated_units": truncated,
            "truncated_share": truncated / n_units if n_units else 0.0,
        }
    )

    keep = piece_len > 0
    p_row, p_off = row[keep], offset[keep]
    sort = np.argsort(p_row * seq_len + p_off, kind="stable")
    eos_pos = (row * seq_len + offset + (doc_len - begin))[has_eos]
    eos_pos.sort()
    return _Layout(
        n_seq=n_rows,
        seq_index=p_row[sort],
        seq_offset=p_off[sort],
        length=piece_len[keep][sort],
        doc_row=units_row[unit[keep]][sort],
        doc_token_start=begin[keep][sort],
        copy=units_copy[unit[keep]][sort],
        eos_seq=eos_pos // seq_len,
        eos_offset=eos_pos % seq_len,
        stats=stats,
    )


# -- pack -------------------------------------------------------------------------------------


@dataclass
class PackedResult:
    """The layout of every split plus what is needed to materialize it."""

    config: PackingConfig
    shards: list[ShardTokens]
    docs: pl.DataFrame  # doc_id, shard, source, lang, offset, length, shard_idx, weight, split
    dtype: np.dtype
    layouts: dict[str, _Layout]
    manifest: dict[str, Any]

    def num_sequences(self, split: str) -> int:
        return self.layouts[split].n_seq

    def segments(self, split: str) -> pl.DataFrame:
        """The segments table of a split (see the module docstring)."""
        lay = self.layouts[split]
        rows = pl.Series(lay.doc_row)
        return pl.DataFrame(
            {
                "seq_index": lay.seq_index,
                "seq_offset": lay.seq_offset,
                "length": lay.length,
                "doc_id": self.docs["doc_id"].gather(rows),
                "shard": self.docs["shard"].gather(rows),
                "doc_token_start": lay.doc_token_start,
                "copy": lay.copy,
            },
            schema=SEGMENT_SCHEMA,
        )

    def sequences(self, split: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows `[start, stop)` of a split as a `[rows, seq_len]` array (little-endian token dtype)."""
        lay = self.layouts[split]
        stop = lay.n_seq if stop is None else min(stop, lay.n_seq)
        start = min(start, stop)
        buf = np.empty((stop - start) * self.config.seq_len, dtype=self.dtype)
        self._fill(lay, start, stop, buf)
        return buf.reshape(stop - start, self.config.seq_len)

    def iter_chunks(self, split: str, rows_per_chunk: int | None = None) -> Iterator[np.ndarray]:
        """The rows of a split in order, a chunk of rows at a time, reusing one buffer."""
        lay = self.layouts[split]
        seq_len = self.config.seq_len
        if rows_per_chunk is None:
            rows_per_chunk = max(1, _CHUNK_BYTES // (seq_len * self.dtype.itemsize))
        buf = np.empty(min(rows_per_chunk, max(lay.n_seq, 1)) * seq_len, dtype=self.dtype)
        for start in range(0, lay.n_seq, rows_per_chunk):
            stop = min(start + rows_per_chunk, lay.n_seq)
            view = buf[: (stop - start) * seq_len]
            self._fill(lay, start, stop, view)
            yield view.reshape(stop - start, seq_len)

    def _fill(self, lay: _Layout, start: int, stop: int, buf: np.ndarray) -> None:
        seq_len = self.config.seq_len
        buf.fill(self.config.pad_id)
        lo, hi = np.searchsorted(lay.seq_index, [start, stop])
        dst = (lay.seq_index[lo:hi] - start) * seq_len + lay.seq_offset[lo:hi]
        rows = lay.doc_row[lo:hi]
        src = self._doc_offset[rows] + lay.doc_token_start[lo:hi]
        length = lay.length[lo:hi]
        shard = self._doc_shard[rows]
        itemsize = self.dtype.itemsize
        out_bytes = memoryview(buf).cast("B")
        for s in np.unique(shard).tolist():
            m = shard == s
            tokens = self.shards[s].tokens
            src_bytes = self._source_bytes[s]
            if src_bytes is not None:  # same dtype and byte order: copy bytes
                for d, a, n in zip(
                    (dst[m] * itemsize).tolist(), (src[m] * itemsize).tolist(), (length[m] * itemsize).tolist()
                ):
                    out_bytes[d : d + n] = src_bytes[a : a + n]
            else:  # another byte order or width: let numpy convert
                for d, a, n in zip(dst[m].tolist(), src[m].tolist(), length[m].tolist()):
                    buf[d : d + n] = tokens[a : a + n]
        lo, hi = np.searchsorted(lay.eos_seq, [start, stop])
        buf[(lay.eos_seq[lo:hi] - start) * seq_len + lay.eos_offset[lo:hi]] = self.config.eos_id

    @cached_property
    def _source_bytes(self) -> list[memoryview | None]:
        """Each shard's tokens as bytes when they can be copied as they are, else None."""
        return [
            memoryview(s.tokens).cast("B") if s.tokens.dtype == self.dtype and s.tokens.flags.c_contiguous else None
            for s in self.shards
        ]

    @cached_property
    def _doc_offset(self) -> np.ndarray:
        return self.docs["offset"].to_numpy()

    @cached_property
    def _doc_shard(self) -> np.ndarray:
        return self.docs["shard_idx"].to_numpy()


def _doc_table(shards: list[ShardTokens]) -> pl.DataFrame:
    frames = []
    for i, shard in enumerate(shards):
        d = shard.docs
        missing = {"doc_id", "offset", "length"} - set(d.columns)
        if missing:
            raise ValueError(f"shard {shard.name!r}: document index lacks {sorted(missing)}")
        if shard.tokens.ndim != 1:
            raise ValueError(f"shard {shard.name!r}: tokens must be a 1-D array")
        frame = d.select(
            pl.col("doc_id").cast(pl.String),
            pl.lit(shard.name, dtype=pl.String).alias("shard"),
            (pl.col("source").cast(pl.String) if "source" in d.columns else pl.lit(shard.name)).alias("source"),
            (pl.col("lang").cast(pl.String) if "lang" in d.columns else pl.lit(None, dtype=pl.String)).alias("lang"),
            (pl.col("quality_score").cast(pl.Float64) if "quality_score" in d.columns
             else pl.lit(None, dtype=pl.Float64)).alias("quality_score"),
            pl.col("offset").cast(pl.Int64),
            pl.col("length").cast(pl.Int64),
            pl.lit(i, dtype=pl.Int64).alias("shard_idx"),
        )
        bad = frame.filter(
            (pl.col("offset") < 0) | (pl.col("length") < 0) | (pl.col("offset") + pl.col("length") > len(shard.tokens))
        )
        if bad.height:
            raise ValueError(
                f"shard {shard.name!r}: {bad.height} documents lie outside its {len(shard.tokens)} tokens,"
                f" e.g. {bad.row(0, named=True)}"
            )
        frames.append(frame)
    docs = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=_DOC_SCHEMA)
    dup = docs.filter(pl.col("doc_id").is_duplicated())
    if dup.height:
        raise ValueError(f"{dup['doc_id'].n_unique()} doc_ids occur more than once, e.g. {dup['doc_id'][0]!r}")
    return docs


_DOC_SCHEMA = {
    "doc_id": pl.String,
    "shard": pl.String,
    "source": pl.String,
    "lang": pl.String,
    "quality_score": pl.Float64,
    "offset": pl.Int64,
    "length": pl.Int64,
    "shard_idx": pl.Int64,
}


def _token_dtype(shards: list[ShardTokens], cfg: PackingConfig) -> np.dtype:
    dtypes = {np.dtype(s.tokens.dtype).newbyteorder("=") for s in shards} or {np.dtype(np.uint16)}
    for dt in dtypes:
        if dt not in (np.dtype(np.uint16), np.dtype(np.uint32)):
            raise ValueError(f"token arrays must be uint16 or uint32, got {dt}")
    dtype = np.dtype(np.uint32) if np.dtype(np.uint32) in dtypes else np.dtype(np.uint16)
    limit = np.iinfo(dtype).max
    if cfg.eos_id > limit or cfg.pad_id > limit:
        raise ValueError(f"eos_id/pad_id do not fit in {dtype}")
    return dtype.newbyteorder("<")


def _check_unique_names(shards: list[ShardTokens]) -> None:
    names = [s.name for s in shards]
    if len(set(names)) != len(names):
        raise ValueError(f"shard names must be unique, got {names}")


def _tokenizer_hash(shards: list[ShardTokens]) -> str | None:
    """The hash of the tokenizer the shards were tokenized with (None when none names one)."""
    hashes = {s.tokenizer_hash for s in shards if s.tokenizer_hash is not None}
    if len(hashes) > 1:
        raise ValueError(f"shards were tokenized with different tokenizers: {sorted(hashes)}")
    return next(iter(hashes), None)


def _mixture_weights(mixture: Mapping[str, float], kind: str) -> dict[str, float]:
    """The mixture's weights of one kind (`source` or `lang`), by name."""
    return {k.partition(":")[2]: float(w) for k, w in mixture.items() if k.startswith(f"{kind}:")}


def _doc_weights(docs: pl.DataFrame, mixture: Mapping[str, float]) -> np.ndarray:
    """Each document's weight: the product of its source's and its language's (1 when unnamed)."""
    if not len(docs):
        return np.zeros(0)
    source_w, lang_w = _mixture_weights(mixture, "source"), _mixture_weights(mixture, "lang")
    return (
        docs["source"].replace_strict(source_w, default=1.0, return_dtype=pl.Float64).to_numpy()
        * docs["lang"].replace_strict(lang_w, default=1.0, return_dtype=pl.Float64).to_numpy()
    )


def _copies(base: np.ndarray, weight: np.ndarray, lengths: np.ndarray, seed: int) -> np.ndarray:
    """How many times each document appears: `floor(weight)`, plus once more with probability
    `weight - floor(weight)`; an empty document never."""
    whole = np.floor(weight)
    extra = _unit_float(splitmix64(base ^ _seed_key(seed, "mixture"))) < (weight - whole)
    return (whole.astype(np.int64) + extra) * (lengths > 0)


def _ordered_units(base: np.ndarray, copies: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Every copy of every document, as its row in the document table and its copy number, in the
    seeded order."""
    unit_row = np.repeat(np.arange(len(copies), dtype=np.int64), copies)
    unit_copy = (np.arange(len(unit_row), dtype=np.int64) - np.repeat(_exclusive_cumsum(copies), copies)).astype(
        np.int32
    )
    order_key = splitmix64(base[unit_row] ^ splitmix64(_seed_key(seed, "order") + unit_copy.astype(_U64)))
    order = np.argsort(order_key, kind="stable")
    return unit_row[order], unit_copy[order]


def _split_layout(
    split: str, unit_row: np.ndarray, unit_copy: np.ndarray, is_val: np.ndarray, lengths: np.ndarray, cfg: PackingConfig
) -> _Layout:
    """The layout of the document copies in one split."""
    in_split = is_val if split == "val" else ~is_val
    m = in_split[unit_row]
    rows = unit_row[m]
    lay = _layout(
        rows,
        unit_copy[m],
        lengths[rows],
        cfg.strategy,
        cfg.seq_len,
        cfg.drop_last,
        _seed_key(cfg.seed, f"shuffle:{split}"),
    )
    lay.stats["documents_in_split"] = int(np.count_nonzero(in_split))
    return lay


def _placed_tokens(layouts: dict[str, _Layout], n_docs: int) -> np.ndarray:
    """Tokens of each document placed in sequences, over all its copies and splits."""
    placed = np.zeros(n_docs, dtype=np.int64)
    for lay in layouts.values():
        placed += np.bincount(lay.doc_row, weights=lay.length, minlength=n_docs).astype(np.int64)
    return placed


def _shares(docs: pl.DataFrame, column: str, weights: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Per value of `column`: its weight in the mixture, and its tokens and shares, natural, requested
    and realized."""
    g = (
        docs.group_by(pl.col(column).fill_null("<null>"))
        .agg(
            pl.col("length").sum().alias("natural_tokens"),
            (pl.col("length") * pl.col("weight")).sum().alias("requested_tokens"),
            pl.col("placed_tokens").sum().alias("realized_tokens"),
        )
        .sort(column)
    )
    totals = {c: g[c].sum() for c in ("natural_tokens", "requested_tokens", "realized_tokens")}
    out = {}
    for row in g.iter_rows(named=True):
        out[row[column]] = {
            "weight": weights.get(row[column], 1.0),
            "natural_tokens": int(row["natural_tokens"]),
            "natural_share": row["natural_tokens"] / totals["natural_tokens"] if totals["natural_tokens"] else 0.0,
            "requested_share": (
                row["requested_tokens"] / totals["requested_tokens"] if totals["requested_tokens"] else 0.0
            ),
            "realized_tokens": int(row["realized_tokens"]),
            "realized_share": (
                row["realized_tokens"] / totals["realized_tokens"] if totals["realized_tokens"] else 0.0
            ),
        }
    return out


def _mixture_record(docs: pl.DataFrame, mixture: Mapping[str, float]) -> dict[str, Any]:
    """The manifest's `mixture`: what was requested, and the shares it gave by source and by language."""
    by_source = _shares(docs, "source", _mixture_weights(mixture, "source"))
    by_lang = _shares(docs, "lang", _mixture_weights(mixture, "lang"))
    unmatched = sorted(
        k for k in mixture if k.partition(":")[2] not in (by_source if k.startswith("source:") else by_lang)
    )
    return {"requested": dict(mixture), "unmatched_keys": unmatched, "by_source": by_source, "by_lang": by_lang}


def _manifest(
    shards: list[ShardTokens],
    cfg: PackingConfig,
    dtype: np.dtype,
    tokenizer_hash: str | None,
    docs: pl.DataFrame,
    layouts: dict[str, _Layout],
) -> dict[str, Any]:
    """What was packed from what, how, and what came of it (`docs` with its weights and placed tokens)."""
    total_tokens = sum(lay.stats["tokens"] for lay in layouts.values())
    pad_tokens = sum(lay.stats["pad_tokens"] for lay in layouts.values())
    n_units = sum(lay.stats["units"] for lay in layouts.values())
    truncated = sum(lay.stats["truncated_units"] for lay in layouts.values())
    manifest = {
        "format": FORMAT,
        "dtype": dtype.name,
        "byte_order": "little",
        "seq_len": cfg.seq_len,
        "strategy": cfg.strategy,
        "seed": cfg.seed,
        "eos_id": cfg.eos_id,
        "pad_id": cfg.pad_id,
        "val_fraction": cfg.val_fraction,
        "drop_last": cfg.drop_last,
        "config": {**asdict(cfg), "mixture": dict(cfg.mixture)},
        "tokenizer_hash": tokenizer_hash,
        "inputs": [
            {
                "shard": s.name,
                "version": dict(s.version) if s.version is not None else None,
                "documents": s.docs.height,
                "tokens": len(s.tokens),
            }
            for s in shards
        ],
        "mixture": _mixture_record(docs, cfg.mixture),
        "documents": {
            "input": docs.height,
            "empty_skipped": int((docs["length"] == 0).sum()),
            "units": n_units,
        },
        "splits": {split: dict(lay.stats) for split, lay in layouts.items()},
        "efficiency": (total_tokens - pad_tokens) / total_tokens if total_tokens else 1.0,
        "truncated_share": truncated / n_units if n_units else 0.0,
    }
    if cfg.curriculum != "none":
        manifest["curriculum"] = {"schedule": "easy_to_hard", "score": cfg.curriculum, "fraction": cfg.curriculum_fraction,
                                  "harder_is": CURRICULUM_MEANING[cfg.curriculum]}  # fmt: skip
    return manifest


def pack(shards: list[ShardTokens], cfg: PackingConfig | None = None) -> PackedResult:
    """Lay out the documents of `shards` into train and val sequences (no token is copied yet)."""
    cfg = cfg or PackingConfig()
    _check_unique_names(shards)
    tokenizer_hash = _tokenizer_hash(shards)
    dtype = _token_dtype(shards, cfg)
    docs = _doc_table(shards)
    weight = _doc_weights(docs, cfg.mixture)
    base = doc_id_hash(docs["doc_id"])
    is_val = _unit_float(base) < cfg.val_fraction
    lengths = docs["length"].to_numpy()
    copies = _copies(base, weight, lengths, cfg.seed)
    unit_row, unit_copy = _ordered_units(base, copies, cfg.seed)
    layouts = {split: _split_layout(split, unit_row, unit_copy, is_val, lengths, cfg) for split in PACKED_SPLITS}
    docs = docs.with_columns(
        pl.Series("weight", weight, dtype=pl.Float64),
        pl.Series("copies", copies, dtype=pl.Int64),
        pl.Series("placed_tokens", _placed_tokens(layouts, len(docs)), dtype=pl.Int64),
        pl.Series("split", np.where(is_val, "val", "train"), dtype=pl.String),
    )
    manifest = _manifest(shards, cfg, dtype, tokenizer_hash, docs, layouts)
    return PackedResult(config=cfg, shards=list(shards), docs=docs, dtype=dtype, layouts=layouts, manifest=manifest)


# What a curriculum's difficulty score measures, per sequence: the token-weighted mean over the pieces in it.
CURRICULUM_MEANING = {
    "length": "longer documents (the full length, in tokens, of each document a piece comes from)",
    "quality": "lower quality (1 - the quality classifier's score; unscored documents count 0.5)",
    "perplexity": "a higher loss of the reference model on the sequence (nats per scored token)",
}


def sequence_difficulty(result: "PackedResult", split: str = "train") -> np.ndarray:
    """Each sequence's curriculum score (float32; higher: harder), as `CURRICULUM_MEANING` defines it.
    A reference model's loss is not the packer's to compute: `write_packed` takes it as `difficulty`."""
    lay = result.layouts[split]
    if result.config.curriculum == "perplexity":
        raise ValueError("the perplexity curriculum's scores come from a reference model: give write_packed difficulty=")
    if result.config.curriculum == "length":
        per_doc = result.docs["length"].to_numpy().astype(np.float64)
    else:
        per_doc = 1.0 - result.docs["quality_score"].fill_null(0.5).to_numpy().astype(np.float64)
    weights = lay.length.astype(np.float64)
    total = np.bincount(lay.seq_index, weights=weights, minlength=lay.n_seq)
    score = np.bincount(lay.seq_index, weights=weights * per_doc[lay.doc_row], minlength=lay.n_seq)
    return np.divide(score, total, out=np.zeros(lay.n_seq), where=total > 0).astype("<f4")


# -- write ------------------------------------------------------------------------------------


def write_packed(
    result: PackedResult,
    out_dir: str | os.PathLike,
    rows_per_chunk: int | None = None,
    difficulty: np.ndarray | None = None,
    curriculum_info: Mapping | None = None,
) -> dict:
    """Write `<split>.bin`, `<split>_segments.parquet` and `manifest.json` into `out_dir`; with a
    curriculum, `train_difficulty.bin` too: `difficulty` when given (one score per train sequence,
    e.g. a reference model's loss), else `sequence_difficulty`. `curriculum_info` is added to the
    manifest's `curriculum` record (what scored it).

    Each file is written under a temporary name and renamed into place. An existing
    `manifest.json` is removed first and the new one renamed in last, so a reader that finds a
    manifest finds the files it describes. Returns the manifest as written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads(json.dumps(result.manifest))
    manifest["files"] = {}
    if difficulty is not None and len(difficulty) != result.num_sequences("train"):
        raise ValueError(f"{len(difficulty)} difficulty scores for {result.num_sequences('train')} train sequences")
    if curriculum_info and "curriculum" in manifest:
        manifest["curriculum"] |= dict(curriculum_info)
    staged: list[tuple[Path, Path]] = []
    try:
        for split in PACKED_SPLITS:
            n_seq = result.num_sequences(split)
            bin_path, seg_path = out / f"{split}.bin", out / f"{split}_segments.parquet"
            tmp = temp_beside(bin_path)
            staged.append((tmp, bin_path))
            with open(tmp, "wb") as f:
                f.writelines(memoryview(chunk).cast("B") for chunk in result.iter_chunks(split, rows_per_chunk))
            tmp_seg = temp_beside(seg_path)
            staged.append((tmp_seg, seg_path))
            result.segments(split).write_parquet(tmp_seg, statistics=True, row_group_size=65536)
            manifest["files"][split] = {
                "bin": bin_path.name,
                "segments": seg_path.name,
                "shape": [n_seq, result.config.seq_len],
                "bytes": n_seq * result.config.seq_len * result.dtype.itemsize,
            }
            if split == "train" and "curriculum" in manifest:
                scores_path = out / f"{split}_difficulty.bin"
                tmp_scores = temp_beside(scores_path)
                staged.append((tmp_scores, scores_path))
                scores = sequence_difficulty(result, split) if difficulty is None else np.asarray(difficulty, dtype="<f4")
                scores.tofile(tmp_scores)
                manifest["files"][split]["difficulty"] = scores_path.name
        manifest_path = out / "manifest.json"
        tmp_manifest = temp_beside(manifest_path)
        tmp_manifest.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        staged.append((tmp_manifest, manifest_path))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    manifest_path.unlink(missing_ok=True)
    for tmp, final in staged:
        os.replace(tmp, final)
    return manifest


def read_manifest(packed_dir: str | os.PathLike) -> dict:
    return json.loads((Path(packed_dir) / "manifest.json").read_text())


def render_sequence(
    tokens: np.ndarray, segments: pl.DataFrame, decode: Callable[[list[int]], str], eos_id: int, pad_id: int
) -> str:
    """One packed sequence as readable text: each document piece opens with a marker naming the document
    and the span of its tokens it holds, and the tokens between pieces (EOS, padding) show as markers.
    `segments` are the sequence's rows of the segments table."""
    parts: list[str] = []
    position = 0

    def between(stop: int) -> None:
        gap = tokens[position:stop].tolist()
        if gap:
            eos, pad = gap.count(eos_id), gap.count(pad_id)
            other = len(gap) - eos - pad
            labels = [f"EOS ×{eos}" if eos > 1 else "EOS"] * bool(eos) + [f"PAD ×{pad}"] * bool(pad)
            parts.append("⟦" + ", ".join(labels + [f"{other} other tokens"] * bool(other)) + "⟧")

    for piece in segments.sort("seq_offset").iter_rows(named=True):
        start, length = piece["seq_offset"], piece["length"]
        between(start)
        first = piece["doc_token_start"]
        parts.append(f"⟦document {piece['doc_id']}, its tokens {first}–{first + length}⟧")
        parts.append(decode(tokens[start:start + length].tolist()))
        position = start + length
    between(len(tokens))
    return "\n".join(parts)
