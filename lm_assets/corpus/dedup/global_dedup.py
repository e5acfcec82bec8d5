"""Global dedup over parquet files in bounded memory: the steps of `clustering.deduplicate_sketches`, streamed.

Inputs are the per-shard files `minhash_signatures` writes (sketches and band rows); every step reads
them through DuckDB under its memory limit, spilling to its temporary folder, and writes its result
to a parquet file. No step loads all signatures or all documents into Python:

1. `band_range_edges` (one band range; each range can run in its own process): the best document of
   each exact group (`ranking.representatives_sql`), the LSH candidate edges of the range
   (`ranking.candidate_edges_sql`), then verification: DuckDB joins the edges with each endpoint's
   signatures in its own query and writes both sorted by edge; read back batch by batch, the two
   files line up row for row, numpy computes the similarities, and edges at or above the threshold
   are written with their `similarity`.
2. `cluster_files`: `ranking.ranked_sql` numbers the documents 0..n-1 in keep-rule order (the dense
   document number), edges become pairs of exact-group numbers, and connected components come from
   union-find over a memory-mapped parent array (`union_find.UnionFind`, 4 bytes per document up to 2^31
   documents, 8 beyond) or, with `algorithm="star"`, from alternating large-star and small-star
   rounds in DuckDB SQL (`star_components`). Only members of non-singleton components take part in
   the keep rule: their signatures are read sorted by component and `clustering.centres` decides one
   component at a time. The clusters table (`config.CLUSTER_SCHEMA`) is written by a DuckDB query.

The result equals `clustering.deduplicate_sketches` row for row (order aside).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lm_assets.corpus.dedup.clustering import centres
from lm_assets.corpus.dedup.config import CLUSTER_SCHEMA, EXACT, NEAR, DedupConfig, Source
from lm_assets.corpus.dedup.decisions import cluster_size_histogram
from lm_assets.corpus.dedup.duckdb_session import DuckDBSession
from lm_assets.corpus.dedup.ranking import RANK_COLUMNS, candidate_edges_sql, ranked_sql, representatives_sql
from lm_assets.corpus.dedup.union_find import UnionFind
from lm_assets.storage.store import ROW_GROUP_ROWS

COMPONENT_ALGORITHMS = ("union_find", "star")
# Rows handed from DuckDB to numpy at a time: two signatures each, about 8 MiB a batch.
BATCH_ROWS = 8192


def _quoted(path: str | Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _copy(db: DuckDBSession, sql: str, out: Path) -> int:
    """Writes the query's rows to a parquet file; returns how many."""
    db.con.execute(f"COPY ({sql}) TO {_quoted(out)} (FORMAT parquet, ROW_GROUP_SIZE {ROW_GROUP_ROWS})").fetchall()
    return _count(db, f"read_parquet({_quoted(out)})")


def _count(db: DuckDBSession, src: str) -> int:
    return int(db.con.execute(f"SELECT count(*) FROM {src}").fetchall()[0][0])


def _matrix(column) -> np.ndarray:
    """A pyarrow list column of equal-length uint32 lists as a (rows, length) array."""
    values = np.asarray(column.flatten(), dtype=np.uint32)
    return values.reshape(len(column), -1) if len(column) else values.reshape(0, 0)


class _ParquetSink:
    """Appends pyarrow tables of one schema to a parquet file; an empty file when nothing came."""

    def __init__(self, out: Path, schema):
        import pyarrow.parquet as pq

        self.writer = pq.ParquetWriter(str(out), schema, compression="zstd")
        self.schema = schema
        self.rows = 0

    def write(self, columns: dict) -> None:
        import pyarrow as pa

        table = pa.table(columns).cast(self.schema)
        self.writer.write_table(table)
        self.rows += table.num_rows

    def close(self) -> None:
        self.writer.close()


# ---------------------------------------------------------------------------------------------
# Step 1: candidate edges and verification of one band range
# ---------------------------------------------------------------------------------------------


