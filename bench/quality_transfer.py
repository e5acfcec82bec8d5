"""How the quality classifier's keep/drop decisions transfer: source-out against by-site, per labelled set and language.

Usage::

    .venv/bin/python bench/quality_transfer.py [--variants default,before,...] [--folds 8] [--smoke]

The pages are the shipped training pages (`lm_assets/quality_model/training_pages.parquet`: every labelled
page of bench/dev_set, bench/transfer_set and bench/web_set, as tokens and signals), so it needs no crawl.
Each page's source is the collection it was labelled in (a Debian package, a repository of saved pages,
the blogs as one).

For each variant, two nested cross-validations, each with `--folds` outer folds:
- **source-out**: every source whole in one fold, as a crawl nobody here labelled would be;
- **by site**: every site whole in one fold (sources are split across folds).
Each outer fold is scored by a classifier trained, exactly as the shipped one is (its own inner
cross-validation, calibration and per-language thresholds included), on the other folds only, and
decided at that classifier's own thresholds: the figures are what a user of a classifier trained
without their pages would get. Printed per labelled set and language: balanced accuracy, good
retention (KEEP pages kept), junk rejection (DROP pages dropped), ROC AUC, and by site minus
source-out (the gap).

Variants (`--variants`, comma-separated):
- `default`: the shipped config (`ClassifierConfig()`);
- `before`: the previous config: inner folds by site, no calibration;
- `text`: fastText alone, no rule signals;
- `logistic`: the stacker a logistic regression instead of gradient boosting;
- `logistic-strong`: the same with C = 0.1 (stronger regularization);
- `no-retention-floor`: the threshold of highest balanced accuracy, without keeping 94 % of the good pages;
- `retention-90`: the same among the cuts that keep 90 % of them;
- `no-calibration`: inner folds by source, scores not calibrated;
- `site-folds`: inner folds by site, scores calibrated.
- `ngram-lm`: the shipped config plus one page signal, the mean token log-probability under a bigram
  language model of the KEEP pages of other sources in the page's language (`benchlib/ngram_lm.py`, the
  CCNet perplexity signal with those pages as reference text): for the training pages from models of the
  other sources of the training folds, for the scored fold from a model of all training folds.

`--smoke`: 300 pages, 3 folds, the default variant. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

import numpy as np
import polars as pl
from benchlib.paths import command_line

import lm_assets.corpus.quality.classifier as qc
from lm_assets.corpus.quality import shipped

VARIANTS = {
    "default": {},
    "before": {"folds_by": "site", "calibrate": False},
    "text": {"features": "text"},
    "logistic": {"stacker": "logistic"},
    "logistic-strong": {"stacker": "logistic", "stacker_c": 0.1},
    "no-retention-floor": {"min_keep_retention": None},
    "retention-90": {"min_keep_retention": 0.9},
    "no-calibration": {"calibrate": False},
    "site-folds": {"folds_by": "site"},
    "ngram-lm": {},
}
# Variants that add a signal computed from the training folds' pages.
LM_SIGNAL = "q_lm_keep_log_prob"
WITH_LM_SIGNAL = {"ngram-lm"}


def outer_folds(pages: pl.DataFrame, by: str, folds: int, seed: int = 7) -> np.ndarray:
    strata = [(bool(k), lang) for k, lang in zip(pages["keep"], pages["lang"])]
    groups = qc.sources(pages) if by == "source" else qc.sites(pages)
    return qc.group_fold_ids(groups, strata, folds, seed)


def with_lm_signal(pages: pl.DataFrame, reference: np.ndarray, scored: np.ndarray, inner_folds: int) -> pl.DataFrame:
    """`pages` with LM_SIGNAL: the `scored` pages' from a model of all `reference` pages, each reference
    page's from a model of the reference pages of the other sources (`inner_folds` folds by source)."""
    from benchlib.ngram_lm import keep_lm_signal

    tokens, langs, keep = pages["tokens"].to_list(), pages["lang"].to_list(), pages["keep"].to_numpy()
    values = keep_lm_signal(tokens, langs, keep, reference, scored)
    inner = np.full(pages.height, -1)
    inner[reference] = outer_folds(pages.filter(pl.Series(reference)), "source", inner_folds, seed=11)
    for f in range(inner_folds):
        values[inner == f] = keep_lm_signal(tokens, langs, keep, reference & (inner != f), inner == f)[inner == f]
    return pages.with_columns(pl.Series(LM_SIGNAL, np.nan_to_num(values, nan=float(np.nanmedian(values)))))


