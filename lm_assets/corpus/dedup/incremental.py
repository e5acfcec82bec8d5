"""New documents deduplicated against the persisted sketches, bands and clusters of earlier runs,
without touching their decisions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from lm_assets.corpus.dedup.clustering import (
    DedupResult,
    centres,
    clusters_frame,
    fuzzy_edges,
    lookup,
    node_signatures,
    removal_reason,
)
from lm_assets.corpus.dedup.config import CLUSTER_SCHEMA, DedupConfig, DuckDBConfig, Source
from lm_assets.corpus.dedup.decisions import dedup_stats
from lm_assets.corpus.dedup.duckdb_session import DuckDBSession, lazy
from lm_assets.corpus.dedup.ranking import exact_representatives, rank_documents
from lm_assets.corpus.dedup.union_find import UnionFind


@dataclass
class DedupState:
    """What earlier runs persisted: their sketches, band tables and clusters table (frames or parquet)."""

    sketches: Source
    bands: Source
    clusters: Source


def deduplicate_incremental(
    new_sketches: Source,
    new_bands: Source | None,
    state: DedupState,
    cfg: DedupConfig | None = None,
    band_parts: int = 1,
    edges: Source | None = None,
) -> DedupResult:
    """Clusters rows for the new documents only, deduplicated against the earlier ones.

    A new document that matches an old one, exactly or through verified edges (also by way of other
    new documents), is removed in favour of that old document's cluster's kept document when it is
    at least as similar to that document as the verification threshold; its row's cluster_size counts
    the old members too. New documents that reach no old document are clustered among themselves with
    the keep rule; one that reached an old cluster only through others stays as itself. Old rows
    never change and old-old edges are never computed; a new group that reaches several old clusters
    joins the one with the smallest cluster_id. New doc_ids must not occur in the state. `merge_clusters` folds the result into the
    persisted table; the new sketches and bands are appended to the state by the caller. `edges`, when
    given, are the verified edges already found per band range (`global_dedup.band_range_edges` with
    the state's bands and sketches), a frame or their parquet files, streamed; `new_bands` and
    `state.bands` are then not read. `new_sketches` may be parquet files too: as in the full run, only the
    ranking columns of every new document are read, and signatures only for documents on an edge.
    """
    cfg = cfg or DedupConfig()
    ranked = rank_documents(new_sketches, cfg.duckdb)
    exact_old = _exact_matches_in_old(new_sketches, state.sketches, cfg.duckdb)
    representatives = exact_representatives(ranked.join(exact_old, on="content_hash", how="anti"))
    if edges is None:
        edges = fuzzy_edges(new_bands, [new_sketches, state.sketches], representatives, cfg, band_parts, state.bands)

    component, old_components, new_values, new_components = _components_with_old(ranked, edges, cfg.duckdb)
    reached = pl.concat(
        [
            ranked.select("doc_id", "content_hash").join(exact_old, on="content_hash").select("doc_id", "old_doc_id"),
            ranked.select("doc_id", pl.Series("component", component, dtype=pl.Int64))
            .join(old_components, on="component")
            .select("doc_id", "old_doc_id"),
        ]
    )
    old_clusters = _old_clusters_of(reached["old_doc_id"].unique(), state.clusters)
    joining = (
        reached.join(old_clusters.rename({"doc_id": "old_doc_id"}), on="old_doc_id")
        .sort("cluster_id")
        .group_by("doc_id", maintain_order=True)
        .first()
        .join(ranked.select("doc_id", "content_hash"), on="doc_id")
    )
    threshold = cfg.effective_verify_threshold
    joined_rows = _rows_joining_old(joining, state.sketches, new_sketches, threshold)

    signatures = node_signatures(ranked, new_values, new_sketches)
    kept = centres(new_values, new_components, signatures, threshold)
    exact_rank = ranked["exact_rank"].to_numpy()
    kept_rank = lookup(new_values, kept, exact_rank, exact_rank)
    # New documents not joining an old cluster (none reached, or too unlike its kept document) keep
    # their own group's best, or the centre of a component of new documents only.
    new_rows = clusters_frame(ranked, kept_rank).join(joined_rows, on="doc_id", how="anti")
    clusters = lazy(new_sketches).select("doc_id").collect().join(
        pl.concat([new_rows, joined_rows]), on="doc_id", how="left", maintain_order="left"
    )
    return DedupResult(clusters, new_sketches, new_bands, edges, dedup_stats(clusters))


def _exact_matches_in_old(new_sketches: Source, old_sketches: Source, duckdb_cfg: DuckDBConfig) -> pl.DataFrame:
    """`content_hash, old_doc_id`: one old document for each new content hash seen before."""
    with DuckDBSession(duckdb_cfg) as db:
        new = db.table("new_sketches", new_sketches, ["content_hash", "empty"])
        old = db.table("old_sketches", old_sketches, ["doc_id", "content_hash", "empty"])
        matches = db.query(
            f"""
            SELECT o.content_hash, min(o.doc_id) AS old_doc_id
            FROM {old} o SEMI JOIN (SELECT DISTINCT content_hash FROM {new} WHERE NOT empty) USING (content_hash)
            WHERE NOT o.empty
            GROUP BY o.content_hash
            """
        )
    return matches.cast({"content_hash": pl.String, "old_doc_id": pl.String})


# Edge rows handed from DuckDB to the union-find at a time.
EDGE_BATCH_ROWS = 1 << 20


def _components_with_old(
    ranked: pl.DataFrame, edges: Source, duckdb_cfg: DuckDBConfig
) -> tuple[np.ndarray, pl.DataFrame, np.ndarray, np.ndarray]:
    """Components over new exact groups (by their best rank) and the old documents on edges.

    Returns each new document's component (-1 when on no edge), `old_doc_id, component` for the old
    documents, and the new nodes of components without an old document with their components (for
    `centres`). Components holding an old document are settled by that document's cluster. The edges
    (a frame or parquet files) stream through DuckDB into the union-find in batches, as in the full run.
    """
    n_new = ranked.height
    with DuckDBSession(duckdb_cfg) as db:
        pairs = db.table("edges", edges, ["doc_a", "doc_b"])
        new = db.table("ranked", ranked, ["doc_id", "exact_rank"])
        db.con.execute(f"""
            CREATE TEMP TABLE old_nodes AS
            SELECT doc_id, {n_new} + row_number() OVER (ORDER BY doc_id) - 1 AS node
            FROM (SELECT doc_a AS doc_id FROM {pairs} UNION SELECT doc_b FROM {pairs})
            WHERE doc_id NOT IN (SELECT doc_id FROM {new})
        """)
        old_ids = db.query("SELECT doc_id FROM old_nodes ORDER BY node")["doc_id"].cast(pl.String)
        nodes = f"(SELECT doc_id, exact_rank AS node FROM {new} UNION ALL SELECT doc_id, node FROM old_nodes)"
        sets = UnionFind(n_new + old_ids.len())
        on_edge = np.zeros(n_new + old_ids.len(), dtype=bool)
        query = f"""
            SELECT na.node AS a, nb.node AS b FROM {pairs} e
            JOIN {nodes} na ON na.doc_id = e.doc_a JOIN {nodes} nb ON nb.doc_id = e.doc_b
        """
        for batch in db.batches(query, EDGE_BATCH_ROWS):
            a, b = batch.column("a").to_numpy(), batch.column("b").to_numpy()
            on_edge[a] = True
            on_edge[b] = True
            sets.union(a, b)
    roots = sets.roots()
    values = np.flatnonzero(on_edge)
    components = roots[values]
    old_component = roots[n_new:]
    old_components = pl.DataFrame(
        {"old_doc_id": old_ids, "component": old_component},
        schema={"old_doc_id": pl.String, "component": pl.Int64},
    )
    new_only = (values < n_new) & ~np.isin(components, old_component)
    component = lookup(values, components, ranked["exact_rank"].to_numpy(), -1)
    return component, old_components, values[new_only], components[new_only]


def _old_clusters_of(doc_ids: pl.Series, clusters: Source) -> pl.DataFrame:
    """`doc_id, cluster_id, cluster_size, kept_doc_id` of the given old documents."""
    found = (
        lazy(clusters)
        .select("doc_id", "cluster_id", "cluster_size", "kept_doc_id")
        .filter(pl.col("doc_id").is_in(doc_ids.implode()))
        .collect()
    )
    missing = doc_ids.to_frame("doc_id").unique().join(found, on="doc_id", how="anti").height
    if missing:
        raise ValueError(f"{missing} earlier documents are in the sketches but not in the clusters table")
    return found


def _rows_joining_old(
    joining: pl.DataFrame, old_sketches: Source, new_sketches: Source, threshold: float | None
) -> pl.DataFrame:
    """Clusters rows of new documents that join old clusters, whose size grows by the newcomers: those
    at least `threshold` similar to the cluster's kept document."""
    kept_docs = (
        lazy(old_sketches)
        .select(
            pl.col("doc_id").alias("kept_doc_id"),
            pl.col("content_hash").alias("kept_hash"),
            pl.col("signature").alias("kept_signature"),
        )
        .filter(pl.col("kept_doc_id").is_in(joining["kept_doc_id"].unique().implode()))
        .collect()
    )
    mine = lazy(new_sketches).select("doc_id", "signature").filter(pl.col("doc_id").is_in(joining["doc_id"].implode()))
    joining = joining.join(kept_docs, on="kept_doc_id", how="left").join(mine.collect(), on="doc_id", how="left")
    if threshold is not None and joining.height:
        mine = joining["signature"].to_numpy()
        theirs = joining["kept_signature"].to_numpy()
        joining = joining.filter(pl.Series((mine == theirs).mean(axis=1) >= threshold))
    return (
        joining
        .select(
            "doc_id",
            "cluster_id",
            (pl.col("cluster_size") + pl.len().over("cluster_id")).alias("cluster_size"),
            pl.lit(False).alias("kept"),
            removal_reason(pl.lit(False), pl.col("content_hash") == pl.col("kept_hash")),
            "kept_doc_id",
        )
        .cast(CLUSTER_SCHEMA)
    )


def merge_clusters(old_clusters: pl.DataFrame, new_clusters: pl.DataFrame) -> pl.DataFrame:
    """The persisted clusters table after an incremental run: old rows get the grown cluster_size."""
    combined = pl.concat([old_clusters.cast(CLUSTER_SCHEMA), new_clusters.cast(CLUSTER_SCHEMA)])
    return combined.with_columns(pl.len().over("cluster_id").cast(pl.Int64).alias("cluster_size"))
