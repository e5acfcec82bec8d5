"""Speed and memory of our MinHash dedup: signature throughput against datasketch and datatrove, and scaling.

Usage::

    .venv/bin/python bench/dedup_speed.py [--crawl DIR] [--max-docs N] [--replicas 1,4,16] [--smoke]

The documents are the extracted texts of a crawl (`bench/build_crawl.py`): `readers.read_shard`, then
`extract.extract_documents`, then `langid.identify_languages` (its kept en and zh documents, with
their `lang`), in shard order, at most `--max-docs` of them (default 2000). Without `--crawl`, the
crawl in `$OUT/dev-crawl` (else `bench/out/dev-crawl`) is built or reused exactly as
`bench/curation.py` does it. `--smoke` runs in seconds, offline: 30 documents of the test slice
(`benchlib.paths.smoke_crawl`), replicated 1x and 2x, one repeat.

What is measured:

1. Signature throughput, in this process, on the same documents, single-threaded (OMP, OpenBLAS,
   MKL, ... limited to one thread before numpy loads). CPU time is `time.process_time()`; each side
   is warmed up on a few documents first and timed `--repeats` times, and the best run counts.
   Figures are docs per CPU-second, i.e. docs/s per core.
   - ours: `minhash.signatures` over batches of `DedupConfig.signature_batch` documents, as
     `dedup.sketch_documents` calls it; also the whole of pipeline step 1 (`sketch_documents`, which
     adds the content hash, and `band_table`), for reference.
   - datasketch: one `MinHash(num_perm, seed, hashfunc=shingle_hash, scheme)` per document with our
     `MinHashConfig`'s values, fed `minhash.shingles(text, lang)` through `update_batch`: the same
     shingles and the same work per document, one document at a time. Its hash values must equal
     our signatures; the output says whether they do.
   - datatrove 0.10.1: the `MinhashDedupSignature` stage (`run` over `Document`s, in this process),
     with `MinhashConfig(n_grams=5, num_buckets=32, hashes_per_bucket=4)`, i.e. 128 hashes, as our
     128 permutations; its other settings (64-bit xxhash, English spaCy word tokenizer for every
     document) are its defaults. It writes and sorts its per-bucket signature files in a temporary
     folder, which is part of the stage and of its time.

2. Whole-dedup scaling. The documents are replicated 1x, 4x, 16x (`--replicas`): replica 0 is the
   documents as they are, every other replica gets new doc_ids and has 1-5% of each document's
   units (words; characters for zh/ja/ko) replaced by units drawn from the same document, with a
   seeded RNG. Each replica count runs in a fresh subprocess, so that its peak RSS is its own
   (`VmHWM` of /proc/self/status, which starts afresh at exec; on Linux `ru_maxrss` carries the
   parent's peak over fork + exec, so it is only the fallback). The run takes the staged path the
   pipeline uses: per shard of `--shard-docs` documents, `sketch_documents` and `band_table`
   written as parquet files; then `rank_documents`, `candidate_edges` (per band range,
   `--band-parts`) on the exact-group representatives, `verify_edges` and `cluster_documents`
   reading those files, with DuckDB under `--duckdb-memory-limit` and spilling to the run's
   temporary folder. Making the replicas (the perturbation) is timed apart and is not part of the
   dedup wall time, but its memory is in the peak RSS (at most one shard of texts at a time).
   Besides the peak of the whole run, the peak of each global step is read on its own (VmHWM
   restarted through /proc/self/clear_refs before each step; the texts are freed first), and the
   RSS before any work (interpreter and imports) is printed as the baseline.
   A least-squares line RSS = a + b * docs over the runs gives the projected peak RSS at 1M
   documents, compared with 2 GiB, for the whole run's peak and for the global steps' peak.
   Growth is called sub-linear when the marginal RSS per document falls from the first pair of
   runs to the last (1x->4x against 4x->16x by default); the log-log exponent of RSS above the
   baseline is printed too, but a fixed per-shard sketching peak makes it look small on small runs.

The last line printed is one JSON object holding every figure.
"""

from __future__ import annotations

import os

