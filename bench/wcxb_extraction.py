"""Main-content extraction on WCXB's development split, by page type: ours beside trafilatura.

Usage::

    .venv/bin/python bench/wcxb_extraction.py --wcxb DIR [--extractors lm_assets,trafilatura] [--show N]
    .venv/bin/python bench/wcxb_extraction.py --smoke

WCXB (Web Content Extraction Benchmark, https://github.com/Murrough-Foley/web-content-extraction-benchmark,
CC-BY-4.0) holds 2,008 pages from 2025 of seven page types (article, service, product, collection,
forum, listing, documentation), each with the main content a person marked. `--wcxb` is a clone of
it (or `$WCXB_DIR`); this bench reads only its `dev` split (1,497 pages): the `test` split is kept
back for held-out measurement and is never read here. Each page's `dev/html/<id>.html.gz` goes to
every extractor, and the extraction is scored against `ground_truth.main_content` of
`dev/ground-truth/<id>.json` by the benchmark's own measure (`evaluate.py`): word-level precision,
recall and F1 of lower-cased `\\w+` tokens as multisets; figures are means over pages, overall and
per page type (`collection` for the type the files call `category`).

Extractors as `bench/extraction_quality.py` names them. `--smoke` scores two pages written here in
WCXB's layout. It prints figures; it checks nothing. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from extraction_quality import make_extractor, version_of

SPLIT = "dev"  # the test split is held out: never read
WORD = re.compile(r"\w+")
SMOKE_PAGES = {
    "0001": ("article", "<html><body><nav><a href='/'>Home</a> <a href='/shop'>Shop</a></nav><article><h1>Bread at home"
             "</h1><p>Mix the flour, water and salt, and let the dough rest for an hour before you fold it.</p><p>Bake"
             " it hot, then let it cool on a rack so the crust stays crisp.</p></article><footer>© 2025 Example</footer>"
             "</body></html>", "Bread at home\nMix the flour, water and salt, and let the dough rest for an hour "
             "before you fold it.\nBake it hot, then let it cool on a rack so the crust stays crisp."),
    "0002": ("listing", "<html><body><h1>Courses</h1><ul><li><a href='/a'>Intro to baking</a> Learn the basics of "
             "bread.</li><li><a href='/b'>Pastry</a> Butter, flour and patience.</li></ul><footer>Contact us</footer>"
             "</body></html>", "Courses\nIntro to baking Learn the basics of bread.\nPastry Butter, flour and "
             "patience."),
}


def words(text: str) -> list[str]:
    return WORD.findall((text or "").lower())


def word_f1(predicted: str, reference: str) -> tuple[float, float, float]:
    """WCXB's evaluate.py: precision, recall and F1 of the word multisets."""
    pred, ref = words(predicted), words(reference)
    if not ref:
        return (1.0, 1.0, 1.0) if not pred else (0.0, 0.0, 0.0)
    if not pred:
        return 0.0, 0.0, 0.0
    overlap = sum((Counter(pred) & Counter(ref)).values())
    p, r = overlap / len(pred), overlap / len(ref)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def page_type(data: dict) -> str:
    kind = ((data.get("_internal") or {}).get("page_type") or {})
    kind = kind.get("primary", "article") if isinstance(kind, dict) else kind if isinstance(kind, str) else "article"
    return "collection" if kind == "category" else kind


def load_pages(root: Path) -> list[tuple[str, str, str, str]]:
    """(id, page type, html, reference main content) of every page of the dev split."""
    pages = []
    for truth_path in sorted((root / SPLIT / "ground-truth").glob("*.json")):
        data = json.loads(truth_path.read_text(encoding="utf-8"))
        truth = data.get("ground_truth")
        html_path = root / SPLIT / "html" / f"{truth_path.stem}.html.gz"
        if not isinstance(truth, dict) or not html_path.exists():
            continue
        html = gzip.decompress(html_path.read_bytes()).decode("utf-8", errors="replace")
        pages.append((truth_path.stem, page_type(data), html, truth.get("main_content") or ""))
    return pages


