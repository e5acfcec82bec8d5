"""Scale of the global dedup steps: wall time, CPU time and peak RSS at millions of documents.

Usage::

    .venv/bin/python bench/dedup_scale.py [--docs 1000000,3000000,10000000] [--shard-docs 250000]
                                          [--band-parts 4] [--algorithms union_find,star]
                                          [--duckdb-memory-limit 512MB] [--smoke]

No text is involved: for N documents the bench writes per-shard sketches and band tables of the
shape `minhash_signatures` writes (`doc_id, content_hash, empty, url, fetched_at, signature`; the
band rows by `dedup.band_table`), generated in chunks of `--chunk` documents so that the generator's
memory does not grow with N. Signatures are 128 pseudo-random uint32 values (splitmix64 of the
document number), except for planted groups, whose members are spread over the shards:

- exact groups (`--exact-fraction` of the documents, groups of 3): one content hash and one
  signature per group;
- near groups (`--near-fraction`, groups of 4): each member keeps each value of its group's base
  signature with a probability drawn per member from 0.75-0.95, else a value of its own, so that
  the estimated similarity of two members is about the product of their agreements.

Then the real global steps run, each in its own process (as each is its own run, and pod, in
production), reading the files through DuckDB with `--duckdb-memory-limit`, spilling to the run's
temporary folder: `global_dedup.band_range_edges` for each of `--band-parts` band ranges, then
`global_dedup.cluster_files` once per components algorithm in `--algorithms`. For each step the
bench prints wall seconds, CPU seconds (user + system, all threads) and peak RSS (`ru_maxrss` of
that process from `os.wait4`); the dedup totals are the sum of the band ranges and the clustering
(wall and CPU) and the largest peak. Recall: the share of planted exact groups, and of planted
near groups, whose members all end up in one cluster. A least-squares line over the sizes gives
seconds and peak MiB per million documents.

Files go to a temporary folder under `$OUT` (else `bench/out/`), removed after each size;
`--smoke` runs 3,000 documents in 3 shards, in seconds. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from benchlib.paths import out_dir  # noqa: E402

from lm_assets.corpus.dedup.config import DedupConfig, DuckDBConfig  # noqa: E402
from lm_assets.corpus.dedup.minhash import MinHashConfig, lsh_params  # noqa: E402
from lm_assets.corpus.dedup.ranking import band_ranges
from lm_assets.corpus.dedup.sketches import band_table

NUM_PERM = MinHashConfig().num_perm
EXACT_GROUP = 3
NEAR_GROUP = 4


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A pseudo-random uint64 for every uint64 input (Steele et al.'s SplitMix64 finaliser)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _values(keys: np.ndarray, salt: int) -> np.ndarray:
    """(len(keys), NUM_PERM) pseudo-random values keyed by `keys`."""
    with np.errstate(over="ignore"):
        grid = keys.astype(np.uint64)[:, None] * np.uint64(NUM_PERM) + np.arange(NUM_PERM, dtype=np.uint64)
        return splitmix64(grid ^ np.uint64((salt * 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF))


class Plan:
    """Which document numbers (0..n-1) form planted groups; document j lives in shard j % shards."""

    def __init__(self, docs: int, shards: int, exact_fraction: float, near_fraction: float):
        self.docs, self.shards = docs, shards
        self.exact_end = int(docs * exact_fraction) // EXACT_GROUP * EXACT_GROUP
        self.near_end = self.exact_end + int(docs * near_fraction) // NEAR_GROUP * NEAR_GROUP

    def signatures_and_hashes(self, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        exact = j < self.exact_end
        near = (j >= self.exact_end) & (j < self.near_end)
        sigs = np.where(exact[:, None], _values(j // EXACT_GROUP, salt=2), _values(j, salt=1))
        group = (j - self.exact_end) // NEAR_GROUP
        if near.any():
            base = _values(group[near], salt=3)
            agreement = 0.75 + 0.2 * (splitmix64(j[near].astype(np.uint64) ^ np.uint64(0xA5A5)) >> np.uint64(11)) / float(1 << 53)
            coin = (_values(j[near], salt=4) >> np.uint64(11)) / float(1 << 53)
            sigs[near] = np.where(coin < agreement[:, None], base, sigs[near])
        hashes = np.where(exact, splitmix64((j // EXACT_GROUP).astype(np.uint64) ^ np.uint64(0xE8AC7)),
                          splitmix64(j.astype(np.uint64) ^ np.uint64(0xD0C)))
        return (sigs & np.uint64(0xFFFFFFFF)).astype(np.uint32), hashes

    def group_of(self, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """('exact' | 'near' | None, group number) of each document number."""
        kind = np.where(j < self.exact_end, "exact", np.where(j < self.near_end, "near", None))
        group = np.where(j < self.exact_end, j // EXACT_GROUP, (j - self.exact_end) // NEAR_GROUP)
        return kind, group


def sketches_chunk(plan: Plan, j: np.ndarray) -> pl.DataFrame:
    sigs, hashes = plan.signatures_and_hashes(j)
    numbers = pl.Series("j", j, dtype=pl.Int64)
    return pl.DataFrame({"j": numbers}).select(
        pl.format("d{}", pl.col("j").cast(pl.String).str.zfill(10)).alias("doc_id"),
        pl.Series("content_hash", hashes, dtype=pl.UInt64).cast(pl.String),
        pl.lit(False).alias("empty"),
        pl.format("https://h{}.example/p/{}", (pl.col("j") % 5003).cast(pl.String), pl.col("j").cast(pl.String))
        .alias("url"),
        pl.lit("2024-01-01T00:00:00Z").alias("fetched_at"),
        pl.Series("signature", sigs, dtype=pl.Array(pl.UInt32, NUM_PERM)),
    )


def generate(plan: Plan, folder: Path, cfg: DedupConfig, chunk: int) -> None:
    """Per shard, `sketches-NNNNN.parquet` and `bands-NNNNN.parquet`, written `chunk` documents at a time."""
    import pyarrow.parquet as pq

    for shard in range(plan.shards):
        numbers = np.arange(shard, plan.docs, plan.shards, dtype=np.int64)
        writers = {}
        for lo in range(0, len(numbers), chunk):
            sketches = sketches_chunk(plan, numbers[lo : lo + chunk])
            for name, table in (("sketches", sketches), ("bands", band_table(sketches, cfg))):
                arrow = table.to_arrow()
                if name not in writers:
                    writers[name] = pq.ParquetWriter(str(folder / f"{name}-{shard:05d}.parquet"), arrow.schema)
                writers[name].write_table(arrow)
        for writer in writers.values():
            writer.close()


def recall(plan: Plan, clusters: Path) -> dict:
    """Share of planted exact and near groups whose members all share one cluster."""
    planted = pl.scan_parquet(clusters).filter(pl.col("doc_id") < f"d{plan.near_end:010d}").select(
        "doc_id", "cluster_id"
    ).collect()
    j = planted["doc_id"].str.slice(1).cast(pl.Int64).to_numpy()
    kind, group = plan.group_of(j)
    per_group = (
        planted.with_columns(pl.Series("kind", kind, dtype=pl.String), pl.Series("group", group))
        .group_by("kind", "group")
        .agg(pl.col("cluster_id").n_unique().alias("clusters"), pl.len().alias("members"))
    )
    out = {}
    for name, size, end in (("exact", EXACT_GROUP, plan.exact_end), ("near", NEAR_GROUP, plan.near_end - plan.exact_end)):
        groups = per_group.filter(pl.col("kind") == name)
        found = groups.filter((pl.col("clusters") == 1) & (pl.col("members") == size)).height
        out[f"{name}_groups"] = end // size
        out[f"{name}_recall"] = found / (end // size) if end else None
    return out


# --- one step per process ----------------------------------------------------------------------


def step_main(args: argparse.Namespace) -> None:
    from lm_assets.corpus.dedup.global_dedup import band_range_edges, cluster_files

    folder = Path(args.folder)
    cfg = config(args, folder)
    sketches = sorted(str(p) for p in folder.glob("sketches-*.parquet"))
    if args.step == "generate":
        generate(Plan(args.n, args.shards, args.exact_fraction, args.near_fraction), folder, cfg, args.chunk)
    elif args.step == "edges":
        lo, hi = (int(x) for x in args.band_range.split("-"))
        bands = sorted(str(p) for p in folder.glob("bands-*.parquet"))
        stats = band_range_edges(bands, sketches, (lo, hi), folder / f"edges-{lo:03d}-{hi:03d}.parquet", cfg)
        print(json.dumps(stats))
    elif args.step == "clusters":
        edges = sorted(str(p) for p in folder.glob("edges-*.parquet"))
        run = cluster_files(sketches, edges, folder / f"clusters-{args.algorithm}.parquet", folder / "work", cfg,
                            algorithm=args.algorithm)
        print(json.dumps(run.stats))


def config(args: argparse.Namespace, folder: Path) -> DedupConfig:
    spill = folder / "spill"
    return DedupConfig(duckdb=DuckDBConfig(memory_limit=args.duckdb_memory_limit, temp_directory=str(spill),
                                           threads=args.threads))


def run_step(args: argparse.Namespace, folder: Path, step: str, *extra: str) -> dict:
    """Runs one step in a fresh process: its wall and CPU seconds, peak RSS (MiB) and printed stats."""
    command = [sys.executable, __file__, "--step", step, "--folder", str(folder), "--n", str(args.n),
               "--shards", str(args.shards), "--chunk", str(args.chunk),
               "--exact-fraction", str(args.exact_fraction), "--near-fraction", str(args.near_fraction),
               "--duckdb-memory-limit", args.duckdb_memory_limit, "--threads", str(args.threads), *extra]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    stdout, stderr = child.stdout.read(), child.stderr.read()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"step {step} {extra} failed:\n{stderr[-4000:]}")
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    return {
        "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024,
        "stats": json.loads(lines[-1]) if lines else {},
    }


def measure(args: argparse.Namespace, n: int, root: Path) -> dict:
    args.n = n
    args.shards = max(1, -(-n // args.shard_docs))
    folder = Path(tempfile.mkdtemp(prefix=f"dedup-scale-{n}-", dir=root))
    try:
        generated = run_step(args, folder, "generate")
        n_bands, _ = lsh_params(MinHashConfig())
        edges = [run_step(args, folder, "edges", "--band-range", f"{lo}-{hi}")
                 for lo, hi in band_ranges(n_bands, args.band_parts)]
        result = {"docs": n, "shards": args.shards, "generate": generated, "edges": edges,
                  "data_mib": sum(p.stat().st_size for p in folder.glob("*-0*.parquet")) / 2**20}
        for algorithm in args.algorithms:
            clusters = run_step(args, folder, "clusters", "--algorithm", algorithm)
            plan = Plan(n, args.shards, args.exact_fraction, args.near_fraction)
            total = {
                "wall_s": sum(e["wall_s"] for e in edges) + clusters["wall_s"],
                "cpu_s": sum(e["cpu_s"] for e in edges) + clusters["cpu_s"],
                "peak_rss_mib": max([e["peak_rss_mib"] for e in edges] + [clusters["peak_rss_mib"]]),
            }
            result[algorithm] = {"clusters": clusters, "total": total,
                                 **recall(plan, folder / f"clusters-{algorithm}.parquet")}
            report(n, algorithm, edges, clusters, total, result[algorithm])
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def report(n: int, algorithm: str, edges: list, clusters: dict, total: dict, found: dict) -> None:
    edge_wall = sum(e["wall_s"] for e in edges)
    print(
        f"N={n:>11,} {algorithm:<10} band ranges {len(edges)}: {edge_wall:8.1f} s (max RSS "
        f"{max(e['peak_rss_mib'] for e in edges):6.0f} MiB, {sum(e['stats']['verified_edges'] for e in edges):,} "
        f"verified edges) | clusters {clusters['wall_s']:7.1f} s, {clusters['peak_rss_mib']:6.0f} MiB | total "
        f"wall {total['wall_s']:8.1f} s, CPU {total['cpu_s']:8.1f} s, peak RSS {total['peak_rss_mib']:6.0f} MiB | "
        f"recall exact {found['exact_recall']}, near {found['near_recall']}",
        flush=True,
    )


def fit(results: list[dict], algorithm: str) -> dict:
    """Least-squares lines of wall seconds, CPU seconds and peak MiB against millions of documents."""
    millions = np.array([r["docs"] / 1e6 for r in results])
    out = {}
    for key in ("wall_s", "cpu_s", "peak_rss_mib"):
        values = np.array([r[algorithm]["total"][key] for r in results])
        if len(results) > 1:
            slope, intercept = np.polyfit(millions, values, 1)
        else:
            slope, intercept = values[0] / millions[0], 0.0
        out[key] = {"per_million": round(float(slope), 2), "intercept": round(float(intercept), 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", default="1000000,3000000")
    parser.add_argument("--shard-docs", type=int, default=250_000)
    parser.add_argument("--band-parts", type=int, default=4)
    parser.add_argument("--algorithms", default="union_find")
    parser.add_argument("--duckdb-memory-limit", default="512MB")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=50_000)
    parser.add_argument("--exact-fraction", type=float, default=0.03)
    parser.add_argument("--near-fraction", type=float, default=0.04)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--step", choices=["generate", "edges", "clusters"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--shards", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--band-range", help=argparse.SUPPRESS)
    parser.add_argument("--algorithm", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        step_main(args)
        return
    if args.smoke:
        args.docs, args.shard_docs, args.chunk, args.algorithms = "3000", 1000, 500, "union_find,star"
    args.algorithms = args.algorithms.split(",")
    sizes = [int(x) for x in args.docs.split(",")]
    root = out_dir() / "dedup_scale"
    root.mkdir(parents=True, exist_ok=True)
    results = [measure(args, n, root) for n in sizes]
    fits = {algorithm: fit(results, algorithm) for algorithm in args.algorithms}
    for algorithm, line in fits.items():
        print(f"fit ({algorithm}): {line['wall_s']['per_million']} wall s and {line['cpu_s']['per_million']} CPU s "
              f"per million documents; peak RSS {line['peak_rss_mib']['intercept']} MiB + "
              f"{line['peak_rss_mib']['per_million']} MiB per million")
    print(json.dumps({"results": results, "fit": fits, "settings": {k: v for k, v in vars(args).items()
                                                                    if k not in ("step", "folder", "n", "shards")}}))


if __name__ == "__main__":
    main()
