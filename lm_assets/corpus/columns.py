"""One sentence on each column a stage's kept document table can carry: raw, extracted, curated (dedup and
decontamination keep the curated columns). Families of columns (one per n-gram size, one per PII type) are
described by a pattern."""

from __future__ import annotations

import re

from lm_assets.corpus.curation.pii import PII_TYPES, count_column

COLUMN_DESCRIPTIONS: dict[str, str] = {
    # raw
    "doc_id": "Stable id of the document: a hash of its source shard and position, or of its URL and payload.",
    "url": "Address the document was fetched from (WARC target URI, or the input record's url).",
    "source": "Name of the input shard the document was read from.",
    "record_index": "Position of the document's record in its input shard.",
    "fetched_at": "When the page was fetched, as the input records it (WARC-Date).",
    "content_type": "MIME type of the payload, from the HTTP header or the input record.",
    "charset": "Character encoding the payload was decoded with.",
    "charset_detected": "Whether the encoding was detected from the bytes rather than declared.",
    "replaced_chars": "Characters whose bytes were not valid in the charset, decoded as U+FFFD (a few damaged bytes "
    "do not cost the page).",
    "html": "The page's HTML, decoded; null for plain-text records.",
    "text": "The document's text: as read for plain-text records, the extracted main text later, PII redacted "
    "after curation.",
    # extracted
    "title": "The page's `<title>`, or null.",
    "lang_hint": "Language the page declares in `<html lang>`, or null.",
    "control_chars_stripped": "Number of NUL and other control characters removed from the text.",
    "html_bytes": "Size of the page's HTML in UTF-8 bytes.",
    "q_html_link_share": "Share of the page's visible text that is link text.",
    "q_html_links_per_kb": "Links per 1,000 bytes of the page's visible text.",
    "q_html_text_ratio": "Visible text bytes over HTML bytes.",
    "q_html_removed_share": "Share of the page's visible text that extraction removed as chrome.",
    "q_html_link_blocks": "Number of blocks extraction removed for being mostly links (menus, link lists).",
    "q_html_pre_share": "Share of the extracted text inside `<pre>` blocks.",
    "q_html_code_share": "Share of the extracted text in lines of code inside `<pre>` blocks, on pages at least half in `<pre>` (else 0).",
    "q_url_listing": "1 when the URL's path names a listing (tag, category, archive, search or page-N), else 0.",
    "q_url_depth": "Number of path segments in the URL.",
    "q_title_listing": "1 when the title names a listing (archive, category, tags, search results, home), else 0.",
    "q_title_error": "1 when the title names an error or login page, else 0.",
    # curated: language ID
    "lang": "Language chosen by fastText lid.176 over windows of the whole text (the largest allowed one).",
    "lang_score": "Share of the text's language-ID votes that went to `lang` (0-1).",
    "lang_shares": "Every language's share of the text's language-ID votes.",
    # curated: quality signals
    "q_cjk": "Whether the document is Chinese, Japanese or Korean, so measured in characters rather than words.",
    "q_word_count": "Words in the text (each CJK character one word).",
    "q_mean_word_length": "Mean length of the words in characters.",
    "q_hash_word_ratio": "'#' characters per word.",
    "q_ellipsis_word_ratio": "Ellipses ('...' or '…') per word.",
    "q_bullet_lines_ratio": "Share of the lines of text that start with a bullet.",
    "q_ellipsis_lines_ratio": "Share of the lines of text that end with an ellipsis.",
    "q_alpha_words_ratio": "Share of the whitespace-separated words that hold a letter.",
    "q_stop_words": "Stop words of the document's language in the text; null for a language without a list.",
    "q_dup_para_frac": "Share of the paragraphs that repeat an earlier paragraph.",
    "q_dup_para_char_frac": "Share of the text's characters in paragraphs that repeat an earlier one.",
    "q_dup_line_frac": "Share of the lines that repeat an earlier line.",
    "q_dup_line_char_frac": "Share of the text's characters in lines that repeat an earlier one.",
    "q_c4_lorem_ipsum": "Whether the text holds 'lorem ipsum' (C4).",
    "q_c4_curly_bracket": "Whether the text holds a curly bracket (C4).",
    "q_c4_sentences": "Sentences in the lines C4's line filter keeps.",
    "q_c4_lines_removed": "Lines C4's line filter removed from the text.",
    "q_fw_line_punct_ratio": "Share of the lines that end in sentence punctuation (FineWeb).",
    "q_fw_short_line_ratio": "Share of the lines at most the short-line length long (FineWeb).",
    "q_fw_char_dup_ratio": "Share of the lines' characters in lines that repeat an earlier one (FineWeb).",
    "q_fw_new_line_ratio": "Line breaks per word (FineWeb).",
    "q_sentences": "Sentences ending in . ! ? or 。！？ over the whole text.",
    "q_prose_share": "Share of the text (UTF-8 bytes) in lines of prose, not headings, labels or code.",
    "q_licence_share": "Share of the text (UTF-8 bytes) in paragraphs quoting licence or copyright boilerplate.",
    "q_date_line_share": "Dates or clock times per line of text, at most one.",
    # curated: classifier, toxicity
    "quality_score": "The quality classifier's P(KEEP) for the document; null when no classifier ran.",
    "quality_model": "Which of the classifier's models scored the document: `html`, or `text` for one read without HTML; null when no classifier ran.",
    "tox_max": "Highest toxicity score (0-1) of any line of the text.",
    "tox_frac": "Share of the text's characters in lines scored toxic.",
    "tox_zh_flagged": "Share of a Chinese document's words that the Chinese lexicon flags; null for other languages.",
    # curated: PII
    **{count_column(kind): f"Number of {kind} matches redacted from the text." for kind in PII_TYPES},
}

COLUMN_FAMILIES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"q_top_(\d+)gram_frac"), "Share of the text's characters covered by its most frequent {}-gram."),
    (re.compile(r"q_dup_(\d+)gram_frac"), "Share of the text's characters covered by {}-grams occurring more than once."),
)


def column_description(name: str) -> str | None:
    """The column's one-sentence description, or None for a column not described here."""
    if name in COLUMN_DESCRIPTIONS:
        return COLUMN_DESCRIPTIONS[name]
    for pattern, description in COLUMN_FAMILIES:
        match = pattern.fullmatch(name)
        if match:
            return description.format(*match.groups())
    return None