# One thread for numerical libraries, set before numpy is imported; the scaling subprocesses inherit it.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from benchlib.crawls import resolve_crawl  # noqa: E402
from benchlib.documents import load_documents, text_mb  # noqa: E402
from benchlib.paths import command_line  # noqa: E402
from benchlib.timing import Clock, rate, timed  # noqa: E402
from curation import quiet_datatrove_logs  # noqa: E402

from lm_assets.corpus.dedup.clustering import cluster_documents
from lm_assets.corpus.dedup.config import DedupConfig, DuckDBConfig
from lm_assets.corpus.dedup.decisions import dedup_stats
from lm_assets.corpus.dedup.minhash import MinHashConfig, lsh_params, shingle_hash, shingles, signatures  # noqa: E402
from lm_assets.corpus.dedup.ranking import (
    band_ranges,
    candidate_edges,
    exact_representatives,
    rank_documents,
    verify_edges,
)
from lm_assets.corpus.dedup.sketches import band_table, sketch_documents
from lm_assets.text import is_cjk_lang  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
GOAL_DOCS_PER_CORE_S = 5000
PROJECTED_DOCS = 1_000_000
RSS_BUDGET_MIB = 2048
WARM_UP_DOCS = 50
# datatrove's hashes: num_buckets x hashes_per_bucket = 128, as our num_perm.
DATATROVE_BUCKETS, DATATROVE_HASHES_PER_BUCKET, DATATROVE_NGRAMS = 32, 4, 5
EDIT_RATE = (0.01, 0.05)
WORD_SPLIT = re.compile(r"(\s+)")


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------


def describe_documents(docs: pl.DataFrame) -> dict:
    return {
        "docs": docs.height,
        "by_language": dict(docs["lang"].value_counts(sort=True).iter_rows()),
        "text_mb": round(text_mb(docs["text"].to_list()), 3),
        "mean_chars": round(float(docs["text"].str.len_chars().mean()), 1),
    }


# ---------------------------------------------------------------------------------------------
# Part 1: signature throughput
# ---------------------------------------------------------------------------------------------


def best_of(repeats: int, work) -> tuple[Clock, object]:
    """CPU and wall time of the run with the least CPU time, and that run's result."""
    best, result = None, None
    for _ in range(repeats):
        clock = Clock()
        with timed(clock):
            result = work()
        if best is None or clock.cpu_s < best.cpu_s:
            best = clock
    return best, result


def ours_signatures(texts: list[str], langs: list[str], cfg: DedupConfig) -> np.ndarray:
    """`signatures` in batches of `signature_batch`, as `sketch_documents` runs it."""
    step = cfg.signature_batch
    batches = [signatures(texts[i : i + step], langs[i : i + step], cfg.minhash) for i in range(0, len(texts), step)]
    return np.concatenate(batches)


def ours_step_one(docs: pl.DataFrame, cfg: DedupConfig) -> int:
    """Pipeline step 1: sketches (content hash, keep-rule columns, signature) and the band table."""
    return band_table(sketch_documents(docs, cfg), cfg).height


def datasketch_signatures(texts: list[str], langs: list[str], cfg: MinHashConfig) -> np.ndarray:
    """One datasketch MinHash per document over our shingles and shingle hash."""
    from datasketch import MinHash

    rows = []
    for text, lang in zip(texts, langs, strict=True):
        sketch = MinHash(num_perm=cfg.num_perm, seed=cfg.seed, hashfunc=shingle_hash, scheme=cfg.scheme)
        sketch.update_batch(shingles(text, lang, cfg))
        rows.append(sketch.hashvalues)
    return np.array(rows)


def datatrove_stage(output_folder: str):
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature

    config = MinhashConfig(
        n_grams=DATATROVE_NGRAMS, num_buckets=DATATROVE_BUCKETS, hashes_per_bucket=DATATROVE_HASHES_PER_BUCKET
    )
    return MinhashDedupSignature(output_folder=output_folder, config=config)


def run_datatrove_stage(stage, texts: list[str]) -> int:
    """The stage's `run` over fresh Documents: signatures, then its sorted per-bucket files."""
    from datatrove.data import Document

    stage.run(iter(Document(text=text, id=str(i)) for i, text in enumerate(texts)), rank=0, world_size=1)
    return len(texts)


