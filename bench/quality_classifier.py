"""The quality classifier (`lm_assets.corpus.quality.classifier`) on the labelled development pages.

Usage::

    .venv/bin/python bench/quality_classifier.py [--crawl DIR] [--labels FILE] [--folds 5] [--repeats 3]
        [--wheels DIR] [--sweep] [--smoke]

The labelled pages (bench/dev_set/labels.jsonl) are read from the development crawl (built into or reused
from `$OUT/dev-crawl`, else `bench/out/dev-crawl`, as `curation.py` does) with the pipeline's own
functions: `readers.read_shard`, `extract.extract_documents`, `langid.identify_languages` (pages it
drops never reach a classifier), then `rules.rule_signals` with the default preset. `--smoke`:
seconds, offline, the 50 pages of the test slice.

1. Choices, by repeated cross-validation: `--repeats` times, the pages are dealt into `--folds` folds
   stratified by (keep, lang); each fold is scored by a classifier trained on the others
   (`train_classifier` with `test_fraction=0`, so it uses all it is given). Printed per variant, pooled
   over the folds and averaged over the repeats: balanced accuracy at the model's own threshold, KEEP
   retention, DROP rejection, ROC AUC, balanced accuracy per language, seconds per training, model
   size. Variants: the default preset's rules alone; fastText alone (`text`); fastText stacked with the
   q_* signals by logistic regression (the default) and by gradient boosting; one model per language;
   the rules followed by the default classifier (what curation would do). `--sweep` adds fastText and
   normalization settings around the default.
2. The default as the asset trains it: `train_classifier(pages)` with its 30 % held-back split; its
   metrics, hash, whether a second run gives the same bytes; the artefact goes to
   `$OUT/quality_classifier/model.zip`.
3. Speed: `QualityClassifier.score` in docs per CPU-second with the q_* columns present (as curation
   hands them over) and without; against the CPU time of `curation.curate` (offline toxicity backend)
   on the same extracted pages.
4. fastText wheels: each folder under `--wheels` (default `$OUT/fasttext-wheels`, if present) holds one
   wheel installed with `pip install --no-deps --target DIR/<name> <wheel>`; the installed `fasttext`
   module is measured too. In a subprocess per wheel: whether it trains, seconds per training, scoring
   docs/s, whether two trainings give the same bytes, and 8 trainings with malloc's memory left as it is
   (`train_fasttext(..., zeroed=False)`): distinct models and "Encountered NaN" failures; and whether its
   Python `predict()` works on numpy 2.

The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
from benchlib.crawls import LABELLED_CRAWLS, WEB_LABELS, find_shards, labelled_crawl, resolve_crawl, web_crawl
from benchlib.documents import as_text_documents
from benchlib.paths import REPO, TEST_SLICE, out_dir

import lm_assets.corpus.quality.classifier as qc
from lm_assets.corpus.audit.agreement import read_labels
from lm_assets.corpus.curation.extract import PAGE_COLUMNS, extract_documents
from lm_assets.corpus.curation.langid import identify_languages
from lm_assets.corpus.curation.pipeline import CurationConfig, curate
from lm_assets.corpus.curation.rules import HARD_RULES, preset, rule_signals, reasons_from_signals
from lm_assets.corpus.curation.toxicity import ToxicityConfig
from lm_assets.corpus.ingest.readers import read_shard
from lm_assets.corpus.quality.classifier import ClassifierConfig, QualityClassifier, train_classifier

DEFAULT_LABELS = REPO / "bench" / "dev_set" / "labels.jsonl"
DEFAULT = ClassifierConfig()
SMOKE = ClassifierConfig(folds=3, epoch=5)
SWEEP = {
    "epoch 50": {"epoch": 50},
    "lr 0.1": {"lr": 0.1},
    "dim 32": {"dim": 32},
    "bucket 50k": {"bucket": 50_000},
    "bucket 200k": {"bucket": 200_000},
    "quantized": {"quantize": True},
    "word_ngrams 1": {"word_ngrams": 1},
    "max_chars 1000": {"max_chars": 1000},
    "max_chars 10000": {"max_chars": 10_000},
    "classes not balanced": {"balance_classes": False},
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crawl", type=Path, help="a crawl folder (default: the development crawl, built in $OUT/dev-crawl when missing)")
    parser.add_argument("--labels", type=Path, help="with --crawl: its labels (default: the development labels)")
    parser.add_argument("--cv", choices=("site", "rows"), default="site",
                        help="cross-validation folds: whole sites (default) or pages stratified by (keep, lang)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wheels", type=Path, help="`pip install --target` folders (default: $OUT/fasttext-wheels)")
    parser.add_argument("--sweep", action="store_true", help="also fastText and normalization settings")
    parser.add_argument("--smoke", action="store_true", help="seconds, offline: the test slice and its labels")
    parser.add_argument("--wheel-probe", nargs=2, type=Path, help=argparse.SUPPRESS)  # pages.parquet model.zip
    args = parser.parse_args(argv)
    if args.smoke:
        args.labels, args.folds, args.repeats = TEST_SLICE / "labels.jsonl", 3, 1
    return args


def labelled_sets(args: argparse.Namespace) -> list[tuple[str, Path, Path]]:
    """(name, crawl, labels): the one given, the test slice, or every labelled crawl of the project."""
    if args.crawl is not None or args.smoke:
        return [("given", resolve_crawl(args), args.labels or DEFAULT_LABELS)]
    sets = [(spec.name, labelled_crawl(spec), spec.labels) for spec in LABELLED_CRAWLS.values()]
    return sets + [("web", web_crawl(), WEB_LABELS)]


# ---------------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------------


def load_pages(crawl: Path, labels: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """The labelled pages as the pipeline extracts them: (pages with lang, keep and q_*, extracted pages)."""
    wanted = labels["url"].implode()
    raw = pl.concat([read_shard(shard).documents.filter(pl.col("url").is_in(wanted)) for shard in find_shards(crawl)])
    raw = raw.filter(pl.col("html").is_not_null()).unique("url", keep="first", maintain_order=True)
    extracted = extract_documents(raw).kept
    identified = identify_languages(extracted).kept
    labelled = labels.select(
        "url", "package", "confidence", pl.col("lang").alias("label_lang"), (pl.col("label") == "KEEP").alias("keep")
    )
    pages = identified.select("doc_id", "url", "text", "lang", *PAGE_COLUMNS).join(labelled, on="url")
    signals = rule_signals(pages["text"].to_list(), pages["lang"].to_list(), preset())
    pages = pl.concat([pages, signals], how="horizontal")
    counts = {
        "labelled": labels.height, "in_crawl": raw.height, "extracted": extracted.height, "after_langid": pages.height,
        "keep": int(pages["keep"].sum()), "drop": int((~pages["keep"]).sum()),
        "by_lang": {
            f"{lang}:{'KEEP' if keep else 'DROP'}": n
            for lang, keep, n in pages.group_by("lang", "keep").len().sort("lang", "keep").rows()
        },
    }
    return pages, extracted.select("doc_id", "url", "text"), counts


# ---------------------------------------------------------------------------------------------
# Cross-validation
# ---------------------------------------------------------------------------------------------


def classifier_variant(config: ClassifierConfig, text_path: bool = False):
    """Train on the other folds; score the held-out pages as they are (each by its model, at the cut of its
    language and page kind), or with `text_path` as documents without HTML (by the text model)."""
    def fit(train: pl.DataFrame):
        trained = train_classifier(train, replace(config, test_fraction=0.0), cross_validations=())
        classifier = QualityClassifier.from_bytes(trained.model)

        def score(test: pl.DataFrame):
            docs = as_text_documents(test) if text_path else test
            scores, models = classifier.score_with_models(docs)
            return scores, classifier.thresholds_for(docs["lang"].to_list(), models, classifier.page_kinds(docs))
        return score, len(trained.model)
    return fit


def per_language_variant(config: ClassifierConfig):
    """One model per language; a language with too few pages of a class is scored by one model on all."""
    def fit(train: pl.DataFrame):
        models, size = {}, 0
        for lang in [*train["lang"].unique().sort().to_list(), None]:
            pages = train if lang is None else train.filter(pl.col("lang") == lang)
            try:
                trained = train_classifier(pages, replace(config, test_fraction=0.0), cross_validations=())
            except ValueError:
                continue
            models[lang] = QualityClassifier.from_bytes(trained.model)
            size += len(trained.model)

        def score(test: pl.DataFrame):
            scores, threshold = np.zeros(test.height), np.zeros(test.height)
            for lang in test["lang"].unique().to_list():
                rows = (test["lang"] == lang).to_numpy()
                classifier = models.get(lang, models[None])
                part = test.filter(rows)
                scores[rows], scored_by = classifier.score_with_models(part)
                threshold[rows] = classifier.thresholds_for(part["lang"].to_list(), scored_by, classifier.page_kinds(part))
            return scores, threshold
        return score, size
    return fit


def rules_keep(pages: pl.DataFrame, only: tuple[str, ...] | None = None) -> np.ndarray:
    return reasons_from_signals(pages.select(pl.col("^q_.*$")), preset(), only=only).is_null().to_numpy()


def rules_variant(train: pl.DataFrame):
    return lambda test: (rules_keep(test).astype(float), 0.5), 0


def cross_validate(pages: pl.DataFrame, fit, folds: int, repeats: int, by_site: bool = True) -> dict:
    """Pooled out-of-fold scores and decisions per repeat, with the training seconds and model sizes."""
    strata = list(zip(pages["keep"].to_list(), pages["lang"].to_list()))
    sites = qc.sites(pages)
    runs = []
    for repeat in range(repeats):
        fold = (qc.group_fold_ids(sites, strata, folds, seed=1000 + repeat) if by_site
                else qc.fold_ids(strata, folds, seed=1000 + repeat))
        scores, keep_decision, seconds, sizes = np.zeros(pages.height), np.zeros(pages.height, dtype=bool), [], []
        for k in range(folds):
            inside = fold != k
            started = time.process_time()
            score, size = fit(pages.filter(inside))
            seconds.append(time.process_time() - started)
            sizes.append(size)
            test = pages.filter(~inside)
            fold_scores, threshold = score(test)
            scores[~inside] = fold_scores
            keep_decision[~inside] = fold_scores >= threshold
        runs.append({"scores": scores, "keep": keep_decision, "train_cpu_s": float(np.mean(seconds)),
                     "model_bytes": int(np.mean(sizes))})
    return runs


def figures(pages: pl.DataFrame, runs: list[dict]) -> dict:
    keep, langs = pages["keep"].to_numpy(), pages["lang"].to_list()
    per_run = []
    for run in runs:
        # decision_metrics keeps a score >= threshold: give it the decisions as 0/1 and the cut 0.5
        decided = qc.decision_metrics(keep, run["keep"].astype(float), 0.5, langs)
        auc = qc.decision_metrics(keep, run["scores"], 0.5, langs)["roc_auc"]
        per_run.append({
            "balanced_accuracy": decided["balanced_accuracy"], "keep_retention": decided["recall"],
            "drop_rejection": decided["drop_rejection"], "roc_auc": auc,
            "per_language": {lang: f["balanced_accuracy"] for lang, f in decided["per_language"].items()},
            "train_cpu_s": run["train_cpu_s"], "model_bytes": run["model_bytes"],
        })

    def mean(key, lang=None):
        values = [r["per_language"][lang] if lang else r[key] for r in per_run]
        values = [v for v in values if v is not None]
        return round(float(np.mean(values)), 4) if values else None

    keys = ("balanced_accuracy", "keep_retention", "drop_rejection", "roc_auc", "train_cpu_s")
    result = {key: mean(key) for key in keys}
    accuracies = [r["balanced_accuracy"] for r in per_run]
    result["balanced_accuracy_range"] = [min(accuracies), max(accuracies)]
    result["per_language"] = {lang: mean(None, lang) for lang in sorted(set(langs))}
    result["model_bytes"] = int(np.mean([r["model_bytes"] for r in per_run]))
    return result


def print_table(rows: dict[str, dict]) -> None:
    langs = sorted({lang for row in rows.values() for lang in row["per_language"]})
    header = ["variant", "bal. acc (range)", "KEEP kept", "DROP rejected", "ROC AUC"]
    header += [f"bal. acc {lang}" for lang in langs] + ["train CPU-s", "model KB"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, row in rows.items():
        low, high = row["balanced_accuracy_range"]
        cells = [name, f"{fmt(row['balanced_accuracy'])} ({fmt(low)}-{fmt(high)})", fmt(row["keep_retention"]),
                 fmt(row["drop_rejection"]), fmt(row["roc_auc"])]
        cells += [fmt(row["per_language"].get(lang)) for lang in langs]
        cells += [fmt(row["train_cpu_s"], 2), str(round(row["model_bytes"] / 1024)) if row["model_bytes"] else "-"]
        print("| " + " | ".join(cells) + " |")


def fmt(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def compare_choices(pages: pl.DataFrame, base: ClassifierConfig, args) -> dict:
    variants = {
        "rules only (lm_assets preset)": rules_variant,
        "text (fastText alone)": classifier_variant(replace(base, features="text")),
        "text+signals, logistic": classifier_variant(replace(base, stacker="logistic")),
        "text+signals, boosting (default)": classifier_variant(base),
        "the default on the text path (the pages' texts without HTML)": classifier_variant(base, text_path=True),
        "per language, text+signals, boosting": per_language_variant(base),
    }
    if args.sweep:
        variants |= {f"default, {name}": classifier_variant(replace(base, **change)) for name, change in SWEEP.items()}
        weights = pages.with_columns(pl.when(pl.col("confidence") == "low").then(0.5).otherwise(1.0).alias("weight"))
    rows, runs_by_name = {}, {}
    for name, fit in variants.items():
        started = time.perf_counter()
        runs = cross_validate(pages, fit, args.folds, args.repeats, by_site=args.cv == "site")
        runs_by_name[name] = runs
        rows[name] = figures(pages, runs)
        print(f"  {name}: {time.perf_counter() - started:.0f} s", flush=True)
    default_runs = runs_by_name["text+signals, boosting (default)"]
    for name, rules in (("policy `classifier`: minimum length, then the default", rules_keep(pages, HARD_RULES)),
                        ("policy `both`: every rule, then the default", rules_keep(pages))):
        rows[name] = figures(pages, [{**run, "keep": run["keep"] & rules} for run in default_runs])
    if args.sweep:
        runs = cross_validate(weights, classifier_variant(base), args.folds, args.repeats, by_site=args.cv == "site")
        rows["default, weight 0.5 for low-confidence labels"] = figures(weights, runs)
    return rows


# ---------------------------------------------------------------------------------------------
# The default as the asset trains it, and speed
# ---------------------------------------------------------------------------------------------


def held_back(pages: pl.DataFrame, config: ClassifierConfig) -> tuple[dict, bytes]:
    examples = pages.select("doc_id", "url", "text", "lang", "keep", pl.col("^q_.*$"))
    started = time.process_time()
    trained = train_classifier(examples, config)
    seconds = time.process_time() - started
    again = train_classifier(examples.reverse(), config, cross_validations=())
    return {"metrics": trained.metrics, "hash": trained.hash, "train_cpu_s": round(seconds, 2),
            "same_bytes_on_a_second_run": again.model == trained.model}, trained.model


def cpu_seconds(function, *args, min_seconds: float = 1.0) -> float:
    """CPU seconds of one call, averaged over as many calls as fill `min_seconds`."""
    calls, started = 0, time.process_time()
    while True:
        function(*args)
        calls += 1
        spent = time.process_time() - started
        if spent >= min_seconds:
            return spent / calls


def speed(pages: pl.DataFrame, extracted: pl.DataFrame, model: bytes, smoke: bool) -> dict:
    classifier = QualityClassifier.from_bytes(model)
    with_signals = pages.select("doc_id", "text", "lang", pl.col("^q_.*$"))
    # The rule signals recomputed; the page signals come from extraction either way.
    without = pages.select("doc_id", "text", "lang", *[c for c in PAGE_COLUMNS if c in pages.columns])
    budget = 0.2 if smoke else 2.0
    scored = cpu_seconds(classifier.score, with_signals, min_seconds=budget)
    recomputed = cpu_seconds(classifier.score, without, min_seconds=budget)
    config = CurationConfig(toxicity=ToxicityConfig(backend="profanity_check"), policy="rules")
    curate(extracted.head(5), config)  # warm-up: models load once
    curate(extracted.filter(pl.col("text").str.contains("[\u4e00-\u9fff]")).head(5), config)  # and the Chinese lexicon
    curation = cpu_seconds(curate, extracted, config, min_seconds=budget)
    n = pages.height
    return {
        "docs": n,
        "score_docs_per_cpu_s": round(n / scored),
        "score_docs_per_cpu_s_computing_signals": round(n / recomputed),
        "curation_docs_per_cpu_s": round(extracted.height / curation),
        "score_cpu_over_curation_cpu": round((scored / n) / (curation / extracted.height), 3),
    }


# ---------------------------------------------------------------------------------------------
# fastText wheels
# ---------------------------------------------------------------------------------------------


def wheel_probe(pages_path: Path, model_path: Path, config: ClassifierConfig) -> dict:
    """Run in a subprocess with one wheel first on sys.path."""
    import fasttext

    pages = pl.read_parquet(pages_path)
    result = {"fasttext": qc.fasttext_package(), "module": str(Path(fasttext.__file__).parent)}
    classifier = QualityClassifier.from_bytes(model_path.read_bytes())
    seconds = cpu_seconds(classifier.score, pages, min_seconds=1.0)
    result["score_docs_per_cpu_s"] = round(pages.height / seconds)
    try:
        wrapper = classifier._fasttext.predict("a b c", k=2)
        result["python_predict_on_numpy2"] = "ok" if len(wrapper[1]) == 2 else f"returned {wrapper!r}"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        result["python_predict_on_numpy2"] = f"{type(exc).__name__}: {str(exc)[:80]}"
    result["trains"] = hasattr(fasttext, "train_supervised")
    if not result["trains"]:
        return result
    examples = pages.select("doc_id", "url", "text", "lang", "keep", pl.col("^q_.*$"))
    started = time.process_time()
    first = train_classifier(examples, config)
    result["train_cpu_s"] = round(time.process_time() - started, 2)
    result["hash"], result["model_bytes"] = first.hash, len(first.model)
    result["held_back_balanced_accuracy"] = first.metrics["balanced_accuracy"]
    result["same_bytes_on_a_second_run"] = train_classifier(examples, config, cross_validations=()).model == first.model
    # The same fastText training with malloc's memory as it comes.
    data, _, _, _ = qc.prepare(examples, config)
    lines = qc.fasttext_lines(data.texts, data.keep, data.weight, config.balance_classes)
    models, failures = set(), 0
    for _ in range(8):
        try:
            models.add(qc.model_hash(qc.train_fasttext(lines, config, zeroed=False)))
        except RuntimeError:
            failures += 1
    result["unzeroed_8_trainings"] = {"distinct_models": len(models), "nan_failures": failures}
    return result


def compare_wheels(pages: pl.DataFrame, model: bytes, wheels: Path | None, smoke: bool) -> dict:
    targets = {"installed": None}
    if wheels is not None and wheels.is_dir():
        targets |= {path.name: path for path in sorted(wheels.iterdir()) if (path / "fasttext").is_dir()}
    results = {}
    with tempfile.TemporaryDirectory(prefix="quality-classifier-") as tmp:
        pages_path, model_path = Path(tmp) / "pages.parquet", Path(tmp) / "model.zip"
        pages.write_parquet(pages_path)
        model_path.write_bytes(model)
        for name, target in targets.items():
            env = dict(os.environ)
            if target is not None:
                env["PYTHONPATH"] = os.pathsep.join([str(target), str(REPO)])
            command = [sys.executable, str(Path(__file__)), "--wheel-probe", str(pages_path), str(model_path)]
            command += ["--smoke"] if smoke else []
            done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
            if done.returncode != 0:
                lines = done.stderr.strip().splitlines()
                results[name] = {"error": lines[-1] if lines else f"exit {done.returncode}"}
            else:
                results[name] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"  {name}: {json.dumps(results[name])}", flush=True)
    return results


# ---------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    loaded, counts = [], {}
    for name, crawl, labels in labelled_sets(args):
        pages, extracted, counts[name] = load_pages(crawl, read_labels(labels))
        # doc_ids are unique within a crawl only
        loaded.append([frame.with_columns((pl.lit(f"{name}:") + pl.col("doc_id")).alias("doc_id")) for frame in (pages, extracted)])
        print(f"crawl: {crawl}, labels: {labels}")
    pages, extracted = (pl.concat([item[i] for item in loaded], how="diagonal_relaxed") for i in (0, 1))
    print(f"pages: {json.dumps(counts)} ({time.perf_counter() - started:.0f} s to read, extract, identify, score)")
    base = SMOKE if args.smoke else DEFAULT

    folds = "whole sites (URL hosts) per fold" if args.cv == "site" else "stratified by (keep, lang)"
    print(f"\n1. choices: {args.repeats} x {args.folds}-fold cross-validation, {folds}")
    rows = compare_choices(pages, base, args)
    print()
    print_table(rows)

    print("\n2. the default config as the asset trains it (30 % held back)")
    report, model = held_back(pages, base)
    shown = ("balanced_accuracy", "precision", "recall", "drop_rejection", "roc_auc", "threshold", "n_train", "n_test")
    for key in (*shown, "model_bytes"):
        print(f"  {key}: {report['metrics'][key]}")
    print(f"  per language: {json.dumps(report['metrics']['per_language'])}")
    print(f"  confusion: {report['metrics']['confusion']}; threshold: {report['metrics']['threshold_reason']}")
    print(f"  hash {report['hash']}, same bytes on a second run: {report['same_bytes_on_a_second_run']}, "
          f"train {report['train_cpu_s']} CPU-s, fastText {report['metrics']['fasttext']}")
    model_path = out_dir("quality_classifier", "model.zip")
    model_path.parent.mkdir(parents=True, exist_ok=True)
    model_path.write_bytes(model)

    print("\n3. speed")
    timing = speed(pages, extracted, model, args.smoke)
    print(f"  {json.dumps(timing)}")

    print("\n4. fastText wheels")
    wheel_dirs = args.wheels or (None if args.smoke else out_dir("fasttext-wheels"))
    wheels = compare_wheels(pages, model, wheel_dirs, args.smoke)
    return {"pages": counts, "choices": rows, "default": report, "speed": timing, "wheels": wheels}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.wheel_probe:
        print(json.dumps(wheel_probe(*args.wheel_probe, SMOKE if args.smoke else DEFAULT)))
        return 0
    try:
        result = run(args)
    except RuntimeError as exc:
        print(f"bench/quality_classifier.py: {exc}", file=sys.stderr)
        return 2
    print()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
