#!/usr/bin/env python3
"""Build the sample web crawl that ships with lm-assets (data/sample-crawl).

The crawl is a small, deterministic stand-in for a Common Crawl segment, made
to exercise every stage of the pretraining data pipeline: WARC reading, HTML
decoding, main-content extraction, language identification, quality and
toxicity filtering, PII redaction and exact/near deduplication.

Output (in --out, default data/sample-crawl):

  crawl-00000.warc.gz .. crawl-00002.warc.gz
      Three WARC/1.0 shards, one gzip member per record.  Each shard starts
      with a warcinfo record and holds about 125 HTML page responses (about
      60% English, 40% Simplified Chinese), about 10% of them preceded by their
      request record, a few non-HTML responses (image/png, application/pdf,
      application/json), one HTTP 404 and one HTTP 301 response.  The pages
      include normal articles, boilerplate-heavy pages, low-quality pages,
      exact and near duplicates spread across shards, pages with PII (plus
      near-miss negatives), toxic pages, one GBK-encoded page declared as
      UTF-8 and one page with invalid UTF-8.  The last record of the last shard is a gzip member
      cut short: the one corrupt record of the crawl.
  expected.json
      Ground truth for tests: record counts per shard and kind, and the URLs
      of every category (see build_expected() for the schema).
  PROVENANCE.md
      Where every piece of text comes from, its licence, and how to rebuild.

Text comes from Debian documentation packages with permissive licences
(fetched with `apt-get download` into --cache and unpacked in Python; once the
.deb files are cached the build runs offline) and from original prose kept in
data/sample-crawl/originals/ (Apache-2.0, written for lm-assets).

Usage:
    .venv/bin/python scripts/build_sample_crawl.py --out data/sample-crawl
    .venv/bin/python scripts/build_sample_crawl.py --out data/sample-crawl --check

--check re-reads the shards with warcio and compares them with expected.json
without rebuilding.  The build needs only the standard library, warcio and
bench/benchlib/crawl/ (its .deb reader, payloads, shingles and WARC shard writer).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import html
import io
import json
import random
import re
import sys
import zlib
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.warcwriter import WARCWriter

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "bench"))
from benchlib.crawl import payloads
from benchlib.crawl.debian import cached_deb, read_deb
from benchlib.crawl.similarity import jaccard, shingles
from benchlib.crawl.warc import ShardWriter, iso

SEED = 20260301
NUM_SHARDS = 3
DEFAULT_OUT = REPO_ROOT / "data" / "sample-crawl"
DEFAULT_ORIGINALS = DEFAULT_OUT / "originals"
DEFAULT_CACHE = Path.home() / ".cache" / "lm-assets" / "sample-crawl-debs"

# Debian packages the text is taken from.  The version is pinned so a rebuild
# gives the same bytes; if the mirror no longer has it, the current version is
# used instead (with a warning) and the output changes accordingly.
DEBIAN_SOURCES = {
    "python3.11-doc": {
        "version": "3.11.2-6+deb12u9",
        "licence": "PSF-2.0 (Python Software Foundation License Version 2)",
        "what": "Python 3.11 documentation (HTML): tutorial, HOWTOs, FAQ, "
        "language and library reference",
    },
    "debmake-doc": {
        "version": "1.17-7",
        "licence": "Expat (MIT)",
        "what": "Guide for Debian Maintainers by Osamu Aoki et al., English "
        "and Simplified Chinese HTML",
    },
    "kicad-doc-zh": {
        "version": "6.0.11+dfsg-1",
        "licence": "CC-BY-3.0 (dual-licensed GPL-3+ or CC-BY-3.0+; "
        "used here under CC-BY-3.0)",
        "what": "KiCad 6.0 manuals, Simplified Chinese translation, "
        "by the KiCad Developers and translators",
    },
}

CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")


# --------------------------------------------------------------------------
# Text extraction from the source HTML
# --------------------------------------------------------------------------

BLOCK_TAGS = {"p", "pre", "h1", "h2", "h3", "h4", "h5", "li", "dt", "dd", "td", "th"}
VOID_TAGS = {"br", "img", "hr", "meta", "link", "input", "col", "area", "base", "wbr"}
SKIP_TAGS = {"script", "style", "head", "nav", "title"}
SKIP_MARKERS = {
    "navheader", "navfooter", "toc", "toctitle", "sphinxsidebar", "related",
    "footer", "footer-text", "header", "headerlink", "copyright",
    "contributors", "translation", "feedback", "publication_date",
    "version_switcher_placeholder", "language_switcher_placeholder",
    "admonition-title", "sig-paren", "viewcode-link", "clearer",
}


class BlockExtractor(HTMLParser):
    """Collect (tag, text) pairs for the block elements of a document."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []
        self.blocks: list[tuple[str, str]] = []
        self.buffer: list[str] = []
        self.current: str | None = None
        self.skipping = 0

    def flush(self):
        text = "".join(self.buffer)
        self.buffer = []
        if self.current == "pre":
            text = text.strip("\n")
        else:
            text = re.sub(r"\s+", " ", text).strip()
        if text and self.current:
            self.blocks.append((self.current, text))

    def handle_starttag(self, tag, attrs):
        if tag in VOID_TAGS:
            if tag == "br" and not self.skipping:
                self.buffer.append("\n" if self.current == "pre" else " ")
            return
        attributes = dict(attrs)
        markers = set((attributes.get("class") or "").split()) | {attributes.get("id") or ""}
        skip = tag in SKIP_TAGS or bool(markers & SKIP_MARKERS)
        self.stack.append((tag, skip))
        if skip:
            self.skipping += 1
        if tag in BLOCK_TAGS and not self.skipping:
            self.flush()
            self.current = tag

    def handle_endtag(self, tag):
        if tag in VOID_TAGS:
            return
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                self.skipping -= sum(1 for _, skip in self.stack[i:] if skip)
                del self.stack[i:]
                break
        else:
            return
        if tag in BLOCK_TAGS:
            self.flush()
            self.current = next((t for t, _ in reversed(self.stack) if t in BLOCK_TAGS), None)

    def handle_data(self, data):
        if not self.skipping and self.current:
            self.buffer.append(data)


def extract_blocks(markup: str) -> list[tuple[str, str]]:
    parser = BlockExtractor()
    parser.feed(markup)
    parser.flush()
    return parser.blocks


def html_title(markup: str) -> str:
    match = re.search(r"<title>(.*?)</title>", markup, re.S)
    return html.unescape(re.sub(r"\s+", " ", match.group(1))).strip() if match else ""


def cjk_count(text: str) -> int:
    return len(CJK_RE.findall(text))


def cjk_ratio(text: str) -> float:
    letters = [c for c in text if not c.isspace()]
    return cjk_count(text) / max(1, len(letters))


def text_size(text: str, lang: str) -> int:
    """Size in words (English) or CJK characters (Chinese)."""
    return cjk_count(text) if lang == "zh" else len(text.split())


# --------------------------------------------------------------------------
# Detectors used to keep PII and abuse out of ordinary pages (and to check
# that the PII/toxic pages really contain what expected.json says)
# --------------------------------------------------------------------------

EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
IPV4_RE = re.compile(
    r"(?<!\d)(?<!\d\.)(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?!\d|\.\d)"
)
IPV6_RE = re.compile(
    r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![\w:])"
    r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}(?::[0-9A-Fa-f]{1,4}){1,6}(?![\w:])"
    r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,7}:(?![\w:])"
    r"|(?<![\w:])::(?:[0-9A-Fa-f]{1,4}:){0,6}[0-9A-Fa-f]{1,4}(?![\w:])"
)
PHONE_RE = re.compile(r"\+\d{1,3}[ -]?(?:\(\d{1,4}\)[ -]?)?\d{1,4}(?:[ -]\d{2,4}){1,4}")
CN_MOBILE_RE = re.compile(r"(?<!\d)1[3-9]\d{9}(?!\d)")
CARD_RE = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
PRC_ID_RE = re.compile(r"(?<!\d)\d{17}[\dXx](?!\d)")
PRC_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
PRC_ID_CHECK = "10X98765432"