def band_range_edges(
    bands: Source,
    sketches: Source,
    band_range: tuple[int, int],
    out: str | Path,
    cfg: DedupConfig | None = None,
    *,
    old_bands: Source | None = None,
    old_sketches: Source | None = None,
) -> dict:
    """Writes the verified edges (`doc_a, doc_b, similarity`) of one band range to `out`.

    `sketches` must hold every document of `bands`. With `old_bands` and `old_sketches` (the state
    of earlier runs) this is the incremental run's range: new exact groups whose text is already in
    the old sketches take no part, old documents join buckets of new ones, no edge links two old
    documents. Returns the range and its candidate and verified edge counts.
    """
    cfg = cfg or DedupConfig()
    out = Path(out)
    with DuckDBSession(cfg.duckdb) as db:
        fresh_sketches = db.table("sketches", sketches, [*RANK_COLUMNS, "signature"])
        old = None
        excluded = None
        signature_src = f"(SELECT doc_id, signature FROM {fresh_sketches})"
        if old_bands is not None:
            old = db.table("old_bands", old_bands, ["doc_id", "band", "band_hash"])
            old_src = db.table("old_sketches", old_sketches, ["doc_id", "content_hash", "empty", "signature"])
            excluded = f"SELECT content_hash FROM {old_src} WHERE NOT empty"
            signature_src = f"({signature_src} UNION ALL SELECT doc_id, signature FROM {old_src})"
        fresh = db.table("fresh_bands", bands, ["doc_id", "band", "band_hash"])
        members_file, candidates_file = (out.with_name(f"{out.name}.{name}.parquet") for name in ("members", "candidates"))
        try:
            _copy(db, representatives_sql(f"(SELECT {', '.join(RANK_COLUMNS)} FROM {fresh_sketches})", excluded),
                  members_file)
            members = f"SELECT doc_id FROM read_parquet({_quoted(members_file)})"
            candidates = _copy(db, candidate_edges_sql(fresh, band_range, members, old), candidates_file)
            verified = _verify(db, f"read_parquet({_quoted(candidates_file)})", signature_src, candidates, out,
                               cfg.effective_verify_threshold)
        finally:
            members_file.unlink(missing_ok=True)
            candidates_file.unlink(missing_ok=True)
    return {"band_range": list(band_range), "candidate_edges": candidates, "verified_edges": verified}


