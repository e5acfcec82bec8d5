"""Keep/drop decisions of the real asset graph against pages labelled by reading them.

Usage::

    .venv/bin/python bench/curation_quality.py [--crawl DIR] [--labels FILE] [--storage DIR] [--show N]
        [--config-json JSON] [--policy rules|classifier|both] [--train CRAWL LABELS]... [--text-path] [--smoke]

`--crawl` takes a crawl folder (`bench/build_crawl.py`); without it the labelled
development crawl is built into (or reused from) `$OUT/dev-crawl`, else `bench/out/dev-crawl`
(bench/dev_set/README.md). `--smoke` runs in seconds, offline: the 50 pages of the test slice
(`benchlib.paths.smoke_crawl`) against their labels.
`--labels` defaults to `bench/dev_set/labels.jsonl`: one JSON object per page with `url, package,
lang, label (KEEP|DROP), confidence, reason` (bench/dev_set/README.md says how they were made).

Every shard goes through raw_shard → extracted_shard → curated_shard → minhash_signatures, then
dedup_clusters, then deduplicated_shard, all by `local_run.run_shard_graph` in this process with an
ephemeral Dagster instance and the offline toxicity backend, into a temporary storage root (or
`--storage DIR`, kept afterwards; `--reuse` scores what is already there without running anything).
`--config-json` merges a run config over that, e.g. `'{"ops": {"curated_shard": {"config":
{"quality_preset": "fineweb"}}}}'` to score a published preset.

`--web` scores the labelled real-web crawl (bench/web_set), rebuilt into `$OUT/web-crawl` from its
source repositories when missing. `--text-path` scores the same pages on the text path: each page's text,
extracted as the pipeline extracts it, in a JSON Lines shard without HTML (so the classifier's text model
decides), as a corpus that others extracted arrives.

`--policy rules|classifier|both` sets curated_shard's quality policy. For `classifier` (the default)
and `both`, every labelled page is scored by a classifier that never saw its site: `--cv-by-site K`
(default 5) deals the crawl's labelled sites into K folds; the graph runs once, then per fold a
classifier trained on the shipped training pages (lm_assets/quality_model/) without that fold's sites
is made current and curated_shard runs again, and each page's outcome comes from its own fold.
`--train CRAWL LABELS` (repeatable) instead trains a classifier the way the pipeline trains it on
those pairs (each crawl extracted into a storage of its own, the labels under its `labels/`,
quality_labels and quality_classifier materialized there) and copies it into the scored storage,
e.g. `--train $OUT/dev-crawl bench/dev_set/labels.jsonl --crawl $OUT/transfer-crawl --labels
bench/transfer_set/labels.jsonl`. `--smoke` trains on the slice itself.

Printed per package, per language (of the label) and overall, by `lm_assets.corpus.audit.agreement`:
good retention (KEEP pages kept after curation), junk rejection (DROP pages dropped), balanced
accuracy, the share of kept KEEP pages that dedup keeps as themselves (pages truth.json lists as
natural duplicates of other source pages left out: only one of them can survive), and the rules that dropped
KEEP pages; then the DROP pages that were kept and the KEEP pages that were dropped (`--show`), the
text integrity of every kept document (paragraphs kept, characters removed, code lines kept), and
for the crawl's injected duplicate groups (truth.json) the share whose original is the copy dedup
keeps. The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import polars as pl
from benchlib.crawls import LABELLED_CRAWLS, WEB_LABELS, find_shards, labelled_crawl, resolve_crawl, web_crawl
from benchlib.paths import REPO, TEST_SLICE, out_dir

from lm_assets.app.local_run import OFFLINE_RUN_CONFIG, run_config_for, run_shard_graph
from lm_assets.corpus.audit.agreement import (
    decision_figures,
    decisions,
    grouped_figures,
    outcomes,
    read_labels,
    text_integrity,
)
from lm_assets.corpus.curation.policy import DEFAULT_QUALITY_POLICY, POLICIES
from lm_assets.defs.dedup.assets import DedupSettings
from lm_assets.storage.layout import CLUSTERS_KEY, CURRENT_CLASSIFIER, classifier_keys, raw_keys, stage_keys
from lm_assets.storage.store import Storage

DEFAULT_LABELS = REPO / "bench" / "dev_set" / "labels.jsonl"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crawl", type=Path, help="a crawl folder (default: the development crawl, built in $OUT/dev-crawl when missing)")
    parser.add_argument("--labels", type=Path, default=DEFAULT_LABELS)
    parser.add_argument("--smoke", action="store_true", help="seconds, offline: the test slice and its labels")
    parser.add_argument("--storage", type=Path, help="storage root to write (kept); default a temporary one")
    parser.add_argument("--reuse", action="store_true", help="score --storage as it is, without running the graph")
    parser.add_argument("--config-json", default="{}", help="run config merged over the offline defaults")
    parser.add_argument("--show", type=int, default=8, help="pages listed per kind of error")
    parser.add_argument("--policy", choices=POLICIES, help=f"curated_shard's quality policy (default: {DEFAULT_QUALITY_POLICY})")
    parser.add_argument("--web", action="store_true", help="score the labelled real-web crawl (bench/web_set)")
    parser.add_argument("--text-path", action="store_true",
                        help="score the pages' extracted texts as JSON Lines documents without HTML (the text path)")
    parser.add_argument(
        "--cv-by-site", type=int, metavar="K", default=None,
        help="classifier policies: deal the scored crawl's sites into K folds; each fold is scored by a classifier "
        "trained on the shipped training pages of every labelled crawl except that fold's sites (the default "
        "for --web and the labelled crawls: 5)",
    )
    parser.add_argument(
        "--train", nargs=2, type=Path, action="append", metavar=("CRAWL", "LABELS"),
        help="a crawl and its labels to train the classifier on; repeat for more (default: the development and "
        "the transfer crawl, built or reused as bench/dev_set and bench/transfer_set say)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.labels = TEST_SLICE / "labels.jsonl"
    if args.web:
        args.labels = WEB_LABELS
    return args


def training_sets(args: argparse.Namespace, crawl: Path) -> list[tuple[Path, Path]]:
    if args.smoke:
        return [(crawl, args.labels)]
    if args.train:
        return [(crawl.resolve(), labels.resolve()) for crawl, labels in args.train]
    return [(labelled_crawl(spec), spec.labels) for spec in LABELLED_CRAWLS.values()]


def merged_config(extra: dict) -> dict:
    config = json.loads(json.dumps(OFFLINE_RUN_CONFIG))
    for op, body in extra.get("ops", {}).items():
        target = config["ops"].setdefault(op, {}).setdefault("config", {})
        target.update(body.get("config", {}))
    return config


def run_pipeline(crawl: Path, storage_root: Path, run_config: dict, train_classifier: bool = False) -> float:
    from dedup_quality import pipeline_definitions

    shards = [path.name for path in find_shards(crawl)]
    instance = dg.DagsterInstance.ephemeral(settings={"python_logs": {"python_log_level": "WARNING"}})
    definitions = pipeline_definitions(storage_root, crawl, DedupSettings())
    started = time.perf_counter()
    results = run_shard_graph(
        definitions, instance, shards, run_config, through_packing=False, train_classifier=train_classifier,
        progress=lambda m: print(f"  {m}", flush=True),
    )
    if not results[-1].success:
        raise RuntimeError(f"the run of {results[-1].job_def.name} failed")
    return time.perf_counter() - started


def trained_classifier(train: list[tuple[Path, Path]], storage_root: Path, floor: float | None = None) -> dict:
    """Train the quality classifier on the (crawl, labels) pairs in `train`, as the pipeline does, in a
    storage of its own; copy it into `storage_root` as the current one. Its training figures.

    Every crawl's shards are hard-linked (else copied) into one landing folder as `<crawl folder>-<shard>`, so that shards
    of two crawls keep apart; every labels file goes under `labels/`."""
    from dedup_quality import pipeline_definitions

    store = Storage(str(storage_root))
    with tempfile.TemporaryDirectory(prefix="classifier-training-") as scratch:
        landing, training = Path(scratch) / "landing", Storage(str(Path(scratch) / "storage"))
        landing.mkdir()
        shards = []
        for n, (crawl, labels) in enumerate(train):
            training.write_bytes(f"labels/{n:02d}-{labels.stem}.jsonl", labels.read_bytes())
            for path in find_shards(crawl):
                shards.append(f"{crawl.name}-{path.name}")
                try:  # a hard link: the landing root refuses symlinks that lead out of it
                    os.link(path, landing / shards[-1])
                except OSError:
                    shutil.copyfile(path, landing / shards[-1])
        instance = dg.DagsterInstance.ephemeral(settings={"python_logs": {"python_log_level": "WARNING"}})
        instance.add_dynamic_partitions("shards", shards)
        definitions = pipeline_definitions(Path(training.root), landing, DedupSettings())
        print("training the quality classifier on " + ", ".join(f"{labels} ({crawl})" for crawl, labels in train) + ":")
        floor_config = {"ops": {"quality_classifier": {"config": {"min_balanced_accuracy": floor}}}} if floor is not None else None
        for job, shard in [("shard_ingest_job", s) for s in shards] + [("quality_classifier_job", None)]:
            result = definitions.resolve_job_def(job).execute_in_process(
                partition_key=shard, instance=instance, run_config=floor_config if shard is None else None, raise_on_error=False
            )
            if not result.success:
                raise RuntimeError(f"training the classifier: the run of {job} failed")
        current = json.loads(training.read_bytes(CURRENT_CLASSIFIER))["hash"]
        for key in classifier_keys(current).values():
            store.write_bytes(key, training.read_bytes(key))
        store.write_bytes(CURRENT_CLASSIFIER, training.read_bytes(CURRENT_CLASSIFIER))
        return json.loads(training.read_bytes(classifier_keys(current)["info"]))


def site_folds(labels: pl.DataFrame, folds: int, seed: int = 0) -> dict[str, int]:
    """Each labelled site of the scored crawl dealt into a fold, whole (`group_fold_ids`)."""
    from lm_assets.corpus.quality.classifier import group_fold_ids, sites

    frame = labels.select(pl.col("url").alias("doc_id"), "url", "lang", "label")
    names = sites(frame)
    strata = list(zip(frame["label"].to_list(), frame["lang"].to_list()))
    ids = group_fold_ids(names, strata, folds, seed)
    return dict(zip(names, (int(i) for i in ids)))


def cross_validated_run(crawl: Path, storage_root: Path, run_config: dict, labels: pl.DataFrame, folds: int) -> tuple[pl.DataFrame, list]:
    """Materialize the graph once, then, per fold, make current a classifier trained on the shipped pages
    without that fold's sites and re-run curated_shard; each labelled page's outcome comes from the run of
    its own fold. The outcomes, and each fold's classifier hash and training size."""
    from dedup_quality import pipeline_definitions

    from lm_assets.corpus.quality import shipped as quality_model
    from lm_assets.corpus.quality.classifier import sites

    fold_of = site_folds(labels, folds)
    pages = quality_model.training_pages()
    page_sites = sites(pages)
    store = Storage(str(storage_root))
    shards = [path.name for path in find_shards(crawl)]
    instance = dg.DagsterInstance.ephemeral(settings={"python_logs": {"python_log_level": "WARNING"}})
    definitions = pipeline_definitions(storage_root, crawl, DedupSettings())
    results = run_shard_graph(definitions, instance, shards, run_config, progress=lambda m: print(f"  {m}", flush=True))
    if not results[-1].success:
        raise RuntimeError(f"the run of {results[-1].job_def.name} failed")
    truth_sites = sites(labels.select(pl.col("url").alias("doc_id"), "url"))
    outcomes_by_fold, trained = [], []
    curate = definitions.resolve_job_def("shard_curation_job")
    for fold in range(folds):
        held = {site for site, k in fold_of.items() if k == fold}
        train = pages.filter(pl.Series([site not in held for site in page_sites]))
        classifier = quality_model.build(train, cross_validations=())
        trained.append({"fold": fold, "hash": classifier.hash, "pages": train.height, "sites_held_out": len(held)})
        keys = classifier_keys(classifier.hash)
        store.write_bytes(keys["model"], classifier.model)
        store.write_bytes(keys["info"], json.dumps({"hash": classifier.hash, "metrics": classifier.metrics}).encode())
        store.write_bytes(CURRENT_CLASSIFIER, json.dumps({"hash": classifier.hash}).encode())
        print(f"  fold {fold}: classifier {classifier.hash} trained on {train.height} pages, {len(held)} sites held out")
        for shard in shards:
            result = curate.execute_in_process(partition_key=shard, instance=instance,
                                               run_config=run_config_for(run_config, curate), raise_on_error=False)
            if not result.success:
                raise RuntimeError(f"fold {fold}: curated_shard failed for {shard}")
        tables = load_tables(storage_root, shards)
        outcome = outcomes(tables["raw"], tables["dropped"], tables["quarantine"], tables["curated"], tables["clusters"])
        fold_urls = [url for url, site in zip(labels["url"].to_list(), truth_sites) if site in held]
        outcomes_by_fold.append(outcome.filter(pl.col("url").is_in(fold_urls)))
    return pl.concat(outcomes_by_fold), trained


