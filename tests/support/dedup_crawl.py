"""A small crawl with known duplicates, built offline from the shipped sample crawl, for dedup quality tests.

`build_dedup_crawl(out, seed)` writes gzip-WARC shards `crawl-NNNNN.warc.gz` and a `truth.json` of
the shape `/work/shared/bench/make_crawl.py` writes, so `lm_assets.corpus.dedup.evaluation` scores both
the same way. Everything follows from the seed and the sample crawl; no network is needed.

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

import hashlib
import io
import json
import random
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from itertools import combinations
from pathlib import Path

import polars as pl
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from lm_assets.corpus.curation.extract import ExtractConfig, extract_html
from lm_assets.corpus.curation.rules import QualityConfig, apply_quality_rules
from lm_assets.corpus.dedup.minhash import MinHashConfig, normalized_units, shingles
from lm_assets.corpus.ingest.readers import read_shard

SAMPLE_CRAWL = Path(__file__).resolve().parents[2] / "data" / "sample-crawl"
ORDINARY_CATEGORIES = {"normal", "exact_dup", "near_dup"}
MIN_UNITS = 200
NATURAL_NEAR_MIN = 0.4
EXACT_FRACTION = 0.10
NEAR_PER_BIN_FRACTION = 0.15
EDIT_RATE_BINS = ((0.01, 0.02), (0.02, 0.04), (0.04, 0.06))
BOILERPLATE_PROB = 0.5
DOCS_PER_SHARD = 125
CRAWL_START = datetime(2024, 3, 1, tzinfo=timezone.utc)
CRAWL_SECONDS = 14 * 86400


@dataclass(frozen=True)
class Page:
    url: str
    html: str
    text: str
    lang: str  # "en" or "zh"

    @property
    def cjk(self) -> bool:
        return self.lang == "zh"

    @property
    def host(self) -> str:
        return self.url.split("/")[2]

    @property
    def path(self) -> str:
        return self.url.split("/", 3)[3] if self.url.count("/") >= 3 else ""


@dataclass(frozen=True)
class Record:
    url: str
    html: str


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
    return sorted(pass_quality_rules(pages), key=lambda page: page.url)


def pass_quality_rules(pages: list[Page]) -> list[Page]:
    frame = pl.DataFrame(
        {"doc_id": [p.url for p in pages], "text": [p.text for p in pages], "lang": [p.lang for p in pages]}
    )
    kept = set(apply_quality_rules(frame, QualityConfig()).kept["doc_id"])
    return [page for page in pages if page.url in kept]


def natural_duplicates(pages: list[Page]) -> tuple[list[list[str]], list[list]]:
    """(groups of URLs with the same text, [url_a, url_b, jaccard] for other pairs at or above NATURAL_NEAR_MIN)."""
    by_text: dict[str, list[str]] = {}
    for page in pages:
        by_text.setdefault(page.text, []).append(page.url)
    groups = sorted(urls for urls in by_text.values() if len(urls) > 1)

    config = MinHashConfig()
    sets = {page.url: set(shingles(page.text, page.lang, config)) for page in pages}
    pairs = []
    for a, b in combinations(pages, 2):
        if a.lang != b.lang or a.text == b.text:
            continue
        small, large = sorted((len(sets[a.url]), len(sets[b.url])))
        if small < NATURAL_NEAR_MIN * large:
            continue
        shared = len(sets[a.url] & sets[b.url])
        similarity = shared / (len(sets[a.url]) + len(sets[b.url]) - shared)
        if similarity >= NATURAL_NEAR_MIN:
            pairs.append([a.url, b.url, round(similarity, 4)])
    return groups, sorted(pairs)


# ---------------------------------------------------------------------------------------------
# Editing HTML text nodes
# ---------------------------------------------------------------------------------------------

MARKUP = re.compile(
    r"<!--.*?-->|<script\b.*?</script\s*>|<style\b.*?</style\s*>|<textarea\b.*?</textarea\s*>|<[^>]*>",
    re.S | re.I,
)
CJK_CHAR = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
WHITESPACE_SPLIT = re.compile(r"(\s+)")
WORD_CHAR = re.compile(r"\w")
AFFIXES = re.compile(r"^(\W*)(.*?)(\W*)$", re.S)
VOCABULARY_WORD = re.compile(r"^[^\W\d_]{2,}$")


def split_markup(html: str) -> list[tuple[bool, str]]:
    """(is_text_node, piece) segments that join back into `html`."""
    segments, position = [], 0
    for match in MARKUP.finditer(html):
        if match.start() > position:
            segments.append((True, html[position : match.start()]))
        segments.append((False, match.group(0)))
        position = match.end()
    if position < len(html):
        segments.append((True, html[position:]))
    return segments


def text_units(segments: list[tuple[bool, str]], cjk: bool) -> tuple[dict[int, list[str]], list[tuple[int, int]]]:
    """Each text node cut into pieces, and the (segment, piece) positions of its editable units."""
    pieces, units = {}, []
    for index, (is_text, segment) in enumerate(segments):
        if not is_text or not segment.strip():
            continue
        parts = list(segment) if cjk else WHITESPACE_SPLIT.split(segment)
        pieces[index] = parts
        for position, part in enumerate(parts):
            if CJK_CHAR.fullmatch(part) if cjk else (part and "&" not in part and WORD_CHAR.search(part)):
                units.append((index, position))
    return pieces, units


def vocabulary(pieces: dict[int, list[str]], units: list[tuple[int, int]], cjk: bool) -> list[str]:
    if cjk:
        return [pieces[i][p] for i, p in units]
    cores = (AFFIXES.match(pieces[i][p]).group(2) for i, p in units)
    return [core for core in cores if VOCABULARY_WORD.match(core)] or ["the", "data", "value", "file"]


def edit_text_nodes(html: str, rate: float, cjk: bool, rng: random.Random) -> tuple[str, int, int]:
    """Substitute (50%), delete (25%) or insert after (25%) `round(rate * units)` units (at least 1).

    Returns (new_html, edits, units)."""
    segments = split_markup(html)
    pieces, units = text_units(segments, cjk)
    if not units:
        return html, 0, 0
    words = vocabulary(pieces, units, cjk)
    edits = min(len(units), max(1, round(rate * len(units))))

    def other_word(old: str) -> str:
        for _ in range(8):
            new = rng.choice(words)
            if new != old:
                return new
        return new

    separator = "" if cjk else " "
    for index, position in sorted(rng.sample(units, edits)):
        old = pieces[index][position]
        prefix, core, suffix = ("", old, "") if cjk else AFFIXES.match(old).groups()
        operation = rng.random()
        if operation < 0.5:
            pieces[index][position] = prefix + other_word(core) + suffix
        elif operation < 0.75:
            pieces[index][position] = ""
        else:
            pieces[index][position] = old + separator + other_word(core)
    edited = ("".join(pieces[i]) if i in pieces else segment for i, (_, segment) in enumerate(segments))
    return "".join(edited), edits, len(units)


def add_mirror_notice(html: str, cjk: bool, style: str, mirror: str, origin: str) -> str:
    """A mirror-site header and/or footer paragraph just inside <body>."""
    if cjk:
        header = f'<div class="mirror-notice"><p>本页面为 {origin} 官方文档的镜像，内容可能不是最新版本。</p></div>'
        footer = f'<p class="mirror-footer">由 {mirror} 提供镜像服务，权威版本请访问 {origin}。</p>'
    else:
        header = (
            f'<div class="mirror-notice"><p>This page mirrors the official documentation at {origin}. '
            "Content may be out of date.</p></div>"
        )
        footer = f'<p class="mirror-footer">Hosted by {mirror}; see {origin} for the canonical version.</p>'
    if style in ("header", "both"):
        opening = re.search(r"<body\b[^>]*>", html, re.I)
        html = html[: opening.end()] + header + html[opening.end() :] if opening else header + html
    if style in ("footer", "both"):
        closing = html.lower().rfind("</body")
        html = html[:closing] + footer + html[closing:] if closing >= 0 else html + footer
    return html


# ---------------------------------------------------------------------------------------------
# Injection
# ---------------------------------------------------------------------------------------------


def copy_url(page: Page, rng: random.Random, used: set[str]) -> str:
    """A new URL for a copy of `page`: a mirror host, an archive path or a query parameter."""
    for attempt in range(1000):
        k = rng.randint(1, 9) + 10 * (attempt // 20)
        url = rng.choice(
            [
                f"https://mirror{k}.{page.host}/{page.path}",
                f"https://{page.host}/archive/{2015 + k}/{page.path}",
                f"https://docs-mirror-{k}.example/{page.host.split('.')[0]}/{page.path}",
                f"https://{page.host}/{page.path}?utm_source=feed&ref={k}",
            ]
        )
        if url not in used:
            used.add(url)
            return url
    raise RuntimeError(f"no free URL for a copy of {page.url}")


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


def exact_copy(page: Page, url_rng: random.Random, used: set[str]) -> tuple[Record, dict]:
    url = copy_url(page, url_rng, used)
    entry = {"url": url, "original_url": page.url, "kind": "exact", "edit_rate": 0.0, "script": script(page)}
    return Record(url, page.html), entry


def near_copy(page: Page, rate_range: tuple[float, float], rng: random.Random, url_rng, used) -> tuple[Record, dict]:
    low, high = rate_range
    rate = round(rng.uniform(low, high), 4)
    if high != EDIT_RATE_BINS[-1][1]:
        rate = min(rate, round(high - 0.0001, 4))
    html, edits, units = edit_text_nodes(page.html, rate, page.cjk, rng)
    url = copy_url(page, url_rng, used)
    style = rng.choice(("header", "footer", "both")) if rng.random() < BOILERPLATE_PROB else "none"
    if style != "none":
        html = add_mirror_notice(html, page.cjk, style, url.split("/")[2], page.host)
    entry = {
        "url": url, "original_url": page.url, "kind": "near", "edit_rate": rate, "script": script(page),
        "unit": "char" if page.cjk else "word", "n_units": units, "n_edits": edits, "boilerplate": style,
    }
    return Record(url, html), entry


def script(page: Page) -> str:
    return "cjk" if page.cjk else "latin"


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
            copies += [near_copy(page, rate_range, edit_rng, url_rng, used) for page in originals]
        records += [record for record, _ in copies]
        injected += [entry for _, entry in copies]
    return records, injected


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


class ShardWriter:
    """One gzip WARC shard with a warcinfo record and HTML responses; ids and dates come from `rng`."""

    def __init__(self, path: Path, rng: random.Random):
        self.path, self.rng = path, rng
        self.buffer = io.BytesIO()
        self.writer = WARCWriter(self.buffer, gzip=True)
        info = b"software: tests/support/dedup_crawl.py\r\nformat: WARC File Format 1.1\r\n"
        record = self.writer.create_warc_record(
            "", "warcinfo", payload=io.BytesIO(info), length=len(info), warc_content_type="application/warc-fields",
            warc_headers_dict={
                "WARC-Record-ID": self.record_id(), "WARC-Date": iso(CRAWL_START), "WARC-Filename": path.name
            },
        )
        self.writer.write_record(record)

    def record_id(self) -> str:
        return f"<urn:uuid:{uuid.UUID(int=self.rng.getrandbits(128), version=4)}>"

    def response(self, url: str, html: str) -> None:
        body = html.encode("utf-8")
        http = StatusAndHeaders(
            "200 OK", [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(body)))],
            protocol="HTTP/1.1",
        )
        date = CRAWL_START + timedelta(seconds=self.rng.randrange(CRAWL_SECONDS))
        record = self.writer.create_warc_record(
            url, "response", payload=io.BytesIO(body), length=len(body), http_headers=http,
            warc_headers_dict={"WARC-Record-ID": self.record_id(), "WARC-Date": iso(date)},
        )
        self.writer.write_record(record)

    def close(self) -> None:
        self.path.write_bytes(self.buffer.getvalue())


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def write_shards(out: Path, records: list[Record], seed: int) -> dict[str, str]:
    """Shuffled records in shards of DOCS_PER_SHARD; returns url -> shard file name."""
    records = list(records)
    random.Random(f"{seed}:shuffle").shuffle(records)
    shard_of = {}
    for number, start in enumerate(range(0, len(records), DOCS_PER_SHARD)):
        name = f"crawl-{number:05d}.warc.gz"
        writer = ShardWriter(out / name, random.Random(f"{seed}:ids:{number}"))
        for record in records[start : start + DOCS_PER_SHARD]:
            writer.response(record.url, record.html)
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
        "format": "make_crawl-truth/1",
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


def crawl_digest(out: Path) -> str:
    """sha256 over the shards and truth.json, to check that a rebuild gives the same bytes."""
    digest = hashlib.sha256()
    for path in sorted([*out.glob("crawl-*.warc.gz"), out / "truth.json"]):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()