def _verify(db: DuckDBSession, edges: str, signatures: str, expected: int, out: Path, threshold: float | None) -> int:
    """Writes to `out` the edges whose endpoints' signatures agree in at least `threshold` of their values.

    Each endpoint's signature is joined on by DuckDB alone (the hash table holds the edges, not the
    signatures) and written sorted by edge, so that the two files, read back in batches, line up row
    for row: memory stays bounded by DuckDB's limit and one batch, however many edges and documents."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ends = {side: out.with_name(f"{out.name}.{side}.parquet") for side in ("doc_a", "doc_b")}
    try:
        counts = [
            _copy(db, f"""
                SELECT e.doc_a, e.doc_b, s.signature
                FROM {signatures} s JOIN (SELECT doc_a, doc_b FROM {edges}) e ON s.doc_id = e.{side}
                ORDER BY e.doc_a, e.doc_b
            """, path)
            for side, path in ends.items()
        ]
        schema = pa.schema([("doc_a", pa.string()), ("doc_b", pa.string()), ("similarity", pa.float64())])
        sink = _ParquetSink(out, schema)
        try:
            batches = (pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS) for path in ends.values())
            for a, b in zip(*batches, strict=True):
                if not (a.column("doc_a").equals(b.column("doc_a")) and a.column("doc_b").equals(b.column("doc_b"))):
                    raise ValueError("the two endpoint files of the verification do not line up")
                similarity = (_matrix(a.column("signature")) == _matrix(b.column("signature"))).mean(axis=1)
                keep = similarity >= threshold if threshold is not None else np.ones(len(similarity), dtype=bool)
                sink.write({
                    "doc_a": a.column("doc_a").filter(pa.array(keep)),
                    "doc_b": a.column("doc_b").filter(pa.array(keep)),
                    "similarity": similarity[keep],
                })
        finally:
            sink.close()
    finally:
        for path in ends.values():
            path.unlink(missing_ok=True)
    if min(counts) != expected:
        raise ValueError(f"{expected - min(counts)} candidate edges have an endpoint without a signature in the sketches")
    return sink.rows


# ---------------------------------------------------------------------------------------------
# Step 2: components
# ---------------------------------------------------------------------------------------------


def union_find_components(pairs: str, n: int, db: DuckDBSession, workdir: Path, out: Path) -> dict:
    """`node, component` (its set's smallest node) of the nodes of `pairs` (a FROM-clause expression
    with integer columns a, b over 0..n-1), written to `out`; the parent array lives in `workdir`."""
    import pyarrow as pa

    sets = UnionFind(n, workdir / "parents.int")
    for batch in db.batches(f"SELECT a, b FROM {pairs}", rows=1 << 20):
        sets.union(batch.column("a").to_numpy(), batch.column("b").to_numpy())
    sets.flatten()
    listed = workdir / "members.parquet"
    sink = _ParquetSink(listed, pa.schema([("node", pa.int64()), ("component", pa.int64())]))
    try:
        for nodes, roots in sets.members():
            sink.write({"node": nodes.astype(np.int64), "component": roots.astype(np.int64)})
    finally:
        sink.close()
    bytes_per_document = sets.bytes_per_document
    del sets
    (workdir / "parents.int").unlink(missing_ok=True)
    _copy(db, f"SELECT DISTINCT node, component FROM read_parquet({_quoted(listed)})", out)
    listed.unlink()
    return {"algorithm": "union_find", "id_array_bytes_per_document": bytes_per_document}


def star_components(pairs: str, db: DuckDBSession, out: Path, max_rounds: int = 200) -> dict:
    """`node, component` of the nodes of `pairs` by alternating large-star and small-star rounds
    (Kiveris et al., "Connected Components in MapReduce and Beyond", 2014), each a DuckDB query over
    the edge table, until a round changes nothing; every node then links to its component's minimum."""
    con = db.con
    con.execute(f"CREATE OR REPLACE TEMP TABLE star_edges AS SELECT DISTINCT least(a, b) AS u, greatest(a, b) AS v "
                f"FROM {pairs} WHERE a <> b").fetchall()
    rounds = 0
    while True:
        rounds += 1
        if rounds > max_rounds:
            raise RuntimeError(f"star components did not converge in {max_rounds} rounds")
        con.execute("""
            CREATE OR REPLACE TEMP TABLE star_large AS
            WITH adj AS (SELECT u AS x, v AS y FROM star_edges UNION ALL SELECT v, u FROM star_edges),
            low AS (SELECT x, least(x, min(y)) AS m FROM adj GROUP BY x)
            SELECT DISTINCT adj.y AS u, low.m AS v FROM adj JOIN low USING (x) WHERE adj.y > adj.x AND adj.y <> low.m
        """).fetchall()
        con.execute("""
            CREATE OR REPLACE TEMP TABLE star_small AS
            WITH adj AS (SELECT u AS x, v AS y FROM star_large UNION ALL SELECT v, u FROM star_large),
            lower_side AS (SELECT x, y FROM adj WHERE y <= x),
            low AS (SELECT x, least(x, min(y)) AS m FROM adj WHERE y <= x GROUP BY x),
            linked AS (
                SELECT lower_side.y AS a, low.m AS b FROM lower_side JOIN low USING (x)
                UNION ALL SELECT x, m FROM low
            )
            SELECT DISTINCT least(a, b) AS u, greatest(a, b) AS v FROM linked WHERE a <> b
        """).fetchall()
        unchanged = con.execute("""
            SELECT (SELECT count(*) FROM star_small) = (SELECT count(*) FROM star_edges)
               AND NOT EXISTS (SELECT u, v FROM star_small EXCEPT SELECT u, v FROM star_edges)
        """).fetchall()[0][0]
        con.execute("CREATE OR REPLACE TEMP TABLE star_edges AS SELECT * FROM star_small").fetchall()
        if unchanged:
            break
    _copy(db, """
        SELECT v AS node, min(u) AS component FROM star_edges GROUP BY v
        UNION ALL SELECT DISTINCT u, u FROM star_edges WHERE u NOT IN (SELECT v FROM star_edges)
    """, out)
    for table in ("star_edges", "star_large", "star_small"):
        con.execute(f"DROP TABLE IF EXISTS {table}").fetchall()
    return {"algorithm": "star", "rounds": rounds}


