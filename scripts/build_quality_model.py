"""Build the shipped quality classifier (lm_assets/quality_model/, see lm_assets/corpus/quality/shipped.py).

Usage::

    .venv/bin/python scripts/build_quality_model.py            # retrain from the shipped training pages
    .venv/bin/python scripts/build_quality_model.py --pages    # first rebuild the pages from the labelled crawls
    .venv/bin/python scripts/build_quality_model.py --check    # retrain and compare with the shipped hash

The default (`make quality-model`) needs nothing but the repository: it trains on
`training_pages.parquet` with the shipped config and seed and writes `classifier.zip` and
`classifier.json`. `--pages` first rebuilds `training_pages.parquet` from the labelled crawls:
bench/dev_set and bench/transfer_set (Debian manuals, built by bench/build_crawl.py into
`$OUT`, as the benches build them) and bench/web_set (real web pages, built from their source
repositories by scripts/build_web_crawl.py into `$OUT/web-crawl`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from lm_assets.corpus.audit.curation_eval import read_labels  # noqa: E402
from lm_assets.corpus.quality import shipped as quality_model  # noqa: E402


def labelled_sets() -> list[tuple[str, Path, Path]]:
    """(label set, crawl folder, labels) of every labelled crawl, building the crawls that are missing."""
    from benchlib.paths import out_dir
    from benchlib.crawls import LABELLED_CRAWLS, find_shards, labelled_crawl

    sets = [(name, labelled_crawl(spec), spec.labels) for name, spec in LABELLED_CRAWLS.items()]
    web, web_labels = out_dir("web-crawl"), REPO / "bench" / "web_set" / "labels.jsonl"
    if web_labels.exists():
        if not any(web.glob("*.warc.gz")):
            raise SystemExit(f"no web crawl in {web}: build it with scripts/build_web_crawl.py --out {web}")
        sets.append(("web", web, web_labels))
    for _, crawl, _ in sets:
        assert find_shards(crawl), crawl
    return sets


def build_pages() -> "quality_model.pl.DataFrame":
    import polars as pl
    from benchlib.crawls import find_shards

    frames = []
    for name, crawl, labels_path in labelled_sets():
        labels = read_labels(labels_path)
        examples = quality_model.labelled_examples(find_shards(crawl), labels)
        print(f"{name}: {labels.height} labels, {examples.height} pages past language ID "
              f"({int(examples['keep'].sum())} KEEP)")
        # Shards of different crawls share names, so doc_ids are made unique by the label set.
        examples = examples.with_columns(pl.concat_str(pl.lit(f"{name}/"), "doc_id").alias("doc_id"))
        frames.append(quality_model.compact_pages(examples, name))
    return pl.concat(frames, how="diagonal_relaxed")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", action="store_true", help="rebuild the training pages from the labelled crawls")
    parser.add_argument("--check", action="store_true", help="retrain and compare with the shipped classifier")
    parser.add_argument("--out", type=Path, default=quality_model.SHIPPED_FOLDER)
    args = parser.parse_args(argv)
    pages = build_pages() if args.pages else quality_model.training_pages()
    trained = quality_model.build(pages)
    if args.check:
        shipped = json.loads((quality_model.SHIPPED_FOLDER / quality_model.INFO_FILE).read_text())["hash"]
        print(f"retrained {trained.hash}, shipped {shipped}: {'same' if trained.hash == shipped else 'DIFFERENT'}")
        return 0 if trained.hash == shipped else 1
    info = quality_model.write(args.out, pages, trained)
    cv = info["metrics"]["cross_validated"]
    print(f"quality classifier {info['hash']} on {info['pages']} pages ({info['by_label_set']}): "
          f"cross-validated by site, balanced accuracy {cv['balanced_accuracy']}, per language "
          + ", ".join(f"{lang} {v['balanced_accuracy']}" for lang, v in cv["per_language"].items())
          + f"; thresholds {info['metrics']['thresholds']}; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
