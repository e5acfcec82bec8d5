"""Build a benchmark crawl (gzip WARC shards with known duplicates) from Debian documentation packages.

Usage::

    .venv/bin/python bench/build_crawl.py --out DIR (--packages a,b,... | --site NAME=FOLDER ...)
        [--seed N] [--docs-per-shard N] [--max-pages N] [--cache DIR] [--smoke]

Each package (or each `--site` folder of HTML files) is one site; `benchlib/crawl/builder.py` says what the
crawl holds and what `truth.json` and `manifest.json` record. Packages come from `--cache` (default
`~/.cache/lm-bench-debs`), or `apt-get download` into it. The benches build their labelled crawls the same
way (`benchlib.crawls.labelled_crawl`), so this script is for other crawls. `--smoke` builds, offline, a
crawl of the test slice's pages as one site into `$OUT/built-crawl`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchlib.crawl.builder import CrawlSpec, Site, build_crawl
from benchlib.crawl.debian import DEFAULT_CACHE, site_pages
from benchlib.crawls import package_sites
from benchlib.paths import TEST_SLICE, out_dir

from lm_assets.corpus.ingest.readers import read_shard


def folder_site(argument: str) -> Site:
    name, _, folder = argument.partition("=")
    if not folder or not Path(folder).is_dir():
        raise SystemExit(f"--site wants NAME=FOLDER with an existing folder, got {argument!r}")
    _, pages, images = site_pages(name, Path(folder))
    return Site(name, tuple(pages), tuple(images), {"folder": str(Path(folder).resolve()), "html_files": len(pages)})


def smoke_site() -> str:
    """The test slice's HTML pages written as files of one site folder; returns its `--site` argument."""
    folder = out_dir("built-crawl-pages")
    for index, html in enumerate(read_shard(TEST_SLICE / "slice.warc.gz").documents["html"].drop_nulls()):
        path = folder / f"page-{index:03d}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    return f"slice={folder}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--packages", help="Debian packages, comma-separated, one site each")
    parser.add_argument("--site", action="append", default=[], help="NAME=FOLDER of HTML files (repeatable)")
    parser.add_argument("--seed", type=int, default=CrawlSpec.seed)
    parser.add_argument("--docs-per-shard", type=int, default=CrawlSpec.docs_per_shard)
    parser.add_argument("--max-pages", type=int, help="a seeded sample of this many pages (default: all)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where .deb files are kept")
    parser.add_argument("--smoke", action="store_true", help="the test slice's pages as one site, offline")
    args = parser.parse_args(argv)
    if args.smoke:
        args.site, args.out, args.docs_per_shard = [smoke_site()], args.out or out_dir("built-crawl"), 20
    if args.out is None or not (args.packages or args.site):
        parser.error("give --out and --packages or --site (or --smoke)")
    sites = (package_sites(args.packages, args.cache) if args.packages else []) + [folder_site(s) for s in args.site]
    spec = CrawlSpec(seed=args.seed, docs_per_shard=args.docs_per_shard, max_pages=args.max_pages)
    started = time.perf_counter()
    manifest = build_crawl(args.out, sites, spec)
    kinds = manifest["records_by_kind"]
    print(
        f"{manifest['source_pages']} pages from {len(sites)} sites -> {len(manifest['shards'])} shards, "
        f"{manifest['records_total']} records ({kinds.get('html_original', 0)} original, {kinds.get('html_exact', 0)} "
        f"exact, {kinds.get('html_near', 0)} near, {kinds.get('request', 0)} requests), "
        f"{manifest['total_bytes'] / 1e6:.1f} MB gzip ({manifest['html_payload_bytes'] / 1e6:.1f} MB HTML) "
        f"in {time.perf_counter() - started:.1f} s -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