# ---------------------------------------------------------------------------------------------
# Step 3: the keep rule and the clusters table
# ---------------------------------------------------------------------------------------------


def _write_centres(db: DuckDBSession, members: str, threshold: float | None, out: Path) -> int:
    """`node, kept_node` for every node of a non-singleton component, read in component order."""
    import pyarrow as pa

    sink = _ParquetSink(out, pa.schema([("node", pa.int64()), ("kept_node", pa.int64())]))
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def settle(nodes: np.ndarray, components: np.ndarray, signatures: np.ndarray) -> None:
        sink.write({"node": nodes, "kept_node": centres(nodes, components, signatures, threshold)})

    try:
        for batch in db.batches(members, BATCH_ROWS):
            nodes = batch.column("node").to_numpy().astype(np.int64)
            components = batch.column("component").to_numpy().astype(np.int64)
            signatures = _matrix(batch.column("signature"))
            if pending:
                earlier = pending.pop()
                nodes, components, signatures = (
                    np.concatenate([before, now]) for before, now in zip(earlier, (nodes, components, signatures))
                )
            # The batch's last component may go on in the next batch.
            last = np.searchsorted(components, components[-1])
            if last:
                settle(nodes[:last], components[:last], signatures[:last])
            pending = [(nodes[last:], components[last:], signatures[last:])]
        if pending:
            settle(*pending[0])
    finally:
        sink.close()
    return sink.rows


CLUSTERS_SQL = """
    WITH kept AS (
        SELECT r.doc_id, r.content_hash, coalesce(c.kept_node, r.exact_rank) AS kept_rank
        FROM {ranked} r LEFT JOIN {centres} c ON c.node = r.exact_rank
    ),
    named AS (
        SELECT k.doc_id, best.doc_id AS kept_doc_id, k.content_hash = best.content_hash AS same_content
        FROM kept k JOIN {ranked} best ON best.rank = k.kept_rank
    ),
    sizes AS (SELECT kept_doc_id, count(*) AS cluster_size FROM named GROUP BY kept_doc_id)
    SELECT doc_id, kept_doc_id AS cluster_id, CAST(cluster_size AS BIGINT) AS cluster_size,
           doc_id = kept_doc_id AS kept,
           CASE WHEN doc_id = kept_doc_id THEN NULL WHEN same_content THEN 'exact_duplicate'
                ELSE 'near_duplicate' END AS reason,
           kept_doc_id
    FROM named JOIN sizes USING (kept_doc_id)
"""


@dataclass
class ClusterRun:
    clusters: Path
    stats: dict


