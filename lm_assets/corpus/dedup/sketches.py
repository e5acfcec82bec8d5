"""Step 1, per shard: each document's content hash, keep-rule columns and MinHash signature (its
sketch), and its LSH band hashes."""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    pass

from lm_assets.corpus.dedup.config import BAND_SCHEMA, DedupConfig
from lm_assets.corpus.dedup.minhash import band_hashes, empty_signatures, lsh_params, signatures


def normalize_content(text: str | None) -> str:
    """NFKC, case-folded, whitespace runs collapsed to one space, ends stripped."""
    if not text:
        return ""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def content_hash(text: str | None) -> str:
    """128-bit blake2b of the normalised text, as 32 hex digits."""
    return hashlib.blake2b(normalize_content(text).encode(), digest_size=16).hexdigest()


def content_hashes(texts: Sequence[str | None]) -> pl.Series:
    return pl.Series("content_hash", [content_hash(text) for text in texts], dtype=pl.String)


def sketch_documents(docs: pl.DataFrame, cfg: DedupConfig | None = None) -> pl.DataFrame:
    """One row per document: `doc_id, content_hash, empty, url, fetched_at, signature`.

    `docs` needs `doc_id` and `text`; `lang` picks word or character shingles, the configured url and
    fetched_at columns feed the keep rule. `signature` is Array(UInt32, num_perm).
    """
    cfg = cfg or DedupConfig()
    texts = docs["text"].to_list()
    langs = docs["lang"].to_list() if "lang" in docs.columns else [None] * len(texts)
    batches = [
        signatures(texts[i : i + cfg.signature_batch], langs[i : i + cfg.signature_batch], cfg.minhash)
        for i in range(0, len(texts), cfg.signature_batch)
    ]
    sigs = np.concatenate(batches) if batches else np.empty((0, cfg.minhash.num_perm), dtype=np.uint32)
    return pl.DataFrame(
        [
            docs["doc_id"].cast(pl.String),
            content_hashes(texts),
            pl.Series("empty", empty_signatures(sigs), dtype=pl.Boolean),
            _optional(docs, cfg.url_column, "url"),
            _optional(docs, cfg.fetched_at_column, "fetched_at"),
            pl.Series("signature", sigs, dtype=pl.Array(pl.UInt32, cfg.minhash.num_perm)),
        ]
    )


def _optional(docs: pl.DataFrame, column: str, name: str) -> pl.Series:
    if column in docs.columns:
        return docs[column].cast(pl.String).alias(name)
    return pl.Series(name, [None] * docs.height, dtype=pl.String)


def band_table(sketches: pl.DataFrame, cfg: DedupConfig | None = None) -> pl.DataFrame:
    """`doc_id, band, band_hash` for every non-empty document and band (documents x bands rows)."""
    cfg = cfg or DedupConfig()
    bands, rows = lsh_params(cfg.minhash)
    sketches = sketches.filter(~pl.col("empty"))
    hashes = band_hashes(_signature_matrix(sketches, cfg.minhash.num_perm), bands, rows)
    return pl.DataFrame(
        {
            "doc_id": np.repeat(sketches["doc_id"].to_numpy(), bands),
            "band": np.tile(np.arange(bands, dtype=np.int32), sketches.height),
            "band_hash": hashes.reshape(-1),
        },
        schema=BAND_SCHEMA,
    )


def _signature_matrix(sketches: pl.DataFrame, num_perm: int) -> np.ndarray:
    if sketches.height == 0:
        return np.empty((0, num_perm), dtype=np.uint32)
    return sketches["signature"].to_numpy().astype(np.uint32, copy=False)
