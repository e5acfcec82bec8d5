"""Steps 2 to 4 as SQL: keep-rule order and exact groups, candidate edges from LSH buckets, and their
verification by signature similarity. The in-memory and the out-of-core paths both run these."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    pass

from lm_assets.corpus.dedup.config import EDGE_SCHEMA, KEEP_ORDER, DuckDBConfig, Source
from lm_assets.corpus.dedup.duckdb_session import DuckDBSession, lazy

RANK_COLUMNS = ["doc_id", "content_hash", "empty", "url", "fetched_at"]


def _keep_features_sql(src: str) -> str:
    """CTEs `docs` and `features`: the keep-rule columns of every document of `src`. Aggregates and
    joins rather than window functions, as those spill to disk under DuckDB's memory limit."""
    return f"""
        docs AS (
            SELECT *, regexp_extract(url, '^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)', 1) AS host FROM {src}
        ),
        hosts AS (SELECT host, count(*) AS host_docs FROM docs GROUP BY host),
        features AS (
            SELECT doc_id, content_hash, empty, fetched_at,
                   coalesce(strpos(url, '?') > 0, FALSE) AS has_query,
                   host_docs,
                   NOT coalesce(starts_with(lower(url), 'https://'), FALSE) AS not_https,
                   coalesce(length(url) - length(replace(url, '/', '')), 0) AS depth
            FROM docs JOIN hosts ON hosts.host IS NOT DISTINCT FROM docs.host
        )"""


# KEEP_ORDER as one comparable value, for arg_min.
KEEP_KEY = (
    "struct_pack(q := has_query, h := -host_docs, s := not_https, d := depth, "
    "n := fetched_at IS NULL, f := coalesce(fetched_at, ''), i := doc_id)"
)


def ranked_sql(src: str) -> str:
    """`doc_id, content_hash, empty, rank, exact_rank` of the documents of `src` (see rank_documents)."""
    return f"""
        WITH {_keep_features_sql(src)},
        ranked AS (
            SELECT doc_id, content_hash, empty, row_number() OVER (ORDER BY {KEEP_ORDER}) - 1 AS rank
            FROM features
        ),
        grouped AS (SELECT *, CASE WHEN empty THEN doc_id ELSE content_hash END AS exact_group FROM ranked),
        groups AS (SELECT exact_group, min(rank) AS exact_rank FROM grouped GROUP BY exact_group)
        SELECT doc_id, content_hash, empty, rank, exact_rank FROM grouped JOIN groups USING (exact_group)
    """


def representatives_sql(src: str, excluded_hashes: str | None = None) -> str:
    """`doc_id` of the best document of each exact group of `src`, empty documents left out: the
    documents `exact_representatives(rank_documents(src))` gives, without ranking the whole corpus.
    `excluded_hashes` (a query of `content_hash`) leaves out groups whose text is already known."""
    excluded = f"AND content_hash NOT IN ({excluded_hashes})" if excluded_hashes else ""
    return f"""
        WITH {_keep_features_sql(src)}
        SELECT arg_min(doc_id, {KEEP_KEY}) AS doc_id FROM features WHERE NOT empty {excluded} GROUP BY content_hash
    """


def rank_documents(sketches: Source, duckdb_cfg: DuckDBConfig | None = None) -> pl.DataFrame:
    """`doc_id, content_hash, empty, rank, exact_rank` for every document.

    `rank` numbers all documents 0.. in keep-rule order; `exact_rank` is the smallest rank among the
    documents sharing this one's content hash (its own rank for empty documents, never grouped).
    """
    with DuckDBSession(duckdb_cfg or DuckDBConfig()) as db:
        ranked = db.query(ranked_sql(db.table("sketches", sketches, RANK_COLUMNS)))
    return ranked.sort("rank").cast({"rank": pl.Int64, "exact_rank": pl.Int64})


def exact_representatives(ranked: pl.DataFrame) -> pl.DataFrame:
    """`doc_id` of the best document of each exact group, empty documents left out: the fuzzy pass's input."""
    return ranked.filter((pl.col("rank") == pl.col("exact_rank")) & ~pl.col("empty")).select("doc_id")


