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
sys.path.insert(0, str(REPO / "scripts"))

from lm_assets.corpus.audit.agreement import read_labels  # noqa: E402
from lm_assets.corpus.quality import shipped as quality_model  # noqa: E402


# The real-web set's collections, as bench/web_set/README.md lists them: each repository of saved pages
# is one, the repositories of a few portal test pages together are one, and every other repository is
# one of the blogs, which are one collection (one template family, one era, one labeller).
WEB_COLLECTIONS = {
    repo: repo for repo in ("marridG/2019-EE208", "charnugagoo/WebCrawler", "microlinkhq/metascraper",
                            "hhursev/recipe-scrapers", "postlight/parser", "scrapinghub/autopager",
                            "virus-warnning/twnews")
} | {
    repo: "portal test pages" for repo in ("zhxieml/IEE-homework", "FenTheFox/499T", "jhy/jsoup", "google/gumbo-parser",
                                           "scrapinghub/extruct", "Justinyj/ruyiwebcrawl", "jianglibo/resp-me-templates")
}


def collections(label_set: str, labels_path: Path) -> dict[str, str]:
    """The collection (source) of every labelled URL: a Debian package for the manuals, a repository (or
    the blogs) for the real web."""
    out = {}
    for line in labels_path.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            row = json.loads(line)
            out[row["url"]] = (WEB_COLLECTIONS.get(row["repo"], "blogs") if label_set == "web"
                               else f"{label_set}:{row['package']}")  # fmt: skip
    return out


def with_collections(pages, sets) -> "quality_model.pl.DataFrame":
    """`pages` with the `collection` of each page, from its label set's labels."""
    import polars as pl

    found = {(name, url): source for name, _, labels_path in sets for url, source in collections(name, labels_path).items()}
    column = [found.get((label_set, url)) for label_set, url in zip(pages["label_set"], pages["url"])]
    if None in column:
        raise SystemExit(f"{column.count(None)} training pages match no label's URL")
    return pages.with_columns(pl.Series("collection", column, dtype=pl.String))


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
    return with_collections(pl.concat(frames, how="diagonal_relaxed"), labelled_sets())


TEXT_LABELS = REPO / "bench" / "text_set" / "labels.jsonl"


def text_set_pages(texts: Path) -> "quality_model.pl.DataFrame":
    """The labelled text set (bench/text_set/, built by scripts/build_text_set.py into `texts`) as training pages:
    each text read as the pipeline reads a JSON Lines shard, past language ID, its repository its collection."""
    import polars as pl
    from build_text_set import document_url

    rows = [json.loads(line) for line in TEXT_LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]
    labels = pl.DataFrame({"url": [document_url(r) for r in rows], "label": [r["label"] for r in rows],
                           "confidence": [r["confidence"] for r in rows]})
    examples = quality_model.labelled_examples([texts], labels, html_only=False)
    print(f"text: {labels.height} labels, {examples.height} texts past language ID ({int(examples['keep'].sum())} KEEP)")
    repo_of = {document_url(r): r["repo"] for r in rows}
    examples = examples.with_columns(
        pl.concat_str(pl.lit("text/"), "doc_id").alias("doc_id"),
        pl.col("url").replace_strict(repo_of, return_dtype=pl.String).alias("collection"),
    )
    return quality_model.compact_pages(examples, "text")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", action="store_true", help="rebuild the training pages from the labelled crawls")
    parser.add_argument("--check", action="store_true", help="retrain and compare with the shipped classifier")
    parser.add_argument("--out", type=Path, default=quality_model.SHIPPED_FOLDER)
    parser.add_argument("--text-set", type=Path, default=None, metavar="TEXTS",
                        help="replace the text set's pages with those of TEXTS (texts.jsonl of scripts/build_text_set.py)")
    args = parser.parse_args(argv)
    pages = build_pages() if args.pages else quality_model.training_pages()
    if args.text_set is not None:
        import polars as pl

        pages = pl.concat([pages.filter(pl.col("label_set") != "text"), text_set_pages(args.text_set)],
                          how="diagonal_relaxed")
    trained = quality_model.build(pages)
    if args.check:
        shipped = json.loads((quality_model.SHIPPED_FOLDER / quality_model.INFO_FILE).read_text())["hash"]
        print(f"retrained {trained.hash}, shipped {shipped}: {'same' if trained.hash == shipped else 'DIFFERENT'}")
        return 0 if trained.hash == shipped else 1
    info = quality_model.write(args.out, pages, trained)
    metrics = info["metrics"]
    print(f"quality classifier {info['hash']} on {info['pages']} pages ({info['by_label_set']}); "
          f"thresholds {metrics['thresholds']}; written to {args.out}")
    for name, cv in (("source-out", metrics["cross_validated"]), ("by site", metrics["cross_validated_by_site"])):
        print(f"  {name:<10} balanced accuracy {cv['balanced_accuracy']}, per language "
              + ", ".join(f"{lang} {v['balanced_accuracy']}" for lang, v in cv["per_language"].items())
              + ", per set " + ", ".join(f"{s} {v['balanced_accuracy']}" for s, v in cv["per_label_set"].items()))
    print(f"  gap (by site - source-out): {metrics['transfer_gap']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
