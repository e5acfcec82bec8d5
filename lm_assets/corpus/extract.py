"""Text out of HTML (main content by default, see `main_content.py`), plus Unicode and control-character cleanup."""

from __future__ import annotations

import html as html_lib
import re
import unicodedata
from dataclasses import dataclass

import polars as pl
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

from lm_assets.corpus.main_content import extract_main_text
from lm_assets.corpus.stage import StageResult, split_by_reason

# C0 and C1 controls except tab and newline, plus DEL. NUL and friends turn into NaN losses downstream.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
BLANK_LINES = re.compile(r"\n{3,}")
TITLE = re.compile(r"<title[^>]*>(.*?)</title", re.I | re.S)
LANG_ATTR = re.compile(r"<html[^>]*?\blang\s*=\s*[\"']?([A-Za-z]{2,3}(?:[-_][A-Za-z0-9]+)*)", re.I)


EXTRACTORS = ("main_content", "resiliparse", "all_text")


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

    def __post_init__(self):
        if self.extractor not in EXTRACTORS:
            raise ValueError(f"unknown extractor {self.extractor!r}; choose from {EXTRACTORS}")


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
    if config.extractor == "main_content":
        text = extract_main_text(html)
    else:
        text = extract_plain_text(
            HTMLTree.parse(html),
            preserve_formatting=config.extractor == "all_text",
            main_content=config.extractor == "resiliparse",
            alt_texts=config.keep_alt_texts,
            links=False,
            comments=False,
        )
    return text, page_title(html), lang_hint(html)


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
    texts, titles, hints, stripped_counts = [], [], [], []
    for html, text in zip(docs["html"].to_list(), docs["text"].to_list()):
        title = hint = None
        if html is not None:
            text, title, hint = extract_html(html, config)
        text, stripped = clean_text(text or "", config.unicode_form)
        texts.append(text)
        titles.append(title)
        hints.append(hint)
        stripped_counts.append(stripped)
    out = docs.drop("html", "text").with_columns(
        pl.Series("text", texts, dtype=pl.String),
        pl.Series("title", titles, dtype=pl.String),
        pl.Series("lang_hint", hints, dtype=pl.String),
        pl.Series("control_chars_stripped", stripped_counts, dtype=pl.Int64),
        pl.Series("html_bytes", [len(h.encode()) if h else 0 for h in docs["html"].to_list()], dtype=pl.Int64),
    )
    result = split_by_reason(
        out,
        pl.when(pl.col("text").str.len_chars() < config.min_chars).then(pl.lit("empty_after_extraction")),
        stage="extract",
    )
    result.stats = {
        "extractor": extractor_name(config),
        "docs_in": docs.height,
        "docs_out": result.kept.height,
        "html_docs": int(docs["html"].is_not_null().sum()),
        "control_chars_stripped": int(sum(stripped_counts)),
        "docs_with_control_chars": int(sum(1 for s in stripped_counts if s)),
    }
    return result
