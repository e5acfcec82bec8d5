"""How the quality classifier's keep/drop decisions transfer: source-out against by-site, per labelled set, language
and input path.

Usage::

    .venv/bin/python bench/quality_transfer.py [--variants default,before,...] [--folds 8] [--pages FILE]
                                               [--scores DIR] [--smoke]

The pages are the shipped training pages (`lm_assets/quality_model/training_pages.parquet`: every labelled
page of bench/dev_set, bench/transfer_set and bench/web_set, and every text of bench/text_set, as tokens and
signals), so it needs no crawl. Each page's source is the collection it was labelled in (a Debian package, a
repository of saved pages, the blogs as one, a repository of crawled texts).

For each variant, two nested cross-validations, each with `--folds` outer folds:
- **source-out**: every source whole in one fold, as a crawl nobody here labelled would be;
- **by site**: every site whole in one fold (sources are split across folds).
Each outer fold is scored by a classifier trained, exactly as the shipped one is (its own inner
cross-validation, calibration and cuts included), on the other folds only, and decided at that
classifier's own cuts: the figures are what a user of a classifier trained without their pages would get.
Every held-out page is scored on two input paths:
- **html**: as the page came (a page with HTML by the HTML stacker; a text of the text set by the text model);
- **text**: its extracted text as a JSON Lines document without HTML (no `q_html_*` or `q_title_*` signal),
  scored by the text model: what a corpus that others extracted gets.
Printed per labelled set and language, the two paths side by side: balanced accuracy source-out and by site,
good retention (KEEP pages kept), junk rejection (DROP pages dropped) and ROC AUC source-out; then each
path's reliability curve per language (source-out scores in ten bins against the share labelled KEEP).

Variants (`--variants`, comma-separated):
- `default`: the shipped config (`ClassifierConfig()`);
- `shipped-before`: the config shipped before the text path: no token signals, one model for every
  document, one cut a language, 94 % retention floor;
- `before`: an older config: inner folds by site, no calibration;
- `text`: fastText alone, no rule signals;
- `logistic`: the stacker a logistic regression instead of gradient boosting;
- `logistic-strong`: the same with C = 0.1 (stronger regularization);
- `no-retention-floor`: the threshold of highest balanced accuracy, without a retention floor;
- `retention-94`: the cuts among those that keep 94 % of the good pages (the floor before);
- `no-calibration`: inner folds by source, scores not calibrated;
- `site-folds`: inner folds by site, scores calibrated;
- `no-text-model`: one stacker for every document, a document without HTML read as a page that is all text;
- `no-token-signals`: without the spam and listing signals of the tokens (`token_signals.py`);
- `text-model-no-url`: the text model without the URL's signals too;
- `one-cut-a-language`: no cuts by page kind (article-like or link-heavy);
- `ngram-lm`: the shipped config plus one page signal, the mean token log-probability under a bigram
  language model of the KEEP pages of other sources in the page's language (`benchlib/ngram_lm.py`, the
  CCNet perplexity signal with those pages as reference text): for the training pages from models of the
  other sources of the training folds, for the scored fold from a model of all training folds.

`--pages` reads other training pages (a training_pages.parquet); `--scores DIR` writes each variant's
out-of-fold scores and decisions per page to `DIR/<variant>.parquet`. `--smoke`: 300 pages, 3 folds, the
default variant. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
from benchlib.documents import as_text_documents
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
    "retention-94": {"min_keep_retention": 0.94},
    "no-calibration": {"calibrate": False},
    "site-folds": {"folds_by": "site"},
    "ngram-lm": {},
    "no-text-model": {"text_model": False},
    "no-token-signals": {"token_signals": ()},
    "shipped-before": {"token_signals": (), "text_model": False, "cut_by_link_share": None, "min_keep_retention": 0.94},
    "one-cut-a-language": {"cut_by_link_share": None},
    "text-model-no-url": {"text_model_without": ("q_html_", "q_title_", "q_url_")},
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


PATHS = ("html", "text")


def nested_decisions(pages: pl.DataFrame, config: qc.ClassifierConfig, by: str, folds: int,
                     lm_signal: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """Per input path, the calibrated scores and keep decisions of every page, each by a classifier trained
    on the other folds: `html` as the page came (text-set rows have no HTML), `text` read as a document
    without HTML."""
    fold = outer_folds(pages, by, folds)
    out = {path: (np.zeros(pages.height), np.zeros(pages.height, dtype=bool)) for path in PATHS}
    for f in range(folds):
        inside = fold != f
        fold_pages = with_lm_signal(pages, inside, ~inside, folds) if lm_signal else pages
        trained = qc.train_classifier(fold_pages.filter(pl.Series(inside)), replace(config, test_fraction=0.0),
                                      cross_validations=())  # fmt: skip
        classifier = qc.QualityClassifier.from_bytes(trained.model)
        held = fold_pages.filter(pl.Series(~inside))
        for path in PATHS:
            docs = held if path == "html" else as_text_documents(held)
            scores, models = classifier.score_with_models(docs)
            out[path][0][~inside] = scores
            out[path][1][~inside] = scores >= classifier.thresholds_for(docs["lang"].to_list(), models,
                                                                        classifier.page_kinds(docs))
    return out


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


def print_variant(name: str, runs: dict) -> None:
    """One row per labelled set and language: the HTML path and the text path side by side."""
    print(f"\n{name}: balanced accuracy source-out | by site, then good retention, junk rejection and ROC AUC "
          "source-out; HTML path, then text path (the page's text as a document without HTML)")
    html, text = runs["source"]["html"], runs["source"]["text"]
    for key, row in html.items():
        cells = []
        for path in PATHS:
            src = runs["source"][path].get(key)
            site = runs["site"][path].get(key, {}).get("balanced_accuracy")
            cells.append(f"{src['balanced_accuracy']:.3f} | {site:.3f}  {src['good_retention']:.3f} "
                         f"{src['junk_rejection']:.3f} {src['roc_auc']:.3f}" if src and site is not None else " " * 33)
        print(f"  {key:<12} {row['pages']:>5}   html {cells[0]}   text {cells[1]}")


def reliability_table(pages: pl.DataFrame, scores: np.ndarray, bins: int = 10) -> dict:
    """Per language, the source-out scores in equal bins: pages, mean score and the share labelled KEEP (a
    calibrated model's two columns agree)."""
    truth, langs = pages["keep"].to_numpy(), pages["lang"].to_numpy()
    which = np.minimum((scores * bins).astype(int), bins - 1)
    out = {}
    for lang in ("en", "zh"):
        rows = []
        for b in range(bins):
            inside = (langs == lang) & (which == b)
            if inside.any():
                rows.append({"bin": f"{b / bins:.1f}-{(b + 1) / bins:.1f}", "pages": int(inside.sum()),
                             "mean_score": round(float(scores[inside].mean()), 3),
                             "keep_share": round(float(truth[inside].mean()), 3)})
        out[lang] = rows
    return out


def print_reliability(name: str, tables: dict) -> None:
    print(f"\n{name}: reliability source-out (bin: pages, mean score -> share labelled KEEP)")
    for path, by_lang in tables.items():
        for lang, rows in by_lang.items():
            cells = "  ".join(f"{r['bin']}: {r['pages']} {r['mean_score']:.2f}->{r['keep_share']:.2f}" for r in rows)
            print(f"  {path:<4} {lang}  {cells}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="default,before")
    parser.add_argument("--folds", type=int, default=8)
    parser.add_argument("--pages", type=Path, default=None,
                        help="training pages to read instead of the shipped ones (a training_pages.parquet)")
    parser.add_argument("--scores", type=Path, default=None,
                        help="a folder to write each variant's out-of-fold scores and decisions to (<variant>.parquet)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    pages = pl.read_parquet(args.pages) if args.pages else shipped.training_pages()
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
        decided = {by: nested_decisions(pages, config, by, args.folds, name in WITH_LM_SIGNAL) for by in ("source", "site")}
        runs = {by: {path: figures(pages, *d) for path, d in paths.items()} for by, paths in decided.items()}
        curves = {path: reliability_table(pages, decided["source"][path][0]) for path in PATHS}
        print_variant(name, runs)
        print_reliability(name, curves)
        print(f"  ({time.process_time() - started:.0f} CPU-s)", flush=True)
        results[name] = {"config": VARIANTS[name], "source_out": runs["source"], "by_site": runs["site"],
                         "reliability_source_out": curves}
        if args.scores:
            args.scores.mkdir(parents=True, exist_ok=True)
            pages.select("doc_id", "lang", "keep", "label_set", "collection").with_columns(
                *[pl.Series(f"{by}_{path}", decided[by][path][0]) for by in decided for path in PATHS],
                *[pl.Series(f"{by}_{path}_keep", decided[by][path][1]) for by in decided for path in PATHS],
            ).write_parquet(args.scores / f"{name}.parquet")
    print(json.dumps({"command": command_line(), "pages": pages.height, "folds": args.folds, "variants": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
