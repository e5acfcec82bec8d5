"""Main-content extraction quality on Mozilla Readability's test pages, ours beside trafilatura.

Usage::

    .venv/bin/python bench/extraction_quality.py --pages PATH [--extractors a,b,...] [--show N]
    .venv/bin/python bench/extraction_quality.py --smoke

`--pages` is Readability's test pages (Apache-2.0): the `test/test-pages` folder of a clone of
https://github.com/mozilla/readability (`<name>/source.html` and `<name>/expected.html`), or a tar.gz
of it; `$READABILITY_TEST_PAGES` when not given. They are not shipped: the bench says where to get
them when they are missing. `--smoke`
scores two small pages written here instead (`SMOKE_PAGES`), with every extractor but rs_trafilatura,
and fails if one of them is missing. It writes nothing.

The reference text of a page is the text of `expected.html`, as a browser lays it out: text nodes
joined as written, a line break around every block element, whitespace collapsed. Every extractor
gets `source.html` and returns plain text. Both are cut into whitespace tokens; a page's score is
the precision and recall of its 4-gram token shingles (as multisets: a shingle repeated in the
extraction counts as often as it occurs in the reference), and F1 from them. A text with fewer
than 4 tokens is one shingle. An empty extraction of a non-empty reference scores 0. Figures are
means over pages (macro averages), and docs/s is pages per CPU-second of the extractor alone
(`time.process_time()`), one core, imports and warm-up before the clock.

Extractors (those whose package is missing are listed as skipped):

- `lm_assets`: the pipeline's `extract_html` with the default `ExtractConfig`, exactly what
  `extracted_shard` runs (`main_content`: selectolax/lexbor DOM, our pruning and layout);
- `lm_assets:<extractor>`: the same with `ExtractConfig(extractor=...)`: `resiliparse` (its own
  `main_content=True` boilerplate removal, the previous default) or `all_text` (every visible text);
- `trafilatura`, `trafilatura:precision`, `trafilatura:recall`: `trafilatura.extract` with its
  defaults, `favor_precision=True` or `favor_recall=True` (comments and tables as its defaults);
- `rs_trafilatura`: the Rust port's `extract`, its `content_html` laid out as the reference is (its
  `main_content` joins paragraphs without a separator); its only wheels are for CPython 3.12, so run
  the bench with a 3.12 interpreter that has it.

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PAGES_VARIABLE = "READABILITY_TEST_PAGES"
MISSING_PAGES = (
    "Readability's test pages are needed: git clone https://github.com/mozilla/readability (Apache-2.0) and pass "
    "--pages readability/test/test-pages (a folder, or a tar.gz of it), or set $READABILITY_TEST_PAGES; "
    "--smoke scores two pages of its own"
)
DEFAULT_EXTRACTORS = (
    "lm_assets,lm_assets:resiliparse,lm_assets:all_text,trafilatura,trafilatura:precision,trafilatura:recall,"
    "rs_trafilatura"
)
SHINGLE = 4

# (name, source.html, expected.html) of --smoke: an article among site chrome, and a page of code.
SMOKE_PAGES = [
    (
        "article",
        "<html><head><title>Backups</title></head><body><nav><a href='/'>Home</a> | <a href='/docs'>Docs</a></nav>"
        "<article><h1>Making backups</h1><p>A backup is a copy of your data kept somewhere else, so that a lost "
        "disk or a mistaken command does not lose the work of years.</p><p>Copy the files every night to a second "
        "machine, and keep a week of copies: an error noticed on Friday can then be undone from Monday's copy."
        "</p><ul><li>Test a restore once a month.</li><li>Keep one copy away from the building.</li></ul>"
        "</article><footer>Copyright 2024 Example. All rights reserved. Privacy policy.</footer></body></html>",
        "<h1>Making backups</h1><p>A backup is a copy of your data kept somewhere else, so that a lost disk or a "
        "mistaken command does not lose the work of years.</p><p>Copy the files every night to a second machine, "
        "and keep a week of copies: an error noticed on Friday can then be undone from Monday's copy.</p><ul>"
        "<li>Test a restore once a month.</li><li>Keep one copy away from the building.</li></ul>",
    ),
    (
        "code",
        "<html><body><div class='sidebar'><a href='/a'>Previous</a> <a href='/b'>Next</a></div><main>"
        "<h2>Reading a file</h2><p>The function below reads a whole text file and returns its lines without "
        "their line endings, which is what most small scripts need.</p><pre>def read_lines(path):\n"
        "    with open(path) as f:\n        return f.read().splitlines()</pre><p>For very large files, read "
        "them line by line instead, so that memory use stays small.</p></main></body></html>",
        "<h2>Reading a file</h2><p>The function below reads a whole text file and returns its lines without their "
        "line endings, which is what most small scripts need.</p><pre>def read_lines(path):\n    with open(path) "
        "as f:\n        return f.read().splitlines()</pre><p>For very large files, read them line by line "
        "instead, so that memory use stays small.</p>",
    ),
]

BLOCK_TAGS = frozenset(
    "address article aside blockquote br dd details div dl dt fieldset figcaption figure footer form "
    "h1 h2 h3 h4 h5 h6 header hr li main nav ol p pre section summary table tbody td tfoot th thead tr ul".split()
)
SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "head", "title"})


class _ReferenceText(HTMLParser):
    """Text of an HTML fragment as laid out by a browser: block elements on their own lines."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in SKIPPED_TAGS:
            self.skipping += 1
        elif tag in BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in SKIPPED_TAGS:
            self.skipping = max(self.skipping - 1, 0)
        elif tag in BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)