def load_tables(storage_root: Path, shards: list[str]) -> dict[str, pl.DataFrame]:
    store = Storage(str(storage_root))

    def concat(key, columns=None) -> pl.DataFrame:
        return pl.concat([store.read_parquet(key(shard), columns=columns) for shard in shards], how="diagonal_relaxed")

    dropped = pl.concat(
        [
            concat(lambda s: raw_keys(s)["dropped"], ["doc_id", "stage", "reason"]),
            concat(lambda s: stage_keys("extracted", s)["dropped"], ["doc_id", "stage", "reason"]),
            concat(lambda s: stage_keys("curated", s)["dropped"], ["doc_id", "stage", "reason"]),
        ]
    )
    return {
        "raw": concat(lambda s: raw_keys(s)["documents"], ["doc_id", "url"]),
        "quarantine": concat(lambda s: raw_keys(s)["quarantine"], ["url", "reason"]),
        "dropped": dropped,
        "extracted": concat(lambda s: stage_keys("extracted", s)["documents"], ["doc_id", "url", "text"]),
        "curated": concat(lambda s: stage_keys("curated", s)["documents"], ["doc_id", "url", "text"]),
        "clusters": store.read_parquet(CLUSTERS_KEY, columns=["doc_id", "kept", "kept_doc_id"]),
    }