def candidate_edges(
    bands: Source,
    band_range: tuple[int, int] | None = None,
    *,
    members: Source | None = None,
    old_bands: Source | None = None,
    duckdb_cfg: DuckDBConfig | None = None,
) -> pl.DataFrame:
    """Distinct `doc_a, doc_b` edges linking each bucket member to the bucket's smallest doc_id.

    Only bands lo <= band < hi of `band_range` are read (all bands when None). `members` (a table
    with `doc_id`) restricts the documents of `bands` that take part, e.g. to exact-group
    representatives. `old_bands` holds bands of documents deduplicated earlier: they join only
    buckets that hold at least one document of `bands`, and no edge links two old documents.
    """
    with DuckDBSession(duckdb_cfg or DuckDBConfig()) as db:
        fresh = db.table("fresh_bands", bands, ["doc_id", "band", "band_hash"])
        member_ids = f"SELECT doc_id FROM {db.table('members', members, ['doc_id'])}" if members is not None else None
        old = db.table("old_bands", old_bands, ["doc_id", "band", "band_hash"]) if old_bands is not None else None
        edges = db.query(candidate_edges_sql(fresh, band_range, member_ids, old))
    return edges.cast(EDGE_SCHEMA)


def candidate_edges_sql(
    fresh: str, band_range: tuple[int, int] | None, member_ids: str | None = None, old: str | None = None
) -> str:
    """The query behind `candidate_edges`, over FROM-clause expressions of band rows; `member_ids` is a
    query of the `doc_id`s of `fresh` that take part."""
    lo, hi = band_range if band_range is not None else (0, 2**31 - 1)
    member_filter = f"AND doc_id IN ({member_ids})" if member_ids else ""
    old_rows = ""
    if old is not None:
        old_rows = f"""
            UNION ALL
            SELECT o.doc_id, o.band, o.band_hash, TRUE AS old
            FROM {old} o SEMI JOIN (SELECT DISTINCT band, band_hash FROM fresh) USING (band, band_hash)
            WHERE o.band >= {int(lo)} AND o.band < {int(hi)}
        """
    return f"""
        WITH fresh AS (
            SELECT doc_id, band, band_hash, FALSE AS old FROM {fresh}
            WHERE band >= {int(lo)} AND band < {int(hi)} {member_filter}
        ),
        bucket_members AS (SELECT * FROM fresh {old_rows}),
        buckets AS (
            SELECT band, band_hash, min(doc_id) AS centre, arg_min(old, doc_id) AS centre_old
            FROM bucket_members GROUP BY band, band_hash HAVING count(*) > 1
        )
        SELECT DISTINCT b.centre AS doc_a, m.doc_id AS doc_b
        FROM bucket_members m JOIN buckets b USING (band, band_hash)
        WHERE m.doc_id <> b.centre AND NOT (m.old AND b.centre_old)
    """


def band_ranges(bands: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous (lo, hi) ranges covering 0..bands, for splitting `candidate_edges`."""
    bounds = np.linspace(0, bands, min(parts, bands) + 1).round().astype(int)
    return [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def verify_edges(
    edges: pl.DataFrame,
    sketches: Source | Sequence[Source],
    threshold: float | None,
    chunk: int = 50_000,
) -> pl.DataFrame:
    """Edges with their estimated Jaccard `similarity`, keeping those >= `threshold` (all when None).

    `sketches` (one source or a list, e.g. new and old) must hold the signatures of every endpoint.
    """
    ids = pl.concat([edges["doc_a"], edges["doc_b"]]).unique()
    sources = sketches if isinstance(sketches, list) else [sketches]
    wanted = pl.col("doc_id").is_in(ids.implode())
    found = pl.concat(
        [lazy(source).select("doc_id", "signature").filter(wanted).collect() for source in sources]
    ).unique("doc_id", keep="first", maintain_order=True)
    if found.height < ids.len():
        raise ValueError(f"{ids.len() - found.height} edge endpoints have no signature in the given sketches")
    index = found.select("doc_id", pl.int_range(pl.len(), dtype=pl.Int64).alias("row"))
    pairs = (
        edges.join(index.rename({"doc_id": "doc_a", "row": "row_a"}), on="doc_a")
        .join(index.rename({"doc_id": "doc_b", "row": "row_b"}), on="doc_b")
    )
    sigs = found["signature"].to_numpy() if found.height else np.empty((0, 1), dtype=np.uint32)
    row_a, row_b = pairs["row_a"].to_numpy(), pairs["row_b"].to_numpy()
    similarity = np.empty(len(pairs))
    for lo in range(0, len(pairs), chunk):
        hi = lo + chunk
        similarity[lo:hi] = (sigs[row_a[lo:hi]] == sigs[row_b[lo:hi]]).mean(axis=1)
    scored = pairs.select("doc_a", "doc_b").with_columns(pl.Series("similarity", similarity, dtype=pl.Float64))
    return scored if threshold is None else scored.filter(pl.col("similarity") >= threshold)