def reference_text(expected_html: str) -> str:
    parser = _ReferenceText()
    parser.feed(expected_html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).split("\n"))
    return "\n".join(line for line in lines if line)


def shingles(text: str) -> Counter:
    tokens = text.split()
    if len(tokens) < SHINGLE:
        return Counter([tuple(tokens)]) if tokens else Counter()
    return Counter(zip(*(tokens[i:] for i in range(SHINGLE))))


def score(extracted: str, reference: str) -> tuple[float, float, float]:
    """Precision, recall and F1 of the extraction's token 4-gram shingles against the reference's."""
    got, want = shingles(extracted), shingles(reference)
    if not want:
        return (1.0, 1.0, 1.0) if not got else (0.0, 1.0, 0.0)
    if not got:
        return 0.0, 0.0, 0.0
    overlap = sum((got & want).values())
    precision, recall = overlap / sum(got.values()), overlap / sum(want.values())
    f1 = 2 * precision * recall / (precision + recall) if overlap else 0.0
    return precision, recall, f1


def load_pages(source: Path) -> list[tuple[str, str, str]]:
    """(name, source html, expected html) for every test page, sorted by name."""
    pages: dict[str, dict[str, str]] = {}
    if source.is_dir():
        for path in sorted(source.rglob("source.html")):
            expected = path.with_name("expected.html")
            if expected.exists():
                pages[path.parent.name] = {
                    "source": path.read_text(encoding="utf-8", errors="replace"),
                    "expected": expected.read_text(encoding="utf-8", errors="replace"),
                }
    else:
        with tarfile.open(source) as tar:
            for member in tar.getmembers():
                name = Path(member.name)
                if member.isfile() and name.name in ("source.html", "expected.html"):
                    data = tar.extractfile(member).read().decode("utf-8", errors="replace")
                    pages.setdefault(name.parent.name, {})[name.stem] = data
    return sorted((n, p["source"], p["expected"]) for n, p in pages.items() if {"source", "expected"} <= p.keys())


# Extractors ------------------------------------------------------------------------------------
def _lm_assets(preset: str | None = None) -> Callable[[str], str]:
    from lm_assets.corpus.curation.extract import ExtractConfig, extract_html

    config = ExtractConfig() if preset is None else ExtractConfig(extractor=preset)
    return lambda page: extract_html(page, config)[0]


def _trafilatura(**options) -> Callable[[str], str]:
    import trafilatura

    return lambda page: trafilatura.extract(page, **options) or ""


def _rs_trafilatura() -> Callable[[str], str]:
    import rs_trafilatura

    def run(page: str) -> str:
        # `main_content` joins paragraphs without a separator ("...here.Second"), so its `content_html` is
        # laid out as the reference is.
        result = rs_trafilatura.extract(page)
        return reference_text(result.content_html) if result.content_html else result.main_content or ""

    return run


def make_extractor(name: str) -> Callable[[str], str]:
    kind, _, variant = name.partition(":")
    if kind == "lm_assets":
        return _lm_assets(variant or None)
    if kind == "trafilatura":
        options = {"": {}, "precision": {"favor_precision": True}, "recall": {"favor_recall": True}}[variant]
        return _trafilatura(**options)
    if kind == "rs_trafilatura":
        return _rs_trafilatura()
    raise ValueError(f"unknown extractor {name!r}")