def originals_kept(truth: dict, tables: dict[str, pl.DataFrame]) -> dict:
    """Of the injected duplicate groups whose original reaches dedup with a copy, the share where dedup keeps
    the original itself."""
    at_dedup = tables["clusters"].join(tables["raw"], on="doc_id")
    kept_by_url = dict(zip(at_dedup["url"].to_list(), at_dedup["kept"].to_list()))
    groups: dict[str, list[str]] = {}
    for item in truth.get("injected", []):
        groups.setdefault(item["original_url"], []).append(item["url"])
    figures = {}
    for kind in ("exact", "near"):
        originals = {item["original_url"] for item in truth.get("injected", []) if item["kind"] == kind}
        contested = [u for u in originals if u in kept_by_url and any(c in kept_by_url for c in groups[u])]
        kept = sum(1 for u in contested if kept_by_url[u])
        figures[kind] = {"groups": len(contested), "original_kept": kept,
                         "share": round(kept / len(contested), 4) if contested else None}
    return figures


def fmt(value) -> str:
    return "  n/a " if value is None else f"{value:6.3f}"


def print_figures(title: str, groups: dict[str, dict]) -> None:
    print(f"\n{title:<28} {'KEEP':>5} {'DROP':>5} {'retain':>7} {'reject':>7} {'bal.acc':>7} {'dedup':>7}  KEEP pages dropped by")
    for name, f in groups.items():
        rules = ", ".join(f"{rule} {n}" for rule, n in list(f["keep_dropped_by"].items())[:4])
        print(
            f"{name:<28} {f['keep']:>5} {f['drop']:>5} {fmt(f['good_retention'])} {fmt(f['junk_rejection'])} "
            f"{fmt(f['balanced_accuracy'])} {fmt(f['keep_survived_dedup'])}  {rules}"
        )


