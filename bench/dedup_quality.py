"""Dedup quality of the real asset graph on a crawl with known duplicates.

Usage::

    .venv/bin/python bench/dedup_quality.py [--crawl DIR] [--show N] [--smoke]

`--crawl` takes a folder made by `bench/build_crawl.py` (gzip WARC shards
`crawl-*.warc.gz` and `truth.json`; `tests/support/dedup_crawl.py` writes the same shape). Without it, the
crawl of `bench/curation.py` is used: built into `$OUT/dev-crawl`, else `bench/out/dev-crawl` (the
labelled development crawl, 4000 source pages in shards of 500) unless one built with those arguments
is already there. `--smoke` runs in seconds, offline, on the test slice (`benchlib.paths.smoke_crawl`:
no injected duplicates, so there is no recall to measure).

Every shard goes through raw_shard → extracted_shard → curated_shard → minhash_signatures, then
dedup_clusters runs across all shards, then the per-shard deduplicated_shard job, all by
`local_run.run_shard_graph(..., through_packing=False)` in this process (tokenizer and packing are
skipped), on an ephemeral Dagster instance and a fresh storage root in a temporary folder, with the
offline toxicity backend and the default dedup settings. The clusters, the sketches (url, lang)
and the curated texts are then scored against `truth.json` by `lm_assets.corpus.dedup.accuracy` (its
docstring defines the figures). The curation stages drop some pages before dedup; only documents
that reach dedup count, and the output says how many did.

The last line printed is the JSON object `accuracy.dedup_accuracy` returns.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import polars as pl
from benchlib.crawls import find_shards, resolve_crawl

from lm_assets.app.local_run import OFFLINE_RUN_CONFIG, run_shard_graph
from lm_assets.corpus.dedup.accuracy import LANGUAGE_GROUPS, LanguageTally, figures, tally
from lm_assets.corpus.dedup.minhash import lsh_params
from lm_assets.defs.common.resources import LandingResource, StorageResource, s3_resource_from_env
from lm_assets.defs.dedup.assets import DedupSettings
from lm_assets.storage.layout import CLUSTERS_KEY, minhash_keys, stage_keys
from lm_assets.storage.store import Storage


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crawl", type=Path, help="a crawl folder (default: the development crawl, built in $OUT/dev-crawl when missing)")
    parser.add_argument("--show", type=int, default=5, help="misses and false removals listed per language")
    parser.add_argument("--smoke", action="store_true", help="seconds, offline: the test slice")
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------------------------
# Running the pipeline
# ---------------------------------------------------------------------------------------------


def pipeline_definitions(storage_root: Path, landing_root: Path, dedup: DedupSettings) -> dg.Definitions:
    """The project's assets and jobs, with storage and landing pointed at the given folders."""
    from lm_assets.definitions import defs

    s3 = s3_resource_from_env()
    resources = {
        **defs.resources,
        "storage": StorageResource(root=str(storage_root), s3=s3),
        "landing": LandingResource(root=str(landing_root), s3=s3),
        "dedup": dedup,
    }
    return dg.Definitions(
        assets=defs.assets, asset_checks=defs.asset_checks, jobs=defs.jobs, resources=resources, executor=defs.executor
    )


class StepClock:
    """Wall time of each step `run_shard_graph` reports, keyed by the step's description."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.current: tuple[str, float] | None = None

    def __call__(self, message: str) -> None:
        self.stop()
        print(f"  {message}", flush=True)
        self.current = (message, time.perf_counter())

    def stop(self) -> None:
        if self.current:
            message, started = self.current
            self.seconds[message] = time.perf_counter() - started
            self.current = None

    def total(self, word: str) -> float:
        return sum(seconds for message, seconds in self.seconds.items() if word in message)


def run_pipeline(crawl: Path, storage_root: Path, dedup: DedupSettings) -> StepClock:
    shards = [path.name for path in find_shards(crawl)]
    clock = StepClock()
    instance = dg.DagsterInstance.ephemeral(settings={"python_logs": {"python_log_level": "WARNING"}})
    definitions = pipeline_definitions(storage_root, crawl, dedup)
    results = run_shard_graph(
        definitions, instance, shards, OFFLINE_RUN_CONFIG, through_packing=False, progress=clock
    )
    clock.stop()
    if not results[-1].success:
        raise RuntimeError(f"the run of {results[-1].job_def.name} failed")
    return clock


def dedup_tables(storage_root: Path, shards: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(clusters with each document's url and lang, the curated texts dedup compared)."""
    store = Storage(str(storage_root))
    sketches = [store.read_parquet(minhash_keys(s)["sketches"], columns=["doc_id", "url", "lang"]) for s in shards]
    texts = [store.read_parquet(stage_keys("curated", s)["documents"], columns=["url", "text"]) for s in shards]
    return store.read_parquet(CLUSTERS_KEY).join(pl.concat(sketches), on="doc_id"), pl.concat(texts)


