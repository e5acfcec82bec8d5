"""A benchmark crawl from sites of real HTML pages: what a crawler hands a text pipeline, with known duplicates.

`build_crawl(out, sites, spec)` writes into `out`:
- `crawl-NNNNN.warc.gz`: gzip WARC shards of `spec.docs_per_shard` HTML responses each, shuffled together:
  every source page, exact copies of `exact_fraction` of them, and one or two near copies of another
  `near_fraction`. A near copy has `round(rate * units)` of its text-node units edited (a unit is a word, or
  a CJK character on a mostly-CJK page), its rate uniform in `edit_rate_range`, and half the time a mirror
  header and/or footer. Each shard also opens with a warcinfo record, puts a request record before about
  10 % of its responses, and carries a few PNG images, PDFs, 404 pages and 301 redirects.
- `truth.json`: every injected copy (url, original_url, kind, edit_rate, shard, ...), the duplicates the
  source pages already hold (`natural_duplicates`: same visible text; `natural_near_pairs`: Jaccard of
  5-gram shingles at least `natural_near_min`), and the other responses (`aux`). Originals of injected
  copies have at least `min_units` units and are never natural duplicates, so a dedup stage that keeps a
  natural twin is not penalised.
- `manifest.json`: the sites, the build settings, record counts by kind, and shard sizes.

Visible text here is a crude render of the text nodes, independent of the pipeline's extractor. Output
depends only on the arguments and the source files: every random choice comes from `spec.seed`.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import zlib
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from lm_assets.text import CJK_CHAR

from . import payloads
from .copies import Record, exact_copy, host, near_copy
from .debian import SourcePage
from .html_edits import WORD_CHAR, mostly_cjk, visible_text
from .similarity import same_text_groups, shingles, similar_pairs
from .warc import ShardWriter

TRUTH_FORMAT = "lm-bench-crawl-truth/1"
MANIFEST_FORMAT = "lm-bench-crawl-manifest/1"
SHINGLE = 5
CRAWL_START = datetime(2024, 3, 1, tzinfo=timezone.utc)
CRAWL_SECONDS = 14 * 86400
REQUEST_PROBABILITY = 0.10
AUX_PER_PAGE = {"png": 0.010, "pdf": 0.004, "http404": 0.006, "http301": 0.006}
SERVERS = ("Apache/2.4.57 (Debian)", "nginx/1.22.1", "Apache/2.4.62 (Unix)", "nginx")
HTML_TYPE = "text/html; charset=utf-8"


@dataclass(frozen=True)
class CrawlSpec:
    seed: int = 0
    docs_per_shard: int = 500
    max_pages: int | None = None  # a seeded sample of this many source pages; None keeps them all
    exact_fraction: float = 0.05
    near_fraction: float = 0.10
    edit_rate_range: tuple[float, float] = (0.01, 0.06)
    min_units: int = 20
    natural_near_min: float = 0.4


@dataclass(frozen=True)
class Site:
    name: str
    pages: tuple[SourcePage, ...]
    images: tuple[tuple[str, Path], ...] = ()
    manifest: dict = field(default_factory=dict)


@dataclass
class Page:
    site: str
    url: str
    body: bytes
    html: str
    text: str
    cjk: bool
    units: int


def load_page(source: SourcePage) -> Page:
    body = source.file.read_bytes()
    html = body.decode("utf-8", errors="replace")
    text = visible_text(html)
    cjk = mostly_cjk(text)
    units = len(CJK_CHAR.findall(text)) if cjk else sum(1 for word in text.split() if WORD_CHAR.search(word))
    return Page(source.site, source.url, body, html, text, cjk, units)


def source_pages(sites: list[Site], spec: CrawlSpec) -> list[Page]:
    sources = [page for site in sites for page in site.pages]
    if not sources:
        raise ValueError("the sites hold no HTML pages")
    if spec.max_pages is not None and spec.max_pages < len(sources):
        keep = set(random.Random(f"{spec.seed}:max-pages").sample(range(len(sources)), spec.max_pages))
        sources = [page for i, page in enumerate(sources) if i in keep]
    return [load_page(source) for source in sources]


def natural_duplicates(pages: list[Page], threshold: float) -> tuple[list[list[str]], list[list]]:
    groups = same_text_groups([page.url for page in pages], [page.text for page in pages])
    sets = [shingles(page.text.lower(), page.cjk, SHINGLE) for page in pages]
    pairs = similar_pairs(sets, [page.cjk for page in pages], threshold)
    near = sorted(
        [min(pages[i].url, pages[j].url), max(pages[i].url, pages[j].url), round(jaccard, 4)]
        for i, j, jaccard in pairs
        if pages[i].text != pages[j].text
    )
    return groups, near


def inject(pages: list[Page], excluded: set[str], spec: CrawlSpec) -> tuple[list[Record], list[dict], int]:
    """The injected copies and their truth entries, and how many pages were eligible as originals."""
    eligible = [page for page in pages if page.units >= spec.min_units and page.url not in excluded]
    n_exact = min(len(eligible), round(spec.exact_fraction * len(pages)))
    n_near = min(len(eligible) - n_exact, round(spec.near_fraction * len(pages)))
    chosen = random.Random(f"{spec.seed}:select").sample(eligible, n_exact + n_near)
    url_rng, edit_rng = random.Random(f"{spec.seed}:urls"), random.Random(f"{spec.seed}:edit")
    used = {page.url for page in pages}
    copies = [exact_copy(page, url_rng, used) for page in chosen[:n_exact]]
    for page in chosen[n_exact:]:
        for _ in range(edit_rng.choice((1, 2))):
            rate = round(edit_rng.uniform(*spec.edit_rate_range), 4)
            copies.append(near_copy(page, rate, edit_rng, url_rng, used))
    return [record for record, _ in copies], [entry for _, entry in copies], len(eligible)


def server(url: str) -> str:
    return SERVERS[zlib.crc32(host(url).encode()) % len(SERVERS)]


def date(rng: random.Random) -> datetime:
    return CRAWL_START + timedelta(seconds=rng.randrange(CRAWL_SECONDS))


def html_headers(url: str, body: bytes, when: datetime) -> list[tuple[str, str]]:
    return [("Date", when.strftime("%a, %d %b %Y %H:%M:%S GMT")), ("Server", server(url)),
            ("Content-Type", HTML_TYPE), ("Content-Length", str(len(body)))]


def aux_response(kind: str, pages: list[Page], images: list[tuple[str, Path]], rng: random.Random) -> tuple:
    """(url, status, content type, body, extra headers) of one non-page response near a random page."""
    page = rng.choice(pages)
    stem = page.url.rsplit(".", 1)[0]
    if kind == "png":
        if images:
            url, image = images[rng.randrange(len(images))]
            return url, "200 OK", "image/png", image.read_bytes(), [("Cache-Control", "max-age=86400")]
        return f"https://{host(page.url)}/images/img{rng.randrange(10**6)}.png", "200 OK", "image/png", payloads.png(rng), []
    if kind == "pdf":
        title = re.search(r"<title[^>]*>(.*?)</title", page.html, re.S | re.I)
        name = " ".join(title.group(1).split()) if title else stem
        url = f"https://{host(page.url)}/downloads/{stem.split('/', 3)[3]}.pdf"
        return url, "200 OK", "application/pdf", payloads.pdf(name), []
    if kind == "http404":
        url = rng.choice([f"{stem}-old.html", f"{stem}.htm", f"{stem}/index.html"])
        body = payloads.not_found("/" + url.split("/", 3)[3], server(url).split(" ")[0], host(url))
        return url, "404 Not Found", "text/html; charset=iso-8859-1", body, []
    url = "http://" + page.url.split("://", 1)[1]
    return url, "301 Moved Permanently", "text/html; charset=iso-8859-1", payloads.moved(page.url), [("Location", page.url)]


def write_shards(out: Path, records: list[Record], bodies: dict[str, bytes], kinds: dict[str, str], pages: list[Page],
                 sites: list[Site], spec: CrawlSpec) -> tuple[dict, list, list, dict]:
    """Shuffled records cut into shards, the other responses mixed in. `bodies` holds the bytes served for a
    URL where they are not its record's HTML (a source page's own bytes). Returns (shard of each URL, aux
    entries, shards, record counts by kind)."""
    records = list(records)
    random.Random(f"{spec.seed}:shuffle").shuffle(records)
    used = {record.url for record in records}
    images = [image for site in sites for image in site.images]
    info = {"software": "lm-assets bench/build_crawl.py", "format": "WARC File Format 1.1", "isPartOf": "lm-bench-crawl",
            "description": "Real pages with injected duplicates: " + ",".join(site.name for site in sites),
            "seed": str(spec.seed)}
    shard_of, aux, shards, counts = {}, [], [], {}
    date_rng = random.Random(f"{spec.seed}:dates")
    per = max(1, spec.docs_per_shard)
    for number, start in enumerate(range(0, len(records), per)):
        name = f"crawl-{number:05d}.warc.gz"
        rng = random.Random(f"{spec.seed}:aux:{number}")
        chunk: list = list(records[start : start + per])
        html_docs = len(chunk)
        for kind, share in AUX_PER_PAGE.items():
            for _ in range(max(1, round(share * html_docs))):
                chunk.insert(rng.randrange(len(chunk) + 1), kind)
        writer = ShardWriter(out / name, random.Random(f"{spec.seed}:ids:{number}"), info, CRAWL_START, "1.1")
        for entry in chunk:
            request = rng.random() < REQUEST_PROBABILITY
            when = date(date_rng)
            if isinstance(entry, Record):
                body = bodies.get(entry.url) or entry.html.encode("utf-8")
                writer.response(entry.url, body, when, html_headers(entry.url, body, when), "html_" + kinds[entry.url],
                                with_request=request)
                shard_of[entry.url] = name
                continue
            url, status, content_type, body, extra = aux_response(entry, pages, images, rng)
            base, k = url, 1
            while url in used:
                k += 1
                url = f"{base}{'&' if '?' in base else '?'}dup={k}"
            used.add(url)
            headers = [("Server", server(url)), ("Content-Type", content_type), ("Content-Length", str(len(body))), *extra]
            writer.response(url, body, when, headers, entry, status=status, with_request=request)
            aux.append({"url": url, "kind": entry, "status": int(status.split()[0]), "content_type": content_type,
                        "shard": name})
        for kind, count in writer.counts.items():
            counts[kind] = counts.get(kind, 0) + count
        shards.append({"file": name, "html_docs": html_docs, "bytes": writer.close()})
    return shard_of, aux, shards, counts


def build_crawl(out: Path, sites: list[Site], spec: CrawlSpec = CrawlSpec()) -> dict:
    """Write the crawl into `out` (replacing an earlier one there); returns its manifest."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("crawl-*.warc.gz"), out / "truth.json", out / "manifest.json"]:
        stale.unlink(missing_ok=True)
    pages = source_pages(sites, spec)
    natural, natural_near = natural_duplicates(pages, spec.natural_near_min)
    excluded = {url for group in natural for url in group} | {url for a, b, _ in natural_near for url in (a, b)}
    copies, injected, eligible = inject(pages, excluded, spec)
    records = [Record(page.url, page.html) for page in pages] + copies
    bodies = {page.url: page.body for page in pages}
    # an exact copy is served with its original's bytes
    bodies |= {entry["url"]: bodies[entry["original_url"]] for entry in injected if entry["kind"] == "exact"}
    kinds = {page.url: "original" for page in pages} | {entry["url"]: entry["kind"] for entry in injected}
    shard_of, aux, shards, counts = write_shards(out, records, bodies, kinds, pages, sites, spec)
    for entry in injected:
        entry["shard"] = shard_of[entry["url"]]
    injected.sort(key=lambda entry: (entry["original_url"], entry["url"]))
    kinds = [entry["kind"] for entry in injected]
    truth = {
        "format": TRUTH_FORMAT,
        "seed": spec.seed,
        "edit_rate_range": list(spec.edit_rate_range),
        "counts": {
            "source_pages": len(pages),
            "html_records": len(records),
            "exact_copies": kinds.count("exact"),
            "near_groups": len({entry["original_url"] for entry in injected if entry["kind"] == "near"}),
            "near_variants": kinds.count("near"),
            "injected_records": len(injected),
            "natural_exact_groups": len(natural),
            "natural_near_pairs": len(natural_near),
            "natural_near_min_jaccard": spec.natural_near_min,
            "injection_eligible_pages": eligible,
            "aux_records": len(aux),
        },
        "injected": injected,
        "natural_duplicates": natural,
        "natural_near_pairs": natural_near,
        "aux": aux,
    }
    manifest = {
        "format": MANIFEST_FORMAT,
        "packages": [{**site.manifest, "name": site.name, "pages_used": sum(p.site == site.name for p in pages)}
                     for site in sites],
        **asdict(spec),
        "source_pages": len(pages),
        "records_by_kind": dict(sorted(counts.items())),
        "records_total": sum(counts.values()),
        "html_payload_bytes": sum(len(bodies.get(r.url) or r.html.encode("utf-8")) for r in records),
        "total_bytes": sum(shard["bytes"] for shard in shards),
        "shards": shards,
    }
    for name, content in (("truth.json", truth), ("manifest.json", manifest)):
        (out / name).write_text(json.dumps(content, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return manifest


def crawl_digest(out: Path) -> str:
    """sha256 over the shards and truth.json, to check that a rebuild gives the same bytes."""
    digest = hashlib.sha256()
    for path in sorted([*out.glob("crawl-*.warc.gz"), out / "truth.json"]):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()