def cluster_files(
    sketches: Source,
    edge_files: Sequence[str | Path],
    out: str | Path,
    workdir: str | Path,
    cfg: DedupConfig | None = None,
    algorithm: str = "union_find",
) -> ClusterRun:
    """Writes the clusters table of every document of `sketches` to `out`, from the verified edges of
    every band range (`band_range_edges` files); `workdir` holds the intermediate files."""
    if algorithm not in COMPONENT_ALGORITHMS:
        raise ValueError(f"algorithm must be one of {COMPONENT_ALGORITHMS}, not {algorithm!r}")
    cfg = cfg or DedupConfig()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ranked, pairs, members, kept = (workdir / f"{name}.parquet" for name in ("ranked", "pairs", "components", "centres"))
    with DuckDBSession(cfg.duckdb) as db:
        src = db.table("sketches", sketches, [*RANK_COLUMNS, "signature"])
        documents = _copy(db, ranked_sql(f"(SELECT {', '.join(RANK_COLUMNS)} FROM {src})"), ranked)
        ranked_src = f"read_parquet({_quoted(ranked)})"
        edges = "read_parquet([" + ", ".join(_quoted(p) for p in edge_files) + "])" if edge_files else None
        edge_count = 0
        if edges:
            edge_count = _copy(db, f"""
                SELECT ra.exact_rank AS a, rb.exact_rank AS b
                FROM {edges} e JOIN {ranked_src} ra ON ra.doc_id = e.doc_a JOIN {ranked_src} rb ON rb.doc_id = e.doc_b
                WHERE ra.exact_rank <> rb.exact_rank
            """, pairs)
        else:
            _copy(db, "SELECT 0::BIGINT AS a, 0::BIGINT AS b WHERE FALSE", pairs)
        pairs_src = f"read_parquet({_quoted(pairs)})"
        if algorithm == "union_find":
            stats = union_find_components(pairs_src, documents, db, workdir, members)
        else:
            stats = star_components(pairs_src, db, members)
        members_src = f"read_parquet({_quoted(members)})"
        clustered = _write_centres(db, f"""
            SELECT c.node, c.component, s.signature
            FROM {members_src} c JOIN {ranked_src} r ON r.rank = c.node JOIN {src} s ON s.doc_id = r.doc_id
            ORDER BY c.component, c.node
        """, cfg.effective_verify_threshold, kept)
        rows = _copy(db, CLUSTERS_SQL.format(ranked=ranked_src, centres=f"read_parquet({_quoted(kept)})"), Path(out))
    for path in (ranked, pairs, members, kept):
        path.unlink(missing_ok=True)
    if rows != documents:
        raise ValueError(f"clusters table has {rows} rows for {documents} documents")
    return ClusterRun(Path(out), stats | {"documents": documents, "edge_pairs": edge_count,
                                          "clustered_nodes": clustered})


# ---------------------------------------------------------------------------------------------
# What a round reports and checks
# ---------------------------------------------------------------------------------------------


