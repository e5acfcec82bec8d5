"""Step 6, per shard: a shard's documents split by the clusters table, and the clusters' figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    pass

from lm_assets.corpus.dedup.config import DEDUP_DROPPED_SCHEMA, DEDUPLICATED, EXACT, NEAR
from lm_assets.corpus.stage import StageResult


def apply_dedup(docs: pl.DataFrame, clusters: pl.DataFrame) -> StageResult:
    """Split one shard's documents by the clusters table: kept rows, and dropped rows with kept_doc_id."""
    decisions = docs.select("doc_id").join(
        clusters.select("doc_id", "kept", "reason", "kept_doc_id"), on="doc_id", how="left", maintain_order="left"
    )
    undecided = decisions.filter(pl.col("kept").is_null()).height
    if undecided:
        raise ValueError(f"{undecided} documents of the shard have no row in the clusters table")
    is_kept = decisions["kept"]
    dropped = decisions.filter(~is_kept).select(
        "doc_id", pl.lit(DEDUPLICATED).alias("stage"), "reason", "kept_doc_id"
    ).cast(DEDUP_DROPPED_SCHEMA)
    kept = docs.filter(is_kept)
    stats = {
        "documents_in": docs.height,
        "documents_kept": kept.height,
        "exact_duplicates": dropped.filter(pl.col("reason") == EXACT).height,
        "near_duplicates": dropped.filter(pl.col("reason") == NEAR).height,
    }
    return StageResult(kept=kept, dropped=dropped, stats=stats)


def dedup_stats(clusters: pl.DataFrame, largest: int = 10) -> dict:
    """Counts, dup rate, a cluster-size histogram (power-of-two bins) and the largest clusters."""
    documents = clusters.height
    removed = clusters.filter(~pl.col("kept")).height
    sizes = clusters.group_by("cluster_id").agg(pl.col("cluster_size").first(), pl.col("kept_doc_id").first())
    return {
        "documents": documents,
        "kept": documents - removed,
        "removed": removed,
        "exact_duplicates": clusters.filter(pl.col("reason") == EXACT).height,
        "near_duplicates": clusters.filter(pl.col("reason") == NEAR).height,
        "dup_rate": removed / documents if documents else 0.0,
        "clusters": sizes.height,
        "duplicate_clusters": sizes.filter(pl.col("cluster_size") > 1).height,
        "cluster_size_histogram": cluster_size_histogram(sizes["cluster_size"]),
        "largest_clusters": sizes.sort(["cluster_size", "cluster_id"], descending=[True, False])
        .head(largest)
        .to_dicts(),
    }


def cluster_size_histogram(sizes: pl.Series, counts: pl.Series | None = None) -> dict[str, int]:
    """Clusters per size bin: "1", "2", "3-4", "5-8", ... (only bins that occur, in order). `sizes` holds
    one size per cluster, or, with `counts`, each distinct size once and `counts` its clusters."""
    size = sizes.to_numpy().astype(np.int64)
    weight = np.ones(len(size), dtype=np.int64) if counts is None else counts.to_numpy().astype(np.int64)
    # frexp's exponent of size - 1 is its bit length, so this is the next power of two >= size.
    upper = np.where(size <= 2, size, np.int64(2) ** np.frexp((size - 1).astype(np.float64))[1].astype(np.int64))
    bins, where = np.unique(upper, return_inverse=True)
    totals = np.bincount(where, weights=weight, minlength=len(bins)).astype(np.int64) if len(size) else []
    return {
        (str(bin_) if bin_ <= 2 else f"{bin_ // 2 + 1}-{bin_}"): int(count)
        for bin_, count in zip(bins.tolist(), list(totals))
    }