def throughput(name: str, docs: int, mb: float, clock: Clock) -> dict:
    return {
        "side": name,
        "docs": docs,
        "cpu_s": round(clock.cpu_s, 3),
        "wall_s": round(clock.wall_s, 3),
        "docs_per_core_s": round(rate(docs, clock.cpu_s) or 0.0, 1),
        "text_mb_per_core_s": round(rate(mb, clock.cpu_s) or 0.0, 3),
    }


def signature_benchmark(docs: pl.DataFrame, repeats: int) -> dict:
    cfg = DedupConfig()
    texts, langs = docs["text"].to_list(), docs["lang"].to_list()
    mb = text_mb(texts)
    warm_texts, warm_langs = texts[:WARM_UP_DOCS], langs[:WARM_UP_DOCS]

    ours_signatures(warm_texts, warm_langs, cfg)
    ours_step_one(docs.head(WARM_UP_DOCS), cfg)
    lsh_params(cfg.minhash)
    ours_clock, ours = best_of(repeats, lambda: ours_signatures(texts, langs, cfg))
    print(f"  ours: {rate(len(texts), ours_clock.cpu_s):,.0f} docs/s/core", flush=True)
    step_clock, _ = best_of(repeats, lambda: ours_step_one(docs, cfg))

    datasketch_signatures(warm_texts, warm_langs, cfg.minhash)
    datasketch_clock, theirs = best_of(repeats, lambda: datasketch_signatures(texts, langs, cfg.minhash))
    print(f"  datasketch: {rate(len(texts), datasketch_clock.cpu_s):,.0f} docs/s/core", flush=True)

    with tempfile.TemporaryDirectory(prefix="dedup-speed-datatrove-") as folder:
        stage = datatrove_stage(folder)
        run_datatrove_stage(stage, warm_texts)
        datatrove_clock, _ = best_of(repeats, lambda: run_datatrove_stage(stage, texts))
    print(f"  datatrove: {rate(len(texts), datatrove_clock.cpu_s):,.0f} docs/s/core", flush=True)

    sides = {
        "ours": throughput("ours: minhash.signatures", len(texts), mb, ours_clock),
        "ours_step1": throughput("ours: sketch_documents + band_table", len(texts), mb, step_clock),
        "datasketch": throughput("datasketch: MinHash per document", len(texts), mb, datasketch_clock),
        "datatrove": throughput("datatrove: MinhashDedupSignature", len(texts), mb, datatrove_clock),
    }
    ours_rate = sides["ours"]["docs_per_core_s"]
    return {
        "repeats": repeats,
        "num_perm": cfg.minhash.num_perm,
        "datatrove_config": {
            "n_grams": DATATROVE_NGRAMS,
            "num_buckets": DATATROVE_BUCKETS,
            "hashes_per_bucket": DATATROVE_HASHES_PER_BUCKET,
        },
        "sides": sides,
        "ours_over_datasketch": _ratio(ours_rate, sides["datasketch"]["docs_per_core_s"]),
        "ours_over_datatrove": _ratio(ours_rate, sides["datatrove"]["docs_per_core_s"]),
        "identical_to_datasketch": bool(np.array_equal(ours, theirs)),
        "goal_docs_per_core_s": GOAL_DOCS_PER_CORE_S,
        "goal_met": ours_rate >= GOAL_DOCS_PER_CORE_S,
    }


def _ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 2) if theirs else None


# ---------------------------------------------------------------------------------------------
# Part 2: whole-dedup scaling (each replica count in its own subprocess)
# ---------------------------------------------------------------------------------------------


def perturb(text: str, lang: str | None, rng: np.random.Generator) -> str:
    """The text with 1-5% of its units replaced by units of the same text (at least one)."""
    if is_cjk_lang(lang):
        pieces = list(text)
        units = [i for i, char in enumerate(pieces) if not char.isspace()]
    else:
        pieces = WORD_SPLIT.split(text)
        units = list(range(0, len(pieces), 2))
        units = [i for i in units if pieces[i]]
    if not units:
        return text
    edits = max(1, round(rng.uniform(*EDIT_RATE) * len(units)))
    targets = rng.choice(units, size=min(edits, len(units)), replace=False)
    sources = rng.choice(units, size=len(targets))
    for target, source in zip(targets.tolist(), sources.tolist()):
        pieces[target] = pieces[source]
    return "".join(pieces)