def version_of(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    kind, _, variant = name.partition(":")
    package = {"lm_assets": "selectolax", "trafilatura": "trafilatura", "rs_trafilatura": "rs-trafilatura"}[kind]
    if kind == "lm_assets" and variant in ("resiliparse", "all_text"):
        package = "resiliparse"
    try:
        return f"{package} {version(package)}"
    except PackageNotFoundError:
        return f"{package} (not installed)"


def run_extractor(name: str, pages, show: int) -> dict:
    try:
        extract = make_extractor(name)
        extract(pages[0][1])  # warm-up: lazy imports, model or tree set-up
    except ImportError as exc:
        return {"extractor": name, "skipped": f"not installed: {exc}"}
    scores, failures = [], 0
    cpu = 0.0
    for page_name, source, expected in pages:
        started = time.process_time()
        try:
            text = extract(source)
        except Exception:  # noqa: BLE001 - an extractor crash scores the page as empty
            text, failures = "", failures + 1
        cpu += time.process_time() - started
        scores.append((page_name, *score(text, reference_text(expected))))
    n = len(scores)
    worst = sorted(scores, key=lambda s: s[3])[:show]
    return {
        "extractor": name,
        "version": version_of(name),
        "pages": n,
        "precision": round(sum(s[1] for s in scores) / n, 4),
        "recall": round(sum(s[2] for s in scores) / n, 4),
        "f1": round(sum(s[3] for s in scores) / n, 4),
        "failures": failures,
        "cpu_s": round(cpu, 3),
        "docs_per_cpu_s": round(n / cpu, 1) if cpu else None,
        "html_mb_per_cpu_s": round(sum(len(p[1].encode()) for p in pages) / 1e6 / cpu, 2) if cpu else None,
        "worst": [{"page": s[0], "precision": round(s[1], 3), "recall": round(s[2], 3), "f1": round(s[3], 3)} for s in worst],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=Path, default=os.environ.get(PAGES_VARIABLE) or None,
                        help=f"Readability's test-pages folder or a tar.gz of it (default: ${PAGES_VARIABLE})")
    parser.add_argument("--extractors", default=DEFAULT_EXTRACTORS)
    parser.add_argument("--show", type=int, default=5, help="list the N worst pages of each extractor")
    parser.add_argument("--smoke", action="store_true", help="two built-in pages; fail if an extractor is missing")
    args = parser.parse_args(argv)

    if args.smoke:
        pages, where = SMOKE_PAGES, "SMOKE_PAGES"
        if args.extractors == DEFAULT_EXTRACTORS:
            args.extractors = DEFAULT_EXTRACTORS.replace(",rs_trafilatura", "")
    elif args.pages is None or not args.pages.exists():
        print(f"{args.pages or 'no --pages given'}: not found. {MISSING_PAGES}", file=sys.stderr)
        return 2
    else:
        pages, where = load_pages(args.pages), args.pages
        if not pages:
            print(f"{args.pages}: no <name>/source.html with its expected.html. {MISSING_PAGES}", file=sys.stderr)
            return 2
    html_mb = sum(len(p[1].encode()) for p in pages) / 1e6
    print(f"{len(pages)} test pages, {html_mb:.1f} MB of HTML, from {where}")
    results = [run_extractor(name, pages, args.show) for name in args.extractors.split(",") if name]

    header = f"{'extractor':<24} {'version':<22} {'precision':>9} {'recall':>7} {'F1':>7} {'docs/CPU-s':>10} {'MB/CPU-s':>8}"
    print(header)
    print("-" * len(header))
    for r in results:
        if "skipped" in r:
            print(f"{r['extractor']:<24} skipped: {r['skipped']}")
            continue
        print(
            f"{r['extractor']:<24} {r['version']:<22} {r['precision']:>9.4f} {r['recall']:>7.4f} {r['f1']:>7.4f} "
            f"{r['docs_per_cpu_s']:>10} {r['html_mb_per_cpu_s']:>8}" + (f"  ({r['failures']} pages failed)" if r["failures"] else "")
        )
    for r in results:
        if r.get("worst"):
            worst = ", ".join(f"{w['page']} {w['f1']}" for w in r["worst"])
            print(f"worst pages of {r['extractor']}: {worst}")
    print(json.dumps({"pages": len(pages), "html_mb": round(html_mb, 2), "results": results}))
    if args.smoke and any("skipped" in r for r in results):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
