"""What dedup is configured with, and the tables that pass between its steps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import polars as pl

if TYPE_CHECKING:
    import pyarrow as pa

from lm_assets.corpus.dedup.minhash import MinHashConfig
from lm_assets.corpus.stage import DROPPED_SCHEMA

DEDUPLICATED = "deduplicated"  # the stage, and the `stage` of its drops


EXACT = "exact_duplicate"


NEAR = "near_duplicate"


KEEP_ORDER = "has_query ASC, host_docs DESC, not_https ASC, depth ASC, fetched_at ASC NULLS LAST, doc_id ASC"


# Largest number of members whose pairwise similarities decide a cluster's centre; larger clusters
# compare every member with a seeded sample of this many.
CENTRE_SAMPLE = 64


BAND_SCHEMA = {"doc_id": pl.String, "band": pl.Int32, "band_hash": pl.UInt64}


EDGE_SCHEMA = {"doc_a": pl.String, "doc_b": pl.String}


CLUSTER_SCHEMA = {
    "doc_id": pl.String,
    "cluster_id": pl.String,
    "cluster_size": pl.Int64,
    "kept": pl.Boolean,
    "reason": pl.String,
    "kept_doc_id": pl.String,
}


DEDUP_DROPPED_SCHEMA = DROPPED_SCHEMA | {"kept_doc_id": pl.String}


# A table handed to a step: in memory, or parquet file(s) that DuckDB and polars scan lazily.
Source: TypeAlias = "pl.DataFrame | pa.Table | str | Path | Sequence[str | Path]"


@dataclass(frozen=True)
class DuckDBConfig:
    memory_limit: str = "2GB"
    # None: a folder under the system temp directory.
    temp_directory: str | None = None
    threads: int | None = None


@dataclass(frozen=True)
class DedupConfig:
    """Settings of both passes.

    `verify_threshold=None` means `minhash.threshold - verify_margin`: 0.55 by default. The margin is
    about one standard error of a 128-permutation estimate near 0.6 (0.043), so pairs right at the
    threshold mostly survive. On the benchmark crawl 0.5 raised false removals of English pages from
    about 0.35% to 0.55%, and 0.6 lost near-duplicates of short pages.
    """

    minhash: MinHashConfig = field(default_factory=MinHashConfig)
    verify: bool = True
    verify_threshold: float | None = None
    verify_margin: float = 0.05
    url_column: str = "url"
    fetched_at_column: str = "fetched_at"
    signature_batch: int = 2000
    duckdb: DuckDBConfig = field(default_factory=DuckDBConfig)

    @property
    def effective_verify_threshold(self) -> float | None:
        if not self.verify:
            return None
        if self.verify_threshold is not None:
            return self.verify_threshold
        return max(round(self.minhash.threshold - self.verify_margin, 6), 0.0)