def replica(shard: pl.DataFrame, number: int, seed: int, shard_number: int) -> pl.DataFrame:
    """Replica 0 is the shard as it is; others get new doc_ids and perturbed texts."""
    if number == 0:
        return shard
    rng = np.random.default_rng([seed, number, shard_number])
    texts = [perturb(text, lang, rng) for text, lang in shard.select("text", "lang").iter_rows()]
    return shard.with_columns(
        (pl.col("doc_id") + f"~r{number}").alias("doc_id"), pl.Series("text", texts, dtype=pl.String)
    )


def current_rss_mib() -> float:
    return _status_kb("VmRSS") / 1024


def peak_rss_mib() -> float:
    """This process's peak RSS: VmHWM, which starts afresh at exec; ru_maxrss where /proc is missing.

    On Linux `ru_maxrss` survives fork + exec, so a child would report its parent's peak if larger.
    """
    try:
        return _status_kb("VmHWM") / 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _status_kb(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE).group(1))


def sketch_shards(base: pl.DataFrame, spec: dict, work: Path, cfg: DedupConfig) -> tuple[int, int, Clock, Clock]:
    """Step 1 per shard, written as parquet. Returns docs, shards, perturbation time, sketch time."""
    perturb_clock, sketch_clock, docs, shards = Clock(), Clock(), 0, 0
    for number in range(spec["replicas"]):
        for shard_number, lo in enumerate(range(0, base.height, spec["shard_docs"])):
            with timed(perturb_clock):
                shard = replica(base.slice(lo, spec["shard_docs"]), number, spec["seed"], shard_number)
            with timed(sketch_clock):
                sketches = sketch_documents(shard, cfg)
                sketches.write_parquet(work / f"sketches-{number:03d}-{shard_number:04d}.parquet")
                band_table(sketches, cfg).write_parquet(work / f"bands-{number:03d}-{shard_number:04d}.parquet")
            docs += shard.height
            shards += 1
            del shard, sketches
    return docs, shards, perturb_clock, sketch_clock


