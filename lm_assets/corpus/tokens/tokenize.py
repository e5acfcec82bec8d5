"""Tokenized shards: every document's token ids, concatenated, as one flat little-endian array.

A shard on disk is three files:
- `<name>`: the token ids, back to back, uint16 (`<u2`) when the vocabulary has fewer than 65,536
  pieces, else uint32 (`<u4`); little-endian whatever the machine. No BOS/EOS inside: EOS is added
  when sequences are packed.
- `<name>.index.parquet`: `doc_id, offset, length` per document, offset and length in tokens,
  documents in input order, so `tokens[offset : offset + length]` is one document.
- `<name>.json`: the sidecar, `{"dtype", "byte_order", "token_count", "documents", "tokenizer_hash",
  "vocab_size", "format_version"}`. It is written last, so a shard whose sidecar exists is complete.

Each file is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from lm_assets.corpus.tokens.tokenizer import atomic_write_bytes, encode_batch
from lm_assets.storage.store import atomic_path

FORMAT_VERSION = 1
UINT16 = np.dtype("<u2")
UINT32 = np.dtype("<u4")
_DTYPES = {"uint16": UINT16, "uint32": UINT32}
INDEX_SCHEMA = {"doc_id": pl.String, "offset": pl.Int64, "length": pl.Int64}
# Characters per encode call: bounds the int32 ids held at once (~4 bytes per char in the worst case).
DEFAULT_BATCH_CHARS = 8_000_000


def token_dtype(vocab_size: int) -> np.dtype:
    """`<u2` when every id fits 16 bits (vocab_size < 65,536), else `<u4`."""
    if vocab_size < 1:
        raise ValueError("vocab_size must be positive")
    return UINT16 if vocab_size < 1 << 16 else UINT32


def dtype_name(dtype: np.dtype) -> str:
    return {UINT16: "uint16", UINT32: "uint32"}[np.dtype(dtype)]


def _little_endian(tokens: np.ndarray) -> np.ndarray:
    if tokens.dtype.str not in ("<u2", "<u4"):
        raise ValueError(f"token arrays must be little-endian uint16/uint32, got {tokens.dtype.str}")
    return tokens


def _batches(texts: Sequence[str | None], batch_chars: int) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for text in texts:
        text = text or ""
        batch.append(text)
        size += len(text)
        if size >= batch_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def iter_tokenized_batches(
    texts: Sequence[str | None], sp, num_threads: int = 1, batch_chars: int = DEFAULT_BATCH_CHARS
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """`(flat token ids, lengths)` for consecutive batches of `texts`, ids in `token_dtype(vocab)`."""
    dtype = token_dtype(sp.get_piece_size())
    for batch in _batches(texts, batch_chars):
        ids = encode_batch(sp, batch, num_threads)
        lengths = np.fromiter((len(a) for a in ids), dtype=np.int64, count=len(ids))
        flat = np.concatenate(ids) if int(lengths.sum()) else np.empty(0, dtype=np.int32)
        yield _little_endian(flat.astype(dtype)), lengths


def tokenize_documents(
    texts: Sequence[str | None], sp, num_threads: int = 1, batch_chars: int = DEFAULT_BATCH_CHARS
) -> tuple[np.ndarray, np.ndarray]:
    """All documents' token ids concatenated (little-endian uint16/uint32) and each one's length (int64).

    Encoding runs in SentencePiece's thread pool (`sp.encode(list, num_threads=N)`), a batch of about
    `batch_chars` characters at a time; no BOS/EOS is added. A null text has length 0.
    """
    dtype = token_dtype(sp.get_piece_size())
    parts, lengths = [], []
    for flat, batch_lengths in iter_tokenized_batches(texts, sp, num_threads, batch_chars):
        parts.append(flat)
        lengths.append(batch_lengths)
    if not parts:
        return np.empty(0, dtype=dtype), np.empty(0, dtype=np.int64)
    return _little_endian(np.concatenate(parts)), np.concatenate(lengths)


def document_index(doc_ids: Sequence[str], lengths: np.ndarray) -> pl.DataFrame:
    """`doc_id, offset, length` with offsets (in tokens) the running sum of the lengths."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(doc_ids) != len(lengths):
        raise ValueError(f"{len(doc_ids)} doc ids for {len(lengths)} lengths")
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(lengths) else lengths
    return pl.DataFrame(
        {"doc_id": list(doc_ids), "offset": offsets, "length": lengths}, schema=INDEX_SCHEMA
    )


def make_sidecar(token_count: int, documents: int, tokenizer_hash: str, vocab_size: int) -> dict:
    return {
        "format_version": FORMAT_VERSION,
        "dtype": dtype_name(token_dtype(vocab_size)),
        "byte_order": "little",
        "token_count": int(token_count),
        "documents": int(documents),
        "tokenizer_hash": tokenizer_hash,
        "vocab_size": int(vocab_size),
    }


@dataclass
class TokenizedShard:
    """A tokenized shard: the document index, the sidecar and, in memory, the token array or, on disk, its path."""

    index: pl.DataFrame
    sidecar: dict
    tokens: np.ndarray | None = None
    path: Path | None = None

    def to_bytes(self) -> bytes:
        """The token file's content: the ids as little-endian bytes."""
        tokens = self.tokens if self.tokens is not None else read_tokenized_shard(self.path)
        return _little_endian(np.asarray(tokens)).tobytes()


