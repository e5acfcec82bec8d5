"""Main-content extraction from HTML with resiliparse, plus Unicode and control-character cleanup."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import polars as pl

from lm_assets.corpus.stage import StageResult, split_by_reason

# C0 and C1 controls except tab and newline, plus DEL. NUL and friends turn into NaN losses downstream.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
BLANK_LINES = re.compile(r"\n{3,}")
LANG_ATTR = re.compile(r"<html[^>]*?\blang\s*=\s*[\"']?([A-Za-z]{2,3}(?:[-_][A-Za-z0-9]+)*)", re.I)


@dataclass
class ExtractConfig:
    main_content: bool = True
    unicode_form: str = "NFC"
    keep_alt_texts: bool = False
    min_chars: int = 1


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
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(html)
    text = extract_plain_text(
        tree, main_content=config.main_content, alt_texts=config.keep_alt_texts, links=False, comments=False
    )
    title = (tree.title or "").strip() or None
    match = LANG_ATTR.search(html[:4096])
    lang_hint = match.group(1).lower().replace("_", "-") if match else None
    return text, title, lang_hint


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
        "docs_in": docs.height,
        "docs_out": result.kept.height,
        "html_docs": int(docs["html"].is_not_null().sum()),
        "control_chars_stripped": int(sum(stripped_counts)),
        "docs_with_control_chars": int(sum(1 for s in stripped_counts if s)),
    }
    return result