def reset_peak_rss() -> bool:
    """Restart VmHWM from the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class StepPeaks:
    """Peak RSS of each step, VmHWM being restarted before it (cumulative peaks where it cannot be)."""

    def __init__(self):
        self.peaks: dict[str, float] = {}
        self.apart = True

    @contextmanager
    def step(self, name: str):
        self.apart = reset_peak_rss() and self.apart
        try:
            yield
        finally:
            self.peaks[name] = round(peak_rss_mib(), 1)


def global_steps(work: Path, cfg: DedupConfig, band_parts: int, meter: StepPeaks) -> tuple[pl.DataFrame, dict]:
    """Steps 2-5 over the parquet files: ranks, LSH candidates, verification, clusters."""
    sketches, bands = str(work / "sketches-*.parquet"), str(work / "bands-*.parquet")
    with meter.step("rank"):
        ranked = rank_documents(sketches, cfg.duckdb)
        members = exact_representatives(ranked)
    n_bands, _ = lsh_params(cfg.minhash)
    with meter.step("candidates"):
        parts = [
            candidate_edges(bands, band_range, members=members, duckdb_cfg=cfg.duckdb)
            for band_range in band_ranges(n_bands, band_parts)
        ]
        candidates = pl.concat(parts).unique()
    with meter.step("verify"):
        verified = verify_edges(candidates, sketches, cfg.effective_verify_threshold)
    with meter.step("cluster"):
        clusters = cluster_documents(ranked, verified, sketches, cfg.effective_verify_threshold)
    return clusters, {"candidate_edges": candidates.height, "verified_edges": verified.height}


def scaling_child(spec: dict) -> dict:
    """One replica count, in this (fresh) process; returns its figures."""
    baseline = peak_rss_mib()
    base = pl.read_parquet(spec["base"])
    work = Path(spec["work"])
    cfg = DedupConfig(
        duckdb=DuckDBConfig(memory_limit=spec["duckdb_memory_limit"], temp_directory=str(work / "duckdb-spill"))
    )
    docs, shards, perturb_clock, sketch_clock = sketch_shards(base, spec, work, cfg)
    sketch_peak = peak_rss_mib()
    # The global steps read parquet only, as a separate process of the pipeline would.
    del base
    gc.collect()
    before_global = current_rss_mib()
    meter, global_clock = StepPeaks(), Clock()
    with timed(global_clock):
        clusters, edges = global_steps(work, cfg, spec["band_parts"], meter)
    global_peak = max(meter.peaks.values())
    stats = dedup_stats(clusters)
    dedup = sketch_clock + global_clock
    return {
        "replicas": spec["replicas"],
        "docs": docs,
        "shards": shards,
        "wall_s": round(dedup.wall_s, 3),
        "cpu_s": round(dedup.cpu_s, 3),
        "sketch_wall_s": round(sketch_clock.wall_s, 3),
        "global_wall_s": round(global_clock.wall_s, 3),
        "perturb_wall_s": round(perturb_clock.wall_s, 3),
        "docs_per_wall_s": round(rate(docs, dedup.wall_s) or 0.0, 1),
        "baseline_rss_mib": round(baseline, 1),
        "sketch_peak_rss_mib": round(sketch_peak, 1),
        "global_peak_rss_mib": round(global_peak, 1),
        "global_step_peaks_mib": meter.peaks,
        "global_peaks_measured_apart": meter.apart,
        "rss_before_global_mib": round(before_global, 1),
        "global_rss_growth_mib": round(global_peak - before_global, 1),
        "peak_rss_mib": round(max(sketch_peak, global_peak), 1),
        "parquet_mb": round(sum(p.stat().st_size for p in work.glob("*.parquet")) / 1e6, 3),
        **edges,
        "kept": stats["kept"],
        "exact_duplicates": stats["exact_duplicates"],
        "near_duplicates": stats["near_duplicates"],
    }


def run_scaling(base: pl.DataFrame, args: argparse.Namespace) -> list[dict]:
    runs = []
    with tempfile.TemporaryDirectory(prefix="dedup-speed-") as tmp:
        base_path = Path(tmp) / "base.parquet"
        base.write_parquet(base_path)
        for replicas in args.replicas:
            work = Path(tmp) / f"replicas-{replicas}"
            work.mkdir()
            spec = {
                "base": str(base_path),
                "work": str(work),
                "replicas": replicas,
                "seed": args.seed,
                "shard_docs": args.shard_docs,
                "band_parts": args.band_parts,
                "duckdb_memory_limit": args.duckdb_memory_limit,
            }
            print(f"  {replicas}x: {replicas * base.height} docs in a fresh process...", flush=True)
            runs.append(run_child(spec))
    for run in runs:
        run["rss_per_1k_docs_mib"] = round(run["peak_rss_mib"] / run["docs"] * 1000, 2)
    return runs


def run_child(spec: dict) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child-spec", json.dumps(spec)]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {spec['replicas']}x run exited with {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def memory_fit(runs: list[dict], key: str = "peak_rss_mib") -> dict:
    """RSS = a + b * docs by least squares over the runs' `key`, its value at 1M docs, and how it grows.

    Growth is sub-linear when the marginal RSS per document falls from the first pair of runs to the
    last (with only two runs: when the log-log exponent of RSS above the baseline is below 1).
    """
    runs = sorted(runs, key=lambda run: run["docs"])
    docs = np.array([run["docs"] for run in runs], dtype=np.float64)
    rss = np.array([run[key] for run in runs])
    fit = {"rss": key, "points": len(runs)}
    if len(set(docs.tolist())) < 2:
        return fit | {"note": "needs at least two replica counts"}
    slope, intercept = np.polyfit(docs, rss, 1)
    projected = intercept + slope * PROJECTED_DOCS
    above = np.maximum(rss - np.array([run["baseline_rss_mib"] for run in runs]), 1e-3)
    exponent = float(np.polyfit(np.log(docs), np.log(above), 1)[0])
    marginal = [
        round(float((rss[i + 1] - rss[i]) / (docs[i + 1] - docs[i]) * 1000), 3)
        for i in range(len(runs) - 1)
        if docs[i + 1] > docs[i]
    ]
    sub_linear = marginal[-1] < marginal[0] if len(marginal) > 1 else exponent < 1.0
    return fit | {
        "intercept_mib": round(float(intercept), 1),
        "slope_mib_per_1k_docs": round(float(slope) * 1000, 3),
        "projected_docs": PROJECTED_DOCS,
        "projected_rss_mib": round(float(projected), 1),
        "budget_mib": RSS_BUDGET_MIB,
        "within_budget": bool(projected <= RSS_BUDGET_MIB),
        "marginal_mib_per_1k_docs": marginal,
        "exponent_above_baseline": round(exponent, 3),
        "sub_linear": bool(sub_linear),
    }


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def print_signatures(report: dict, documents: dict) -> None:
    print()
    print(
        f"signature throughput: {documents['docs']} documents {documents['by_language']}, "
        f"{documents['text_mb']:.1f} MB of text ({documents['mean_chars']:.0f} chars/doc), "
        f"{report['num_perm']} hashes, best of {report['repeats']}, single-threaded"
    )
    header = f"{'side':<40} {'CPU s':>8} {'wall s':>8} {'docs/s/core':>12} {'MB/s/core':>10}"
    print(header)
    print("-" * len(header))
    for row in report["sides"].values():
        print(
            f"{row['side']:<40} {row['cpu_s']:>8.2f} {row['wall_s']:>8.2f} "
            f"{row['docs_per_core_s']:>12,.0f} {row['text_mb_per_core_s']:>10.2f}"
        )
    ours = report["sides"]["ours"]["docs_per_core_s"]
    print(f"ours/datasketch: {report['ours_over_datasketch']}x   ours/datatrove: {report['ours_over_datatrove']}x")
    print(f"our signatures equal datasketch's hash values: {report['identical_to_datasketch']}")
    verdict = "met" if report["goal_met"] else "not met"
    print(f"goal >= {GOAL_DOCS_PER_CORE_S:,} docs/s/core for ours: {verdict} ({ours:,.0f})")


def print_scaling(runs: list[dict], fits: dict[str, dict]) -> None:
    print()
    print("whole dedup (staged, parquet + DuckDB), one fresh process per replica count")
    header = (
        f"{'replicas':>8} {'docs':>7} {'shards':>6} {'wall s':>7} {'sketch':>7} {'global':>7} {'CPU s':>7} "
        f"{'docs/s':>7} {'peak RSS MiB':>12} {'MiB/1k docs':>11} {'sketch MiB':>10} {'global MiB':>10} "
        f"{'global +':>8} {'edges':>7} {'kept':>6}"
    )
    print(header)
    print("-" * len(header))
    for run in runs:
        print(
            f"{run['replicas']:>8} {run['docs']:>7} {run['shards']:>6} {run['wall_s']:>7.2f} "
            f"{run['sketch_wall_s']:>7.2f} {run['global_wall_s']:>7.2f} {run['cpu_s']:>7.2f} "
            f"{run['docs_per_wall_s']:>7,.0f} {run['peak_rss_mib']:>12.1f} {run['rss_per_1k_docs_mib']:>11.2f} "
            f"{run['sketch_peak_rss_mib']:>10.1f} {run['global_peak_rss_mib']:>10.1f} "
            f"{run['global_rss_growth_mib']:>8.1f} {run['verified_edges']:>7} {run['kept']:>6}"
        )
    print(
        "wall s = sketch (per-shard sketches + bands to parquet) + global (ranks, candidates, verification, "
        "clusters); perturbation not included"
    )
    print(
        "peak RSS = max(sketch MiB, global MiB); global MiB = the highest per-step peak (VmHWM restarted "
        "before each global step); global + = global MiB - RSS when the global steps began; "
        f"baseline after imports: {runs[0]['baseline_rss_mib']:.0f} MiB"
    )
    for run in runs:
        steps = ", ".join(f"{name} {peak:.0f}" for name, peak in run["global_step_peaks_mib"].items())
        print(f"  {run['replicas']}x peak RSS per global step (MiB): {steps}")
    for label, fit in (("peak RSS", fits["peak"]), ("global-steps RSS", fits["global"])):
        print_fit(label, fit)


def print_fit(label: str, fit: dict) -> None:
    if "slope_mib_per_1k_docs" not in fit:
        print(f"{label} fit: {fit.get('note')}")
        return
    verdict = "within" if fit["within_budget"] else "over"
    print(
        f"{label} fit: {fit['intercept_mib']:.1f} MiB + {fit['slope_mib_per_1k_docs']:.3f} MiB per 1k docs -> "
        f"{fit['projected_rss_mib']:,.0f} MiB at {PROJECTED_DOCS:,} docs: {verdict} {RSS_BUDGET_MIB} MiB (2 GiB)"
    )
    growth = "sub-linear" if fit["sub_linear"] else "not sub-linear"
    marginal = " -> ".join(f"{value:.2f}" for value in fit["marginal_mib_per_1k_docs"])
    print(
        f"{label} growth: {growth}; marginal MiB per 1k docs between runs: {marginal}; "
        f"(RSS - baseline) ~ docs^{fit['exponent_above_baseline']:.2f}"
    )


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def replica_counts(value: str) -> list[int]:
    counts = [int(part) for part in value.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("replica counts must be positive integers, e.g. 1,4,16")
    return counts


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--crawl", type=Path, help="a crawl folder (default: the development crawl, built in $OUT/dev-crawl when missing)")
    parser.add_argument("--smoke", action="store_true", help="seconds, offline: a few documents of the test slice")
    parser.add_argument("--max-docs", type=int, default=2000, help="documents used, before replication (2000)")
    parser.add_argument("--doc-bytes", type=int, help="only documents of at least this many bytes, cut to it (e.g. 3500)")
    parser.add_argument("--replicas", type=replica_counts, default=[1, 4, 16], help="replica counts (1,4,16)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per signature side; the best counts (3)")
    parser.add_argument("--shard-docs", type=int, default=500, help="documents per sketch shard (500)")
    parser.add_argument("--band-parts", type=int, default=1, help="band ranges for candidate_edges (1)")
    parser.add_argument("--duckdb-memory-limit", default=DuckDBConfig().memory_limit, help="DuckDB memory_limit")
    parser.add_argument("--seed", type=int, default=0, help="seed of the replica perturbations (0)")
    parser.add_argument("--child-spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.max_docs, args.replicas, args.repeats, args.shard_docs = 30, [1, 2], 1, 20
    if min(args.max_docs, args.repeats, args.shard_docs, args.band_parts) < 1:
        parser.error("--max-docs, --repeats, --shard-docs and --band-parts must be at least 1")
    return args


def run(args: argparse.Namespace) -> dict:
    crawl = resolve_crawl(args)
    quiet_datatrove_logs()
    docs = load_documents(crawl, args.max_docs, args.doc_bytes)
    documents = describe_documents(docs)
    print(f"crawl {crawl}: {documents['docs']} documents {documents['by_language']}", flush=True)
    print("signature throughput...", flush=True)
    sigs = signature_benchmark(docs, args.repeats)
    print_signatures(sigs, documents)
    print()
    print("whole-dedup scaling...", flush=True)
    runs = run_scaling(docs, args)
    fits = {"peak": memory_fit(runs), "global": memory_fit(runs, "global_peak_rss_mib")}
    print_scaling(runs, fits)
    return {
        "command": command_line(),
        "crawl": str(crawl),
        "documents": documents,
        "signatures": sigs,
        "scaling": {
            "runs": runs,
            "fit": fits["peak"],
            "fit_global_steps": fits["global"],
            "shard_docs": args.shard_docs,
            "band_parts": args.band_parts,
            "duckdb_memory_limit": args.duckdb_memory_limit,
            "edit_rate": list(EDIT_RATE),
            "seed": args.seed,
        },
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child_spec:
        print(json.dumps(scaling_child(json.loads(args.child_spec))))
        return 0
    try:
        report = run(args)
    except RuntimeError as exc:
        print(f"bench/dedup_speed.py: {exc}", file=sys.stderr)
        return 2
    print()
    print(f"command: {report['command']}")
    print(json.dumps(report, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
