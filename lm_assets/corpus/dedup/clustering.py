"""Step 5 in memory: components of exact groups and verified edges, the keep rule, the clusters
table. `deduplicate` runs steps 1 to 5 on frames: the reference that `global_dedup`, the
out-of-core path the assets run, is tested against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    pass

from lm_assets.corpus.dedup.config import CENTRE_SAMPLE, CLUSTER_SCHEMA, EXACT, NEAR, DedupConfig, Source
from lm_assets.corpus.dedup.decisions import dedup_stats
from lm_assets.corpus.dedup.duckdb_session import lazy
from lm_assets.corpus.dedup.minhash import lsh_params
from lm_assets.corpus.dedup.ranking import (
    band_ranges,
    candidate_edges,
    exact_representatives,
    rank_documents,
    verify_edges,
)
from lm_assets.corpus.dedup.sketches import band_table, sketch_documents
from lm_assets.corpus.dedup.union_find import UnionFind


def edge_components(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the edges (a[i], b[i]) over integer node values.

    Returns the distinct values, sorted, and a component number for each; only values that are on
    an edge take part, so memory follows the number of candidate pairs, not of documents.
    """
    values, index = np.unique(np.concatenate([a, b]).astype(np.int64), return_inverse=True)
    sets = UnionFind(len(values))
    sets.union(index[: len(a)], index[len(a) :])
    return values, sets.roots()


def lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray, missing) -> np.ndarray:
    """For each query, the value at its position in the sorted `keys`, or `missing` (a number, or an
    array like `query`) where it is not a key: a node's component, or an exact group's kept rank."""
    if len(keys) == 0:
        return np.broadcast_to(np.asarray(missing, dtype=np.int64), query.shape).copy()
    position = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
    return np.where(keys[position] == query, values[position], missing)


def centres(
    values: np.ndarray, components: np.ndarray, signatures: np.ndarray | None, threshold: float | None
) -> np.ndarray:
    """The kept node of every node (`values`, sorted ranks of exact-group bests) of every component;
    `signatures` has a row per node.

    A component keeps its centre: the node with the highest mean estimated similarity to the others,
    the smallest rank among equals (see the module docstring). A node less similar to the centre than
    `threshold` keeps itself: it was chained in through other members. Without signatures every
    component keeps its smallest rank.
    """
    kept = values.copy()
    if len(values) == 0:
        return kept
    order = np.argsort(components, kind="stable")
    for members in np.split(order, np.flatnonzero(np.diff(components[order])) + 1):
        nodes = values[members]  # ascending rank, as `values` is sorted and the sort is stable
        if signatures is None or len(nodes) < 2:
            kept[members] = nodes[0]
            continue
        sigs = signatures[members]
        if len(nodes) <= CENTRE_SAMPLE:
            sample = sigs
        else:
            sample = sigs[np.random.default_rng(int(nodes[0])).choice(len(nodes), CENTRE_SAMPLE, replace=False)]
        # Self-similarity is 1 for every node in a full comparison, so it does not change the order.
        centre = int(np.argmax(_mean_agreement(sigs, sample)))
        to_centre = (sigs == sigs[centre]).mean(axis=1)
        stays = to_centre >= threshold if threshold is not None else np.ones(len(nodes), dtype=bool)
        kept[members] = np.where(stays, nodes[centre], nodes)
    return kept


def _mean_agreement(sigs: np.ndarray, sample: np.ndarray, chunk: int = 512) -> np.ndarray:
    """Each row's mean estimated similarity to the rows of `sample`, `chunk` rows at a time."""
    return np.concatenate([
        (sigs[lo : lo + chunk, None, :] == sample[None, :, :]).mean(axis=2).mean(axis=1)
        for lo in range(0, len(sigs), chunk)
    ])


def cluster_documents(
    ranked: pl.DataFrame,
    edges: pl.DataFrame,
    sketches: Source | None = None,
    threshold: float | None = None,
) -> pl.DataFrame:
    """The clusters table (`CLUSTER_SCHEMA`) from `rank_documents` output and verified edges.

    Documents with equal content form exact groups; edges (between any documents of `ranked`) merge
    groups; each cluster keeps its centre (`centres`), whose signatures come from `sketches` (only
    those of documents on edges are read). Without sketches each cluster keeps its smallest rank.
    """
    ranked = ranked.sort("rank")
    if not np.array_equal(ranked["rank"].to_numpy(), np.arange(ranked.height)):
        raise ValueError("ranks must number the documents 0..n-1, as rank_documents does")
    group = ranked["exact_rank"].to_numpy()
    rank_of = ranked.select("doc_id", "rank")
    pairs = edges.join(rank_of.rename({"doc_id": "doc_a", "rank": "a"}), on="doc_a").join(
        rank_of.rename({"doc_id": "doc_b", "rank": "b"}), on="doc_b"
    )
    values, components = edge_components(group[pairs["a"].to_numpy()], group[pairs["b"].to_numpy()])
    signatures = node_signatures(ranked, values, sketches) if sketches is not None else None
    kept = centres(values, components, signatures, threshold)
    return clusters_frame(ranked, lookup(values, kept, group, group))


