"""Cross-shard deduplication: exact content hashes first, then MinHash-LSH near-duplicates.

The work is split into steps that each run in parallel or within a memory bound, with parquet-friendly
polars tables between them:

1. Per shard, in parallel: `sketch_documents` gives each document its content hash, keep-rule
   columns and MinHash signature (the "sketches"); `band_table` cuts signatures into LSH band
   hashes, one row per (doc_id, band).
2. `rank_documents` (DuckDB) puts all documents in keep-rule order and finds exact-duplicate groups:
   `rank` 0 is the best document, `exact_rank` the best rank among documents with the same content.
3. `candidate_edges` (DuckDB) groups band rows by (band, band_hash) into buckets and links every
   member of a bucket to the bucket's smallest doc_id: a star, so a bucket of k documents costs k - 1
   edges instead of k^2 / 2, and connectivity is unchanged. Buckets of different bands are
   independent, so the band axis can be split: `candidate_edges(bands, band_range=(lo, hi))` only
   reads bands lo <= band < hi, and the union of the edges over ranges that cover 0..bands is
   exactly the edge set of one unsplit run. Each range can be its own process or partition. DuckDB
   runs with `memory_limit` and spills to `temp_directory` (see `DuckDBConfig`).
4. `verify_edges` keeps an edge when the signature-estimated Jaccard similarity of its two documents
   (the fraction of equal MinHash values) reaches `verify_threshold`. With star edges a member is
   compared with its bucket's centre, not with every other member.
5. `cluster_documents` joins exact groups and verified edges with union-find and applies the keep
   rule, giving the clusters table for every input document.
6. Per shard: `apply_dedup` turns the clusters table into a `StageResult`.

`deduplicate` runs steps 1-5 in memory; `deduplicate_incremental` deduplicates new documents against
the persisted sketches, bands and clusters of earlier runs without touching their decisions.

Keep rule: a cluster keeps the copy that best represents it, not the longest one (a mirror's copy
is longer by its banner). Among its distinct texts (exact groups) that is the one with the highest
mean estimated similarity to the others, so a copy with an added header or footer, or with its own
edits, loses to the original they were all made from. A member less similar to that centre than the
verification threshold was only chained in through others and stays as its own cluster. Ties (a
pair of texts, and the copies of one text) go by the URL that looks canonical (`KEEP_ORDER`): no
query string, then the host with more documents in the corpus (a mirror holds few), then https, then
the shallower path; then the earliest `fetched_at` (ISO-8601 strings order correctly), then the
smallest doc_id; missing values sort last.

Clusters table (`CLUSTER_SCHEMA`), one row per document, singletons included: `doc_id`,
`cluster_id` (the doc_id of the cluster's kept document, so ids stay stable across incremental
runs), `cluster_size`, `kept`, `reason` (null when kept, else "exact_duplicate" when the text equals
the kept document's after normalisation, "near_duplicate" otherwise) and `kept_doc_id` (the
document's own id when kept).

Documents without any shingle (empty, or only punctuation) are never clustered: each stays a kept
singleton, and `empty` in the sketches flags them.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import polars as pl

if TYPE_CHECKING:
    import pyarrow as pa

from lm_assets.corpus.dedup.minhash import (
    MinHashConfig,
    band_hashes,
    empty_signatures,
    lsh_params,
    signatures,
)
from lm_assets.corpus.stage import DROPPED_SCHEMA, StageResult

STAGE = "dedup"
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


# ---------------------------------------------------------------------------------------------
# Exact content hash
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Step 1: sketches and bands, per shard
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# DuckDB plumbing
# ---------------------------------------------------------------------------------------------


class _DuckDB:
    """A DuckDB connection with a memory limit and a spill folder; tables are registered by name."""

    def __init__(self, cfg: DuckDBConfig):
        temp = cfg.temp_directory or os.path.join(tempfile.gettempdir(), "lm-assets-duckdb")
        Path(temp).mkdir(parents=True, exist_ok=True)
        import duckdb  # imported on first use: the code location loads this module

        self.con = duckdb.connect()
        self._set("memory_limit", cfg.memory_limit)
        self._set("temp_directory", temp)
        # Without insertion order DuckDB can stream and spill large joins and aggregates.
        self.con.execute("SET preserve_insertion_order = false").fetchall()
        if cfg.threads:
            self.con.execute(f"SET threads = {int(cfg.threads)}").fetchall()

    def _set(self, name: str, value: str) -> None:
        self.con.execute(f"SET {name} = '{str(value).replace(chr(39), chr(39) * 2)}'").fetchall()

    def table(self, name: str, source: Source, columns: Sequence[str]) -> str:
        """A FROM-clause expression reading `columns` of `source`."""
        import pyarrow as pa

        if isinstance(source, pl.DataFrame):
            self.con.register(name, source.select(columns).to_arrow())
            return name
        if isinstance(source, pa.Table):
            self.con.register(name, source.select(list(columns)))
            return name
        paths = [source] if isinstance(source, (str, Path)) else list(source)
        quoted = ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths)
        return f"(SELECT {', '.join(columns)} FROM read_parquet([{quoted}]))"

    def query(self, sql: str) -> pl.DataFrame:
        return self.con.sql(sql).pl()

    def __enter__(self) -> _DuckDB:
        return self

    def __exit__(self, *exc) -> None:
        self.con.close()


def _lazy(source: Source) -> pl.LazyFrame:
    import pyarrow as pa

    if isinstance(source, pl.DataFrame):
        return source.lazy()
    if isinstance(source, pa.Table):
        return pl.from_arrow(source).lazy()
    paths = [source] if isinstance(source, (str, Path)) else list(source)
    return pl.scan_parquet([str(p) for p in paths])


# ---------------------------------------------------------------------------------------------
# Step 2: keep-rule order and exact groups
# ---------------------------------------------------------------------------------------------


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
    with _DuckDB(duckdb_cfg or DuckDBConfig()) as db:
        ranked = db.query(ranked_sql(db.table("sketches", sketches, RANK_COLUMNS)))
    return ranked.sort("rank").cast({"rank": pl.Int64, "exact_rank": pl.Int64})


def exact_representatives(ranked: pl.DataFrame) -> pl.DataFrame:
    """`doc_id` of the best document of each exact group, empty documents left out: the fuzzy pass's input."""
    return ranked.filter((pl.col("rank") == pl.col("exact_rank")) & ~pl.col("empty")).select("doc_id")


