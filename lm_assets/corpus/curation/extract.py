"""Text out of HTML (main content by default, see `main_content.py`), plus Unicode and control-character cleanup."""

from __future__ import annotations

import html as html_lib
import re
import time
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import polars as pl
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

from lm_assets.corpus.curation.main_content import PAGE_SIGNALS, extract_main_content, page_signals, walked_page
from lm_assets.corpus.ingest.readers import DOCUMENT_SCHEMA as BATCH_SCHEMA
from lm_assets.corpus.stage import QUARANTINE_SCHEMA, StageResult, split_by_reason
from lm_assets.storage.accounting import drop_example_ids

# C0 and C1 controls except tab and newline, plus DEL. NUL and friends turn into NaN losses downstream.
EXTRACTED = "extracted"  # the stage, and the `stage` of its drops
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
BLANK_LINES = re.compile(r"\n{3,}")
TITLE = re.compile(r"<title[^>]*>(.*?)</title", re.I | re.S)
LANG_ATTR = re.compile(r"<html[^>]*?\blang\s*=\s*[\"']?([A-Za-z]{2,3}(?:[-_][A-Za-z0-9]+)*)", re.I)


EXTRACTORS = ("main_content", "resiliparse", "all_text")

# Listing pages by their address and title: tag, category, archive, search, index and channel pages
# (English and Chinese), login and error pages. Matched against the lower-cased URL path and query,
# and the title.
_LISTING_PATH = re.compile(
    r"/(?:tags?|categor(?:y|ies)|archives?|topics?|labels?|authors?|search|page|list|lists|index|channels?|"
    r"columns?|sitemap)(?:[/_.?#-]|$)"
    r"|/page/\d+|[/_-](?:list|index|page)[_-]?\d+\.\w+$|/\d{4}/(?:\d{1,2}/)?$"
    r"|[?&](?:s|q|query|search|keyword|keywords|wd|kw|tag|cat|category|page|pn)="
)
_LISTING_TITLE = re.compile(
    r"archive|categor|\btags?\b|search results|results for|\bpage \d+|index of|\bhome\b|homepage|"
    r"首页|首頁|主页|主頁|列表|频道|頻道|栏目|欄目|分类|分類|标签|標籤|归档|歸檔|存档|存檔|搜索|搜尋|"
    r"第\s*\d+\s*页|第\s*\d+\s*頁|门户|門戶|官网|官網|官方网站|官方網站|导航|導航|大全"
)
_ERROR_TITLE = re.compile(
    r"\b404\b|not found|\berror\b|sign in|sign up|log ?in\b|register|access denied|forbidden|"
    r"登录|登錄|登入|注册|註冊|找不到|不存在|错误|錯誤|出错|無法"
)
URL_SIGNALS = {"q_url_listing": int, "q_url_depth": int, "q_title_listing": int, "q_title_error": int}


def address_signals(url: str | None, title: str | None) -> dict:
    """Whether the URL and title name a listing (or a login or error page), and the URL's path depth."""
    path = ""
    if url:
        rest = url.split("://", 1)[-1]
        path = rest[rest.find("/"):].lower() if "/" in rest else "/"
    segments = [part for part in path.split("?", 1)[0].split("#", 1)[0].split("/") if part]
    if segments and segments[-1].split(".")[0] in ("index", "default", "home", "main"):
        segments = segments[:-1]
    lowered = (title or "").lower()
    return {
        "q_url_listing": int(bool(_LISTING_PATH.search(path))) if url else 0,
        "q_url_depth": len(segments),
        "q_title_listing": int(bool(_LISTING_TITLE.search(lowered))),
        "q_title_error": int(bool(_ERROR_TITLE.search(lowered))),
    }