def print_errors(table: pl.DataFrame, show: int) -> None:
    found = table.filter(pl.col("found"))
    junk = found.filter((pl.col("label") == "DROP") & pl.col("kept"))
    lost = found.filter((pl.col("label") == "KEEP") & ~pl.col("kept"))
    print(f"\nDROP pages kept ({junk.height}):")
    for row in junk.head(show).iter_rows(named=True):
        print(f"  {row['url']}  ({row['reason']})")
    print(f"KEEP pages dropped ({lost.height}):")
    for row in lost.head(show).iter_rows(named=True):
        print(f"  {row['drop_reason']:<40} {row['url']}")


def text_crawl(crawl: Path, folder: Path) -> Path:
    """The crawl as the text path reads it, in `folder` (replaced): each shard's pages extracted by the
    pipeline's extractor and written as a JSON Lines shard of `url, text` (no HTML), as a corpus that others
    extracted arrives."""
    from lm_assets.corpus.curation.extract import extract_documents
    from lm_assets.corpus.ingest.readers import read_shard

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for shard in find_shards(crawl):
        docs = read_shard(shard).documents
        texts = extract_documents(docs.filter(pl.col("html").is_not_null())).kept.select("url", "text")
        texts.write_ndjson(folder / shard.name.replace(".warc.gz", ".jsonl"))
    shutil.copyfile(crawl / "truth.json", folder / "truth.json")
    return folder


