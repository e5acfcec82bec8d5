"""A small crawl with known duplicates, built offline from the shipped sample crawl, for dedup quality tests.

`build_dedup_crawl(out, seed)` writes gzip-WARC shards `crawl-NNNNN.warc.gz` and a `truth.json` of
the shape `bench/build_crawl.py` writes, so `lm_assets.corpus.dedup.accuracy` scores both the same
way, and with the same text-node edits and copies (`benchlib.crawl`). Everything follows from the seed
and the sample crawl; no network is needed.

Source pages
    The HTML pages of `data/sample-crawl` (read with `readers.read_shard`) that its expected.json
    marks as ordinary content (categories normal, exact_dup, near_dup: no low-quality, toxic, PII,
    boilerplate-heavy or non-UTF-8 page), whose extracted text has at least `MIN_UNITS` units
    (words, or CJK characters for Chinese pages) and passes the default quality rules, so that most
    pages and their copies reach dedup. A page's language is the one expected.json gives.

Natural duplicates
    The sample crawl already holds duplicates. Pages with the same extracted text are listed in
    `natural_duplicates`; page pairs whose extracted texts have a Jaccard similarity of at least
    `NATURAL_NEAR_MIN` on `minhash.shingles` (default `MinHashConfig`) in `natural_near_pairs`.
    Neither kind is used as an original of an injected group.

Injected duplicates, per language, with disjoint originals
    * exact: a byte-identical copy of `EXACT_FRACTION` of the pages, at a new URL;
    * near: for each edit-rate bin (0.01-0.02, 0.02-0.04, 0.04-0.06), one variant of
      `NEAR_PER_BIN_FRACTION` of the pages, its edit rate drawn uniformly within the bin.
      `round(rate * units)` (at least 1) units of the HTML's text nodes (never tags, comments,
      scripts or styles) are substituted, deleted or followed by an inserted unit, with
      replacements drawn from the page's own vocabulary. Half of the variants also get a mirror
      header and/or footer paragraph.
    Copies are served at unique mirror URLs. All page records are shuffled together and cut into
    shards of `DOCS_PER_SHARD`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
from benchlib.crawl.builder import HTML_TYPE, TRUTH_FORMAT, crawl_digest  # noqa: F401  (crawl_digest: for the tests)
from benchlib.crawl.copies import Record, exact_copy, near_copy
from benchlib.crawl.similarity import same_text_groups, similar_pairs
from benchlib.crawl.warc import ShardWriter

from lm_assets.corpus.curation.extract import ExtractConfig, extract_html
from lm_assets.corpus.curation.rules import apply_rules, preset
from lm_assets.corpus.dedup.minhash import MinHashConfig, normalized_units, shingles
from lm_assets.corpus.ingest.readers import read_shard

SAMPLE_CRAWL = Path(__file__).resolve().parents[2] / "data" / "sample-crawl"
ORDINARY_CATEGORIES = {"normal", "exact_dup", "near_dup"}
MIN_UNITS = 200
NATURAL_NEAR_MIN = 0.4
EXACT_FRACTION = 0.10
NEAR_PER_BIN_FRACTION = 0.15
EDIT_RATE_BINS = ((0.01, 0.02), (0.02, 0.04), (0.04, 0.06))
DOCS_PER_SHARD = 125
CRAWL_START = datetime(2024, 3, 1, tzinfo=timezone.utc)
CRAWL_SECONDS = 14 * 86400
WARC_INFO = {"software": "tests/support/dedup_crawl.py", "format": "WARC File Format 1.1"}


@dataclass(frozen=True)
class Page:
    url: str
    html: str
    text: str
    lang: str  # "en" or "zh"

    @property
    def cjk(self) -> bool:
        return self.lang == "zh"


# ---------------------------------------------------------------------------------------------
# Source pages and their natural duplicates
# ---------------------------------------------------------------------------------------------


def source_pages(sample_crawl: Path = SAMPLE_CRAWL) -> list[Page]:
    expected = json.loads((sample_crawl / "expected.json").read_text())["pages"]
    pages = []
    for shard in sorted(sample_crawl.glob("crawl-*.warc.gz")):
        documents = read_shard(shard).documents
        for url, html in documents.select("url", "html").iter_rows():
            info = expected.get(url)
            if html is None or info is None or not set(info["categories"]) <= ORDINARY_CATEGORIES:
                continue
            text, _, _ = extract_html(html, ExtractConfig())
            if len(normalized_units(text).split()) >= MIN_UNITS:
                pages.append(Page(url, html, text, info["lang"]))
    return sorted(pass_rules(pages), key=lambda page: page.url)


def pass_rules(pages: list[Page]) -> list[Page]:
    frame = pl.DataFrame(
        {"doc_id": [p.url for p in pages], "text": [p.text for p in pages], "lang": [p.lang for p in pages]}
    )
    kept = set(apply_rules(frame, preset("published")).kept["doc_id"])
    return [page for page in pages if page.url in kept]


def natural_duplicates(pages: list[Page]) -> tuple[list[list[str]], list[list]]:
    """(groups of URLs with the same text, [url_a, url_b, jaccard] for other pairs at or above NATURAL_NEAR_MIN)."""
    config = MinHashConfig()
    sets = [set(shingles(page.text, page.lang, config)) for page in pages]
    pairs = similar_pairs(sets, [page.lang for page in pages], NATURAL_NEAR_MIN)
    near = [[pages[i].url, pages[j].url, round(jaccard, 4)] for i, j, jaccard in pairs if pages[i].text != pages[j].text]
    return same_text_groups([page.url for page in pages], [page.text for page in pages]), sorted(near)


# ---------------------------------------------------------------------------------------------
# Injection
# ---------------------------------------------------------------------------------------------


def choose_originals(pages: list[Page], excluded: set[str], rng: random.Random) -> tuple[list[Page], list[list[Page]]]:
    """(originals of exact copies, originals of near variants per edit-rate bin) for one language."""
    eligible = [page for page in pages if page.url not in excluded]
    rng.shuffle(eligible)
    n_exact = round(EXACT_FRACTION * len(pages))
    n_per_bin = round(NEAR_PER_BIN_FRACTION * len(pages))
    if n_exact + n_per_bin * len(EDIT_RATE_BINS) > len(eligible):
        raise ValueError(f"only {len(eligible)} eligible pages for {n_exact} exact and {n_per_bin} near per bin")
    near = eligible[n_exact:]
    return eligible[:n_exact], [near[i * n_per_bin : (i + 1) * n_per_bin] for i in range(len(EDIT_RATE_BINS))]


def edit_words(text: str, rate: float, seed: int) -> str:
    """Substitute about `rate` of the words with other words of the same text."""
    rng = random.Random(seed)
    words = text.split(" ")
    for i in rng.sample(range(len(words)), max(1, round(rate * len(words)))):
        words[i] = rng.choice(words)
    return " ".join(words)


def near_rate(rate_range: tuple[float, float], rng: random.Random) -> float:
    """A rate drawn within the bin, below its upper end unless it is the last bin."""
    low, high = rate_range
    rate = round(rng.uniform(low, high), 4)
    return rate if high == EDIT_RATE_BINS[-1][1] else min(rate, round(high - 0.0001, 4))


def inject(pages: list[Page], excluded: set[str], seed: int) -> tuple[list[Record], list[dict]]:
    """Every page's record plus the injected copies, and the truth entry of each copy."""
    select_rng, url_rng, edit_rng = (random.Random(f"{seed}:{purpose}") for purpose in ("select", "urls", "edit"))
    used = {page.url for page in pages}
    records = [Record(page.url, page.html) for page in pages]
    injected = []
    for lang in ("en", "zh"):
        exact_originals, near_originals = choose_originals([p for p in pages if p.lang == lang], excluded, select_rng)
        copies = [exact_copy(page, url_rng, used) for page in exact_originals]
        for rate_range, originals in zip(EDIT_RATE_BINS, near_originals, strict=True):
            copies += [near_copy(page, near_rate(rate_range, edit_rng), edit_rng, url_rng, used) for page in originals]
        records += [record for record, _ in copies]
        injected += [entry for _, entry in copies]
    return records, injected


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def write_shards(out: Path, records: list[Record], seed: int) -> dict[str, str]:
    """Shuffled records in shards of DOCS_PER_SHARD; returns url -> shard file name."""
    records = list(records)
    random.Random(f"{seed}:shuffle").shuffle(records)
    shard_of = {}
    for number, start in enumerate(range(0, len(records), DOCS_PER_SHARD)):
        name = f"crawl-{number:05d}.warc.gz"
        rng = random.Random(f"{seed}:ids:{number}")
        writer = ShardWriter(out / name, rng, WARC_INFO, CRAWL_START)
        for record in records[start : start + DOCS_PER_SHARD]:
            body = record.html.encode("utf-8")
            date = CRAWL_START + timedelta(seconds=rng.randrange(CRAWL_SECONDS))
            writer.response(record.url, body, date, [("Content-Type", HTML_TYPE), ("Content-Length", str(len(body)))])
            shard_of[record.url] = name
        writer.close()
    return shard_of