@dataclass
class ExtractConfig:
    """`extractor` picks how HTML becomes text:

    - `main_content` (the default): page chrome removed as whole elements, the content root chosen as
      Readability chooses it, link blocks dropped, the rest laid out with its paragraphs, headings,
      lists and code blocks (`main_content.py`);
    - `resiliparse`: resiliparse's own `main_content=True` heuristics, flat text;
    - `all_text`: every visible text of the page, with its layout.
    """

    extractor: str = "main_content"
    unicode_form: str = "NFC"
    keep_alt_texts: bool = False
    min_chars: int = 1
    # Seconds one page may take; a page over it is quarantined (`timeout`) and the shard goes on. The
    # budget is checked when the page is done: lexbor's parse cannot be interrupted. Its time grows with
    # the square of the nesting depth (a list 40,000 deep takes 2 s, 100,000 deep about 12 s), so a page
    # nested deeper than `max_depth` is quarantined before it is parsed. Browsers nest 512 levels at most.
    time_budget_s: float | None = 2.0
    max_depth: int | None = 10_000

    def __post_init__(self):
        if self.max_depth is not None and self.max_depth < 1:
            raise ValueError(f"max_depth must be at least 1 or unset, not {self.max_depth}")
        if self.extractor not in EXTRACTORS:
            raise ValueError(f"unknown extractor {self.extractor!r}; choose from {EXTRACTORS}")


_TAG = re.compile(r"<(?:!--.*?(?:-->|\Z)|(/?)([A-Za-z][^\s/>]*)[^>]*?(/?)>)", re.S)
_VOID = frozenset(
    "area base basefont bgsound br col embed frame hr img input keygen link meta param source track wbr".split()
)
_RAW_TEXT = frozenset("script style textarea title xmp noembed noframes iframe plaintext".split())
# A start tag of one of these closes an open element of the same name on top of the stack (`<p>a<p>b`).
_IMPLIED_END = frozenset("p li dt dd option optgroup tr td th tbody thead tfoot rb rt rp".split())


def nesting_depth(html: str, limit: int) -> int:
    """How deep the page's elements nest, as a tag scan sees it (void elements, raw text, comments and
    implied ends of paragraphs, list items and cells understood), counted up to `limit + 1` at most;
    0 when a cheap bound shows that it stays within `limit`.

    The bounds come first, so that almost every page costs a count: a page of no more than `limit`
    tags, or whose running count of start minus end tags (a bound that only end tags matching no open
    element can undercut) stays within `limit`, cannot nest deeper.
    """
    if html.count("<") <= limit or _open_tag_bound(html) <= limit:
        return 0
    stack: list[str] = []
    open_names: dict[str, int] = {}
    deepest = 0
    lowered = None
    pos = 0
    while match := _TAG.search(html, pos):
        pos = match.end()
        closing, name, self_closing = match.groups()
        if name is None:
            continue
        name = name.lower()
        if closing:
            if open_names.get(name):
                while (top := stack.pop()) != name:
                    open_names[top] -= 1
                open_names[name] -= 1
            continue
        if name in _RAW_TEXT:
            lowered = lowered if lowered is not None else html.lower()
            end = lowered.find("</" + name, pos)
            pos = len(html) if end < 0 else end
            continue
        if name in _VOID or self_closing:
            continue
        if name in _IMPLIED_END and stack and stack[-1] == name:
            continue
        stack.append(name)
        open_names[name] = open_names.get(name, 0) + 1
        deepest = max(deepest, len(stack))
        if deepest > limit:
            break
    return deepest


def too_deep(html: str, config: ExtractConfig) -> bool:
    """Whether the page nests deeper than `config.max_depth` (never, when that is unset): too deep to parse."""
    return config.max_depth is not None and nesting_depth(html, config.max_depth) > config.max_depth