def run(args: argparse.Namespace) -> dict:
    crawl = web_crawl() if args.web else resolve_crawl(args)
    if args.text_path:
        crawl = text_crawl(crawl, out_dir("text-path", crawl.name))
        print(f"text path: the crawl's pages as extracted texts in JSON Lines shards, without HTML ({crawl})")
    shards = [path.name for path in find_shards(crawl)]
    truth = json.loads((crawl / "truth.json").read_text())
    labels = read_labels(args.labels)
    extra = json.loads(args.config_json)
    curated_config = extra.setdefault("ops", {}).setdefault("curated_shard", {}).setdefault("config", {})
    curated_config["quality_policy"] = args.policy or curated_config.get("quality_policy") or DEFAULT_QUALITY_POLICY
    run_config = merged_config(extra)
    policy = curated_config["quality_policy"]
    folds = args.cv_by_site
    if folds is None and policy != "rules" and not (args.smoke or args.train or args.reuse):
        folds = 5
    train = training_sets(args, crawl) if policy != "rules" and not args.reuse and not folds else []
    if any(labels.resolve() == args.labels.resolve() for _, labels in train) and not args.smoke:
        print("warning: the classifier is trained on the labels it is scored on; this measures memorisation")
    print(f"crawl: {crawl} ({len(shards)} shards), labels: {args.labels} ({labels.height} pages), policy: {policy}")
    classifier = cross_validation = None
    with tempfile.TemporaryDirectory(prefix="curation-quality-") as scratch:
        storage_root = args.storage or Path(scratch)
        seconds = None
        if folds:
            print(f"cross-validation by site, {folds} folds: every labelled page is scored by a classifier trained on "
                  "the shipped training pages without its site")
            started = time.perf_counter()
            fold_outcome, cross_validation = cross_validated_run(crawl, storage_root, run_config, labels, folds)
            seconds = time.perf_counter() - started
        elif not args.reuse:
            if policy != "rules":
                # The slice's 15 held-back pages are too few for the asset's accuracy floor.
                classifier = trained_classifier(train, storage_root, floor=0.0 if args.smoke else None)
                m = classifier["metrics"]
                print(f"  classifier {classifier['hash']}: held-back balanced accuracy {m['balanced_accuracy']} "
                      f"on {m['n_test']} pages, threshold {m['threshold']}")
            print(f"materializing the asset graph into {storage_root}:")
            seconds = run_pipeline(crawl, storage_root, run_config)
        tables = load_tables(storage_root, shards)
    outcome = outcomes(tables["raw"], tables["dropped"], tables["quarantine"], tables["curated"], tables["clusters"])
    if folds:
        outcome = pl.concat([fold_outcome, outcome.filter(~pl.col("url").is_in(fold_outcome["url"].implode()))])
    natural = {url for group in truth.get("natural_duplicates", []) for url in group}
    natural |= {url for a, b, _ in truth.get("natural_near_pairs", []) for url in (a, b)}
    table = decisions(labels, outcome, natural)
    missing = table.filter(~pl.col("found"))["url"].to_list()
    if missing:
        print(f"warning: {len(missing)} labelled URLs are not in this crawl, e.g. {missing[:3]}")
    overall = decision_figures(table)
    print_figures("package", grouped_figures(table, "package"))
    print_figures("language", grouped_figures(table, "lang"))
    print_figures("overall", {"all labelled pages": overall})
    print_errors(table, args.show)
    integrity = text_integrity(tables["extracted"], tables["curated"])
    print(
        f"\ntext integrity over {integrity['documents']} kept documents: "
        f"{fmt(integrity['still_have_paragraphs'])} of the {integrity['had_paragraphs']} with paragraphs still have them, "
        f"{fmt(integrity['code_lines_survive'])} of the {integrity['had_code_lines']} with def/class lines keep them all, "
        f"{fmt(integrity['chars_removed_share'])} of extracted characters removed by curation"
    )
    originals = originals_kept(truth, tables)
    print(
        "injected duplicate groups whose original dedup keeps: "
        + ", ".join(f"{kind} {fmt(f['share'])} ({f['original_kept']}/{f['groups']})" for kind, f in originals.items())
    )
    if seconds is not None:
        print(f"asset graph: {seconds:.1f} s wall")
    return {
        "path": "text" if args.text_path else "html",
        "overall": overall,
        "packages": grouped_figures(table, "package"),
        "languages": grouped_figures(table, "lang"),
        "text_integrity": integrity,
        "originals_kept": originals,
        "missing_labels": len(missing),
        "policy": policy,
        "classifier": {"hash": classifier["hash"], "training": classifier["metrics"]} if classifier else None,
        "cross_validation_by_site": cross_validation,
        "seconds": seconds,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        result = run(args)
    except RuntimeError as exc:
        print(f"bench/curation_quality.py: {exc}", file=sys.stderr)
        return 2
    print()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