def nested_decisions(pages: pl.DataFrame, config: qc.ClassifierConfig, by: str, folds: int,
                     lm_signal: bool = False) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Calibrated scores and keep decisions of every page, each by a classifier trained on the other folds."""
    fold = outer_folds(pages, by, folds)
    scores, keep = np.zeros(pages.height), np.zeros(pages.height, dtype=bool)
    for f in range(folds):
        inside = fold != f
        fold_pages = with_lm_signal(pages, inside, ~inside, folds) if lm_signal else pages
        trained = qc.train_classifier(fold_pages.filter(pl.Series(inside)), replace(config, test_fraction=0.0),
                                      cross_validations=())  # fmt: skip
        classifier = qc.QualityClassifier.from_bytes(trained.model)
        held = fold_pages.filter(pl.Series(~inside))
        scores[~inside] = classifier.score(held)
        keep[~inside] = scores[~inside] >= classifier.thresholds_for(held["lang"].to_list())
    return scores, keep


def figures(pages: pl.DataFrame, scores: np.ndarray, decided: np.ndarray) -> dict:
    """Per labelled set and language (and pooled): balanced accuracy, retention, rejection, ROC AUC."""
    from sklearn.metrics import roc_auc_score

    truth = pages["keep"].to_numpy()
    out = {}
    for name in ["all", *sorted(pages["label_set"].unique())]:
        for lang in ["all", "en", "zh"]:
            rows = np.ones(pages.height, dtype=bool)
            if name != "all":
                rows &= (pages["label_set"] == name).to_numpy()
            if lang != "all":
                rows &= (pages["lang"] == lang).to_numpy()
            k, d, s = truth[rows], decided[rows], scores[rows]
            if not rows.any() or k.all() or not k.any():
                continue
            out[f"{name}/{lang}"] = {
                "pages": int(rows.sum()),
                "balanced_accuracy": round(float(qc.balanced_accuracy(k, d)), 4),
                "good_retention": round(float(d[k].mean()), 4),
                "junk_rejection": round(float((~d[~k]).mean()), 4),
                "roc_auc": round(float(roc_auc_score(k, s)), 4),
            }
    return out


def print_variant(name: str, source_out: dict, by_site: dict) -> None:
    print(f"\n{name}: balanced accuracy source-out | by site | gap;  good retention, junk rejection, ROC AUC (source-out)")
    for key, row in source_out.items():
        site = by_site.get(key, {}).get("balanced_accuracy")
        gap = f"{site - row['balanced_accuracy']:+.3f}" if site is not None else "   -  "
        site = f"{site:.3f}" if site is not None else "  -  "
        print(f"  {key:<15} {row['pages']:>5} pages  {row['balanced_accuracy']:.3f} | {site} | {gap}"
              f"   {row['good_retention']:.3f}  {row['junk_rejection']:.3f}  {row['roc_auc']:.3f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="default,before")
    parser.add_argument("--folds", type=int, default=8)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    pages = shipped.training_pages()
    if args.smoke:
        pages = pages.sample(300, seed=0).sort("doc_id")
        args.folds, args.variants = 3, "default"
    unknown = set(args.variants.split(",")) - VARIANTS.keys()
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {sorted(VARIANTS)}")
    print(f"{pages.height} labelled pages, {len(set(qc.sources(pages)))} sources, {len(set(qc.sites(pages)))} sites; "
          f"{args.folds} outer folds")  # fmt: skip
    results = {}
    for name in args.variants.split(","):
        config = replace(qc.ClassifierConfig(), **VARIANTS[name])
        started = time.process_time()
        runs = {by: figures(pages, *nested_decisions(pages, config, by, args.folds, name in WITH_LM_SIGNAL))
                for by in ("source", "site")}
        print_variant(name, runs["source"], runs["site"])
        print(f"  ({time.process_time() - started:.0f} CPU-s)", flush=True)
        results[name] = {"config": VARIANTS[name], "source_out": runs["source"], "by_site": runs["site"]}
    print(json.dumps({"command": command_line(), "pages": pages.height, "folds": args.folds, "variants": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