def luhn_ok(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    total = 0
    for i, digit in enumerate(reversed(digits)):
        if i % 2 == 1:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def prc_id_check_digit(first17: str) -> str:
    return PRC_ID_CHECK[sum(int(d) * w for d, w in zip(first17, PRC_ID_WEIGHTS)) % 11]


def prc_id_ok(number: str) -> bool:
    return len(number) == 18 and prc_id_check_digit(number[:17]) == number[17].upper()


# Not personal data: documentation examples (RFC 5737, RFC 3849), loopback, and section numbers.
NOT_PERSONAL_IPV4 = ("192.0.2.", "198.51.100.", "203.0.113.", "127.")
SECTION_BEFORE_RE = re.compile(r"(?:section|chapter|§|第)\s*$", re.I)


def ip_is_personal(match: re.Match, text: str) -> bool:
    value = match.group()
    if value.startswith(NOT_PERSONAL_IPV4) or value.lower().startswith("2001:db8:") or value == "::1":
        return False
    return not SECTION_BEFORE_RE.search(text[max(0, match.start() - 12) : match.start()])


def find_pii(text: str) -> list[tuple[str, str]]:
    """Return (type, value) for every PII-like string: the redaction targets."""
    found = [("email", m.group()) for m in EMAIL_RE.finditer(text)]
    found += [("ipv4", m.group()) for m in IPV4_RE.finditer(text) if ip_is_personal(m, text)]
    found += [("ipv6", m.group()) for m in IPV6_RE.finditer(text) if ":" in m.group().strip(":") and ip_is_personal(m, text)]
    found += [("credit_card", m.group()) for m in CARD_RE.finditer(text) if luhn_ok(m.group())]
    found += [("prc_id", m.group()) for m in PRC_ID_RE.finditer(text) if prc_id_ok(m.group())]
    found += [("cn_mobile", m.group()) for m in CN_MOBILE_RE.finditer(text)]
    for match in PHONE_RE.finditer(text):
        value = match.group()
        digits = re.sub(r"\D", "", value)
        kind = "cn_mobile" if re.fullmatch(r"861[3-9]\d{9}", digits) else "phone"
        if len(digits) >= 8:
            found.append((kind, value))
    return found


TOXIC_LEXICON = (
    "idiot", "stupid", "moron", "shut up", "loser", "worthless", "scumbag",
    "pathetic", "brainless", "damn you", "白痴", "蠢货", "蠢猪", "没用的废物", "滚开", "臭嘴",
)


def has_toxic_words(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in TOXIC_LEXICON)


# --------------------------------------------------------------------------
# Articles: the main content of the pages
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Article:
    key: str  # unique id, e.g. "python3.11-doc:tutorial/classes#2" or "original:fjords"
    lang: str  # "en" or "zh"
    title: str
    blocks: list  # list of (tag, text); tag is p, pre, li, h2 or h3
    source: str  # Debian package name or "original"
    kind: str = "article"  # for originals: article, brief, post, toxic

    @property
    def text(self) -> str:
        return "\n".join(text for _, text in self.blocks)

    @property
    def size(self) -> int:
        return text_size(self.text, self.lang)


HEADING_NUMBER_RE = re.compile(
    r"^(?:Chapter|Appendix)\s+[0-9A-Z]+\.\s*|^(?:[0-9A-Z]+\.)+[0-9]*\.?\s+|^[0-9]+\.\s+"
)


def normalise_block(tag: str, text: str) -> tuple[str, str]:
    if tag in ("h1", "h2"):
        return "h2", HEADING_NUMBER_RE.sub("", text).rstrip("¶ ").strip()
    if tag in ("h3", "h4", "h5"):
        return "h3", HEADING_NUMBER_RE.sub("", text).rstrip("¶ ").strip()
    if tag in ("dt", "dd", "th", "td"):
        return "p", text
    return tag, text


LONG_DIGITS_RE = re.compile(r"\d(?:[ -]?\d){10,}")


def block_is_clean(text: str) -> bool:
    """True for text with no PII-like strings, no long digit runs and no abuse."""
    return not find_pii(text) and not LONG_DIGITS_RE.search(text) and not has_toxic_words(text)


def split_document(prefix, doc_title, blocks, lang, source, lo, hi) -> list[Article]:
    """Cut a document into articles of lo..hi words (or CJK characters).

    The document is cut into sections at headings (long sections are cut
    again between blocks), and consecutive sections are packed into articles
    no larger than hi; articles smaller than lo are dropped.
    """

    def size_of(part):
        return text_size("\n".join(t for _, t in part), lang)

    units, current = [], []
    for tag, text in blocks:
        if tag in ("h2", "h3") and current:
            units.append(current)
            current = []
        if current and size_of(current + [(tag, text)]) > hi:
            units.append(current)
            current = []
        current.append((tag, text))
    if current:
        units.append(current)

    articles, pending = [], []

    def emit(body):
        while body and body[-1][0] in ("h2", "h3"):
            body = body[:-1]
        if not body or size_of(body) < lo:
            return
        heading = next((t for tag, t in body if tag in ("h2", "h3")), "")
        title = f"{heading} — {doc_title}" if heading and heading != doc_title else doc_title
        if body[0][0] in ("h2", "h3") and body[0][1] == heading:
            body = body[1:]
        key = f"{source}:{prefix}#{len(articles)}"
        articles.append(Article(key, lang, title, body, source))

    for unit in units:
        if pending and size_of(pending + unit) > hi:
            emit(pending)
            pending = []
        pending = pending + unit
    emit(pending)
    return articles


PYTHON_DOC_PAGES = (
    ["tutorial/" + p for p in (
        "appetite", "interpreter", "introduction", "controlflow", "datastructures",
        "modules", "inputoutput", "errors", "classes", "stdlib", "stdlib2", "venv",
        "whatnow", "interactive", "floatingpoint", "appendix")]
    + ["howto/" + p for p in (
        "argparse", "descriptor", "enum", "functional", "logging", "regex",
        "sorting", "unicode", "annotations", "curses", "pyporting", "cporting",
        "instrumentation", "isolating-extensions", "clinic")]
    + ["faq/" + p for p in (
        "general", "programming", "design", "library", "extending", "gui",
        "installed", "windows")]
    + ["reference/" + p for p in (
        "introduction", "lexical_analysis", "datamodel", "executionmodel",
        "import", "expressions", "simple_stmts", "compound_stmts",
        "toplevel_components")]
    + ["library/" + p for p in (
        "intro", "functions", "constants", "stdtypes", "exceptions", "string",
        "re", "difflib", "textwrap", "unicodedata", "datetime", "calendar",
        "collections", "heapq", "bisect", "array", "weakref", "copy", "pprint",
        "enum", "numbers", "math", "decimal", "fractions", "random",
        "statistics", "itertools", "functools", "operator", "pathlib",
        "os.path", "fileinput", "tempfile", "glob", "fnmatch", "shutil",
        "pickle", "copyreg", "shelve", "marshal", "sqlite3", "zlib", "gzip",
        "bz2", "lzma", "zipfile", "tarfile", "csv", "configparser", "hashlib",
        "hmac", "secrets", "io", "time", "argparse", "getopt", "logging",
        "curses", "platform", "errno", "ctypes", "threading",
        "multiprocessing", "concurrent.futures", "subprocess", "sched",
        "queue", "contextvars", "asyncio-task", "asyncio-eventloop",
        "asyncio-queue", "asyncio-sync", "json", "base64", "binascii",
        "html", "html.parser", "xml.etree.elementtree", "webbrowser",
        "wsgiref", "gettext", "locale", "turtle", "cmd", "shlex", "tkinter",
        "typing", "pydoc", "doctest", "unittest", "unittest.mock", "pdb",
        "profile", "timeit", "trace", "tracemalloc", "sys", "sysconfig",
        "builtins", "warnings", "dataclasses", "contextlib", "abc", "atexit",
        "traceback", "gc", "inspect", "site", "code", "codeop", "importlib",
        "ast", "symtable", "token", "keyword", "tokenize", "dis",
        "pickletools", "zipapp", "venv", "struct", "codecs", "graphlib",
        "reprlib", "types", "cmath", "filecmp", "stat", "os", "signal",
        "mmap", "select", "selectors")]
)


def load_python_docs(files: dict[str, bytes]) -> list[Article]:
    root = "usr/share/doc/python3.11/html/"
    articles = []
    for page in PYTHON_DOC_PAGES:
        markup = files[root + page + ".html"].decode("utf-8")
        main = markup.split('<div class="body" role="main">', 1)[-1]
        main = main.split('<div class="sphinxsidebar"', 1)[0]
        title = HEADING_NUMBER_RE.sub("", html_title(markup).split(" — ")[0])
        blocks = [normalise_block(t, x) for t, x in extract_blocks(main)]
        blocks = [(t, x) for t, x in blocks if x and block_is_clean(x) and len(x) < 6000]
        articles += split_document(page, title, blocks, "en", "python3.11-doc", 350, 2500)
    return articles


def load_debmake(files: dict[str, bytes], lang: str) -> list[Article]:
    root = "usr/share/doc/debmake-doc/html/"
    suffix = {"en": ".en.html", "zh": ".zh-cn.html"}[lang]
    lo, hi = (300, 2000) if lang == "en" else (300, 1300)
    articles = []
    for path in sorted(p for p in files if p.startswith(root) and p.endswith(suffix)):
        name = path[len(root):]
        if name.startswith("index."):
            continue
        markup = files[path].decode("utf-8")
        title = HEADING_NUMBER_RE.sub("", html_title(markup))
        blocks = [normalise_block(t, x) for t, x in extract_blocks(markup)]
        blocks = [(t, x) for t, x in blocks if x and block_is_clean(x) and len(x) < 5000]
        if lang == "zh":
            blocks = [(t, x) for t, x in blocks
                      if (t == "pre" and len(x) < 400) or cjk_ratio(x) >= 0.15]
        articles += split_document(name, title, blocks, lang, "debmake-doc", lo, hi)
    if lang == "zh":  # keep pages that read as Chinese, not as code listings
        articles = [a for a in articles if cjk_ratio(a.text) >= 0.3]
    return articles


def load_kicad_zh(files: dict[str, bytes]) -> list[Article]:
    root = "usr/share/doc/kicad/help/zh/"
    articles = []
    titles = {"introduction": "KiCad 简介", "kicad": "KiCad 工程管理器",
              "eeschema": "原理图编辑器", "pcbnew": "PCB 编辑器",
              "pl_editor": "图框编辑器", "gerbview": "GerbView 查看器",
              "pcb_calculator": "PCB 计算器"}
    for page, title in titles.items():
        markup = files[root + page + ".html"].decode("utf-8")
        main = markup.split('<div id="content">', 1)[-1].split('<div id="footer">', 1)[0]
        # the translated manual starts at its first chapter; before it are the
        # copyright notice, contributor and translator lists
        first_chapter = main.find('<div class="sect1">')
        main = main[first_chapter:] if first_chapter >= 0 else main
        blocks = [normalise_block(t, x) for t, x in extract_blocks(main)]
        blocks = [
            (t, x) for t, x in blocks
            if x and block_is_clean(x) and len(x) < 5000
            and (cjk_ratio(x) >= 0.2 or (t == "pre" and len(x) < 600))
            and x not in ("Note", "Tip", "Warning", "Important", "Caution")
        ]
        articles += split_document(page, title, blocks, "zh", "kicad-doc-zh", 300, 1300)
    return [a for a in articles if cjk_ratio(a.text) >= 0.35]


def load_originals(path: Path, lang: str) -> list[Article]:
    """Parse an originals file (see its header for the format)."""
    articles, current, paragraphs = [], None, []

    def close():
        if current is None:
            return
        slug, kind, title = current
        blocks = [("h2", p[3:]) if p.startswith("## ") else ("p", p) for p in paragraphs]
        articles.append(Article(f"original:{slug}", lang, title, blocks, "original", kind))

    buffer: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if line.startswith("=== "):
            if buffer:
                paragraphs.append(" ".join(buffer))
                buffer = []
            close()
            slug, kind, title = (part.strip() for part in line[4:].split("|", 2))
            current, paragraphs = (slug, kind, title), []
        elif line.startswith("#") and current is None:
            continue
        elif not line.strip():
            if buffer:
                paragraphs.append(" ".join(buffer) if lang == "en" else "".join(buffer))
                buffer = []
        elif current is not None:
            buffer.append(line.strip())
    close()
    return articles


def load_all_articles(debs: dict[str, Path], originals: Path) -> dict[str, list[Article]]:
    python_files = read_deb(
        debs["python3.11-doc"],
        lambda p: p.startswith("usr/share/doc/python3.11/html/")
        and p.endswith(".html") and p.count("/") <= 6,
    )
    debmake_files = read_deb(
        debs["debmake-doc"],
        lambda p: p.startswith("usr/share/doc/debmake-doc/html/") and p.endswith(".html"),
    )
    kicad_files = read_deb(
        debs["kicad-doc-zh"],
        lambda p: p.startswith("usr/share/doc/kicad/help/zh/") and p.endswith(".html"),
    )
    return {
        "python": load_python_docs(python_files),
        "debmake_en": load_debmake(debmake_files, "en"),
        "debmake_zh": load_debmake(debmake_files, "zh"),
        "kicad_zh": load_kicad_zh(kicad_files),
        "original_en": load_originals(originals / "en.txt", "en"),
        "original_zh": load_originals(originals / "zh.txt", "zh"),
    }


# --------------------------------------------------------------------------
# Sites and page templates
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Site:
    host: str
    name: str
    lang: str
    style: str  # docs, blog, news, forum, shop, legacy or plain
    nav: tuple
    server: str = "nginx"

    def url(self, path: str) -> str:
        return f"https://{self.host}{path}"


EN_NAV_DOCS = ("Home", "Tutorial", "Library", "Language Reference", "HOWTOs", "FAQ", "Glossary", "Download")
EN_NAV_BLOG = ("Home", "Articles", "Guides", "Archive", "About", "Newsletter")
EN_NAV_NEWS = ("Home", "Local", "World", "Science", "Technology", "Food", "Travel", "Opinion", "Weather")
EN_NAV_FORUM = ("Forums", "Latest", "Unanswered", "Members", "Rules", "Help")
EN_NAV_SHOP = ("Shop", "New arrivals", "Deals", "Phones", "Laptops", "Accessories", "Help", "My account")
ZH_NAV_DOCS = ("首页", "入门指南", "参考手册", "常见问题", "下载", "社区", "关于")
ZH_NAV_BLOG = ("首页", "美食", "园艺", "旅行", "读书", "生活随笔", "关于我")
ZH_NAV_NEWS = ("首页", "本地", "国内", "国际", "科技", "文化", "健康", "教育", "天气")
ZH_NAV_FORUM = ("论坛首页", "最新帖子", "精华区", "版规", "帮助")
ZH_NAV_SHOP = ("商城首页", "手机数码", "电脑办公", "家用电器", "服饰鞋包", "我的订单", "客户服务")

SITES = {s.host: s for s in (
    Site("docs.pyguide.example", "PyGuide Docs", "en", "docs", EN_NAV_DOCS),
    Site("learn.codepath.example", "CodePath Learning", "en", "blog", EN_NAV_BLOG, "Apache"),
    Site("wiki.packaging-notes.example", "Packaging Notes Wiki", "en", "docs",
         ("Main page", "Guides", "Policy", "Tools", "Recent changes", "Help")),
    Site("www.curious-minds.example", "Curious Minds Magazine", "en", "news", EN_NAV_NEWS),
    Site("blog.greenpatch.example", "The Green Patch", "en", "blog", EN_NAV_BLOG),
    Site("www.homekitchen.example", "Home Kitchen Notes", "en", "blog", EN_NAV_BLOG, "Apache"),
    Site("www.spokesandgears.example", "Spokes & Gears", "en", "blog", EN_NAV_BLOG),
    Site("news.riverside-town.example", "Riverside Town News", "en", "news", EN_NAV_NEWS),
    Site("www.citydaily.example", "The City Daily", "en", "news", EN_NAV_NEWS),
    Site("forum.techtalk.example", "TechTalk Forums", "en", "forum", EN_NAV_FORUM),
    Site("shop.gadgetbarn.example", "GadgetBarn", "en", "shop", EN_NAV_SHOP),
    Site("www.techdigest-daily.example", "Tech Digest Daily", "en", "news", EN_NAV_NEWS),
    Site("blog.readinglist.example", "Reading List", "en", "blog", EN_NAV_BLOG),
    Site("mirror.pyguide-archive.example", "PyGuide Docs", "en", "docs", EN_NAV_DOCS),
    Site("www.archive-mirror.example", "Archive Mirror", "en", "docs", EN_NAV_DOCS),
    Site("docs.kaiyuan-wendang.example", "开源文档中心", "zh", "docs", ZH_NAV_DOCS),
    Site("www.dianzi-shequ.example", "电子设计社区", "zh", "docs",
         ("首页", "教程", "元件库", "问答", "下载", "关于")),
    Site("www.zhishi-baike.example", "知识小百科", "zh", "news", ZH_NAV_NEWS),
    Site("life.shenghuo-riji.example", "生活日记", "zh", "blog", ZH_NAV_BLOG),
    Site("news.chengshi-kuaibao.example", "城市快报", "zh", "news", ZH_NAV_NEWS),
    Site("bbs.jishu-luntan.example", "技术交流论坛", "zh", "forum", ZH_NAV_FORUM),
    Site("mall.youpin-shangcheng.example", "优品商城", "zh", "shop", ZH_NAV_SHOP),
    Site("www.wenzhang-jicui.example", "文章集萃", "zh", "news", ZH_NAV_NEWS),
    Site("blog.xinxi-daohang.example", "信息导航博客", "zh", "blog", ZH_NAV_BLOG),
    Site("mirror.wendang-jingxiang.example", "开源文档中心", "zh", "docs", ZH_NAV_DOCS),
    Site("cache.zhishi-jingxiang.example", "知识小百科", "zh", "news", ZH_NAV_NEWS),
)}

STRINGS = {
    "en": {
        "skip": "Skip to content", "search": "Search", "contents": "Contents",
        "home": "Home", "prev": "Previous", "next": "Next", "related": "Related articles",
        "popular": "Popular posts", "posted": "Posted on", "by": "by", "tags": "Tags",
        "share": "Share this article", "comments": "Comments", "leave": "Leave a comment",
        "rights": "All rights reserved.", "footer_links": ("About us", "Contact", "Privacy policy",
        "Terms of use", "Sitemap", "Accessibility"), "most_read": "Most read",
        "newsletter": "Get our weekly newsletter with the best stories.",
        "subscribe": "Subscribe", "reply": "Reply", "joined": "Joined", "posts": "Posts",
        "edit": "Edit this page", "updated": "Last updated", "login": "Log in",
        "register": "Register", "min_read": "min read",
    },
    "zh": {
        "skip": "跳到正文", "search": "搜索", "contents": "目录", "home": "首页",
        "prev": "上一篇", "next": "下一篇", "related": "相关文章", "popular": "热门文章",
        "posted": "发布于", "by": "作者", "tags": "标签", "share": "分享到",
        "comments": "评论", "leave": "发表评论", "rights": "版权所有",
        "footer_links": ("关于我们", "联系方式", "隐私政策", "使用条款", "网站地图", "意见反馈"),
        "most_read": "阅读排行", "newsletter": "订阅每周精选，好文章不错过。",
        "subscribe": "订阅", "reply": "回复", "joined": "注册时间", "posts": "帖子",
        "edit": "编辑此页", "updated": "最后更新", "login": "登录", "register": "注册",
        "min_read": "分钟阅读",
    },
}


def esc(text: str) -> str:
    return html.escape(text, quote=False)


def render_blocks(blocks) -> str:
    """Render (tag, text) blocks as article HTML."""
    out, open_list = [], False
    for tag, text in blocks:
        if tag == "li" and not open_list:
            out.append("<ul>")
            open_list = True
        elif tag != "li" and open_list:
            out.append("</ul>")
            open_list = False
        if tag == "li":
            out.append(f"<li>{esc(text)}</li>")
        elif tag in ("h2", "h3"):
            out.append(f"<{tag}>{esc(text)}</{tag}>")
        elif tag == "pre":
            out.append(f'<pre><code>{esc(text)}</code></pre>')
        elif tag == "raw":
            out.append(text)
        else:
            out.append(f"<p>{esc(text)}</p>")
    if open_list:
        out.append("</ul>")
    return "\n".join(out)


def nav_html(site: Site, css_class: str) -> str:
    items = "".join(
        f'<li><a href="/{"" if i == 0 else slugify(label)}">{esc(label)}</a></li>'
        for i, label in enumerate(site.nav)
    )
    return f'<nav class="{css_class}"><ul>{items}</ul></nav>'


def link_list(links, css_class="links") -> str:
    items = "".join(f'<li><a href="{esc(href)}">{esc(text)}</a></li>' for text, href in links)
    return f'<ul class="{css_class}">{items}</ul>'


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug or "c" + hashlib.md5(text.encode("utf-8")).hexdigest()[:8]


def footer_html(site: Site, year_from: int) -> str:
    s = STRINGS[site.lang]
    links = link_list([(label, "/" + slugify(label) if site.lang == "en" else f"/info/{i}")
                       for i, label in enumerate(s["footer_links"])], "footer-links")
    if site.lang == "en":
        note = f"© {year_from}–2026 {esc(site.name)}. {s['rights']}"
    else:
        note = f"© {year_from}-2026 {esc(site.name)} {s['rights']}"
    return f'<footer class="site-footer">{links}<p class="copyright">{note}</p></footer>'


def head_html(site: Site, title: str, charset: str, extra_css: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="{"en" if site.lang == "en" else "zh-CN"}">\n<head>\n'
        f'<meta charset="{charset}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)} - {esc(site.name)}</title>\n"
        f'<link rel="stylesheet" href="/static/{extra_css}.css">\n'
        '<script src="/static/site.js" defer></script>\n'
        "</head>\n"
    )


@dataclasses.dataclass
class PageView:
    """What a template needs to render one page."""

    site: Site
    path: str
    title: str
    body: str  # the article HTML (already rendered)
    date: str
    author: str
    sidebar: list  # (title, href) of other pages on the site
    charset: str = "utf-8"
    after_article: str = ""  # extra HTML after the article (comments, replies)


def render_docs(v: PageView) -> str:
    s = STRINGS[v.site.lang]
    crumbs = f'<a href="/">{s["home"]}</a> › <a href="{v.path.rsplit("/", 2)[0]}/">{esc(v.site.nav[1])}</a> › {esc(v.title)}'
    prev_link, next_link = (v.sidebar + [("", "/"), ("", "/")])[:2]
    return (
        head_html(v.site, v.title, v.charset, "docs")
        + f'<body>\n<a class="skip-link" href="#content">{s["skip"]}</a>\n'
        f'<header class="topbar"><a class="brand" href="/">{esc(v.site.name)}</a>\n'
        + nav_html(v.site, "topnav")
        + f'\n<form class="search" action="/search"><input type="search" name="q" placeholder="{s["search"]}"></form></header>\n'
        '<div class="layout">\n'
        f'<nav class="sidebar" aria-label="{s["contents"]}"><h2>{s["contents"]}</h2>'
        + link_list(v.sidebar, "toc")
        + "</nav>\n"
        f'<main id="content">\n<div class="breadcrumbs">{crumbs}</div>\n<article class="document">\n'
        f"<h1>{esc(v.title)}</h1>\n{v.body}\n</article>\n"
        f'<p class="page-meta">{s["updated"]}: {v.date} · <a href="/edit{v.path}">{s["edit"]}</a></p>\n'
        f'<nav class="pager"><a rel="prev" href="{esc(prev_link[1])}">« {s["prev"]}</a> '
        f'<a rel="next" href="{esc(next_link[1])}">{s["next"]} »</a></nav>\n'
        f"{v.after_article}</main>\n</div>\n"
        + footer_html(v.site, 2016)
        + "\n</body>\n</html>\n"
    )


def render_blog(v: PageView) -> str:
    s = STRINGS[v.site.lang]
    return (
        head_html(v.site, v.title, v.charset, "blog")
        + "<body>\n"
        f'<div id="masthead"><div class="logo"><a href="/">{esc(v.site.name)}</a></div>\n'
        + nav_html(v.site, "menu")
        + f'\n<div class="account"><a href="/login">{s["login"]}</a> | <a href="/register">{s["register"]}</a></div></div>\n'
        '<div id="wrapper">\n<div id="primary">\n<article class="post">\n'
        f'<h1 class="entry-title">{esc(v.title)}</h1>\n'
        f'<div class="entry-meta">{s["posted"]} <time>{v.date}</time> {s["by"]} <span class="author">{esc(v.author)}</span></div>\n'
        f'<div class="entry-content">\n{v.body}\n</div>\n'
        f'<div class="share">{s["share"]}: <a href="#">Weibo</a> <a href="#">Mastodon</a> <a href="#">Email</a></div>\n'
        "</article>\n"
        f'{v.after_article}<div id="respond"><h3>{s["leave"]}</h3>'
        f'<form action="/comment" method="post"><textarea name="comment"></textarea>'
        f'<button>{s["reply"]}</button></form></div>\n'
        "</div>\n"
        f'<div id="secondary" class="widget-area"><h3>{s["popular"]}</h3>'
        + link_list(v.sidebar, "widget-links")
        + "</div>\n</div>\n"
        + footer_html(v.site, 2014)
        + "\n</body>\n</html>\n"
    )


def render_news(v: PageView) -> str:
    s = STRINGS[v.site.lang]
    return (
        head_html(v.site, v.title, v.charset, "news")
        + "<body>\n"
        f'<header class="masthead"><div class="date-line">{v.date}</div>'
        f'<a class="title" href="/">{esc(v.site.name)}</a></header>\n'
        + nav_html(v.site, "sections")
        + '\n<div class="page">\n<main>\n<article>\n'
        f"<h1>{esc(v.title)}</h1>\n"
        f'<p class="byline">{s["by"]} {esc(v.author)} · <time>{v.date}</time></p>\n'
        f'<div class="story-body">\n{v.body}\n</div>\n</article>\n{v.after_article}</main>\n'
        f'<aside class="rail"><h2>{s["most_read"]}</h2>'
        + link_list(v.sidebar, "most-read")
        + f'<div class="newsletter"><p>{s["newsletter"]}</p><button>{s["subscribe"]}</button></div></aside>\n'
        "</div>\n"
        + footer_html(v.site, 2009)
        + "\n</body>\n</html>\n"
    )


TEMPLATES = {"docs": render_docs, "blog": render_blog, "news": render_news}


def render_forum(site: Site, path: str, title: str, posts, sidebar, board: str) -> str:
    """posts: list of (user, date, blocks)."""
    s = STRINGS[site.lang]
    parts = []
    for n, (user, date, blocks) in enumerate(posts, 1):
        parts.append(
            f'<div class="post" id="p{n}">\n'
            f'<div class="post-author"><span class="username">{esc(user)}</span> '
            f'<span class="user-meta">{s["joined"]}: 20{10 + n % 14}-0{1 + n % 9} · {s["posts"]}: {17 * n + 3}</span></div>\n'
            f'<div class="post-body">\n{render_blocks(blocks)}\n</div>\n'
            f'<div class="post-footer"><time>{date}</time> · <a href="#reply">{s["reply"]}</a></div>\n</div>'
        )
    return (
        head_html(site, title, "utf-8", "forum")
        + "<body>\n"
        f'<div id="forum-header"><a class="logo" href="/">{esc(site.name)}</a>\n'
        + nav_html(site, "forum-nav")
        + f'\n<a href="/login">{s["login"]}</a> <a href="/register">{s["register"]}</a></div>\n'
        f'<div class="breadcrumb"><a href="/">{esc(site.nav[0])}</a> › <a href="/board/">{esc(board)}</a></div>\n'
        f'<main class="thread">\n<h1 class="thread-title">{esc(title)}</h1>\n'
        + "\n".join(parts)
        + f'\n</main>\n<aside class="similar"><h2>{s["related"]}</h2>'
        + link_list(sidebar, "similar-threads")
        + "</aside>\n"
        + footer_html(site, 2008)
        + "\n</body>\n</html>\n"
    )


def render_shop(site: Site, path: str, title: str, body: str, sidebar) -> str:
    s = STRINGS[site.lang]
    cart = "Cart (0)" if site.lang == "en" else "购物车（0）"
    return (
        head_html(site, title, "utf-8", "shop")
        + "<body>\n"
        f'<div class="shop-header"><a class="logo" href="/">{esc(site.name)}</a>'
        f'<form action="/search"><input name="q" placeholder="{s["search"]}"></form>'
        f'<a class="cart" href="/cart">{cart}</a></div>\n'
        + nav_html(site, "categories")
        + f'\n<div class="container">\n<main class="content">\n<h1>{esc(title)}</h1>\n{body}\n</main>\n'
        f'<aside class="recommended"><h2>{s["popular"]}</h2>'
        + link_list(sidebar, "products")
        + "</aside>\n</div>\n"
        + footer_html(site, 2012)
        + "\n</body>\n</html>\n"
    )


def render_plain(lang: str, title: str, body: str, charset: str = "utf-8") -> str:
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="{"en" if lang == "en" else "zh-CN"}">\n<head>\n<meta charset="{charset}">\n'
        f"<title>{esc(title)}</title>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def render_legacy(lang: str, title: str, body: str, links) -> str:
    """An old table-based layout, as used by many spam and directory sites."""
    cells = "".join(f'<tr><td><a href="{esc(h)}"><font size="2">{esc(t)}</font></a></td></tr>' for t, h in links)
    return (
        '<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.01 Transitional//EN">\n'
        f'<html lang="{"en" if lang == "en" else "zh-CN"}">\n<head>\n'
        '<meta http-equiv="Content-Type" content="text/html; charset=utf-8">\n<meta charset="utf-8">\n'
        f"<title>{esc(title)}</title>\n</head>\n"
        '<body bgcolor="#ffffff">\n<table width="100%" border="0" cellpadding="4">\n'
        f'<tr><td colspan="2" bgcolor="#003399"><font color="#ffffff" size="5">{esc(title)}</font></td></tr>\n'
        f'<tr><td width="180" valign="top"><table>{cells}</table></td>\n'
        f'<td valign="top">\n{body}\n</td></tr>\n</table>\n</body>\n</html>\n'
    )


# Word pools for the generated boilerplate (headline lists, menus, footers).
EN_HEADLINE_PARTS = (
    ("Council", "Residents", "Local school", "Harbour board", "City library", "Rail operator",
     "Hospital trust", "Football club", "Weather service", "Museum", "University", "Bakery",
     "Fire brigade", "Water company", "Theatre group", "Cycling club", "Market traders"),
    ("approves", "questions", "delays", "celebrates", "unveils", "reviews", "expands",
     "postpones", "launches", "debates", "funds", "opens", "closes", "plans", "repairs"),
    ("new cycle lanes", "summer timetable", "budget for parks", "river clean-up",
     "winter shelter", "late-night buses", "school meals plan", "flood defences",
     "street lighting", "recycling centre", "festival programme", "housing scheme",
     "bridge repairs", "community garden", "parking charges", "heritage trail"),
    ("in the north district", "after long debate", "for the coming year", "despite protests",
     "near the old quay", "this weekend", "ahead of schedule", "as costs rise",
     "in the town centre", "after storm damage", "with volunteer help", "at last"),
)
ZH_HEADLINE_PARTS = (
    ("市政府", "社区居委会", "实验小学", "港务局", "市图书馆", "地铁公司", "人民医院", "足球俱乐部",
     "气象台", "博物馆", "科技大学", "老字号面馆", "消防支队", "自来水公司", "话剧团", "骑行协会"),
    ("批准", "讨论", "推迟", "庆祝", "公布", "审议", "扩建", "启动", "举办", "资助", "开放", "规划", "维修"),
    ("新建自行车道", "夏季运营时刻表", "公园建设预算", "河道清理计划", "冬季避寒点", "夜间公交线路",
     "学生午餐方案", "防洪堤工程", "路灯改造", "垃圾分类中心", "文化节活动", "保障房项目",
     "桥梁加固工程", "社区菜园", "停车收费标准", "历史文化步道"),
    ("北区居民关注", "经过多轮讨论", "明年起实施", "引发热议", "老码头附近", "本周末", "提前完成",
     "成本上升", "市中心", "暴雨过后", "志愿者参与", "终于落地"),
)
EN_MENU_WORDS = (
    "News", "Sport", "Business", "Health", "Education", "Travel", "Culture", "Food", "Money",
    "Property", "Jobs", "Motoring", "Puzzles", "Podcasts", "Video", "Photos", "Letters",
    "Obituaries", "Events", "Weather", "Traffic", "Schools", "Gardening", "Books", "Film",
    "Music", "Theatre", "Science", "Technology", "Environment", "Politics", "Crime", "Courts",
    "Council", "Transport", "History", "Family", "Pets", "Recipes", "Restaurants",
)
ZH_MENU_WORDS = (
    "要闻", "体育", "财经", "健康", "教育", "旅游", "文化", "美食", "理财", "房产", "招聘", "汽车",
    "视频", "图片", "读者来信", "活动", "天气", "交通", "校园", "园艺", "读书", "电影", "音乐",
    "戏剧", "科学", "科技", "环境", "政务", "法治", "社区", "出行", "历史", "亲子", "宠物",
    "菜谱", "餐厅", "数码", "家居", "时尚", "公益",
)
COOKIE_TEXT = {
    "en": ("We use cookies and similar technologies to run this site, to remember your "
           "preferences, to measure how the site is used and to show you relevant offers from "
           "our partners. You can accept all cookies, reject optional cookies or choose your "
           "settings at any time from the link at the bottom of every page."),
    "zh": ("本网站使用 Cookie 及类似技术来保障网站正常运行、记住您的偏好设置、统计访问情况，"
           "并向您展示合作伙伴的相关内容。您可以选择接受全部 Cookie、拒绝非必要 Cookie，"
           "或随时通过页面底部的链接修改设置。"),
}
LEGAL_TEXT = {
    "en": ("Reproduction of any material on this site without written permission is prohibited. "
           "Opinions expressed in comments and letters are those of their authors. Prices and "
           "timetables were correct at the time of publication but may change. Advertising on "
           "this site is clearly marked; we are not responsible for the content of external "
           "websites linked from our pages."),
    "zh": ("未经书面许可，不得转载、摘编本网站的任何内容。评论和读者来信仅代表作者个人观点。"
           "文中涉及的价格和时刻表以发布时为准，如有变动以官方公布为准。本网站的广告均有明确标识，"
           "对外部链接网站的内容不承担责任。"),
}


def make_headlines(rng: random.Random, lang: str, count: int) -> list[str]:
    parts = EN_HEADLINE_PARTS if lang == "en" else ZH_HEADLINE_PARTS
    joiner = " " if lang == "en" else ""
    headlines = set()
    while len(headlines) < count:
        headlines.add(joiner.join(rng.choice(p) for p in parts))
    ordered = sorted(headlines)
    rng.shuffle(ordered)
    return ordered


def headline_links(rng, lang, count, prefix="/story/"):
    return [(h, f"{prefix}{rng.randrange(10000, 99999)}") for h in make_headlines(rng, lang, count)]


def render_heavy(site: Site, path: str, title: str, body: str, date: str, author: str,
                 rng: random.Random) -> str:
    """A news page buried in boilerplate: cookie banner, mega menu, link rails, big footer."""
    s = STRINGS[site.lang]
    words = EN_MENU_WORDS if site.lang == "en" else ZH_MENU_WORDS
    menu = []
    for section in rng.sample(words, 8):
        links = [(w, f"/{slugify(section)}/{slugify(w)}-{rng.randrange(100, 999)}") for w in rng.sample(words, 9)]
        menu.append(f'<li class="mega"><a href="/{slugify(section)}/">{esc(section)}</a>{link_list(links, "sub")}</li>')
    ticker = link_list(headline_links(rng, site.lang, 6), "ticker")
    columns = "".join(
        f'<div class="footer-col"><h4>{esc(col)}</h4>'
        + link_list([(w, f"/{slugify(w)}") for w in rng.sample(words, 8)], "footer-col-links")
        + "</div>"
        for col in rng.sample(words, 5)
    )
    rails = ""
    for heading in (s["related"], s["most_read"], s["popular"]):
        rails += f'<div class="rail-box"><h3>{esc(heading)}</h3>{link_list(headline_links(rng, site.lang, 9), "rail")}</div>\n'
    accept = ("Accept all", "Reject optional", "Settings") if site.lang == "en" else ("全部接受", "拒绝非必要", "设置")
    return (
        head_html(site, title, "utf-8", "portal")
        + "<body>\n"
        f'<div id="cookie-banner" class="consent"><p>{COOKIE_TEXT[site.lang]}</p>'
        + "".join(f"<button>{b}</button>" for b in accept) + "</div>\n"
        f'<div class="topbar"><span>{date}</span> <a href="/login">{s["login"]}</a> '
        f'<a href="/register">{s["register"]}</a> <a href="/subscribe">{s["subscribe"]}</a></div>\n'
        f'<header class="masthead"><a class="title" href="/">{esc(site.name)}</a></header>\n'
        f'<div class="mega-menu"><ul>{"".join(menu)}</ul></div>\n'
        f'<div class="breaking">{ticker}</div>\n'
        '<div class="page">\n<div class="content">\n<article>\n'
        f"<h1>{esc(title)}</h1>\n"
        f'<p class="byline">{s["by"]} {esc(author)} · <time>{date}</time> · 3 {s["min_read"]}</p>\n'
        f'<div class="story-body">\n{body}\n</div>\n</article>\n'
        f'<div class="share">{s["share"]}: Facebook · X · LinkedIn · WhatsApp · Email</div>\n'
        "</div>\n"
        f'<aside class="rails">\n{rails}'
        f'<div class="newsletter"><p>{s["newsletter"]}</p><button>{s["subscribe"]}</button></div></aside>\n'
        "</div>\n"
        f'<footer class="site-footer"><div class="footer-columns">{columns}</div>'
        f'<p class="legal">{LEGAL_TEXT[site.lang]}</p>'
        + link_list([(w, f"/info/{slugify(w)}") for w in s["footer_links"]], "footer-links")
        + f'<p class="copyright">© 2003-2026 {esc(site.name)}</p></footer>\n'
        "</body>\n</html>\n"
    )


# --------------------------------------------------------------------------
# Low-quality pages
# --------------------------------------------------------------------------

LOREM_WORDS = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris "
    "nisi aliquip ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse "
    "cillum fugiat nulla pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui "
    "officia deserunt mollit anim id est laborum"
).split()