def _doc_columns(docs: pl.DataFrame) -> tuple[list[str], list[str | None]]:
    return docs["doc_id"].to_list(), docs["text"].to_list()


def tokenize_shard(
    docs: pl.DataFrame, sp, tokenizer_hash: str, num_threads: int = 1, batch_chars: int = DEFAULT_BATCH_CHARS
) -> TokenizedShard:
    """Tokenize a frame with `doc_id` and `text` in memory: tokens, index and sidecar."""
    doc_ids, texts = _doc_columns(docs)
    tokens, lengths = tokenize_documents(texts, sp, num_threads, batch_chars)
    index = document_index(doc_ids, lengths)
    sidecar = make_sidecar(len(tokens), len(doc_ids), tokenizer_hash, sp.get_piece_size())
    return TokenizedShard(index=index, sidecar=sidecar, tokens=tokens)


def sidecar_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".json")


def index_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".index.parquet")


def write_tokenized_shard(
    path: str | Path,
    docs: pl.DataFrame,
    sp,
    tokenizer_hash: str,
    num_threads: int = 1,
    batch_chars: int = DEFAULT_BATCH_CHARS,
) -> TokenizedShard:
    """Tokenize `docs` (`doc_id`, `text`) straight into `path`, batch by batch, then write index and sidecar.

    Every file is written under a temporary name in the same folder and renamed into place, the
    sidecar last. Returns the index and sidecar, with `path` set.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc_ids, texts = _doc_columns(docs)
    # An earlier shard's sidecar must not vouch for the new token file while it is being replaced.
    sidecar_path(path).unlink(missing_ok=True)
    lengths = []
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        for flat, batch_lengths in iter_tokenized_batches(texts, sp, num_threads, batch_chars):
            f.write(flat.tobytes())
            lengths.append(batch_lengths)
    all_lengths = np.concatenate(lengths) if lengths else np.empty(0, dtype=np.int64)
    index = document_index(doc_ids, all_lengths)
    sidecar = make_sidecar(int(all_lengths.sum()), len(doc_ids), tokenizer_hash, sp.get_piece_size())
    write_index(index_path(path), index)
    write_sidecar(sidecar_path(path), sidecar)
    return TokenizedShard(index=index, sidecar=sidecar, path=path)


def write_index(path: str | Path, index: pl.DataFrame) -> None:
    with atomic_path(path) as tmp:
        index.write_parquet(tmp)


def write_sidecar(path: str | Path, sidecar: dict) -> None:
    atomic_write_bytes(path, (json.dumps(sidecar, indent=2, sort_keys=True) + "\n").encode())


def read_sidecar(path: str | Path) -> dict:
    """The sidecar of the shard at `path` (the token file's path)."""
    return json.loads(sidecar_path(path).read_text())


def read_index(path: str | Path) -> pl.DataFrame:
    """The `doc_id, offset, length` index of the shard at `path`."""
    return pl.read_parquet(index_path(path))


def sidecar_dtype(sidecar: dict) -> np.dtype:
    if sidecar.get("byte_order", "little") != "little":
        raise ValueError(f"unsupported byte order {sidecar.get('byte_order')!r}")
    try:
        return _DTYPES[sidecar["dtype"]]
    except KeyError:
        raise ValueError(f"unknown token dtype {sidecar.get('dtype')!r}") from None


def read_tokenized_shard(path: str | Path) -> np.memmap | np.ndarray:
    """The token ids of the shard at `path`, memory-mapped read-only with the sidecar's little-endian dtype.

    Raises ValueError when the file's size disagrees with the sidecar's token count. An empty shard
    (0 tokens, which cannot be mapped) comes back as an empty array.
    """
    path = Path(path)
    sidecar = read_sidecar(path)
    dtype = sidecar_dtype(sidecar)
    expected = int(sidecar["token_count"]) * dtype.itemsize
    size = path.stat().st_size
    if size != expected:
        raise ValueError(f"{path}: {size} bytes, but the sidecar promises {sidecar['token_count']} {dtype} tokens")
    if size == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def index_tiles_tokens(index: pl.DataFrame, documents: int, token_count: int) -> bool:
    """Whether the document index has one row per document and its spans tile the token file: the
    first at offset 0, each starting where the one before ends, all together `token_count` tokens."""
    offsets, lengths = index["offset"], index["length"]
    contiguous = index.height == 0 or (
        offsets[0] == 0 and (offsets.shift(-1).drop_nulls() == (offsets + lengths).head(-1)).all()
    )
    return index.height == documents and bool(contiguous) and int(lengths.sum()) == token_count


def is_stale(sidecar: dict | None, current_tokenizer_hash: str) -> bool:
    """True when the shard must be re-tokenized: no sidecar, another format, or another tokenizer."""
    if not sidecar:
        return True
    return sidecar.get("format_version") != FORMAT_VERSION or sidecar.get("tokenizer_hash") != current_tokenizer_hash