def node_signatures(ranked: pl.DataFrame, ranks: np.ndarray, sketches: Source) -> np.ndarray:
    """The signatures of the documents of `ranked` with the given ranks, one row per rank, in order."""
    wanted = ranked.sort("rank")[ranks.tolist()].select("doc_id", pl.int_range(pl.len()).alias("row"))
    found = (
        lazy(sketches).select("doc_id", "signature")
        .filter(pl.col("doc_id").is_in(wanted["doc_id"].implode())).collect()
        .unique("doc_id", keep="first")
    )
    ordered = wanted.join(found, on="doc_id", how="left").sort("row")
    if ordered["signature"].null_count():
        raise ValueError(f"{ordered['signature'].null_count()} clustered documents have no signature")
    if ordered.height == 0:
        return np.empty((0, 0), dtype=np.uint32)
    return ordered["signature"].to_numpy()


def clusters_frame(ranked: pl.DataFrame, kept_rank: np.ndarray) -> pl.DataFrame:
    """Clusters table from each document's kept document, given by rank within `ranked`."""
    kept = ranked.select(
        pl.col("rank").alias("kept_rank"),
        pl.col("doc_id").alias("kept_doc_id"),
        pl.col("content_hash").alias("kept_hash"),
    )
    table = ranked.with_columns(pl.Series("kept_rank", kept_rank, dtype=pl.Int64)).join(
        kept, on="kept_rank", how="left"
    )
    return table.select(
        "doc_id",
        pl.col("kept_doc_id").alias("cluster_id"),
        pl.len().over("kept_doc_id").cast(pl.Int64).alias("cluster_size"),
        (pl.col("doc_id") == pl.col("kept_doc_id")).alias("kept"),
        removal_reason(pl.col("doc_id") == pl.col("kept_doc_id"), pl.col("content_hash") == pl.col("kept_hash")),
        "kept_doc_id",
    ).cast(CLUSTER_SCHEMA)


def removal_reason(is_kept: pl.Expr, same_content: pl.Expr) -> pl.Expr:
    return (
        pl.when(is_kept).then(None).when(same_content).then(pl.lit(EXACT)).otherwise(pl.lit(NEAR)).alias("reason")
    )


@dataclass
class DedupResult:
    """`clusters` has a row per document of this run; sketches and bands are the state to persist."""

    clusters: pl.DataFrame
    sketches: pl.DataFrame
    bands: pl.DataFrame
    edges: pl.DataFrame
    stats: dict


def deduplicate(docs: pl.DataFrame, cfg: DedupConfig | None = None, band_parts: int = 1) -> DedupResult:
    """Exact then near-duplicate clusters over all of `docs`, in memory (steps 1-5)."""
    cfg = cfg or DedupConfig()
    sketches = sketch_documents(docs, cfg)
    return deduplicate_sketches(sketches, band_table(sketches, cfg), cfg, band_parts)


def deduplicate_sketches(
    sketches: pl.DataFrame, bands: pl.DataFrame, cfg: DedupConfig | None = None, band_parts: int = 1
) -> DedupResult:
    """Steps 2-5 over sketches and band tables made per shard by steps 1."""
    cfg = cfg or DedupConfig()
    ranked = rank_documents(sketches, cfg.duckdb)
    edges = fuzzy_edges(bands, sketches, exact_representatives(ranked), cfg, band_parts)
    clustered = cluster_documents(ranked, edges, sketches, cfg.effective_verify_threshold)
    clusters = sketches.select("doc_id").join(clustered, on="doc_id", how="left", maintain_order="left")
    return DedupResult(clusters, sketches, bands, edges, dedup_stats(clusters))


def fuzzy_edges(
    bands: Source,
    sketches: Source | list[Source],
    members: pl.DataFrame,
    cfg: DedupConfig,
    band_parts: int,
    old_bands: Source | None = None,
) -> pl.DataFrame:
    n_bands, _ = lsh_params(cfg.minhash)
    parts = [
        candidate_edges(bands, band_range, members=members, old_bands=old_bands, duckdb_cfg=cfg.duckdb)
        for band_range in band_ranges(n_bands, band_parts)
    ]
    edges = pl.concat(parts).unique()
    return verify_edges(edges, sketches, cfg.effective_verify_threshold)