def write_smoke(root: Path) -> None:
    for name, (kind, html, truth) in SMOKE_PAGES.items():
        (root / SPLIT / "html").mkdir(parents=True, exist_ok=True)
        (root / SPLIT / "ground-truth").mkdir(parents=True, exist_ok=True)
        (root / SPLIT / "html" / f"{name}.html.gz").write_bytes(gzip.compress(html.encode()))
        (root / SPLIT / "ground-truth" / f"{name}.json").write_text(json.dumps(
            {"_internal": {"page_type": {"primary": kind}}, "ground_truth": {"main_content": truth}}))


def run(name: str, pages, show: int) -> dict:
    try:
        extract = make_extractor(name)
        extract(pages[0][2])
    except ImportError as exc:
        return {"extractor": name, "skipped": f"not installed: {exc}"}
    rows, cpu, failures = [], 0.0, 0
    for page_id, kind, html, reference in pages:
        started = time.process_time()
        try:
            text = extract(html)
        except Exception:  # noqa: BLE001 - a crash scores the page as empty
            text, failures = "", failures + 1
        cpu += time.process_time() - started
        rows.append((page_id, kind, *word_f1(text, reference)))
    by_type = defaultdict(list)
    for row in rows:
        by_type[row[1]].append(row)

    def mean(part, i):
        return round(sum(r[i] for r in part) / len(part), 4)

    return {
        "extractor": name, "version": version_of(name), "pages": len(rows), "failures": failures,
        "precision": mean(rows, 2), "recall": mean(rows, 3), "f1": mean(rows, 4),
        "by_type": {kind: {"pages": len(part), "precision": mean(part, 2), "recall": mean(part, 3), "f1": mean(part, 4)}
                    for kind, part in sorted(by_type.items())},
        "docs_per_cpu_s": round(len(rows) / cpu, 1) if cpu else None,
        "worst": [{"page": r[0], "type": r[1], "f1": round(r[4], 3)} for r in sorted(rows, key=lambda r: r[4])[:show]],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wcxb", type=Path, default=os.environ.get("WCXB_DIR") or None,
                        help="a clone of WCXB (default: $WCXB_DIR); only its dev split is read")
    parser.add_argument("--extractors", default="lm_assets,trafilatura")
    parser.add_argument("--show", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.wcxb
        if args.smoke:
            root = Path(tmp)
            write_smoke(root)
        elif root is None or not (root / SPLIT / "ground-truth").is_dir():
            print(f"{root or 'no --wcxb given'}: no {SPLIT}/ground-truth here. Clone "
                  "https://github.com/Murrough-Foley/web-content-extraction-benchmark (CC-BY-4.0) and pass its folder "
                  "as --wcxb, or set $WCXB_DIR", file=sys.stderr)  # fmt: skip
            return 2
        pages = load_pages(root)
    print(f"{len(pages)} pages of WCXB's {SPLIT} split, " + ", ".join(
        f"{kind} {n}" for kind, n in sorted(Counter(p[1] for p in pages).items())))
    results = [run(name, pages, args.show) for name in args.extractors.split(",") if name]
    kinds = sorted({p[1] for p in pages})
    print(f"{'extractor':<16} {'F1':>6} {'P':>6} {'R':>6} " + " ".join(f"{k[:11]:>11}" for k in kinds) + "  docs/CPU-s")
    for r in results:
        if "skipped" in r:
            print(f"{r['extractor']:<16} skipped: {r['skipped']}")
            continue
        print(f"{r['extractor']:<16} {r['f1']:>6.3f} {r['precision']:>6.3f} {r['recall']:>6.3f} "
              + " ".join(f"{r['by_type'].get(k, {}).get('f1', float('nan')):>11.3f}" for k in kinds)
              + f"  {r['docs_per_cpu_s']}")
    print(json.dumps({"split": SPLIT, "pages": len(pages), "results": results}))
    return 1 if args.smoke and any("skipped" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