def lorem_paragraph(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(LOREM_WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


@dataclasses.dataclass
class LowQuality:
    kind: str
    lang: str
    host: str
    path: str
    title: str
    html: str


def low_quality_pages(rng: random.Random) -> list[LowQuality]:
    """The low-quality pages: one per kind and language, two for some kinds."""
    pages = []

    def add(kind, lang, host, path, title, markup):
        pages.append(LowQuality(kind, lang, host, path, title, markup))

    # --- English
    add("too_short", "en", "www.comingsoon-site.example", "/", "Coming soon",
        render_plain("en", "Coming soon", "<h1>Coming soon</h1>\n<p>Our new website is on its way. Check back later.</p>"))
    add("too_short", "en", "www.bluefern-studio.example", "/portfolio/",
        "Portfolio", render_plain("en", "Portfolio", "<p>Nothing here yet.</p>\n<p><a href=\"/\">Back</a></p>"))
    line = "Best cheap flights to Paris book now and save big on your holiday"
    add("repeated_lines", "en", "www.flights-paris-deals.example", "/cheap-flights-paris",
        "Cheap flights to Paris", render_plain("en", "Cheap flights to Paris",
        "\n".join(f"<p>{line}</p>" for _ in range(45))))
    stuffing = []
    for _ in range(30):
        stuffing.append(" ".join(rng.sample(
            ["cheap watches", "buy cheap watches", "best cheap watches online", "discount watches",
             "cheap watches sale", "luxury watches cheap", "watches cheap price", "cheap watch deals",
             "replica watches cheap", "cheap watches free shipping"], 6)))
    add("keyword_stuffing", "en", "cheap-watches-outlet.example", "/cheap-watches-best-price.html",
        "Cheap Watches | Buy Cheap Watches | Best Cheap Watches Online",
        render_legacy("en", "Cheap Watches | Buy Cheap Watches | Best Cheap Watches Online",
                      "\n".join(f"<p>{esc(p)}</p>" for p in stuffing),
                      [("cheap watches", "/"), ("watches sale", "/sale"), ("discount watches", "/discount")]))
    kinds = ("Guide", "Directory", "Links", "Resources", "Sites", "Online", "Portal")
    directory = [(f"{rng.choice(EN_MENU_WORDS)} {rng.choice(kinds)} {n}",
                  f"https://site{rng.randrange(1000, 9999)}.example/") for n in range(1, 121)]
    add("link_list", "en", "links.web-directory.example", "/category/misc/page-7",
        "Web Directory - Miscellaneous - Page 7",
        render_legacy("en", "Web Directory - Miscellaneous - Page 7", link_list(directory, "dir"),
                      [("Home", "/"), ("Submit a site", "/submit")]))
    rows = []
    for draw in range(1, 61):
        nums = sorted(rng.sample(range(1, 50), 6))
        rows.append(f"<tr><td>{2600 - draw}</td><td>2026-0{1 + draw % 9}-{10 + draw % 18}</td>"
                    + "".join(f"<td>{n}</td>" for n in nums) + f"<td>{rng.randrange(1, 11)}</td></tr>")
    add("numbers", "en", "numbers.lotto-results.example", "/archive/2026",
        "Lotto results archive 2026",
        render_plain("en", "Lotto results archive 2026", "<h1>Results</h1>\n<table>\n" + "\n".join(rows) + "\n</table>"))
    shouting = [
        "THIS IS THE MOST IMPORTANT ANNOUNCEMENT OF THE YEAR AND EVERYONE MUST READ IT NOW",
        "OUR PRICES ARE THE LOWEST IN THE WHOLE COUNTRY AND NOBODY CAN BEAT THEM EVER",
        "CALL US TODAY BECAUSE THIS OFFER WILL NOT LAST AND STOCKS ARE RUNNING OUT FAST",
        "WE HAVE THOUSANDS OF HAPPY CUSTOMERS WHO LOVE OUR AMAZING PRODUCTS EVERY DAY",
        "DO NOT MISS OUT ON THE DEAL OF A LIFETIME ORDER RIGHT NOW AND SAVE MONEY",
        "FREE DELIVERY ON EVERYTHING FOR THE NEXT TWENTY FOUR HOURS ONLY HURRY UP",
    ]
    add("all_caps", "en", "www.shouting-sale.example", "/mega-sale",
        "MEGA SALE NOW ON", render_plain("en", "MEGA SALE NOW ON",
        "<h1>MEGA SALE NOW ON!!!</h1>\n" + "\n".join(f"<p>{t}!!!</p>" for t in shouting * 3)))
    for n, host in enumerate(("www.lorem-placeholder.example", "demo.themeforge.example"), 1):
        paras = "\n".join(f"<p>{lorem_paragraph(rng, rng.randrange(50, 90))}</p>" for _ in range(7))
        add("lorem_ipsum", "en", host, f"/sample-page-{n}/", "Sample Page",
            render_plain("en", "Sample Page", f"<h1>Sample Page</h1>\n{paras}"))
    spam = []
    for _ in range(25):
        spam.append(rng.choice([
            '<p><a href="/win">CLICK HERE</a> to claim your FREE prize now!!!</p>',
            '<p>You have been selected! <a href="/claim">Click here</a> click here click here!</p>',
            '<p><a href="/go">Click here to win a brand new phone</a> - limited time only!!!</p>',
            '<p>Congratulations winner!!! <a href="/prize">CLICK HERE NOW</a></p>',
            '<p><a href="/free">Click here</a> for free money, free gifts, free everything!</p>',
        ]))
    add("click_here_spam", "en", "win-prizes-now.example", "/congratulations",
        "Congratulations! You are a winner", render_plain("en", "Congratulations! You are a winner", "\n".join(spam)))
    specs = []
    for _ in range(40):
        specs.append(rng.choice(("Colour", "Size", "Weight", "Material", "Model", "Battery",
                                 "Voltage", "Warranty", "Origin", "Stock"))
                     + " " + rng.choice(("black", "large", "2 kg", "steel", "X200", "4000 mAh", "12 V",
                                         "1 year", "imported", "in stock", "blue", "small")))
    add("no_terminal_punct", "en", "www.bargain-listings.example", "/item/88213",
        "Item 88213 details", render_plain("en", "Item 88213 details",
        "<h1>Item 88213</h1>\n" + "<br>\n".join(esc(x) for x in specs)))

    # --- Chinese
    add("too_short", "zh", "www.xinzhan-jianshe.example", "/", "网站建设中",
        render_plain("zh", "网站建设中", "<h1>网站建设中</h1>\n<p>敬请期待。</p>"))
    add("too_short", "zh", "www.geren-zhuye.example", "/about.html", "关于",
        render_plain("zh", "关于", "<p>暂无内容。</p>"))
    for n, (host, sentence) in enumerate((
        ("www.haohuo-dianpu.example", "欢迎光临本店，本店商品物美价廉，欢迎选购！"),
        ("www.jiameng-zhaoshang.example", "加盟我们，轻松创业，月入过万不是梦！"),
    ), 1):
        add("repeated_sentence", "zh", host, f"/index{n}.html", sentence[:6],
            render_plain("zh", sentence[:6], "\n".join(f"<p>{sentence}</p>" for _ in range(60))))
    terms = ["减肥药", "减肥药排行榜", "最好的减肥药", "减肥药哪个好", "快速减肥药", "减肥药价格",
             "正品减肥药", "减肥药官网", "减肥药效果", "减肥茶"]
    add("keyword_stuffing", "zh", "www.zuihao-jianfei.example", "/jianfeiyao.html",
        "减肥药_减肥药排行榜_最好的减肥药",
        render_legacy("zh", "减肥药_减肥药排行榜_最好的减肥药",
                      "\n".join("<p>" + " ".join(rng.sample(terms, 7)) + "</p>" for _ in range(30)),
                      [("减肥药", "/"), ("减肥茶", "/cha")]))
    friends = [(f"{rng.choice(ZH_MENU_WORDS)}{rng.choice(['网', '导航', '之家', '在线', '频道', '大全'])}",
                f"https://z{rng.randrange(1000, 9999)}.example/") for _ in range(120)]
    add("link_list", "zh", "www.haowangzhi-daohang.example", "/youqing.html", "友情链接大全",
        render_legacy("zh", "友情链接大全", link_list(friends, "friends"), [("首页", "/")]))
    draws = []
    for draw in range(1, 61):
        red = " ".join(f"{n:02d}" for n in sorted(rng.sample(range(1, 34), 6)))
        draws.append(f"<tr><td>第{26000 + draw}期</td><td>{red}</td><td>{rng.randrange(1, 17):02d}</td></tr>")
    add("numbers", "zh", "caipiao.kaijiang-chaxun.example", "/history.html", "开奖号码历史查询",
        render_plain("zh", "开奖号码历史查询", "<table>\n" + "\n".join(draws) + "\n</table>"))
    zh_spam = ["<p><a href=\"/lingjiang\">点击这里</a>领取大奖！！！</p>",
               "<p>恭喜您中奖了！<a href=\"/go\">立即点击</a>，手慢无！</p>",
               "<p><a href=\"/free\">点击这里免费领取</a>，名额有限！！！</p>",
               "<p>限时福利，<a href=\"/get\">点击领取</a>，点击领取，点击领取！</p>"]
    add("click_here_spam", "zh", "www.dianji-lingjiang.example", "/zhongjiang.html", "恭喜您中奖了",
        render_plain("zh", "恭喜您中奖了", "\n".join(rng.choice(zh_spam) for _ in range(25))))
    lines = []
    for _ in range(40):
        lines.append(f"{rng.choice(['品牌', '型号', '颜色', '尺寸', '重量', '材质', '产地', '库存', '保修', '电压'])}"
                     f" {rng.choice(['黑色', '大号', '两公斤', '不锈钢', 'X200', '现货', '一年', '进口', '蓝色', '小号'])}")
    add("no_terminal_punct", "zh", "www.ershou-xinxi.example", "/item/5521.html", "商品参数",
        render_plain("zh", "商品参数", "<h1>商品参数</h1>\n" + "<br>\n".join(lines)))
    return pages


# --------------------------------------------------------------------------
# PII pages
# --------------------------------------------------------------------------


def make_prc_id(region: str, birth: str, seq: int) -> str:
    """A PRC resident ID with a valid check digit that does not also pass Luhn."""
    while True:
        first17 = f"{region}{birth}{seq:03d}"
        number = first17 + prc_id_check_digit(first17)
        if not luhn_ok(number):
            return number
        seq += 1


def bad_check_digit(number: str) -> str:
    wrong = next(c for c in "0123456789" if c != number[17] and not luhn_ok(number[:17] + c))
    return number[:17] + wrong


@dataclasses.dataclass
class PiiPage:
    lang: str
    host: str
    path: str
    title: str
    blocks: list
    items: list  # (type, value): strings a redactor should remove
    negatives: list  # (type, value, reason): look-alikes it should keep
    style: str = "page"  # page, forum or shop
    posts: list = dataclasses.field(default_factory=list)  # for forum pages


def pii_pages() -> list[PiiPage]:
    id1 = make_prc_id("110105", "19880514", 123)
    id2 = make_prc_id("440305", "19920308", 456)
    id3 = make_prc_id("330106", "19751120", 31)
    bad_id = bad_check_digit(make_prc_id("320102", "19900101", 258))
    bad_card_en, bad_card_zh = "4111 1111 1111 1112", "6222 0000 0000 0001"
    assert not luhn_ok(bad_card_en) and not luhn_ok(bad_card_zh) and not prc_id_ok(bad_id)
    pages = [
        PiiPage("en", "blog.greenpatch.example", "/contact/", "Contact the Green Patch team", [
            ("p", "We love hearing from readers, whether you have a question about one of our "
                  "growing guides, a photo of your own balcony harvest or an idea for an article."),
            ("p", "For questions about published articles, write to our editor Jane Doe at "
                  "jane.doe@greenpatch.example and she will pass your message to the right author."),
            ("p", "For advertising and partnerships, contact our business manager Marcus Lee at "
                  "marcus.lee@mailbox.example or call +1 415 555 0132 between 9am and 5pm Pacific time."),
            ("p", "Readers in the United Kingdom can reach our London office on +44 20 7946 0958. "
                  "Please note that we cannot give advice about individual plant diseases by phone."),
            ("p", "We read every message, but as a small team we may take a week or two to reply. "
                  "Thank you for your patience, and happy gardening."),
        ], [("email", "jane.doe@greenpatch.example"), ("email", "marcus.lee@mailbox.example"),
            ("phone", "+1 415 555 0132"), ("phone", "+44 20 7946 0958")], []),
        PiiPage("en", "forum.techtalk.example", "/t/ssh-connection-refused-after-moving-servers/8812",
                "SSH connection refused after moving servers", [], [
            ("ipv4", "172.20.14.45"), ("ipv4", "192.168.1.23"), ("ipv4", "10.44.2.17"),
            ("ipv6", "fd3c:85a3:10::8a2e:370:7334"), ("ipv6", "fe80::1ff:fe23:4567:890a"),
            ("email", "ops-team@techtalk-users.example")],
            [("ipv4", "999.10.10.10", "octet out of range"), ("ipv4", "10.0.19045", "only three parts (a build number)"),
             ("ipv4", "192.0.2.1", "a documentation example address (RFC 5737)"),
             ("ipv4", "127.0.0.1", "loopback"), ("ipv4", "4.1.2.4", "a section number")],
            style="forum", posts=[
                ("nightowl_admin", "2026-02-11 22:14", [
                    ("p", "We moved our app to a new server at 172.20.14.45 last night. SSH from my "
                          "laptop (192.168.1.23) now fails with connection refused, while the old "
                          "box at 10.44.2.17 still accepts connections with the same key."),
                    ("p", "The new machine also has the IPv6 address fd3c:85a3:10::8a2e:370:7334 and "
                          "the link-local fe80::1ff:fe23:4567:890a, and connecting over IPv6 fails in the same way."),
                    ("p", "I followed the hardening guide, which uses 192.0.2.1 as its example address; see "
                          "Section 4.1.2.4 of it. On the server itself, ssh to 127.0.0.1 works fine."),
                    ("p", "One odd thing: the old firewall config still lists 999.10.10.10 as an allowed "
                          "source, which is obviously not a real address. The server runs Windows build "
                          "10.0.19045 inside a VM, if that matters."),
                    ("p", "Any ideas? You can also mail me at ops-team@techtalk-users.example."),
                ]),
                ("packet_wrangler", "2026-02-11 23:02", [
                    ("p", "Connection refused means nothing is listening on the port, or a firewall is "
                          "actively rejecting you. Check that the SSH service is running on the new "
                          "machine and that it listens on all interfaces, not only on localhost."),
                    ("p", "Then look at the host firewall and at any security group rules at your "
                          "provider. It is very common to forget to open port 22 on a fresh server."),
                ]),
            ]),
        PiiPage("en", "shop.gadgetbarn.example", "/orders/100245/confirmation",
                "Order confirmation #100245", [
            ("p", "Thank you for your order, Emily Carter! We have received your payment and your "
                  "items will be dispatched within two working days."),
            ("p", "Order number: 100245"),
            ("p", "Items: USB-C charger (65 W), braided cable 2 m, laptop sleeve 14 inch"),
            ("p", "Total paid: $84.97 including delivery"),
            ("p", "Billing email: emily.carter@inbox.example"),
            ("p", "Delivery phone: +1 212 555 0147"),
            ("p", "Paid with Visa card 4111 1111 1111 1111"),
            ("p", "Backup card on file: Mastercard 5500-0000-0000-0004"),
            ("p", f"Loyalty card number: {bad_card_en}"),
            ("p", "You can track your parcel from the My account page once it has left our warehouse. "
                  "If anything is missing or damaged, reply to this confirmation within 30 days."),
        ], [("email", "emily.carter@inbox.example"), ("phone", "+1 212 555 0147"),
            ("credit_card", "4111 1111 1111 1111"), ("credit_card", "5500-0000-0000-0004")],
            [("credit_card", bad_card_en, "16 digits that fail the Luhn check")], style="shop"),
        PiiPage("en", "learn.codepath.example", "/team/support/", "Meet the support team", [
            ("p", "Our support team looks after learners on every course, answers questions about "
                  "billing and accounts, and keeps the practice servers running."),
            ("h2", "Course support"),
            ("p", "Priya Raman leads course support. Reach her at priya.raman@codepath-mail.example or on "
                  "+1 646 555 0199 during New York office hours."),
            ("p", "Tom Whitfield covers learners in Europe from Manchester and can be called on "
                  "+44 161 496 0321 on weekdays."),
            ("h2", "Billing"),
            ("p", "Company accounts sometimes pay by corporate card. For testing our payment form we "
                  "use the card 3782 822463 10005, which is accepted only in the sandbox."),
            ("h2", "Practice servers"),
            ("p", "The practice environment is reached through the VPN gateway at 10.20.30.40. If the "
                  "gateway does not answer, please tell us before trying again."),
        ], [("email", "priya.raman@codepath-mail.example"), ("phone", "+1 646 555 0199"),
            ("phone", "+44 161 496 0321"), ("credit_card", "3782 822463 10005"), ("ipv4", "10.20.30.40")], []),
        PiiPage("zh", "news.chengshi-kuaibao.example", "/zhaopin/20260215.html", "优品商城招聘客服专员", [
            ("p", "优品商城因业务发展需要，现面向社会招聘客服专员五名，工作地点在本市高新区。"),
            ("p", "岗位要求：大专及以上学历，普通话标准，熟练使用电脑办公软件，有电商客服经验者优先。"
                  "公司提供五险一金、带薪年假和定期培训。"),
            ("p", "有意者请将简历发送至 hr@youpin-shangcheng.example，邮件标题请注明“应聘客服专员”。"),
            ("p", "联系人：王女士，手机：13812345678，也可拨打 +86 135 1234 5678（微信同号）。"
                  "工作日上午九点至下午五点接听电话。"),
            ("p", "报名截止时间为本月底，通过初选的应聘者将收到面试通知。"),
        ], [("email", "hr@youpin-shangcheng.example"), ("cn_mobile", "13812345678"),
            ("cn_mobile", "+86 135 1234 5678")], []),
        PiiPage("zh", "bbs.jishu-luntan.example", "/thread-20931-1-1.html", "求助：实名认证总是提示号码有误",
                [], [("prc_id", id1), ("prc_id", id2), ("cn_mobile", "13912345678")],
                [("prc_id", bad_id, "18 digits with a wrong ISO 7064 MOD 11-2 check digit")],
                style="forum", posts=[
                    ("小林不加班", "2026-02-20 21:37", [
                        ("p", f"在某个网站做实名认证，输入我的身份证号 {id1} 总是提示“号码有误”，"
                              "可是我在别的地方都能正常使用。"),
                        ("p", f"我又试了我爸爸的号码 {id2}，一样不行。客服让我核对一下号码，"
                              f"还发来一个他们系统里查到的号码 {bad_id}，跟我的根本对不上。"),
                        ("p", "客服留的回访手机是 13912345678，打过去一直占线。有没有人遇到过类似的情况？"),
                    ]),
                    ("老张修电脑", "2026-02-20 22:05", [
                        ("p", "先别在论坛上贴完整的身份证号，很不安全，建议马上编辑掉。"
                              "号码格式出错，多半是网站那边的校验有问题，或者输入时混进了空格和全角字符，"
                              "可以换个浏览器再试一次。"),
                    ]),
                ]),
        PiiPage("zh", "bbs.jishu-luntan.example", "/thread-21007-1-1.html", "服务器日志里出现大量异常访问",
                [], [("ipv4", "10.8.3.33"), ("ipv4", "172.31.200.8"), ("ipv6", "fd00:abcd:12::7"),
                     ("email", "admin@xiaozhan-jishu.example")],
                [("ipv4", "300.1.2.3", "octet out of range"),
                 ("ipv4", "198.51.100.7", "a documentation example address (RFC 5737)"),
                 ("ipv6", "2001:db8::7", "a documentation example address (RFC 3849)"),
                 ("ipv4", "3.2.1.5", "a section number")],
                style="forum", posts=[
                    ("运维小白", "2026-02-22 09:12", [
                        ("p", "这两天网站响应很慢，查看访问日志发现 10.8.3.33 和 172.31.200.8 "
                              "两个地址在不停地请求登录页面，一分钟几百次。"),
                        ("p", "手册第 3.2.1.5 节的例子用的是 198.51.100.7 和 2001:db8::7 这样的示例地址，"
                              "跟我这里的情况对不上。"),
                        ("p", "另外还有一个 IPv6 地址 fd00:abcd:12::7 也在做同样的事情。"
                              "防火墙的配置文件里居然还写着 300.1.2.3 这样的地址，不知道是谁加的。"),
                        ("p", "请问应该怎么处理比较好？有经验的朋友也可以发邮件到 admin@xiaozhan-jishu.example 指点一下。"),
                    ]),
                    ("安全研究员", "2026-02-22 10:40", [
                        ("p", "先在防火墙上封掉这几个来源，再给登录接口加上频率限制和验证码。"
                              "也可以装一个自动封禁工具，连续失败多次就临时拉黑。"
                              "配置文件里那个明显无效的地址可以直接删掉。"),
                    ]),
                ]),
        PiiPage("zh", "mall.youpin-shangcheng.example", "/order/detail-8830127.html", "订单详情", [
            ("p", "您的订单已支付成功，我们将在四十八小时内为您发货。"),
            ("p", "订单编号：8830127"),
            ("p", "商品：保温杯（五百毫升）× 2，帆布购物袋 × 1"),
            ("p", "收货人：李先生"),
            ("p", "联系电话：+86 139 0571 2468"),
            ("p", f"实名认证：{id3}"),
            ("p", "支付方式：信用卡 5500 0000 0000 0004"),
            ("p", "备用支付卡：4111111111111111"),
            ("p", f"会员卡号：{bad_card_zh}"),
            ("p", "如需修改收货地址，请在发货前联系在线客服。感谢您对优品商城的支持！"),
        ], [("cn_mobile", "+86 139 0571 2468"), ("prc_id", id3),
            ("credit_card", "5500 0000 0000 0004"), ("credit_card", "4111111111111111")],
            [("credit_card", bad_card_zh, "16 digits that fail the Luhn check")], style="shop"),
    ]
    return pages


# --------------------------------------------------------------------------
# Near-duplicate edits and similarity
# --------------------------------------------------------------------------

NEAR_DUP_EDIT_RATE = 0.03  # share of words (en) or CJK characters (zh) edited


def edit_tokens(tokens: list[str], vocab: list[str], rng: random.Random, is_target) -> list[str]:
    """Edit about NEAR_DUP_EDIT_RATE of the target tokens, in runs of 1-3 tokens."""
    out, i = [], 0
    while i < len(tokens):
        token = tokens[i]
        if is_target(token) and rng.random() < NEAR_DUP_EDIT_RATE / 2:
            run = rng.randint(1, 3)
            op = rng.choice(("replace", "replace", "delete", "insert"))
            if op == "replace":
                out.extend(rng.choice(vocab) for _ in range(run))
                i += run
            elif op == "delete":
                i += run
            else:
                out.extend(rng.choice(vocab) for _ in range(run))
                out.append(token)
                i += 1
            continue
        out.append(token)
        i += 1
    return out


def near_duplicate_blocks(article: Article, rng: random.Random) -> list:
    """A lightly edited copy of the article's blocks (code blocks and headings untouched)."""
    if article.lang == "en":
        vocab = sorted({w for _, t in article.blocks for w in t.split() if w.isalpha() and len(w) > 2})
    else:
        vocab = sorted(set(CJK_RE.findall(article.text)))
    edited = []
    for tag, text in article.blocks:
        if tag not in ("p", "li"):
            edited.append((tag, text))
        elif article.lang == "en":
            edited.append((tag, " ".join(edit_tokens(text.split(), vocab, rng, lambda t: True))))
        else:
            edited.append((tag, "".join(edit_tokens(list(text), vocab, rng, lambda c: bool(CJK_RE.match(c))))))
    return edited


def main_shingles(page: Page) -> set:
    """Word 5-grams of the lower-cased main text (en), or character 5-grams of the main text (zh)."""
    return shingles(page.main_text.lower() if page.lang == "en" else page.main_text, page.lang == "zh")


# --------------------------------------------------------------------------
# Planning the pages
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Page:
    url: str
    lang: str
    title: str
    main_text: str  # the text a main-content extractor should recover
    categories: list  # see build_expected()
    render: object = None  # callable(page, sidebar) -> str
    site: Site | None = None
    html: str = ""
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    source: str = ""
    info: dict = dataclasses.field(default_factory=dict)
    shard: int | None = None
    copy_of: "Page | None" = None


EN_AUTHORS = ("Alex Morgan", "Sam Patel", "Jordan Lee", "Chris Novak", "Robin Okafor",
              "Taylor Brooks", "Morgan Reyes", "Casey Lindqvist", "Jamie Fraser")
ZH_AUTHORS = ("李明", "王芳", "陈静", "张伟", "刘洋", "赵磊", "周婷", "孙浩", "吴敏")

EN_ORIGINAL_HOSTS = {
    "balcony-tomatoes": "blog.greenpatch.example", "compost": "blog.greenpatch.example",
    "sourdough-winter": "www.homekitchen.example", "stovetop-rice": "www.homekitchen.example",
    "bicycle-chain": "www.spokesandgears.example",
}
ZH_LIFE_SLUGS = {"shougan-mian", "yangtai-fanqie", "chaye", "zixingche", "jiachang-doufu",
                 "yushui", "mianbao", "shuimian", "waiyu", "yangmao", "dengshan", "gbk-huaji"}
EN_MIRRORS = ("mirror.pyguide-archive.example", "www.archive-mirror.example")
ZH_MIRRORS = ("mirror.wendang-jingxiang.example", "cache.zhishi-jingxiang.example")
EN_REPOSTERS = ("www.techdigest-daily.example", "blog.readinglist.example")
ZH_REPOSTERS = ("www.wenzhang-jicui.example", "blog.xinxi-daohang.example")
PYTHON_NORMAL_PAGES = 148


def random_date(rng: random.Random) -> str:
    day = datetime(2024, 1, 1) + timedelta(days=rng.randrange(0, 760))
    return day.strftime("%Y-%m-%d")


def original_slug(article: Article) -> str:
    return article.key.split(":", 1)[1]


def home_for(article: Article, rng: random.Random) -> tuple[Site, str]:
    """The site and URL path where an article is published."""
    key = article.key.split(":", 1)[1]
    page, _, part = key.partition("#")
    part_suffix = "" if part in ("", "0") else f"-part{int(part) + 1}"
    if article.source == "python3.11-doc":
        if rng.random() < 0.6:
            return SITES["docs.pyguide.example"], f"/3.11/{page}{part_suffix}.html"
        return SITES["learn.codepath.example"], f"/posts/{slugify(article.title)[:70]}{part_suffix}/"
    if article.source == "debmake-doc" and article.lang == "en":
        return SITES["wiki.packaging-notes.example"], f"/wiki/debmake/{page.split('.')[0]}{part_suffix}"
    if article.source == "debmake-doc":
        return SITES["docs.kaiyuan-wendang.example"], f"/debmake/{page.split('.')[0]}{part_suffix}.html"
    if article.source == "kicad-doc-zh":
        return SITES["www.dianzi-shequ.example"], f"/kicad/manual/{page}{part_suffix}.html"
    slug = original_slug(article)
    year, month = rng.choice(("2024", "2025")), rng.randrange(1, 13)
    if article.lang == "en":
        host = EN_ORIGINAL_HOSTS.get(slug, "www.curious-minds.example")
        return SITES[host], f"/{year}/{month:02d}/{slug}/"
    if slug in ZH_LIFE_SLUGS:
        return SITES["life.shenghuo-riji.example"], f"/{year}/{month:02d}/{slug}.html"
    return SITES["www.zhishi-baike.example"], f"/article/{slug}.html"


def template_page(site, path, title, blocks, lang, rng, categories, source="",
                  after_article="", after_text="", charset="utf-8") -> Page:
    """A page rendered with the site's normal template."""
    date = random_date(rng)
    author = rng.choice(EN_AUTHORS if lang == "en" else ZH_AUTHORS)
    body = render_blocks(blocks)

    def render(page, sidebar):
        view = PageView(site, path, title, body, date, author, sidebar, charset, after_article)
        return TEMPLATES[site.style](view)

    main = "\n".join([title] + [t for _, t in blocks] + ([after_text] if after_text else []))
    return Page(site.url(path), lang, title, main, list(categories), render, site, source=source)


class Planner:
    """Turns articles into the list of pages of the crawl."""

    def __init__(self, articles: dict[str, list[Article]], rng: random.Random):
        self.rng = rng
        self.pools = {name: list(items) for name, items in articles.items()}
        for name in ("python", "debmake_en", "debmake_zh", "kicad_zh"):
            rng.shuffle(self.pools[name])
        self.originals = {original_slug(a): a for a in articles["original_en"] + articles["original_zh"]}
        self.pages: list[Page] = []
        self.exact_groups: list[list[Page]] = []
        self.near_groups: list[list[Page]] = []

    def take(self, pool: str) -> Article:
        return self.pools[pool].pop()

    def take_original(self, slug: str) -> Article:
        article = self.originals.pop(slug)
        for pool in ("original_en", "original_zh"):
            if article in self.pools[pool]:
                self.pools[pool].remove(article)
        return article

    def add(self, page: Page) -> Page:
        self.pages.append(page)
        return page

    def article_page(self, article: Article, categories=("normal",)) -> Page:
        site, path = home_for(article, self.rng)
        return template_page(site, path, article.title, article.blocks, article.lang, self.rng,
                             categories, article.key)

    # --- duplicates

    def exact_group(self, article: Article, size: int):
        original = self.add(self.article_page(article, ("normal", "exact_dup")))
        group = [original]
        mirrors = EN_MIRRORS if article.lang == "en" else ZH_MIRRORS
        for k in range(1, size):
            host = mirrors[k - 1]
            url = f"https://{host}/{original.site.host}{original.url.split(original.site.host, 1)[1]}"
            copy = Page(url, article.lang, article.title, original.main_text, ["normal", "exact_dup"],
                        None, SITES[host], source=article.key, copy_of=original)
            group.append(self.add(copy))
        self.exact_groups.append(group)

    def near_group(self, article: Article, size: int):
        original = self.add(self.article_page(article, ("normal", "near_dup")))
        group = [original]
        hosts = EN_REPOSTERS if article.lang == "en" else ZH_REPOSTERS
        slug = slugify(article.title)[:50] if article.lang == "en" else f"wz{len(self.near_groups)}"
        for k in range(1, size):
            site = SITES[hosts[k - 1]]
            blocks = near_duplicate_blocks(article, self.rng)
            page = template_page(site, f"/repost/{slug}-{k}.html", article.title, blocks, article.lang,
                                 self.rng, ("normal", "near_dup"), article.key)
            group.append(self.add(page))
        self.near_groups.append(group)

    def plan_duplicates(self):
        for pool, size in (("python", 3), ("python", 2), ("python", 2), ("debmake_en", 3)):
            self.exact_group(self.take(pool), size)
        self.exact_group(self.take_original("lighthouses"), 2)
        for pool, size in (("python", 2), ("python", 2), ("python", 3)):
            self.near_group(self.take(pool), size)
        self.near_group(self.take_original("fjords"), 2)
        self.near_group(self.take_original("escapement"), 2)
        for pool, size in (("debmake_zh", 3), ("debmake_zh", 3), ("kicad_zh", 2)):
            self.exact_group(self.take(pool), size)
        self.exact_group(self.take_original("chaye"), 3)
        self.exact_group(self.take_original("tielu"), 3)
        for pool, size in (("kicad_zh", 3), ("kicad_zh", 2), ("debmake_zh", 3)):
            self.near_group(self.take(pool), size)
        self.near_group(self.take_original("sanxia"), 3)
        self.near_group(self.take_original("huozi"), 2)

    # --- special pages

    def plan_boilerplate_heavy(self):
        hosts = {"en": ("news.riverside-town.example", "www.citydaily.example"),
                 "zh": ("news.chengshi-kuaibao.example",)}
        briefs = [a for a in list(self.originals.values()) if a.kind == "brief"]
        for n, article in enumerate(sorted(briefs, key=lambda a: a.key)):
            self.take_original(original_slug(article))
            site = SITES[hosts[article.lang][n % len(hosts[article.lang])]]
            story_id = self.rng.randrange(100000, 999999)
            path = (f"/local/{slugify(article.title)}-{story_id}" if article.lang == "en"
                    else f"/bendi/{random_date(self.rng).replace('-', '')}/{story_id}.html")
            body = render_blocks(article.blocks)
            date = random_date(self.rng)
            author = self.rng.choice(EN_AUTHORS if article.lang == "en" else ZH_AUTHORS)
            seed = self.rng.random()

            def render(page, sidebar, site=site, path=path, article=article, body=body,
                       date=date, author=author, seed=seed):
                return render_heavy(site, path, article.title, body, date, author, random.Random(seed))

            main = "\n".join([article.title] + [t for _, t in article.blocks])
            self.add(Page(site.url(path), article.lang, article.title, main,
                          ["boilerplate_heavy"], render, site, source=article.key))

    def plan_low_quality(self):
        for lq in low_quality_pages(self.rng):
            page = Page(f"https://{lq.host}{lq.path}", lq.lang, lq.title, "", ["low_quality"],
                        lambda page, sidebar, markup=lq.html: markup, source="generated")
            page.info["low_quality_kind"] = lq.kind
            self.add(page)

    def plan_pii(self):
        for pii in pii_pages():
            site = SITES[pii.host]
            if pii.style == "forum":
                posts = [(u, d, b) for u, d, b in pii.posts]
                page = self.forum_page(site, pii.path, pii.title, posts, ["pii"])
            elif pii.style == "shop":
                page = self.shop_page(site, pii.path, pii.title, pii.blocks, ["pii"])
            else:
                page = template_page(site, pii.path, pii.title, pii.blocks, pii.lang, self.rng, ["pii"])
            page.source = "generated"
            page.info["pii"] = [{"type": t, "value": v} for t, v in pii.items]
            page.info["pii_negatives"] = [{"type": t, "value": v, "why": w} for t, v, w in pii.negatives]
            self.add(page)

    def forum_page(self, site, path, title, posts, categories) -> Page:
        board = "General discussion" if site.lang == "en" else "综合讨论区"

        def render(page, sidebar):
            return render_forum(site, path, title, posts, sidebar, board)

        main = "\n".join([title] + [t for _, _, blocks in posts for _, t in blocks])
        return Page(site.url(path), site.lang, title, main, list(categories), render, site)

    def shop_page(self, site, path, title, blocks, categories) -> Page:
        body = render_blocks(blocks)

        def render(page, sidebar):
            return render_shop(site, path, title, body, sidebar)

        main = "\n".join([title] + [t for _, t in blocks])
        return Page(site.url(path), site.lang, title, main, list(categories), render, site)

    def plan_toxic(self):
        def text_of(slug):
            return [t for _, t in self.take_original(slug).blocks]

        forum_en, forum_zh = SITES["forum.techtalk.example"], SITES["bbs.jishu-luntan.example"]
        rant = self.originals["toxic-rant-1"]
        lines = text_of("toxic-rant-1")
        page = self.forum_page(forum_en, "/t/nobody-asked-for-your-opinion/9120", rant.title,
                               [("ridge_runner", "2026-02-03 01:17", [("p", t) for t in lines])], ["toxic"])
        self.add_toxic(page, "mostly", lines)

        review = text_of("toxic-rant-2")
        blocks = [("p", "Wireless Earbuds X2 with charging case, 24-hour battery, in black or white."),
                  ("p", "Customer rating: 1 out of 5 stars. Review title: Worst seller ever.")]
        blocks += [("p", t) for t in review]
        page = self.shop_page(SITES["shop.gadgetbarn.example"], "/product/wireless-earbuds-x2/reviews",
                              "Customer reviews: Wireless Earbuds X2", blocks, ["toxic"])
        self.add_toxic(page, "mostly", review)

        question, reply = self.take_original("forum-cache"), self.take_original("forum-cache-reply")
        toxic_line = text_of("toxic-line-en")[0]
        posts = [("buildbot_bea", "2026-01-28 10:05", question.blocks),
                 ("cachemaster", "2026-01-28 11:42", reply.blocks),
                 ("anon_4412", "2026-01-28 12:10", [("p", toxic_line)]),
                 ("buildbot_bea", "2026-01-28 12:31", [("p", "Thanks for the tip about the index file, "
                  "that is exactly the kind of approach I was looking for. I will try it this week.")])]
        page = self.forum_page(forum_en, "/t/build-cache-keeps-growing/9034", question.title, posts, ["toxic"])
        self.add_toxic(page, "single_line", [toxic_line])

        rant_zh = self.originals["toxic-zh-1"]
        lines = text_of("toxic-zh-1")
        page = self.forum_page(forum_zh, "/thread-21520-1-1.html", rant_zh.title,
                               [("路过的风", "2026-02-14 23:48", [("p", t) for t in lines])], ["toxic"])
        self.add_toxic(page, "mostly", lines)

        question, reply = self.take_original("luntan-wenti"), self.take_original("luntan-huifu")
        toxic_line = text_of("toxic-line-zh")[0]
        posts = [("宅家程序员", "2026-02-16 20:11", question.blocks),
                 ("网络老司机", "2026-02-16 20:45", reply.blocks),
                 ("匿名用户", "2026-02-16 21:02", [("p", toxic_line)]),
                 ("宅家程序员", "2026-02-16 21:30", [("p", "谢谢楼上的建议，我把路由器拿出来放到通风的地方，"
                  "又升级了固件，这两天晚上都没有再断网。")])]
        page = self.forum_page(forum_zh, "/thread-20877-1-1.html", question.title, posts, ["toxic"])
        self.add_toxic(page, "single_line", [toxic_line])

        article = self.take_original("yangmao")
        toxic_line = text_of("toxic-line-zh-2")[0]
        comments = [("铲屎官小王", "写得很详细，刚好家里准备养猫，收藏了，谢谢分享！"), ("过客", toxic_line)]
        after = '<section class="comments"><h3>评论（2）</h3>\n' + "\n".join(
            f'<div class="comment"><span class="comment-author">{esc(user)}</span><p>{esc(text)}</p></div>'
            for user, text in comments) + "\n</section>\n"
        site, path = home_for(article, self.rng)
        page = template_page(site, path, article.title, article.blocks, "zh", self.rng,
                             ["normal", "toxic"], article.key, after_article=after,
                             after_text="\n".join(t for _, t in comments))
        self.add_toxic(page, "single_line", [toxic_line])

    def add_toxic(self, page: Page, severity: str, lines: list[str]):
        page.source = page.source or "original"
        page.info["toxic"] = {"severity": severity, "lines": lines}
        self.add(page)

    def plan_encodings(self):
        article = self.take_original("gbk-huaji")
        article.text.encode("gbk")  # the article itself must be representable in GBK
        site, path = home_for(article, self.rng)
        # GBK bytes that the server and the page both declare as UTF-8, as misconfigured sites do.
        page = template_page(site, path, article.title, article.blocks, "zh", self.rng,
                             ["normal", "gbk"], article.key, charset="utf-8")
        page.content_type = "text/html; charset=utf-8"
        self.add(page)

        article = self.take("python")
        site = SITES["learn.codepath.example"]
        page = template_page(site, f"/posts/{slugify(article.title)[:70]}-{article.key[-1]}/", article.title,
                             article.blocks, "en", self.rng, ["normal", "invalid_utf8"], article.key)
        self.add(page)

    def plan_corrupt(self) -> Page:
        """The page whose record is cut short; it is written last and is not in self.pages."""
        article = self.take("python")
        page, _, part = article.key.split(":", 1)[1].partition("#")
        path = f"/3.11/{page}{'' if part == '0' else f'-part{int(part) + 1}'}.html"
        return template_page(SITES["docs.pyguide.example"], path, article.title, article.blocks,
                             "en", self.rng, ["corrupt"], article.key)

    def plan_normal(self):
        for _ in range(PYTHON_NORMAL_PAGES):
            self.add(self.article_page(self.take("python")))
        for pool in ("debmake_en", "debmake_zh", "kicad_zh"):
            while self.pools[pool]:
                self.add(self.article_page(self.take(pool)))
        for slug, article in sorted(self.originals.items()):
            if article.kind == "article":
                self.add(self.article_page(self.take_original(slug)))


INVALID_UTF8_SEQUENCES = (b"\xff\xfe", b"\xc3\x28", b"\xe2\x82", b"\x80\x81", b"\xed\xa0\x80")


def corrupt_utf8(body: bytes) -> tuple[bytes, list[int]]:
    """Overwrite a few spaces inside the article text with invalid UTF-8 sequences."""
    start = body.index(b'<div class="entry-content">')
    offsets, pos = [], start
    for bad in INVALID_UTF8_SEQUENCES:
        pos = body.index(b" ", body.index(b"<p>", pos) + 3)
        body = body[:pos] + b" " + bad + body[pos:]
        offsets.append(pos + 1)
        pos += 200
    return body, offsets


def render_pages(pages: list[Page], rng: random.Random):
    """Render every page to its HTTP payload, filling sidebars with sibling pages."""
    by_host: dict[str, list[Page]] = {}
    for page in pages:
        if page.site and page.copy_of is None:
            by_host.setdefault(page.site.host, []).append(page)
    for page in pages:
        if page.copy_of is not None:
            continue
        siblings = [p for p in by_host.get(page.site.host, []) if p is not page] if page.site else []
        picks = rng.sample(siblings, min(8, len(siblings)))
        sidebar = [(p.title, p.url.split(p.site.host, 1)[1]) for p in picks]
        if len(sidebar) < 4:
            sidebar += headline_links(rng, page.lang, 6 - len(sidebar), "/read/")
        page.html = page.render(page, sidebar)
        if "gbk" in page.categories:
            # the article is plain GBK; the odd template symbol (©) becomes a character reference
            page.body = page.html.encode("gbk", errors="xmlcharrefreplace")
        elif "invalid_utf8" in page.categories:
            page.body, page.info["invalid_utf8_offsets"] = corrupt_utf8(page.html.encode("utf-8"))
        else:
            page.body = page.html.encode("utf-8")
    for page in pages:
        if page.copy_of is not None:
            page.html, page.body = page.copy_of.html, page.copy_of.body


# --------------------------------------------------------------------------
# Non-HTML payloads
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Response:
    """One HTTP response to write (with its request record when with_request)."""

    url: str
    kind: str  # html_ok, non_html, http_404, http_301 or corrupt
    status: str  # e.g. "200 OK"
    content_type: str
    body: bytes
    server: str = "nginx"
    extra_headers: tuple = ()
    page: Page | None = None
    with_request: bool = False


def shard_extras(shard: int, rng: random.Random) -> list[Response]:
    """Non-HTML responses, a 404 and a 301 for one shard."""
    extras = [
        Response(f"https://docs.pyguide.example/_images/diagram-{shard + 1}.png", "non_html", "200 OK",
                 "image/png", payloads.png(rng, 16 + 8 * shard, 12, step=8)),
        Response(f"https://www.zhishi-baike.example/static/img/banner{shard + 1}.png", "non_html",
                 "200 OK", "image/png", payloads.png(rng, 24, 8 + 4 * shard, step=8)),
        Response(f"https://wiki.packaging-notes.example/files/handout-{shard + 1}.pdf", "non_html", "200 OK",
                 "application/pdf", payloads.pdf(f"Packaging workshop handout {shard + 1}", (595, 842), 760)),
        Response(f"https://shop.gadgetbarn.example/api/v1/stock?page={shard + 1}", "non_html", "200 OK",
                 "application/json", json.dumps({
                     "page": shard + 1, "per_page": 3, "items": [
                         {"sku": f"GB-{rng.randrange(10000, 99999)}", "in_stock": rng.randrange(0, 50),
                          "price": round(rng.uniform(5, 200), 2)} for _ in range(3)]},
                     indent=2).encode("utf-8")),
    ]
    missing = (("https://docs.pyguide.example/3.11/library/removed-module.html", "en"),
               ("https://www.zhishi-baike.example/article/yijing-shanchu.html", "zh"),
               ("https://blog.greenpatch.example/2019/04/old-seed-swap/", "en"))[shard]
    title = "404 Not Found" if missing[1] == "en" else "404 页面不存在"
    text = (f"The page {missing[0]} could not be found." if missing[1] == "en"
            else f"抱歉，您访问的页面 {missing[0]} 不存在或已被删除。")
    extras.append(Response(missing[0], "http_404", "404 Not Found", "text/html; charset=utf-8",
                           render_plain(missing[1], title, f"<h1>{title}</h1>\n<p>{esc(text)}</p>").encode("utf-8")))
    source, target = (("http://www.curious-minds.example/", "https://www.curious-minds.example/"),
                      ("https://docs.kaiyuan-wendang.example/debmake", "https://docs.kaiyuan-wendang.example/debmake/"),
                      ("https://learn.codepath.example/old-course", "https://learn.codepath.example/posts/"))[shard]
    moved = f'<h1>Moved Permanently</h1>\n<p>The document has moved <a href="{target}">here</a>.</p>'
    extras.append(Response(source, "http_301", "301 Moved Permanently", "text/html; charset=utf-8",
                           render_plain("en", "301 Moved Permanently", moved).encode("utf-8"),
                           extra_headers=(("Location", target),)))
    return extras


# --------------------------------------------------------------------------
# Shards and WARC writing
# --------------------------------------------------------------------------


def assign_shards(pages, exact_groups, near_groups, rng: random.Random):
    """Spread the pages over the shards; members of a duplicate group never share a shard."""
    totals = [0] * NUM_SHARDS
    buckets: dict[tuple, int] = {}
    for group in exact_groups + near_groups:
        for page, shard in zip(group, rng.sample(range(NUM_SHARDS), len(group))):
            page.shard = shard
            totals[shard] += 1
    for page in pages:
        if "gbk" in page.categories:
            page.shard = 1
        elif "invalid_utf8" in page.categories:
            page.shard = 2
    rest = [p for p in pages if p.shard is None]
    rng.shuffle(rest)
    for page in rest:
        bucket = (page.lang, next((c for c in page.categories if c != "normal"), "normal"))
        page.shard = min(range(NUM_SHARDS), key=lambda s: (buckets.get((bucket, s), 0), totals[s], s))
        buckets[(bucket, page.shard)] = buckets.get((bucket, page.shard), 0) + 1
        totals[page.shard] += 1


def shard_responses(pages, shard: int, rng: random.Random) -> list[Response]:
    responses = [
        Response(p.url, "html_ok", "200 OK", p.content_type, p.body,
                 p.site.server if p.site else "Apache", page=p)
        for p in pages if p.shard == shard
    ]
    responses += shard_extras(shard, rng)
    rng.shuffle(responses)
    html_ok = [r for r in responses if r.kind == "html_ok"]
    for response in rng.sample(html_ok, round(len(html_ok) / 10)):
        response.with_request = True
    return responses


REQUEST_HEADERS = (
    ("User-Agent", "lm-assets-sample-crawler/1.0 (+https://lm-assets.example/crawler)"),
    ("Accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"),
    ("Accept-Language", "en,zh-CN;q=0.8"),
)


class SampleShardWriter(ShardWriter):
    """The sample crawl's record layout: warcio's own warcinfo record, and WARC-Date ahead of WARC-Record-ID."""

    def warc_headers(self, record_id: str, date: datetime) -> dict[str, str]:
        return {"WARC-Date": iso(date), "WARC-Record-ID": record_id}

    def warcinfo_record(self, info: dict[str, str], date: datetime):
        record = self.writer.create_warcinfo_record(self.path.name, info)
        record.rec_headers.replace_header("WARC-Record-ID", self.record_id())
        record.rec_headers.replace_header("WARC-Date", iso(date))
        return record

    def truncated_response(self, url: str, body: bytes, date: datetime, headers: list, kind: str, status: str,
                           keep: float):
        """A response whose gzip member is cut after `keep` of its bytes."""
        buffer = io.BytesIO()
        WARCWriter(buffer, gzip=True).write_record(self.response_record(url, body, date, headers, status,
                                                                        self.record_id()))
        member = buffer.getvalue()
        kept = int(len(member) * keep)
        self.log.append({"index": len(self.log), "offset": self.file.tell(), "type": "response", "kind": kind,
                         "url": url, "member_bytes": len(member), "kept_bytes": kept})
        self.file.write(member[:kept])


def http_headers(response: Response, moment: datetime) -> list[tuple[str, str]]:
    return [("Date", moment.strftime("%a, %d %b %Y %H:%M:%S GMT")), ("Server", response.server),
            ("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
            *response.extra_headers]


def write_shard(path: Path, shard: int, responses: list[Response], corrupt: Response | None,
                rng: random.Random, seed: int) -> list[dict]:
    """Write one shard, the responses a few seconds apart; returns where every record went."""
    clock = datetime(2026, 3, 2 + shard, 6, 0, 0, tzinfo=timezone.utc)
    info = {
        "software": "lm-assets scripts/build_sample_crawl.py",
        "format": "WARC File Format 1.0",
        "isPartOf": "lm-assets-sample-crawl",
        "description": "Synthetic sample crawl for testing the lm-assets data pipeline",
        "seed": str(seed),
    }
    writer = SampleShardWriter(path, rng, info, clock, request_headers=REQUEST_HEADERS)
    for response in responses:
        clock += timedelta(seconds=rng.randint(2, 75))
        writer.response(response.url, response.body, clock, http_headers(response, clock), response.kind,
                        response.status, response.with_request)
    if corrupt is not None:
        clock += timedelta(seconds=rng.randint(2, 75))
        writer.truncated_response(corrupt.url, corrupt.body, clock, http_headers(corrupt, clock), corrupt.kind,
                                  corrupt.status, 0.6)
    writer.close()
    return writer.log


# --------------------------------------------------------------------------
# Self-checks on the rendered pages
# --------------------------------------------------------------------------


def visible_text(markup: str) -> str:
    markup = re.sub(r"<(script|style)\b.*?</\1>", " ", markup, flags=re.S | re.I)
    markup = re.sub(r"<br\s*/?>", "\n", markup)
    markup = re.sub(r"</(p|li|div|h[1-6]|tr|td|section|article|header|footer|nav)>", "\n", markup)
    return html.unescape(re.sub(r"<[^>]+>", " ", markup))


def verify_pages(pages: list[Page]):
    """Fail loudly if a page breaks a promise that expected.json makes."""
    for page in pages:
        text = visible_text(page.html)
        found = find_pii(text)
        if "pii" not in page.categories:
            assert not found, f"unexpected PII-like text in {page.url}: {found}"
        else:
            for item in page.info["pii"]:
                types = {t for t, v in found if v == item["value"]}
                assert types == {item["type"]}, f"{page.url}: {item} detected as {types}"
            for negative in page.info["pii_negatives"]:
                assert negative["value"] in text
                assert all(v != negative["value"] for _, v in found), f"{page.url}: {negative}"
            expected_values = {item["value"] for item in page.info["pii"]}
            extra = [(t, v) for t, v in found if v not in expected_values]
            assert not extra, f"{page.url}: undeclared PII-like text {extra}"
        if "toxic" not in page.categories:
            assert not has_toxic_words(text), f"abusive words in {page.url}"
        else:
            assert all(line in text for line in page.info["toxic"]["lines"])
        if page.lang == "en" and "low_quality" not in page.categories:
            assert cjk_ratio(text) < 0.02, f"Chinese text in English page {page.url}"
        if page.lang == "zh" and "low_quality" not in page.categories:
            assert cjk_ratio(page.main_text) > 0.3, f"too little Chinese in {page.url}"
    urls = [page.url for page in pages]
    assert len(urls) == len(set(urls)), f"duplicate URLs: {sorted(u for u in set(urls) if urls.count(u) > 1)}"


def similarity_report(pages: list[Page], groups: list[list[Page]]) -> float:
    """Highest main-text Jaccard between two pages that are not in the same duplicate group."""
    grouped = {id(p): n for n, group in enumerate(groups) for p in group}
    texts = [p for p in pages if p.main_text]
    sets = [{s for s in main_shingles(p) if zlib.crc32("\x1f".join(s).encode()) % 4 == 0} for p in texts]
    index: dict = {}
    for i, sh in enumerate(sets):
        for s in sh:
            index.setdefault(s, []).append(i)
    shared: dict = {}
    for members in index.values():
        if len(members) > 20:
            continue
        for a in range(len(members)):
            for b in range(a + 1, len(members)):
                shared[(members[a], members[b])] = shared.get((members[a], members[b]), 0) + 1
    worst = 0.0
    for (a, b), _ in shared.items():
        pa, pb = texts[a], texts[b]
        if grouped.get(id(pa), -1) == grouped.get(id(pb), -2):
            continue
        worst = max(worst, jaccard(main_shingles(pa), main_shingles(pb)))
    return worst


# --------------------------------------------------------------------------
# expected.json
# --------------------------------------------------------------------------

RECORD_KINDS = ("warcinfo", "request", "html_ok", "non_html", "http_404", "http_301", "corrupt")
KIND_NOTES = {
    "warcinfo": "the warcinfo record that opens each shard",
    "request": "HTTP request records; each directly precedes its response (WARC-Concurrent-To)",
    "html_ok": "HTTP 200 responses with a text/html Content-Type (the pages)",
    "non_html": "HTTP 200 responses with image/png, application/pdf or application/json",
    "http_404": "an HTTP 404 response (small HTML body)",
    "http_301": "an HTTP 301 response with a Location header (small HTML body)",
    "corrupt": "the final record of the last shard: its gzip member is cut off at 60% of its "
               "bytes. warcio 1.8 and fastwarc 2.0 do not raise on it; they yield a response "
               "whose body is shorter than its HTTP Content-Length (fastwarc with parse_http=False "
               "also fails verify_block_digest())",
}


def snippet(page: Page) -> str | None:
    """A sentence of main content that an extractor should keep."""
    minimum = 40 if page.lang == "en" else 20
    lines = [line for line in page.main_text.split("\n")[1:] if len(line) >= minimum]
    if not lines:
        return None
    line = lines[len(lines) // 2]
    return line[:120] if page.lang == "en" else line[:40]


def build_expected(pages, logs, exact_groups, near_groups, out: Path, worst_unrelated: float,
                   seed: int) -> dict:
    page_by_url = {p.url: p for p in pages}
    shards, categories = {}, {
        "english": [], "chinese": [], "boilerplate_heavy": [], "low_quality": {},
        "exact_dup_groups": [[p.url for p in g] for g in exact_groups],
        "near_dup_groups": [[p.url for p in g] for g in near_groups],
        "near_dup_similarity": [], "pii": [], "toxic": [], "corrupt": None,
        "encodings": {"gbk": [], "invalid_utf8": []}, "non_html": [], "http_404": [], "http_301": [],
    }
    for group in near_groups:
        base = main_shingles(group[0])
        categories["near_dup_similarity"].append({
            "lang": group[0].lang, "urls": [p.url for p in group],
            "jaccard_to_first": [round(jaccard(base, main_shingles(p)), 3) for p in group[1:]],
            "shingles": "word 5-grams (en) or character 5-grams (zh) of the main text",
        })
    page_info = {}
    for name, (log, responses) in logs.items():
        by_url = {r.url: r for r in responses}
        entry = {"records": len(log), "counts": {k: 0 for k in RECORD_KINDS}}
        for key in ("english", "chinese", "boilerplate_heavy", "low_quality", "exact_dup", "near_dup",
                    "pii", "toxic", "gbk", "invalid_utf8", "non_html", "http_404", "http_301", "requests"):
            entry[key] = []
        entry["corrupt"] = None
        for rec in log:
            entry["counts"][rec["kind"]] += 1
            url, kind = rec["url"], rec["kind"]
            if kind == "request":
                entry["requests"].append(url)
            elif kind == "non_html":
                entry["non_html"].append(url)
                categories["non_html"].append({"url": url, "content_type": by_url[url].content_type, "shard": name})
            elif kind == "http_404":
                entry["http_404"].append(url)
                categories["http_404"].append({"url": url, "shard": name})
            elif kind == "http_301":
                entry["http_301"].append(url)
                location = dict(by_url[url].extra_headers)["Location"]
                categories["http_301"].append({"url": url, "location": location, "shard": name})
            elif kind == "corrupt":
                entry["corrupt"] = categories["corrupt"] = {
                    "shard": name, "record_index": rec["index"], "offset": rec["offset"], "url": url,
                    "member_bytes": rec["member_bytes"], "kept_bytes": rec["kept_bytes"],
                    "is_last_record": True}
            elif kind == "html_ok":
                page = page_by_url[url]
                entry["english" if page.lang == "en" else "chinese"].append(url)
                categories["english" if page.lang == "en" else "chinese"].append(url)
                for cat in ("boilerplate_heavy", "exact_dup", "near_dup", "pii", "toxic", "gbk", "invalid_utf8"):
                    if cat in page.categories:
                        entry[cat].append(url)
                if "low_quality" in page.categories:
                    entry["low_quality"].append(url)
                    categories["low_quality"][url] = page.info["low_quality_kind"]
                if "boilerplate_heavy" in page.categories:
                    categories["boilerplate_heavy"].append(url)
                if "pii" in page.categories:
                    categories["pii"].append({
                        "url": url, "lang": page.lang,
                        "types": sorted({i["type"] for i in page.info["pii"]}),
                        "items": page.info["pii"], "negatives": page.info["pii_negatives"]})
                if "toxic" in page.categories:
                    categories["toxic"].append({"url": url, "lang": page.lang, **page.info["toxic"]})
                if "gbk" in page.categories:
                    categories["encodings"]["gbk"].append({"url": url, "charset": "gbk", "declared_charset": "utf-8"})
                if "invalid_utf8" in page.categories:
                    categories["encodings"]["invalid_utf8"].append(
                        {"url": url, "declared_charset": "utf-8",
                         "body_byte_offsets": page.info["invalid_utf8_offsets"]})
                page_info[url] = {
                    "shard": name, "record_index": rec["index"], "lang": page.lang,
                    "title": page.title, "categories": sorted(set(page.categories)),
                    "source": page.source, "content_type": page.content_type,
                    "main_text_size": text_size(page.main_text, page.lang),
                    "snippet": snippet(page),
                }
        shards[name] = entry

    html_pages = [p for p in pages if p.url in page_info]
    zh_pages = [p for p in html_pages if p.lang == "zh"]
    totals = {k: sum(s["counts"][k] for s in shards.values()) for k in RECORD_KINDS}
    stats = {
        "html_ok": len(html_pages),
        "english_pages": len(categories["english"]), "chinese_pages": len(categories["chinese"]),
        "english_share": round(len(categories["english"]) / len(html_pages), 3),
        "chinese_cjk_chars_main_text": sum(cjk_count(p.main_text) for p in zh_pages),
        "chinese_cjk_chars_visible_text": sum(cjk_count(visible_text(p.html)) for p in zh_pages),
        "english_words_main_text": sum(len(p.main_text.split()) for p in html_pages if p.lang == "en"),
        "max_main_text_jaccard_outside_dup_groups": round(worst_unrelated, 3),
    }
    files = {}
    for name in shards:
        data = (out / name).read_bytes()
        files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return {
        "description": "Ground truth for the lm-assets sample crawl; written by "
                       "scripts/build_sample_crawl.py together with the shards.",
        "seed": seed,
        "files": files,
        "record_kinds": KIND_NOTES,
        "category_notes": {
            "english/chinese": "every html_ok page, by the language of its main content "
                               "(<html lang> is en or zh-CN); for low_quality pages this is "
                               "the declared language, which a language identifier may not "
                               "confirm (lorem ipsum reads as Latin, number tables as nothing)",
            "boilerplate_heavy": "pages whose main article is a small share of the visible text",
            "low_quality": "url -> kind (too_short, repeated_lines, repeated_sentence, "
                           "keyword_stuffing, link_list, numbers, all_caps, lorem_ipsum, "
                           "click_here_spam, no_terminal_punct)",
            "exact_dup_groups": "byte-identical HTTP bodies at different URLs, in different shards",
            "near_dup_groups": "the same article with about 3% of its words or CJK characters "
                               "edited, on a different site (different header and footer); "
                               "the first URL is the original",
            "pii": "items: strings a redactor should remove (types email, phone, cn_mobile, "
                   "ipv4, ipv6, credit_card [Luhn-valid], prc_id [valid MOD 11-2 check digit]); "
                   "negatives: look-alikes it should keep. No other page holds PII-like text",
            "toxic": "severity mostly: the main content is abusive; single_line: one abusive "
                     "line in otherwise normal content. No other page holds abusive words",
            "pages": "per html_ok page: snippet is a line of main content that an extractor "
                     "should keep; main_text_size is words (en) or CJK characters (zh)",
        },
        "totals": totals,
        "shards": shards,
        "categories": categories,
        "stats": stats,
        "pages": page_info,
    }


# --------------------------------------------------------------------------
# PROVENANCE.md
# --------------------------------------------------------------------------


def licence_texts(debs: dict[str, Path]) -> dict[str, str]:
    """Licence texts quoted from the packages themselves."""
    python = read_deb(debs["python3.11-doc"], lambda p: p.endswith("html/license.html"))
    markup = next(iter(python.values())).decode("utf-8")
    blocks = extract_blocks(markup)
    start = next(i for i, (t, x) in enumerate(blocks) if t.startswith("h") and x.startswith("PSF LICENSE AGREEMENT"))
    end = next(i for i in range(start + 1, len(blocks)) if blocks[i][0].startswith("h"))
    psf = "\n".join(x for _, x in blocks[start + 1 : end])
    debmake = read_deb(debs["debmake-doc"], lambda p: p == "usr/share/doc/debmake-doc/copyright")
    copyright_file = next(iter(debmake.values())).decode("utf-8")
    expat = copyright_file.split("Files:     png/", 1)[0].split("Files:     *", 1)[1].strip()
    return {"psf": psf, "expat": expat}


def write_provenance(out: Path, debs: dict[str, Path], expected: dict, source_counts: dict, seed: int):
    texts = licence_texts(debs)
    stats = expected["stats"]
    files = "\n".join(f"| `{n}` | {f['bytes']:,} | `{f['sha256'][:16]}…` |" for n, f in expected["files"].items())
    deb_rows = "\n".join(
        f"| `{name}` | {meta['version']} | {meta['licence']} | {meta['what']} | {source_counts.get(name, 0)} |"
        for name, meta in DEBIAN_SOURCES.items())
    deb_hashes = "\n".join(f"- `{deb.name}` sha256 `{hashlib.sha256(deb.read_bytes()).hexdigest()}`"
                           for deb in debs.values())
    psf = "\n".join("    " + line for line in texts["psf"].splitlines())
    expat = "\n".join("    " + line.strip() for line in texts["expat"].splitlines())
    body = f"""# Sample crawl: provenance

This directory holds a small synthetic web crawl used to test the lm-assets
pipeline, and the ground truth for it.  Everything here is generated by
`scripts/build_sample_crawl.py` (seed {seed}); do not edit the files by hand.

| file | bytes | sha256 |
| --- | ---: | --- |
{files}

`expected.json` describes every record (see its `record_kinds`,
`category_notes` and `stats`); `originals/` holds the original prose the pages
are built from.  The crawl has {stats['html_ok']} HTML pages:
{stats['english_pages']} English and {stats['chinese_pages']} Simplified Chinese
({stats['chinese_cjk_chars_main_text']:,} CJK characters of Chinese main text,
{stats['chinese_cjk_chars_visible_text']:,} counting page furniture).

## Where the text comes from

### Debian documentation packages

Fetched with `apt-get download` from Debian 12 (bookworm) and unpacked by the
build script.  Paragraphs, headings, lists and code blocks are taken from the
package's HTML, split into sections and placed in new page templates; blocks
containing e-mail addresses, IP addresses, phone or card-like numbers or
long digit runs are left out.  Near-duplicate copies have about 3% of their
words or characters changed.

| package | version | licence | content | pages (with copies) |
| --- | --- | --- | --- | ---: |
{deb_rows}

{deb_hashes}

**Python documentation.** Copyright (c) 2001-2023 Python Software Foundation;
All Rights Reserved.  Used under the PSF License Agreement, quoted from the
package's `license.html`:

{psf}

**Guide for Debian Maintainers (debmake-doc).** Used under the Expat licence,
quoted from the package's copyright file:

{expat}

**KiCad documentation (Simplified Chinese).** The KiCad 6.0 manuals
(KiCad 简介, KiCad 工程管理器, 原理图编辑器, PCB 编辑器, 图框编辑器,
GerbView, PCB 计算器), Copyright (c) 2010-2022 by the KiCad documentation
contributors listed in each manual (Jean-Pierre Charras, Fabrizio Tappero,
Wayne Stambaugh, Cirilo Bernardo, Jon Evans, Graham Keeth and others), Chinese
translation by taotieren and others.  The manuals are dual-licensed under the
GNU GPL version 3 or later or the Creative Commons Attribution License version
3.0 or later; they are used here under CC BY 3.0
(https://creativecommons.org/licenses/by/3.0/).  Changes: only paragraphs
mostly in Chinese were kept (the translation is incomplete), front matter was
dropped, text was split into sections and re-published in new page templates,
and some sections were edited to make near duplicates.

### Original text written for lm-assets

`originals/en.txt` and `originals/zh.txt` were written for this project and are
licensed under Apache-2.0, like the rest of lm-assets.  They hold English and
Chinese articles (computing history, cooking, geography, gardening, astronomy,
engineering and more), short local-news briefs for the boilerplate-heavy
pages, forum posts, and the abusive lines of the toxic pages, which were
written only to exercise toxicity filters.

### Generated by the build script

Page templates (navigation, headers, footers, cookie banners, link rails),
headline lists, the low-quality pages (very short, repeated lines, keyword
stuffing, link lists, number tables, all caps, lorem ipsum, "click here" spam,
lines without punctuation), the PII pages, the 404/301 bodies, PNG images, PDF
stubs and JSON responses are produced by `scripts/build_sample_crawl.py`
(Apache-2.0).  All names, addresses and numbers on the PII pages are invented
or reserved: `.example` domains, IPv4 addresses from the private ranges
10.0.0.0/8, 172.16.0.0/12 and 192.168.0.0/16, IPv6 addresses from fd00::/8 and
fe80::/10 (the documentation ranges 192.0.2.0/24, 198.51.100.0/24 and
2001:db8::/32 appear as examples that are not personal data), North American 555-01xx and UK
Ofcom drama numbers, published payment-card test numbers (4111 1111 1111 1111,
5500 0000 0000 0004, 3782 822463 10005), Chinese mobile numbers such as
13812345678, and resident ID numbers with invented birth dates and sequence
numbers whose check digit is computed with ISO 7064 MOD 11-2.

## Rebuilding

    apt-get update   # once, so that apt-get download can find the packages
    .venv/bin/python scripts/build_sample_crawl.py --out data/sample-crawl
    .venv/bin/python scripts/build_sample_crawl.py --out data/sample-crawl --check

The script needs Python 3.11 with warcio.  The .deb files are cached in
`--cache` (default `~/.cache/lm-assets/sample-crawl-debs`); with the cache
filled the build runs offline.  With the same seed, the package versions
above and the same zlib, the output is byte-for-byte identical.  If a pinned version has left
the Debian mirror, the script falls back to the current one and warns: the
crawl then changes and `expected.json` is regenerated to match.
"""
    (out / "PROVENANCE.md").write_text(body, encoding="utf-8")


# --------------------------------------------------------------------------
# Reading the shards back (--check)
# --------------------------------------------------------------------------


def classify(record) -> tuple[str, bytes]:
    if record.rec_type in ("warcinfo", "request"):
        return record.rec_type, record.content_stream().read()
    body = record.content_stream().read()
    declared = int(record.http_headers.get_header("Content-Length") or -1)
    status = record.http_headers.get_statuscode()
    content_type = record.http_headers.get_header("Content-Type") or ""
    if len(body) != declared:
        return "corrupt", body
    if status == "404":
        return "http_404", body
    if status == "301":
        return "http_301", body
    if status == "200" and content_type.startswith("text/html"):
        return "html_ok", body
    return "non_html", body


def check(out: Path) -> list[str]:
    """Compare the shards with expected.json; return a list of problems."""
    expected = json.loads((out / "expected.json").read_text(encoding="utf-8"))
    problems, digests = [], {}
    for name, shard in expected["shards"].items():
        counts = {k: 0 for k in RECORD_KINDS}
        seen: dict[str, list[str]] = {"english": [], "chinese": []}
        try:
            with open(out / name, "rb") as stream:
                for record in ArchiveIterator(stream):
                    kind, body = classify(record)
                    counts[kind] += 1
                    url = record.rec_headers.get_header("WARC-Target-URI")
                    if kind != "html_ok":
                        continue
                    digests[url] = hashlib.sha1(body).hexdigest()
                    charset = (record.http_headers.get_header("Content-Type").split("charset=")[-1]).strip()
                    if url in shard["gbk"]:
                        charset = "gbk"  # declared as UTF-8 on purpose
                    try:
                        text = body.decode(charset)
                        if url in shard["invalid_utf8"]:
                            problems.append(f"{url} decodes although it should not")
                    except UnicodeDecodeError:
                        if url not in shard["invalid_utf8"]:
                            problems.append(f"{url} does not decode as {charset}")
                        text = body.decode(charset, errors="replace")
                    lang = re.search(r'<html lang="([^"]+)"', text).group(1)
                    seen["english" if lang == "en" else "chinese"].append(url)
        except Exception as error:  # a reader that raises on the truncated member ends here
            problems.append(f"{name}: reading stopped with {type(error).__name__}: {error}")
        if counts != shard["counts"]:
            problems.append(f"{name}: counts {counts} != expected {shard['counts']}")
        for key in ("english", "chinese"):
            if sorted(seen[key]) != sorted(shard[key]):
                problems.append(f"{name}: {key} pages differ from expected.json")
    for group in expected["categories"]["exact_dup_groups"]:
        if len({digests.get(url) for url in group}) != 1:
            problems.append(f"exact duplicate group differs: {group}")
    for group in expected["categories"]["near_dup_groups"]:
        if len({digests.get(url) for url in group}) != len(group):
            problems.append(f"near duplicate group has identical bodies: {group}")
    return problems


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def build(out: Path, cache: Path, originals: Path, seed: int):
    rng = random.Random(seed)
    debs = {name: cached_deb(name, cache, meta["version"]) for name, meta in DEBIAN_SOURCES.items()}
    articles = load_all_articles(debs, originals)
    planner = Planner(articles, rng)
    planner.plan_duplicates()
    planner.plan_boilerplate_heavy()
    planner.plan_low_quality()
    planner.plan_pii()
    planner.plan_toxic()
    planner.plan_encodings()
    corrupt_page = planner.plan_corrupt()
    planner.plan_normal()
    pages = planner.pages
    render_pages(pages + [corrupt_page], rng)
    verify_pages(pages)
    worst = similarity_report(pages, planner.exact_groups + planner.near_groups)
    assert worst < 0.5, f"unrelated pages too similar: {worst}"
    assign_shards(pages, planner.exact_groups, planner.near_groups, rng)

    logs = {}
    for shard in range(NUM_SHARDS):
        name = f"crawl-{shard:05d}.warc.gz"
        responses = shard_responses(pages, shard, rng)
        corrupt = None
        if shard == NUM_SHARDS - 1:
            corrupt = Response(corrupt_page.url, "corrupt", "200 OK", corrupt_page.content_type,
                               corrupt_page.body, corrupt_page.site.server)
        log = write_shard(out / name, shard, responses, corrupt, rng, seed)
        logs[name] = (log, responses + ([corrupt] if corrupt else []))

    expected = build_expected(pages, logs, planner.exact_groups, planner.near_groups, out, worst, seed)
    (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1) + "\n",
                                       encoding="utf-8")
    source_counts: dict[str, int] = {}
    for page in pages:
        source = page.source.split(":", 1)[0] if ":" in page.source else page.source
        source_counts[source] = source_counts.get(source, 0) + 1
    write_provenance(out, debs, expected, source_counts, seed)
    return expected


def summarise(expected: dict):
    for name, shard in expected["shards"].items():
        print(name, expected["files"][name]["bytes"], "bytes", shard["counts"])
    print("totals", expected["totals"])
    print("stats", expected["stats"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where .deb files are cached")
    parser.add_argument("--originals", type=Path, default=DEFAULT_ORIGINALS,
                        help="folder with the original prose (en.txt, zh.txt)")
    parser.add_argument("--seed", type=int, default=SEED, help="random seed (default %(default)s)")
    parser.add_argument("--check", action="store_true", help="only compare the shards with expected.json")
    args = parser.parse_args(argv)
    if not args.check:
        args.out.mkdir(parents=True, exist_ok=True)
        summarise(build(args.out, args.cache, args.originals, args.seed))
    problems = check(args.out)
    for problem in problems:
        print("problem:", problem)
    print("check:", "ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