def html_records(storage_root: Path, shards: list[str]) -> int:
    store = Storage(str(storage_root))
    return sum(store.read_parquet(stage_keys("raw", s)["documents"], columns=["doc_id"]).height for s in shards)


# ---------------------------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------------------------


def print_settings(dedup: DedupSettings) -> None:
    config = dedup.dedup_config()
    bands, rows = lsh_params(config.minhash)
    print(
        f"MinHash: num_perm={config.minhash.num_perm} seed={config.minhash.seed} scheme={config.minhash.scheme} "
        f"word_ngram={config.minhash.word_ngram} char_ngram={config.minhash.char_ngram} "
        f"threshold={config.minhash.threshold} ({bands} bands x {rows} rows) "
        f"verify_threshold={config.effective_verify_threshold}"
    )


def ratio_text(hits: int, total: int) -> str:
    return f"{hits / total:.4f} ({hits}/{total})" if total else "n/a (0/0)"


def print_language(lang: str, counts: LanguageTally, show: int) -> None:
    print(f"\n[{lang}] {counts.docs} documents reached dedup")
    exact = ratio_text(counts.exact.hits, counts.exact.total)
    print(f"  exact recall            {exact}   (groups with >= 2 members at dedup)")
    for name, ratio in counts.near.items():
        print(f"  near recall {name}   {ratio_text(ratio.hits, ratio.total)}   (copies at dedup with their original)")
    print(f"  false removal rate      {ratio_text(len(counts.false_removals), counts.docs)}")
    for group in counts.missed_exact_groups[:show]:
        print(f"    missed exact group: {' '.join(group)}")
    for item in counts.missed_near_copies[:show]:
        how = f"edit rate {item['edit_rate']}, boilerplate {item.get('boilerplate')}"
        print(f"    missed near copy ({how}): {item['url']}  original: {item['original_url']}")
    for removal in counts.false_removals[:show]:
        print(f"    false removal (Jaccard {removal.jaccard:.3f}): {removal.url}  kept instead: {removal.kept_url}")


def print_truth_coverage(truth: dict, clusters: pl.DataFrame) -> None:
    present = set(clusters["url"])
    injected = truth["injected"]
    for kind in ("exact", "near"):
        items = [item for item in injected if item["kind"] == kind]
        both = sum(item["url"] in present and item["original_url"] in present for item in items)
        print(f"injected {kind} copies: {len(items)} in truth.json, {both} reached dedup together with their original")


# ---------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict:
    crawl = resolve_crawl(args)
    shards = [path.name for path in find_shards(crawl)]
    truth = json.loads((crawl / "truth.json").read_text())
    dedup = DedupSettings()
    print(f"crawl: {crawl} ({len(shards)} shards)")
    print_settings(dedup)
    with tempfile.TemporaryDirectory(prefix="dedup-quality-") as storage_root:
        print(f"materializing the asset graph with storage root {storage_root} (removed afterwards):")
        started = time.perf_counter()
        clock = run_pipeline(crawl, Path(storage_root), dedup)
        pipeline_seconds = time.perf_counter() - started
        clusters, texts = dedup_tables(Path(storage_root), shards)
        records = html_records(Path(storage_root), shards)
    started = time.perf_counter()
    counts = tally(clusters, texts, truth, dedup.dedup_config().minhash)
    scoring_seconds = time.perf_counter() - started

    steps = ", ".join(
        f"{name} {clock.total(word):.1f} s"
        for name, word in (("curation + sketches", "raw_shard"), ("dedup_clusters", "dedup_clusters"),
                           ("per-shard dedup job", "deduplicated_shard"))
    )
    print(f"\nwall time: {pipeline_seconds:.1f} s for the asset graph ({steps}), {scoring_seconds:.1f} s scoring")
    print(
        f"documents: {records} HTML records read, {clusters.height} reached dedup after curation "
        f"({', '.join(f'{lang} {counts[lang].docs}' for lang in LANGUAGE_GROUPS)}), "
        f"{int((~clusters['kept']).sum())} removed as duplicates"
    )
    print_truth_coverage(truth, clusters)
    for lang in LANGUAGE_GROUPS:
        print_language(lang, counts[lang], args.show)
    return figures(counts)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        result = run(args)
    except RuntimeError as exc:
        print(f"bench/dedup_quality.py: {exc}", file=sys.stderr)
        return 2
    print()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
