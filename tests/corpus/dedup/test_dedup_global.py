"""The bounded-memory global dedup (corpus/dedup/global_dedup.py) against the in-memory steps of corpus/dedup/clustering.py."""

import functools

import numpy as np
import polars as pl
import pytest

from lm_assets.corpus.dedup.clustering import deduplicate_sketches
from lm_assets.corpus.dedup.config import CLUSTER_SCHEMA, DedupConfig, DuckDBConfig
from lm_assets.corpus.dedup.duckdb_session import DuckDBSession
from lm_assets.corpus.dedup.global_dedup import (
    band_range_edges,
    cluster_files,
    cluster_report,
    merge_cluster_files,
    star_components,
    union_find_components,
)
from lm_assets.corpus.dedup.incremental import DedupState, deduplicate_incremental, merge_clusters
from lm_assets.corpus.dedup.ranking import band_ranges
from lm_assets.corpus.dedup.sketches import band_table, sketch_documents
from lm_assets.corpus.dedup.union_find import UnionFind
from lm_assets.storage.store import ROW_GROUP_ROWS
from tests.support.dedup_crawl import edit_words, source_pages

N_BANDS = 24


# --- components --------------------------------------------------------------------------------


def random_graph(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random edges, a long chain and two stars over shuffled node numbers 0..n-1."""
    rng = np.random.default_rng(seed)
    label = rng.permutation(n)
    chain = np.arange(0, 1500)
    star_low, star_high = np.arange(2000, 2600), np.arange(3000, 3400)
    a = np.concatenate([rng.integers(4000, n, 1500), chain[:-1], np.full(599, 2000), star_high[:-1]])
    b = np.concatenate([rng.integers(4000, n, 1500), chain[1:], star_low[1:], np.full(399, 3399)])
    order = rng.permutation(len(a))
    return label[a[order]], label[b[order]]


def in_memory_components(n: int, a: np.ndarray, b: np.ndarray) -> dict[int, int]:
    """node -> smallest node of its component, for nodes on an edge: a plain breadth-first search."""
    neighbours: dict[int, set[int]] = {}
    for x, y in zip(a.tolist(), b.tolist()):
        neighbours.setdefault(x, set()).add(y)
        neighbours.setdefault(y, set()).add(x)
    roots = {}
    for start in sorted(neighbours):
        if start in roots:
            continue
        todo, seen = [start], {start}
        while todo:
            for other in neighbours[todo.pop()] - seen:
                seen.add(other)
                todo.append(other)
        for node in seen:
            roots[node] = start
    smallest = {}
    for node in np.unique(np.concatenate([a, b])).tolist():
        smallest[roots[node]] = min(smallest.get(roots[node], node), node)
    return {node: smallest[roots[node]] for node in np.unique(np.concatenate([a, b])).tolist()}


def as_mapping(path) -> dict[int, int]:
    frame = pl.read_parquet(path)
    assert frame["node"].n_unique() == frame.height
    return dict(zip(frame["node"].to_list(), frame["component"].to_list()))


@pytest.mark.parametrize("seed", [0, 1])
def test_out_of_core_components_equal_in_memory_union_find(tmp_path, seed):
    n = 6000
    a, b = random_graph(n, seed)
    expected = in_memory_components(n, a, b)
    assert max(list(expected.values()).count(c) for c in set(expected.values())) >= 1500  # the chain is whole
    pl.DataFrame({"a": a, "b": b}).write_parquet(tmp_path / "pairs.parquet")
    pairs = f"read_parquet('{tmp_path / 'pairs.parquet'}')"
    with DuckDBSession(DuckDBConfig(temp_directory=str(tmp_path / "spill"))) as db:
        union_find_components(pairs, n, db, tmp_path, tmp_path / "uf.parquet")
        stats = star_components(pairs, db, tmp_path / "star.parquet")
    assert as_mapping(tmp_path / "uf.parquet") == expected
    assert as_mapping(tmp_path / "star.parquet") == expected
    assert stats["rounds"] > 2

    # Edges in many small batches over a parent array read in small chunks.
    sets = UnionFind(n, tmp_path / "parents.int", chunk=1000)
    for lo in range(0, len(a), 97):
        sets.union(a[lo : lo + 97], b[lo : lo + 97])
    sets.flatten()
    pieces = list(sets.members())
    nodes = np.concatenate([p[0] for p in pieces])
    roots = np.concatenate([p[1] for p in pieces])
    assert dict(zip(nodes.tolist(), roots.tolist())) == expected
    assert sets.bytes_per_document == 4


# --- the sample crawl, whole and by band range ---------------------------------------------------


@functools.cache
def sample_crawl_docs() -> pl.DataFrame:
    """The sample crawl's ordinary pages, an exact copy of every seventh and an edited copy of every fifth."""
    pages = source_pages()
    rows = [(p.url, p.text, p.lang, p.url, "2024-03-01T00:00:00Z") for p in pages]
    rows += [(p.url + "#copy", p.text, p.lang, p.url.replace("https://", "http://mirror."), "2024-03-02T00:00:00Z")
             for p in pages[::7]]
    rows += [(p.url + "#edit", edit_words(p.text, 0.03, i), p.lang, p.url + "?print=1", "2024-03-03T00:00:00Z")
             for i, p in enumerate(pages[::5])]
    return pl.DataFrame(rows, schema=["doc_id", "text", "lang", "url", "fetched_at"], orient="row")


def write_shards(frame: pl.DataFrame, folder, name: str, shards: int = 3) -> list[str]:
    """The frame cut into `shards` parquet files, rows dealt round-robin."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard in range(shards):
        path = folder / f"{name}-{shard}.parquet"
        # Row groups as the project's storage writes them (a reader decodes a row group's column at once).
        frame.filter(pl.int_range(pl.len()) % shards == shard).write_parquet(path, row_group_size=ROW_GROUP_ROWS)
        paths.append(str(path))
    return paths


def run_by_band_range(sketches, bands, folder, band_parts: int, algorithm: str = "union_find",
                      cfg: DedupConfig | None = None) -> pl.DataFrame:
    edges = []
    for lo, hi in band_ranges(N_BANDS, band_parts):
        out = folder / f"edges-{band_parts}-{lo}-{hi}.parquet"
        band_range_edges(bands, sketches, (lo, hi), out, cfg)
        edges.append(out)
    run = cluster_files(sketches, edges, folder / f"clusters-{band_parts}-{algorithm}.parquet", folder / "work", cfg,
                        algorithm=algorithm)
    return pl.read_parquet(run.clusters).sort("doc_id")


def test_band_partitioned_run_equals_the_unpartitioned_one_on_the_sample_crawl(tmp_path):
    sketches = sketch_documents(sample_crawl_docs())
    bands = band_table(sketches)
    expected = deduplicate_sketches(sketches, bands).clusters.sort("doc_id")
    removed = expected.filter(~pl.col("kept"))["reason"].value_counts()
    assert set(removed["reason"]) == {"exact_duplicate", "near_duplicate"}
    sketch_files = write_shards(sketches, tmp_path, "sketches")
    band_files = write_shards(bands, tmp_path, "bands")
    for band_parts, algorithm in ((1, "union_find"), (4, "union_find"), (3, "star")):
        clusters = run_by_band_range(sketch_files, band_files, tmp_path, band_parts, algorithm)
        assert clusters.schema == expected.schema
        assert clusters.equals(expected), (band_parts, algorithm)


def test_incremental_dedup_after_repartitioning_gives_the_same_decisions(tmp_path):
    docs = sample_crawl_docs()
    sketches = sketch_documents(docs)
    old_ids = docs.filter(pl.int_range(pl.len()) % 2 == 0)["doc_id"]
    old, new = sketches.filter(pl.col("doc_id").is_in(old_ids.implode())), sketches.filter(
        ~pl.col("doc_id").is_in(old_ids.implode())
    )
    old_sketches, old_bands = write_shards(old, tmp_path, "old-sketches"), write_shards(band_table(old), tmp_path, "old-bands")
    new_bands = band_table(new)
    old_clusters = run_by_band_range(old_sketches, old_bands, tmp_path, band_parts=2)
    old_clusters.write_parquet(tmp_path / "old-clusters.parquet")
    state = DedupState(sketches=old_sketches, bands=old_bands, clusters=tmp_path / "old-clusters.parquet")
    expected = deduplicate_incremental(new, new_bands, state).clusters.sort("doc_id")
    assert expected.filter(~pl.col("kept") & pl.col("kept_doc_id").is_in(old_ids.implode())).height > 5

    for band_parts in (3, 5):
        edges = []
        for lo, hi in band_ranges(N_BANDS, band_parts):
            out = tmp_path / f"new-edges-{band_parts}-{lo}.parquet"
            band_range_edges(new_bands, new, (lo, hi), out, old_bands=old_bands, old_sketches=old_sketches)
            edges.append(pl.read_parquet(out))
        result = deduplicate_incremental(new, None, state, edges=pl.concat(edges))
        assert result.clusters.sort("doc_id").equals(expected), band_parts


# --- spilling ------------------------------------------------------------------------------------


def synthetic_sketches(n: int, seed: int) -> pl.DataFrame:
    """Random signatures; every tenth document is an exact copy of the one before, every tenth a near copy."""
    rng = np.random.default_rng(seed)
    sigs = rng.integers(0, 2**32, (n, 128), dtype=np.uint32)
    hashes = np.arange(n).astype(str).astype(object)
    copies = np.arange(10, n, 10)
    sigs[copies] = sigs[copies - 1]
    hashes[copies] = hashes[copies - 1]
    near = np.arange(15, n, 10)
    changed = rng.random((len(near), 128)) < 0.15
    sigs[near] = np.where(changed, sigs[near] + 1, sigs[near - 1])
    return pl.DataFrame({
        "doc_id": [f"doc-{i:07d}" for i in range(n)],
        "content_hash": hashes.tolist(),
        "empty": np.zeros(n, dtype=bool),
        "url": [f"https://site{i % 97}.example/{i}" for i in range(n)],
        "fetched_at": ["2024-01-01"] * n,
        "signature": pl.Series(sigs, dtype=pl.Array(pl.UInt32, 128)),
    })


def test_a_memory_limit_far_below_the_data_completes_by_spilling(tmp_path):
    sketches = synthetic_sketches(200_000, seed=3)
    sketch_files = write_shards(sketches, tmp_path, "sketches", shards=2)
    band_files = write_shards(band_table(sketches), tmp_path, "bands", shards=2)
    # DuckDB 2.0 needs about 40 MB for itself here; the data is over four times the limit.
    assert sketches.estimated_size() + band_table(sketches).estimated_size() > 4 * 48 * 2**20
    tight = DedupConfig(duckdb=DuckDBConfig(memory_limit="48MB", temp_directory=str(tmp_path / "spill"), threads=1))
    clusters = run_by_band_range(sketch_files, band_files, tmp_path, band_parts=2, cfg=tight)
    assert clusters.height == sketches.height
    assert clusters.filter(pl.col("reason") == "exact_duplicate").height == 19_999
    assert clusters.filter(pl.col("reason") == "near_duplicate").height == 19_999


def report_frames():
    clusters = pl.DataFrame({
        "doc_id": ["a", "b", "c", "d", "e", "f"],
        "cluster_id": ["a", "a", "c", "d", "d", "d"],
        "cluster_size": [2, 2, 1, 3, 3, 3],
        "kept": [True, False, True, True, False, False],
        "reason": [None, "exact_duplicate", None, None, "near_duplicate", "near_duplicate"],
    })
    sketches = pl.DataFrame({
        "doc_id": ["a", "b", "c", "d", "e", "f"],
        "content_hash": ["h1", "h1", "h2", "h3", "h4", "h5"],
        "source": ["s1", "s1", "s1", "s2", "s2", "s2"],
        "url": [f"https://x.example/{d}" for d in "abcdef"],
    })
    return clusters, sketches


def test_the_cluster_report_counts_and_checks_through_duckdb():
    clusters, sketches = report_frames()
    report = cluster_report(clusters, sketches)
    assert (report["documents"], report["kept"], report["exact_duplicates"], report["near_duplicates"]) == (6, 3, 1, 2)
    assert report["dup_rate"] == 0.5 and report["cluster_size_histogram"] == {"1": 1, "2": 1, "3-4": 1}
    assert not any(report["problems"].values()) and report["kept_sharing_a_hash"] == 0
    assert report["per_shard"].rows() == [("s1", 3, 1, 0.3333), ("s2", 3, 2, 0.6667)]
    assert report["largest"]["cluster_id"].to_list() == ["d", "a"]
    assert report["largest"]["sample_urls"][0] == "https://x.example/d  https://x.example/e  https://x.example/f"

    broken = pl.concat([clusters, pl.DataFrame({
        "doc_id": ["c", "g"], "cluster_id": ["c", "c"], "cluster_size": [1, 1], "kept": [True, True], "reason": [None, None],
    })])
    unsketched = sketches.with_columns(
        pl.when(pl.col("doc_id") == "c").then(pl.lit("h1")).otherwise("content_hash").alias("content_hash")
    ).vstack(pl.DataFrame({"doc_id": ["h"], "content_hash": ["h9"], "source": ["s2"], "url": ["https://x.example/h"]}))
    bad = cluster_report(broken, unsketched)
    assert bad["problems"] == {
        "duplicate_rows": 1, "clusters_not_keeping_one": 1, "wrong_cluster_size": 1,
        "documents_without_cluster": 1, "rows_without_sketch": 1,
    }
    assert bad["kept_sharing_a_hash"] == 2  # c twice and a share h1


def test_the_cluster_report_of_a_corpus_that_kept_nothing_counts_zeros():
    clusters, sketches = (frame.clear() for frame in report_frames())
    report = cluster_report(clusters, sketches)
    assert (report["documents"], report["kept"], report["exact_duplicates"], report["near_duplicates"]) == (0, 0, 0, 0)
    assert report["problems"] == {
        "duplicate_rows": 0, "clusters_not_keeping_one": 0, "wrong_cluster_size": 0,
        "documents_without_cluster": 0, "rows_without_sketch": 0,
    }


def test_merging_cluster_files_equals_merging_in_memory(tmp_path):
    old, _ = report_frames()
    new = pl.DataFrame({
        "doc_id": ["g", "h"], "cluster_id": ["a", "h"], "cluster_size": [3, 1], "kept": [False, True],
        "reason": ["near_duplicate", None], "kept_doc_id": ["a", "h"],
    })
    old = old.with_columns(pl.when(pl.col("kept")).then("doc_id").otherwise("cluster_id").alias("kept_doc_id"))
    old.write_parquet(tmp_path / "old.parquet")
    rows = merge_cluster_files(tmp_path / "old.parquet", new, tmp_path / "merged.parquet")
    merged = pl.read_parquet(tmp_path / "merged.parquet")
    assert rows == 8 and merged.schema == CLUSTER_SCHEMA
    assert merged.sort("doc_id").equals(merge_clusters(old, new).sort("doc_id"))
    assert merged.filter(pl.col("cluster_id") == "a")["cluster_size"].to_list() == [3, 3, 3]


def test_incremental_round_from_sketch_files_equals_the_one_from_frames(tmp_path):
    """The incremental round reads the new sketches from their parquet files as it reads the old ones."""
    docs = sample_crawl_docs()
    sketches = sketch_documents(docs)
    old_ids = docs.filter(pl.int_range(pl.len()) % 3 == 0)["doc_id"]
    old = sketches.filter(pl.col("doc_id").is_in(old_ids.implode()))
    new = sketches.filter(~pl.col("doc_id").is_in(old_ids.implode()))
    old_sketches, old_bands = write_shards(old, tmp_path, "old-sketches"), write_shards(band_table(old), tmp_path, "old-bands")
    run_by_band_range(old_sketches, old_bands, tmp_path, band_parts=2).write_parquet(tmp_path / "old-clusters.parquet")
    state = DedupState(sketches=old_sketches, bands=old_bands, clusters=tmp_path / "old-clusters.parquet")
    new_bands = band_table(new)
    edges = tmp_path / "new-edges.parquet"
    band_range_edges(new_bands, new, (0, N_BANDS), edges, old_bands=old_bands, old_sketches=old_sketches)
    from_frames = deduplicate_incremental(new, None, state, edges=[edges]).clusters
    from_files = deduplicate_incremental(write_shards(new, tmp_path, "new-sketches"), None, state, edges=[edges]).clusters
    assert from_files.sort("doc_id").equals(from_frames.sort("doc_id"))
    assert from_files.filter(~pl.col("kept") & pl.col("kept_doc_id").is_in(old_ids.implode())).height > 3