def _open_tag_bound(html: str) -> int:
    """The highest running count of `<` minus `</` (comments and declarations aside), never below 0."""
    data = np.frombuffer(html.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    opens = np.flatnonzero(data[:-1] == ord("<"))
    if not opens.size:
        return 0
    after = data[opens + 1]
    steps = np.where(after == ord("/"), -1, np.where((after == ord("!")) | (after == ord("?")), 0, 1))
    running = np.cumsum(steps)
    return int((running - np.minimum(np.minimum.accumulate(running), 0)).max())


def clean_text(text: str, form: str = "NFC") -> tuple[str, int]:
    """Normalize Unicode and strip control characters. Returns the text and how many were stripped.

    `\r\n` and lone `\r` become `\n` first, so line-based rules downstream see real lines.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text, stripped = CONTROL_CHARS.subn("", text)
    if form:
        text = unicodedata.normalize(form, text)
    text = BLANK_LINES.sub("\n\n", text).strip()
    return text, stripped


def extract_html(html: str, config: ExtractConfig) -> tuple[str, str | None, str | None]:
    """Main text, title and `<html lang>` hint of one page."""
    text, _ = extract_page(html, config)
    return text, page_title(html), lang_hint(html)


def extract_page(html: str, config: ExtractConfig, html_bytes: int | None = None) -> tuple[str, dict]:
    """Main text of one page and its `PAGE_SIGNALS`, whichever extractor runs."""
    if config.extractor == "main_content":
        return extract_main_content(html, html_bytes=html_bytes)
    text = extract_plain_text(
        HTMLTree.parse(html),
        preserve_formatting=config.extractor == "all_text",
        main_content=config.extractor == "resiliparse",
        alt_texts=config.keep_alt_texts,
        links=False,
        comments=False,
    )
    return text, page_signals(walked_page(html), text, html, html_bytes)


def signal_columns(rows: list[dict]) -> list[pl.Series]:
    """The page and address signals as typed columns (null where a document had no HTML)."""
    types = {int: pl.Int64, float: pl.Float64}
    return [
        pl.Series(name, [row[name] for row in rows], dtype=types[kind])
        for name, kind in (PAGE_SIGNALS | URL_SIGNALS).items()
    ]


PAGE_COLUMNS = tuple(PAGE_SIGNALS) + tuple(URL_SIGNALS)


def extractor_name(config: ExtractConfig) -> str:
    """What ran, with the versions of the libraries doing the work."""
    from importlib.metadata import version

    if config.extractor == "main_content":
        return f"main_content (lm_assets on selectolax {version('selectolax')}, lexbor)"
    return f"{config.extractor} (resiliparse {version('resiliparse')})"


def page_title(html: str) -> str | None:
    match = TITLE.search(html, 0, 65536)
    return " ".join(html_lib.unescape(match.group(1)).split()) or None if match else None


def lang_hint(html: str) -> str | None:
    match = LANG_ATTR.search(html[:4096])
    return match.group(1).lower().replace("_", "-") if match else None


def extract_documents(docs: pl.DataFrame, config: ExtractConfig | None = None) -> StageResult:
    """HTML rows get their main text extracted; text rows pass through. Both are cleaned."""
    config = config or ExtractConfig()
    texts, titles, hints, stripped_counts, signals, over_budget = [], [], [], [], [], []
    urls = docs["url"].to_list() if "url" in docs.columns else [None] * docs.height
    sizes = docs["html"].str.len_bytes().fill_null(0).to_list()
    budget = config.time_budget_s if config.time_budget_s is not None else float("inf")
    for html, text, url, size in zip(docs["html"].to_list(), docs["text"].to_list(), urls, sizes):
        title = hint = None
        page = dict.fromkeys(PAGE_SIGNALS)
        if html is not None:
            if too_deep(html, config):
                over_budget.append(f"nested over {config.max_depth:,} elements deep: refused before its parse, "
                                   "whose time grows with the square of the depth")
                text = ""
            else:
                started = time.perf_counter()
                text, page = extract_page(html, config, size)
                seconds = time.perf_counter() - started
                if seconds > budget:
                    over_budget.append(f"extraction took {seconds:.2f} s, over the {budget:g} s budget")
                    text, page = "", dict.fromkeys(PAGE_SIGNALS)
                else:
                    over_budget.append(None)
            title, hint = page_title(html), lang_hint(html)
        else:
            over_budget.append(None)
        text, stripped = clean_text(text or "", config.unicode_form)
        texts.append(text)
        titles.append(title)
        hints.append(hint)
        stripped_counts.append(stripped)
        signals.append(page | address_signals(url, title))
    out = docs.drop("html", "text").with_columns(
        pl.Series("text", texts, dtype=pl.String),
        pl.Series("title", titles, dtype=pl.String),
        pl.Series("lang_hint", hints, dtype=pl.String),
        pl.Series("control_chars_stripped", stripped_counts, dtype=pl.Int64),
        pl.Series("html_bytes", sizes, dtype=pl.Int64),
        *signal_columns(signals),
    )
    timed_out = pl.Series(over_budget, dtype=pl.String).is_not_null()
    quarantine = timeout_quarantine(docs.filter(timed_out), [s for s in over_budget if s is not None])
    result = split_by_reason(
        out.filter(~timed_out),
        pl.when(pl.col("text").str.len_chars() < config.min_chars).then(pl.lit("empty_after_extraction")),
        stage=EXTRACTED,
    )
    result.quarantine = quarantine
    result.stats = {
        "extractor": extractor_name(config),
        "docs_in": docs.height,
        "docs_out": result.kept.height,
        "html_docs": int(docs["html"].is_not_null().sum()),
        "control_chars_stripped": int(sum(stripped_counts)),
        "docs_with_control_chars": int(sum(1 for s in stripped_counts if s)),
        "timeouts": quarantine.height,
    }
    return result


def timeout_quarantine(docs: pl.DataFrame, details: list[str]) -> pl.DataFrame:
    """Quarantine rows for the pages that ran over the time budget, or would have."""
    return pl.DataFrame(
        {
            "doc_id": docs["doc_id"],
            "source": docs["source"] if "source" in docs.columns else None,
            "record_index": docs["record_index"] if "record_index" in docs.columns else None,
            "byte_offset": None,
            "url": docs["url"] if "url" in docs.columns else None,
            "reason": "timeout",
            "detail": details,
        },
        schema=QUARANTINE_SCHEMA,
    )


SUMMED_STATS = ("docs_in", "docs_out", "html_docs", "control_chars_stripped", "docs_with_control_chars", "timeouts")


def extract_batches(batches: Iterable[pl.DataFrame], config: ExtractConfig | None = None) -> tuple[StageResult, pl.DataFrame]:
    """`extract_documents` over a shard's documents given in batches, in order: the same result as on all of
    them at once, holding one batch's HTML at a time. Also returns `doc_id, url, text` (the text or HTML as
    read) of the dropped documents that `drop_examples` may show, a few per reason and batch."""
    run = ExtractionRun(config)
    kept = pl.concat(list(run.kept_batches(batches))).rechunk()
    return run.result(kept)


class ExtractionRun:
    """`extract_batches` as a stream, for a stage that writes its documents as they come: `kept_batches`
    yields each batch's kept documents (one empty batch, with the columns, when there are none); once it
    is exhausted, `result(kept)` gives the rest: the drops, quarantine and stats of the whole shard."""

    def __init__(self, config: ExtractConfig | None = None):
        self.config = config or ExtractConfig()
        self.dropped: list[pl.DataFrame] = []
        self.held: list[pl.DataFrame] = []
        self.sources: list[pl.DataFrame] = []
        self.stats = dict.fromkeys(SUMMED_STATS, 0) | {
            "extractor": extractor_name(self.config), "charset_detected": 0, "batches": 0
        }

    def kept_batches(self, batches: Iterable[pl.DataFrame]) -> Iterator[pl.DataFrame]:
        stats = self.stats
        for batch in batches:
            result = extract_documents(batch, self.config)
            self.dropped.append(result.dropped)
            self.held.append(result.quarantine)
            self.sources.append(
                batch.filter(pl.col("doc_id").is_in(drop_example_ids(result.dropped).implode()))
                .select("doc_id", "url", pl.coalesce("text", "html").alias("text"))
            )
            for name in SUMMED_STATS:
                stats[name] += result.stats[name]
            if "charset_detected" in batch.columns:
                stats["charset_detected"] += int(batch["charset_detected"].sum())
            stats["batches"] += 1
            yield result.kept
        if not stats["batches"]:  # no documents: the stage's empty result, with its columns
            empty = extract_documents(pl.DataFrame(schema=BATCH_SCHEMA), self.config)
            self.dropped, self.held = [empty.dropped], [empty.quarantine]
            self.sources = [pl.DataFrame(schema={"doc_id": pl.String, "url": pl.String, "text": pl.String})]
            yield empty.kept

    def result(self, kept: pl.DataFrame) -> tuple[StageResult, pl.DataFrame]:
        result = StageResult(kept, pl.concat(self.dropped).rechunk(), self.stats, pl.concat(self.held).rechunk())
        return result, pl.concat(self.sources)