def cluster_report(clusters: Source, sketches: Source | None, cfg: DedupConfig | None = None, largest: int = 10) -> dict:
    """Counts, the cluster-size histogram, duplicates per shard, the largest clusters and the consistency
    checks of a clusters table against the sketches it was made from, each computed by DuckDB over the
    files, so a report on billions of rows stays within its memory limit. `sketches` hold `doc_id`,
    `content_hash`, `source` and `url`; without them only the clusters' own figures are reported."""
    cfg = cfg or DedupConfig()
    with DuckDBSession(cfg.duckdb) as db:
        c = db.table("clusters", clusters, ["doc_id", "cluster_id", "cluster_size", "kept", "reason"])
        # count_if over no rows is NULL in DuckDB: a corpus whose shards kept nothing counts 0.
        counts = db.query(f"""
            SELECT count(*) AS documents, coalesce(count_if(kept), 0)::BIGINT AS kept,
                   coalesce(count_if(reason = '{EXACT}'), 0)::BIGINT AS exact_duplicates,
                   coalesce(count_if(reason = '{NEAR}'), 0)::BIGINT AS near_duplicates, count(DISTINCT doc_id) AS distinct_documents
            FROM {c}
        """).row(0, named=True)
        # One row per cluster, made once: the histogram, two checks and the largest clusters read it.
        db.con.execute(f"""
            CREATE TEMP TABLE per_cluster AS
            SELECT cluster_id, any_value(cluster_size) AS cluster_size, count(*) AS members,
                   count_if(kept)::BIGINT AS kept
            FROM {c} GROUP BY cluster_id
        """).fetchall()
        sizes = db.query("SELECT cluster_size, count(*) AS clusters FROM per_cluster GROUP BY cluster_size ORDER BY 1")
        wrong = db.query("""
            SELECT coalesce(count_if(kept <> 1), 0)::BIGINT AS clusters_not_keeping_one,
                   coalesce(count_if(members <> cluster_size), 0)::BIGINT AS wrong_cluster_size
            FROM per_cluster
        """).row(0, named=True)
        documents = counts["documents"]
        report = {
            "documents": documents,
            "kept": counts["kept"],
            "exact_duplicates": counts["exact_duplicates"],
            "near_duplicates": counts["near_duplicates"],
            "dup_rate": (documents - counts["kept"]) / documents if documents else 0.0,
            "cluster_size_histogram": cluster_size_histogram(sizes["cluster_size"], sizes["clusters"]),
            "problems": {"duplicate_rows": documents - counts["distinct_documents"], **wrong},
        }
        if sketches is None:
            return report
        k = db.table("sketches", sketches, ["doc_id", "content_hash", "source", "url"])
        report["per_shard"] = db.query(f"""
            SELECT k.source, count(*) AS documents, count_if(NOT c.kept)::BIGINT AS removed,
                   round(count_if(NOT c.kept) / count(*), 4)::DOUBLE AS dup_rate
            FROM {c} c JOIN {k} k USING (doc_id) GROUP BY k.source ORDER BY k.source
        """)
        report["largest"] = db.query(f"""
            WITH top AS (
                SELECT cluster_id, cluster_size FROM per_cluster WHERE cluster_size > 1
                ORDER BY cluster_size DESC, cluster_id LIMIT {int(largest)}
            ),
            members AS (
                SELECT t.cluster_id, t.cluster_size, k.url, row_number() OVER (PARTITION BY t.cluster_id ORDER BY c.doc_id) AS n
                FROM top t JOIN {c} c USING (cluster_id) JOIN {k} k USING (doc_id)
            )
            SELECT cluster_id, any_value(cluster_size) AS cluster_size, string_agg(url, '  ' ORDER BY n) AS sample_urls
            FROM members WHERE n <= 3 GROUP BY cluster_id ORDER BY cluster_size DESC, cluster_id
        """)
        missing = db.query(f"""
            SELECT (SELECT count(*) FROM {k} ANTI JOIN {c} USING (doc_id)) AS documents_without_cluster,
                   (SELECT count(*) FROM {c} ANTI JOIN {k} USING (doc_id)) AS rows_without_sketch,
                   (SELECT count(*) - count(DISTINCT content_hash) FROM {c} c JOIN {k} k USING (doc_id) WHERE c.kept)
                       AS kept_sharing_a_hash
        """).row(0, named=True)
        report["kept_sharing_a_hash"] = missing.pop("kept_sharing_a_hash")
        report["problems"] |= missing
    return report


def merge_cluster_files(old: Source, new: Source, out: str | Path, cfg: DedupConfig | None = None) -> int:
    """The persisted clusters table after an incremental round, written to `out` by DuckDB: the old rows,
    then the new, every row with its cluster's grown size (as `incremental.merge_clusters`, in bounded memory).
    Returns the rows written."""
    cfg = cfg or DedupConfig()
    columns = list(CLUSTER_SCHEMA)
    with DuckDBSession(cfg.duckdb) as db:
        combined = f"""(SELECT {', '.join(columns)} FROM {db.table('old_clusters', old, columns)}
                        UNION ALL SELECT {', '.join(columns)} FROM {db.table('new_clusters', new, columns)})"""
        return _copy(db, f"""
            WITH combined AS {combined},
            sizes AS (SELECT cluster_id, count(*) AS grown FROM combined GROUP BY cluster_id)
            SELECT {', '.join('grown::BIGINT AS cluster_size' if c == 'cluster_size' else c for c in columns)}
            FROM combined JOIN sizes USING (cluster_id)
        """, Path(out))