# ---------------------------------------------------------------------------------------------
# Step 3: candidate edges from LSH buckets
# ---------------------------------------------------------------------------------------------


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
    with _DuckDB(duckdb_cfg or DuckDBConfig()) as db:
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


# ---------------------------------------------------------------------------------------------
# Step 4: verification
# ---------------------------------------------------------------------------------------------


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
        [_lazy(source).select("doc_id", "signature").filter(wanted).collect() for source in sources]
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


# ---------------------------------------------------------------------------------------------
# Step 5: union-find and the keep rule
# ---------------------------------------------------------------------------------------------


class UnionFind:
    """Disjoint sets over 0..n-1, with path compression and union by size."""

    def __init__(self, n: int):
        self.parent = list(range(n))
        self.size = [1] * n

    def find(self, x: int) -> int:
        parent = self.parent
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, a: int, b: int) -> int:
        root_a, root_b = self.find(a), self.find(b)
        if root_a == root_b:
            return root_a
        if self.size[root_a] < self.size[root_b]:
            root_a, root_b = root_b, root_a
        self.parent[root_b] = root_a
        self.size[root_a] += self.size[root_b]
        return root_a

    def union_all(self, a: np.ndarray, b: np.ndarray) -> None:
        for x, y in zip(np.asarray(a).tolist(), np.asarray(b).tolist()):
            self.union(x, y)

    def roots(self) -> np.ndarray:
        """The root of every element, by vectorised pointer jumping."""
        parent = np.array(self.parent, dtype=np.int64)
        while True:
            grand = parent[parent]
            if np.array_equal(grand, parent):
                return parent
            parent = grand


