"""The crawls the benches read: the labelled development and transfer crawls, the real-web crawl, any other.

A crawl is a folder of gzip WARC shards `crawl-*.warc.gz` and a `truth.json` of its known duplicates, as
`bench/build_crawl.py` writes it. The labelled crawls are built from Debian documentation packages into
`$OUT/<name>-crawl` when missing, and reused while their manifest matches the build settings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .crawl.builder import CrawlSpec, Site, build_crawl
from .crawl.debian import DEFAULT_CACHE, package
from .paths import REPO, out_dir, smoke_crawl

SHARD_GLOB = "crawl-*.warc.gz"
TEXT_SHARD_GLOB = "crawl-*.jsonl"


@dataclass(frozen=True)
class LabelledCrawl:
    """A crawl of Debian documentation packages, and the labels of its pages."""

    name: str
    packages: str
    labels: Path
    seed: int
    docs_per_shard: int = 500
    max_pages: int | None = None  # None: every page of the packages

    @property
    def folder(self) -> Path:
        return out_dir(f"{self.name}-crawl")

    @property
    def spec(self) -> CrawlSpec:
        return CrawlSpec(seed=self.seed, docs_per_shard=self.docs_per_shard, max_pages=self.max_pages)


# The labelled development crawl (bench/dev_set/README.md): English and Chinese technical manuals.
DEV_CRAWL = LabelledCrawl(
    "dev",
    "sqlite3-doc,python-sqlalchemy-doc,python-flask-doc,python-jinja2-doc,git-doc,debian-policy,"
    "debian-handbook,harden-doc,installation-guide-amd64,lilypond-doc-html-zh,libreoffice-help-zh-cn",
    REPO / "bench" / "dev_set" / "labels.jsonl", seed=0, max_pages=4000,
)
# Twelve other packages, labelled the same way (bench/transfer_set/README.md).
TRANSFER_CRAWL = LabelledCrawl(
    "transfer",
    "python-requests-doc,python-click-doc,python-werkzeug-doc,python-pytest-doc,vim-doc,bash-doc,debian-history,"
    "developers-reference,apache2-doc,kicad-doc-zh,linuxcnc-doc-zh-cn,libreoffice-help-zh-tw",
    REPO / "bench" / "transfer_set" / "labels.jsonl", seed=1,
)
LABELLED_CRAWLS = {crawl.name: crawl for crawl in (DEV_CRAWL, TRANSFER_CRAWL)}
# Real web pages from public repositories of saved pages, rebuilt by scripts/build_web_crawl.py
# (bench/web_set/README.md); the clones are read from $LM_ASSETS_WEB_REPOS.
WEB_LABELS = REPO / "bench" / "web_set" / "labels.jsonl"
WEB_REPOS = Path(os.environ.get("LM_ASSETS_WEB_REPOS", "/work/.mirror"))


def find_shards(crawl: Path) -> list[Path]:
    """A crawl's shards: WARC, or JSON Lines of extracted texts (`curation_quality.py --text-path`)."""
    return sorted([*crawl.glob(SHARD_GLOB), *crawl.glob(TEXT_SHARD_GLOB)])


def is_crawl(crawl: Path) -> bool:
    return bool(find_shards(crawl)) and (crawl / "truth.json").is_file()


def reusable_crawl(crawl: Path, spec: LabelledCrawl) -> bool:
    """A crawl in `crawl` that `bench/build_crawl.py` built with `spec`'s packages and settings."""
    try:
        manifest = json.loads((crawl / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    shards = {s["file"] for s in manifest.get("shards", [])}
    settings = json.loads(json.dumps(asdict(spec.spec)))  # as the manifest stores them (tuples as lists)
    return (
        is_crawl(crawl)
        and all(manifest.get(key) == value for key, value in settings.items())
        and [p["name"] for p in manifest.get("packages", [])] == spec.packages.split(",")
        and shards == {p.name for p in find_shards(crawl)}
    )


def package_sites(packages: str, cache: Path = DEFAULT_CACHE) -> list[Site]:
    sites = []
    for name in packages.split(","):
        found = package(name, cache)
        sites.append(Site(name, found.pages, found.images, found.manifest()))
    return sites


def labelled_crawl(spec: LabelledCrawl, cache: Path = DEFAULT_CACHE) -> Path:
    """`spec`'s crawl, reused from its folder or built there."""
    if reusable_crawl(spec.folder, spec):
        print(f"reusing the crawl in {spec.folder}")
        return spec.folder
    print(f"building the {spec.name} crawl in {spec.folder}", flush=True)
    manifest = build_crawl(spec.folder, package_sites(spec.packages, cache), spec.spec)
    print(f"built {manifest['records_total']} records in {len(manifest['shards'])} shards", flush=True)
    return spec.folder


def web_crawl() -> Path:
    """The labelled real-web crawl, reused from `$OUT/web-crawl` or rebuilt there from its sources."""
    folder = out_dir("web-crawl")
    if is_crawl(folder):
        print(f"reusing the crawl in {folder}")
        return folder
    command = [sys.executable, str(REPO / "scripts" / "build_web_crawl.py"), "--repos", str(WEB_REPOS), "--out", str(folder)]
    print(f"building the crawl: {' '.join(command)}", flush=True)
    if subprocess.run(command, check=False).returncode != 0 or not is_crawl(folder):
        raise RuntimeError(f"cannot build the web crawl (clones of its source repositories under {WEB_REPOS}?)")
    return folder


def resolve_crawl(args: argparse.Namespace) -> Path:
    """`--crawl` if given, the smoke crawl under `--smoke`, else the development crawl."""
    if args.crawl is not None:
        crawl = args.crawl.resolve()
        if not is_crawl(crawl):
            raise RuntimeError(f"{crawl} is not a crawl folder (no {SHARD_GLOB} or no truth.json)")
        return crawl
    if args.smoke:
        return smoke_crawl()
    return labelled_crawl(DEV_CRAWL)