def build_dedup_crawl(out: Path, seed: int = 0, sample_crawl: Path = SAMPLE_CRAWL) -> dict:
    """Write the crawl's shards and truth.json into `out`; returns the truth."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("crawl-*.warc.gz"), out / "truth.json"]:
        stale.unlink(missing_ok=True)
    pages = source_pages(sample_crawl)
    natural, natural_near = natural_duplicates(pages)
    excluded = {url for group in natural for url in group} | {url for a, b, _ in natural_near for url in (a, b)}
    records, injected = inject(pages, excluded, seed)
    shard_of = write_shards(out, records, seed)
    for entry in injected:
        entry["shard"] = shard_of[entry["url"]]
    injected.sort(key=lambda entry: (entry["original_url"], entry["url"]))
    truth = {
        "format": TRUTH_FORMAT,
        "generator": "tests/support/dedup_crawl.py",
        "seed": seed,
        "edit_rate_range": [EDIT_RATE_BINS[0][0], EDIT_RATE_BINS[-1][1]],
        "counts": truth_counts(pages, records, injected, natural, natural_near),
        "injected": injected,
        "natural_duplicates": natural,
        "natural_near_pairs": natural_near,
        "aux": [],
    }
    (out / "truth.json").write_text(json.dumps(truth, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return truth


def truth_counts(pages, records, injected, natural, natural_near) -> dict:
    kinds = [entry["kind"] for entry in injected]
    return {
        "source_pages": len(pages),
        "source_pages_by_lang": {lang: sum(page.lang == lang for page in pages) for lang in ("en", "zh")},
        "html_records": len(records),
        "exact_copies": kinds.count("exact"),
        "near_variants": kinds.count("near"),
        "injected_records": len(injected),
        "natural_exact_groups": len(natural),
        "natural_near_pairs": len(natural_near),
        "natural_near_min_jaccard": NATURAL_NEAR_MIN,
    }