def _components(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the edges (a[i], b[i]) over integer node values.

    Returns the distinct values, sorted, and a component number for each; only values that are on
    an edge take part, so memory follows the number of candidate pairs, not of documents.
    """
    values, index = np.unique(np.concatenate([a, b]).astype(np.int64), return_inverse=True)
    sets = UnionFind(len(values))
    sets.union_all(index[: len(a)], index[len(a) :])
    return values, sets.roots()


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray, missing) -> np.ndarray:
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
    values, components = _components(group[pairs["a"].to_numpy()], group[pairs["b"].to_numpy()])
    signatures = node_signatures(ranked, values, sketches) if sketches is not None else None
    kept = centres(values, components, signatures, threshold)
    return _clusters_frame(ranked, _lookup(values, kept, group, group))


def node_signatures(ranked: pl.DataFrame, ranks: np.ndarray, sketches: Source) -> np.ndarray:
    """The signatures of the documents of `ranked` with the given ranks, one row per rank, in order."""
    wanted = ranked.sort("rank")[ranks.tolist()].select("doc_id", pl.int_range(pl.len()).alias("row"))
    found = (
        _lazy(sketches).select("doc_id", "signature")
        .filter(pl.col("doc_id").is_in(wanted["doc_id"].implode())).collect()
        .unique("doc_id", keep="first")
    )
    ordered = wanted.join(found, on="doc_id", how="left").sort("row")
    if ordered["signature"].null_count():
        raise ValueError(f"{ordered['signature'].null_count()} clustered documents have no signature")
    if ordered.height == 0:
        return np.empty((0, 0), dtype=np.uint32)
    return ordered["signature"].to_numpy()


def _clusters_frame(ranked: pl.DataFrame, kept_rank: np.ndarray) -> pl.DataFrame:
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
        _reason(pl.col("doc_id") == pl.col("kept_doc_id"), pl.col("content_hash") == pl.col("kept_hash")),
        "kept_doc_id",
    ).cast(CLUSTER_SCHEMA)


def _reason(is_kept: pl.Expr, same_content: pl.Expr) -> pl.Expr:
    return (
        pl.when(is_kept).then(None).when(same_content).then(pl.lit(EXACT)).otherwise(pl.lit(NEAR)).alias("reason")
    )


# ---------------------------------------------------------------------------------------------
# Whole runs
# ---------------------------------------------------------------------------------------------


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
    edges = _fuzzy_edges(bands, sketches, exact_representatives(ranked), cfg, band_parts)
    clustered = cluster_documents(ranked, edges, sketches, cfg.effective_verify_threshold)
    clusters = sketches.select("doc_id").join(clustered, on="doc_id", how="left", maintain_order="left")
    return DedupResult(clusters, sketches, bands, edges, dedup_stats(clusters))


def _fuzzy_edges(
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


@dataclass
class DedupState:
    """What earlier runs persisted: their sketches, band tables and clusters table (frames or parquet)."""

    sketches: Source
    bands: Source
    clusters: Source


def deduplicate_incremental(
    new_sketches: pl.DataFrame,
    new_bands: pl.DataFrame,
    state: DedupState,
    cfg: DedupConfig | None = None,
    band_parts: int = 1,
    edges: pl.DataFrame | None = None,
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
    the state's bands and sketches); `new_bands` and `state.bands` are then not read.
    """
    cfg = cfg or DedupConfig()
    ranked = rank_documents(new_sketches, cfg.duckdb)
    exact_old = _exact_matches_in_old(new_sketches, state.sketches, cfg.duckdb)
    representatives = exact_representatives(ranked.join(exact_old, on="content_hash", how="anti"))
    if edges is None:
        edges = _fuzzy_edges(new_bands, [new_sketches, state.sketches], representatives, cfg, band_parts, state.bands)
    else:
        edges = edges.select("doc_a", "doc_b", "similarity").unique()

    component, old_components, new_values, new_components = _components_with_old(ranked, edges)
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
    kept_rank = _lookup(new_values, kept, exact_rank, exact_rank)
    # New documents not joining an old cluster (none reached, or too unlike its kept document) keep
    # their own group's best, or the centre of a component of new documents only.
    new_rows = _clusters_frame(ranked, kept_rank).join(joined_rows, on="doc_id", how="anti")
    clusters = new_sketches.select("doc_id").join(
        pl.concat([new_rows, joined_rows]), on="doc_id", how="left", maintain_order="left"
    )
    return DedupResult(clusters, new_sketches, new_bands, edges, dedup_stats(clusters))


def _exact_matches_in_old(new_sketches: pl.DataFrame, old_sketches: Source, duckdb_cfg: DuckDBConfig) -> pl.DataFrame:
    """`content_hash, old_doc_id`: one old document for each new content hash seen before."""
    with _DuckDB(duckdb_cfg) as db:
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


def _components_with_old(
    ranked: pl.DataFrame, edges: pl.DataFrame
) -> tuple[np.ndarray, pl.DataFrame, np.ndarray, np.ndarray]:
    """Components over new exact groups (by their best rank) and the old documents on edges.

    Returns each new document's component (-1 when on no edge), `old_doc_id, component` for the old
    documents, and the new nodes of components without an old document with their components (for
    `centres`). Components holding an old document are settled by that document's cluster.
    """
    n_new = ranked.height
    endpoints = pl.concat([edges["doc_a"], edges["doc_b"]]).unique(maintain_order=True)
    old_ids = endpoints.filter(~endpoints.is_in(ranked["doc_id"].implode()))
    node_of = pl.concat(
        [
            ranked.select("doc_id", pl.col("exact_rank").alias("node")),
            old_ids.to_frame("doc_id").with_columns(
                pl.int_range(n_new, n_new + pl.len(), dtype=pl.Int64).alias("node")
            ),
        ]
    )
    pairs = edges.join(node_of.rename({"doc_id": "doc_a", "node": "a"}), on="doc_a").join(
        node_of.rename({"doc_id": "doc_b", "node": "b"}), on="doc_b"
    )
    values, components = _components(pairs["a"].to_numpy(), pairs["b"].to_numpy())
    old_nodes = np.arange(n_new, n_new + old_ids.len())
    old_component = _lookup(values, components, old_nodes, -1)
    old_components = pl.DataFrame(
        {"old_doc_id": old_ids, "component": old_component},
        schema={"old_doc_id": pl.String, "component": pl.Int64},
    )
    new_only = (values < n_new) & ~np.isin(components, old_component)
    component = _lookup(values, components, ranked["exact_rank"].to_numpy(), -1)
    return component, old_components, values[new_only], components[new_only]


def _old_clusters_of(doc_ids: pl.Series, clusters: Source) -> pl.DataFrame:
    """`doc_id, cluster_id, cluster_size, kept_doc_id` of the given old documents."""
    found = (
        _lazy(clusters)
        .select("doc_id", "cluster_id", "cluster_size", "kept_doc_id")
        .filter(pl.col("doc_id").is_in(doc_ids.implode()))
        .collect()
    )
    missing = doc_ids.to_frame("doc_id").unique().join(found, on="doc_id", how="anti").height
    if missing:
        raise ValueError(f"{missing} earlier documents are in the sketches but not in the clusters table")
    return found


def _rows_joining_old(
    joining: pl.DataFrame, old_sketches: Source, new_sketches: pl.DataFrame, threshold: float | None
) -> pl.DataFrame:
    """Clusters rows of new documents that join old clusters, whose size grows by the newcomers: those
    at least `threshold` similar to the cluster's kept document."""
    kept_docs = (
        _lazy(old_sketches)
        .select(
            pl.col("doc_id").alias("kept_doc_id"),
            pl.col("content_hash").alias("kept_hash"),
            pl.col("signature").alias("kept_signature"),
        )
        .filter(pl.col("kept_doc_id").is_in(joining["kept_doc_id"].unique().implode()))
        .collect()
    )
    joining = joining.join(kept_docs, on="kept_doc_id", how="left").join(
        new_sketches.select("doc_id", "signature"), on="doc_id", how="left"
    )
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
            _reason(pl.lit(False), pl.col("content_hash") == pl.col("kept_hash")),
            "kept_doc_id",
        )
        .cast(CLUSTER_SCHEMA)
    )


def merge_clusters(old_clusters: pl.DataFrame, new_clusters: pl.DataFrame) -> pl.DataFrame:
    """The persisted clusters table after an incremental run: old rows get the grown cluster_size."""
    combined = pl.concat([old_clusters.cast(CLUSTER_SCHEMA), new_clusters.cast(CLUSTER_SCHEMA)])
    return combined.with_columns(pl.len().over("cluster_id").cast(pl.Int64).alias("cluster_size"))


# ---------------------------------------------------------------------------------------------
# Step 6 and metadata
# ---------------------------------------------------------------------------------------------


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
        "doc_id", pl.lit(STAGE).alias("stage"), "reason", "kept_doc_id"
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
