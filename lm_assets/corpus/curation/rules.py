"""Heuristic rules (drop stage `rules`) after Gopher (quality and repetition), C4 and FineWeb, aware of CJK text.

The rules follow the published thresholds as datatrove implements them. Chinese, Japanese and
Korean are measured in characters rather than whitespace words: each CJK character is one "word",
repetition n-grams run over characters (n scaled by `cjk_chars_per_word`), length uses
`min_doc_chars_cjk`, CJK sentence punctuation ends a line, stop words are common function
characters, and FineWeb's short-line length is `short_line_length_cjk`.

Signals are computed once per document into `q_*` columns; `reasons_from_signals` turns stored
signals into a drop reason, so thresholds can be changed without recomputing (see RulesConfig
for the few settings that shape the signals themselves). As in datatrove's FineWeb pipeline, the
Gopher families read the original text and FineWeb reads what C4's line filter leaves behind.

Deliberate departures from datatrove: tokens come from one regex instead of nltk/spacy, the
top-n-gram rule only counts n-grams that occur at least twice, stop words match case-insensitively,
lines are whitespace-stripped before their last character is checked, a citation mark needs a number
("[12]"; C4's "[]" would eat `int[]`), and a line filter removes lines but keeps the blank lines between
paragraphs and the indentation of what it keeps. Blank lines are not lines for the line ratios.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from lm_assets.corpus.stage import StageResult, split_by_reason
from lm_assets.text import CJK, CJK_CHAR, base_lang, is_cjk_lang

STAGE = "rules"
FAMILIES = ("gopher_quality", "gopher_repetition", "c4", "fineweb", "prose", "page")


DEFAULT_STOP_WORDS: dict[str, tuple[str, ...]] = {
    "en": ("the", "be", "to", "of", "and", "that", "have", "with"),
    "zh": (
        "的", "了", "是", "在", "和", "有", "我", "不", "这", "這", "也", "就", "都", "他", "她", "它",
        "们", "們", "一", "个", "個", "与", "與", "着", "著", "之", "而", "及", "被", "把", "对", "對",
        "从", "從", "但", "所", "以", "说", "說", "要", "会", "會", "能", "到", "很", "你", "那", "为", "為",
    ),
    "ja": (
        "の", "に", "は", "を", "た", "が", "で", "て", "と", "し", "も", "な", "か", "だ",
        "です", "ます", "する", "いる", "ある", "こと",
    ),
    "ko": ("이", "가", "은", "는", "을", "를", "의", "에", "도", "와", "과", "고", "다", "로", "에서", "하다", "있다"),
}


@dataclass(frozen=True)
class RulesConfig:
    """Every threshold of the rule families. `None` switches a single rule off.

    The field defaults are the `lm_assets` preset, the rules the pipeline runs (chosen on the labelled
    development set: pages of English and Chinese manuals), so that `RulesConfig()` and a bare
    `apply_rules(df)` run what curated_shard runs. `PRESETS` names the others: `published` holds
    the thresholds of Gopher, C4 and FineWeb as datatrove implements them (see `preset`).

    Most fields are thresholds that `reasons_from_signals` can re-apply to stored signals. These
    shape the signals and need a recompute: `families`, `stop_words`, the n of `top_n_grams` and
    `dup_n_grams`, `cjk_chars_per_word`, `repetition_skips_structure_lines`, the C4 line settings
    (`c4_filter_lines` through `c4_filter_policy`) and `short_line_length` / `short_line_length_cjk`.
    """

    families: tuple[str, ...] = ("gopher_quality", "gopher_repetition", "c4", "prose", "page")

    # Gopher quality
    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    # Gopher's 50 words at `cjk_chars_per_word` characters a word.
    min_doc_chars_cjk: int | None = 75
    max_doc_chars_cjk: int | None = 150_000
    min_avg_word_length: float | None = 3
    max_avg_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    # datatrove's name; it is a lower bound on the fraction of words holding an alphabetic character. Code
    # and SQL tokens ("x_id=3;", "--verbose") carry no letter; prose pages of a manual have 60 %+.
    max_non_alpha_words_ratio: float | None = 0.6
    min_stop_words: int | None = 2
    stop_words: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_STOP_WORDS))

    # Gopher repetition, over prose lines only (`repetition_skips_structure_lines`), at twice Gopher's
    # thresholds: a reference page repeats whole sentences by design ("Changed in version 3.10: Added the key
    # parameter." under every function), spam repeats far more.
    dup_line_frac: float | None = 0.6
    dup_para_frac: float | None = 0.6
    dup_line_char_frac: float | None = 0.4
    dup_para_char_frac: float | None = 0.4
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple[tuple[int, float], ...] = ((5, 0.30), (6, 0.28), (7, 0.26), (8, 0.24), (9, 0.22), (10, 0.20))
    # A CJK word n-gram spans about this many characters, so character n-grams use round(n * this).
    cjk_chars_per_word: float = 1.5
    # Count repetition over prose lines only: headings, labels and table-of-contents entries (short lines
    # without a sentence end, see `is_structure_line`) repeat by design ("Parameters", "See also", a
    # contents list echoing the page's own headings).
    repetition_skips_structure_lines: bool = True

    # C4. Its line rules and its curly-bracket and sentence rules are aimed at web spam; here they would
    # remove headings, list items and code, and drop SQL, templates and short reference pages.
    c4_filter_lines: bool = True
    c4_filter_no_terminal_punct: bool = False
    c4_remove_citations: bool = True
    c4_min_words_per_line: int = 0
    # CJK lines are measured in characters, punctuation included.
    c4_min_chars_per_line_cjk: int = 0
    c4_max_word_length: int | None = 1000
    c4_filter_javascript: bool = True
    # Only lines that are a notice about JavaScript ("please enable JavaScript"), not every line naming it.
    c4_javascript_notices_only: bool = True
    c4_filter_policy: bool = True
    c4_filter_lorem_ipsum: bool = True
    c4_filter_curly_bracket: bool = False
    c4_min_sentences: int | None = None

    # FineWeb
    line_punct_thr: float | None = 0.12
    line_punct_exclude_zero: bool = False
    short_line_thr: float | None = 0.67
    short_line_length: int = 30
    short_line_length_cjk: int = 10
    char_duplicates_ratio: float | None = 0.01
    new_line_ratio: float | None = 0.3

    # Prose (our own): sentences ending in . ! ? or 。！？ over the whole text, CJK or not; the share of
    # the text in lines of prose. About three sentences of explanation and a fifth of the text in prose lines.
    min_sentences: int | None = 3
    min_prose_share: float | None = 0.2
    # Licence and copyright boilerplate: the share of the text in paragraphs that quote a licence. A
    # licence's own text holds its boilerplate phrases in about a third of its paragraphs (the GPL's 0.29),
    # documentation that quotes one in far fewer (at most 0.15 on the dev set).
    max_licence_share: float | None = 0.25

    # Page (our own): what extraction measured on the HTML and the address (`extract.PAGE_COLUMNS`); a
    # document without HTML passes. A listing by both its URL and its title (tag, category, archive,
    # search, channel and list pages), and the shares of the visible text in links and removed by extraction.
    # On the labelled web pages the listing and source rules drop 7 % more of the junk and no good page of
    # any labelled crawl; the link and removed shares cost good pages for little (docs/architecture.md).
    listing_page: bool | None = True
    # A raw source listing (a Sphinx `_modules` page, a code file shown as a page): nearly all of the text
    # in `<pre>`, and much of it lines of code (`SOURCE_LISTING`).
    source_listing: bool | None = True
    max_html_link_share: float | None = None
    max_html_removed_share: float | None = None

    def __post_init__(self):
        unknown = set(self.families) - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown quality rule families {sorted(unknown)}; choose from {FAMILIES}")

    def cjk_ngram_size(self, n: int) -> int:
        return max(n, int(n * self.cjk_chars_per_word + 0.5))


# The thresholds Gopher, C4 and FineWeb published, as datatrove implements them, where they differ
# from RulesConfig's defaults (ours): no prose or page rules, C4 rewriting lines.
PUBLISHED: dict[str, Any] = {
    "families": ("gopher_quality", "gopher_repetition", "c4", "fineweb"),
    "min_doc_chars_cjk": 100,
    "max_non_alpha_words_ratio": 0.8,
    "repetition_skips_structure_lines": False,
    "dup_line_frac": 0.3,
    "dup_para_frac": 0.3,
    "dup_line_char_frac": 0.2,
    "dup_para_char_frac": 0.2,
    "dup_n_grams": ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)),
    "c4_filter_no_terminal_punct": True,
    "c4_min_words_per_line": 3,
    "c4_min_chars_per_line_cjk": 5,
    "c4_javascript_notices_only": False,
    "c4_filter_curly_bracket": True,
    "c4_min_sentences": 5,
    "min_sentences": None,
    "min_prose_share": None,
    "max_licence_share": None,
    "listing_page": None,
    "source_listing": None,
}
# The published presets, as datatrove ships them, and ours. `lm_assets` (RulesConfig's defaults) was chosen
# on the labelled development set (bench/dev_set; docs/curation.md, "Curation defaults"): pages of English and
# Chinese manuals.
PRESETS: dict[str, dict[str, Any]] = {
    # Gopher, C4 and FineWeb at once, C4 rewriting lines: the pipeline's earlier default.
    "published": PUBLISHED,
    "gopher": {**PUBLISHED, "families": ("gopher_quality", "gopher_repetition")},
    "c4": {**PUBLISHED, "families": ("c4",)},
    # datatrove's FineWeb pipeline: its C4 filter keeps lines without terminal punctuation.
    "fineweb": {
        **PUBLISHED,
        "families": ("gopher_repetition", "gopher_quality", "c4", "fineweb"),
        "c4_filter_no_terminal_punct": False,
    },
    "lm_assets": {},
}
DEFAULT_PRESET = "lm_assets"


def preset(name: str = DEFAULT_PRESET, **overrides: Any) -> RulesConfig:
    """The named preset's config, with `overrides` (field names of `RulesConfig`) on top."""
    if name not in PRESETS:
        raise ValueError(f"unknown quality preset {name!r}; choose from {sorted(PRESETS)}")
    known = {f.name for f in dataclasses.fields(RulesConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown quality settings {unknown}; known: {sorted(known)}")
    fields = {**PRESETS[name], **overrides}
    for key in ("families", "top_n_grams", "dup_n_grams"):
        if key in fields and isinstance(fields[key], list):
            fields[key] = tuple(tuple(item) if isinstance(item, list) else item for item in fields[key])
    return RulesConfig(**fields)


# ---------------------------------------------------------------------------------------------
# Text primitives
# ---------------------------------------------------------------------------------------------

# A word is one CJK character, or a run of other letters/digits joined by apostrophes, dots or hyphens.
_WORD_RE = re.compile(rf"[^\W_{CJK}]+(?:['’.\-][^\W_{CJK}]+)*|[{CJK}]")
_ASCII_WORD_RE = re.compile(r"[A-Za-z0-9]+(?:['.\-][A-Za-z0-9]+)*")
_LINE_SPLIT_RE = re.compile(r"\n+")
_BLANK_RUNS_RE = re.compile(r"\n\s*\n(?:\s*\n)+")
_PARAGRAPH_SPLIT_RE = re.compile(r"\n{2,}")

_BULLETS = ("•", "-")
_ELLIPSES = ("...", "…")

_C4_END = (".", "?", "!", '"', "'")
_CJK_END = ("。", "！", "？", "；", "…", "｡", "．", "”", "’", "」", "』")
_C4_END_CJK = _C4_END + _CJK_END
_FINEWEB_END = (".", "!", "?", '"', "'", "؟", "۔", "।", "॥", "።", "᠃", "︒", "﹒", "﹖", "﹗") + _CJK_END
_C4_POLICY = (
    "terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies",
    "隐私政策", "隱私政策", "使用条款", "使用條款", "服务条款", "服務條款",
)
# Phrases of licence and copyright boilerplate (GPL, GFDL, BSD, MIT, Apache, Creative Commons), English and Chinese.
_LICENCE_RE = re.compile(
    r"general public license|free documentation license|lesser general public|creative commons|"
    r"permission is (?:hereby )?granted|without any warranty|without warranty of any kind|merchantability|"
    r"fitness for a particular purpose|redistribution and use in source and binary|all rights reserved|"
    r"licensed under the|under the terms of the|free software foundation|provided (?:by the copyright holders )?"
    r"[\"“]?as is[\"”]?|copyright ©|copyright \(c\)|invariant sections|front-cover texts|"
    r"通用公共许可证|通用公共授權|自由文档许可证|自由文檔許可證|自由软件基金会|自由軟體基金會|版权所有|版權所有|"
    r"不提供任何担保|不提供任何擔保|适销性|適銷性|特定用途"
)  # matched against lower-cased text
_C4_POLICY_RE = re.compile("|".join(map(re.escape, _C4_POLICY)))
_CITATION_RE = re.compile(r"\[\d+\]|\[edit\]|\[citation needed\]|\[编辑\]|\[編輯\]|\[来源请求\]|\[來源請求\]", re.I)
_SENTENCE_END_RE = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)")
# A sentence end in a CJK text: a run of full-width or ASCII marks, or a full stop before a space. Two
# patterns, each opening with its own set of characters, which `re` scans for far faster than a choice.
_SENTENCE_END_CJK_MARKS_RE = re.compile(r"[。！？｡!?]+")
_SENTENCE_END_CJK_STOP_RE = re.compile(r"\.(?=\s|$)")
_CJK_SENTENCE_MARK_RE = re.compile(r"[。！？｡]")

# Counts over whole texts, taken for all documents at once by polars' regex engine (Rust), which
# scans text many times faster than `re`. Rust's regex has no lookaround: `(?:\s|$)` stands for
# `(?=\s|$)`, which counts the same since no match starts with a space.
_SENTENCE_END_CJK_COUNT = r"[。！？｡]+[”’」』）)]*"
_SENTENCE_END_COUNT = r"[.!?]+[\"'”’)\]]*(?:\s|$)"
_LIST_MARKER_COUNT = r"(?m)^[^\S\n]*(?:[•\-*·]|\d{1,3}[.)])[^\S\n]+"
# Dates and clock times: listings of news, posts and threads stamp every entry. ASCII word boundaries, which
# polars' regex engine scans many times faster than Unicode ones.
_DATE_COUNT = (
    r"\d(?:\d{3}[-/.年]\d{1,2}(?:[-/.月]\d{1,2})?|\d?[-/.]\d{1,2}[-/.]\d{2,4}|\d?月\d{1,2}日|\d?:\d{2}(?-u:\b))"
    r"|(?-u:\b)(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.? \d{1,2},? \d{4}"
)
_TEXT_LINE_COUNT = r"(?m)^[^\S\n]*\S"
_TOKEN_COUNT = r"\S+"
_LETTER_TOKEN_COUNT = r"[^\s\p{L}]*\p{L}\S*"  # a whitespace-separated token holding a letter
_JAVASCRIPT_NOTICE_RE = re.compile(
    r"(?:enable|turn on|activate|allow|requires?|need|support)\w*\W+(?:\w+\W+){0,4}?javascript"
    r"|javascript\W+(?:\w+\W+){0,3}?(?:is |be )?(?:disabled|enabled|required|turned off|not supported)",
    re.I,
)
_LIST_MARKER_RE = re.compile(r"^(?:[•\-*·]|\d{1,3}[.)])\s+")
_MARKER_STARTS = frozenset("•-*·0123456789")
STRUCTURE_LINE_WORDS = 12
# Signals that extraction measures on the HTML and the address (`extract.PAGE_COLUMNS`), not the rules, and
# a language model's (q_lm_: bench/quality_transfer.py's ngram-lm variant).
PAGE_SIGNAL_PREFIXES = ("q_html_", "q_url_", "q_title_", "q_lm_")


def is_structure_line(line: str) -> bool:
    """A heading, label or contents entry: at most `STRUCTURE_LINE_WORDS` words (a CJK character counting
    half), with no sentence end. Such lines repeat by design and are not prose."""
    line = line.strip()
    if line[:1] in _MARKER_STARTS:
        line = _LIST_MARKER_RE.sub("", line)
    if not line:
        return True
    if line.endswith(_FINEWEB_END) or line.endswith((":", "：")):
        return False
    if line.isascii():
        return len(line.split(maxsplit=STRUCTURE_LINE_WORDS)) <= STRUCTURE_LINE_WORDS
    spaced, cjk = CJK_CHAR.subn(" ", line)
    return cjk <= 2 * STRUCTURE_LINE_WORDS and (
        len(spaced.split(maxsplit=STRUCTURE_LINE_WORDS)) + cjk / 2 <= STRUCTURE_LINE_WORDS
    )


def is_prose_line(line: str) -> bool:
    """Not a structure line, and holding a sentence end: a line of prose, not a heading, label or code."""
    # Either kind, in any text: a Chinese page quotes English sentences and the other way round.
    return not is_structure_line(line) and bool(_CJK_SENTENCE_MARK_RE.search(line) or _SENTENCE_END_RE.search(line))




@functools.lru_cache(maxsize=64)
def _cjk_stop_word_regex(words: tuple[str, ...]) -> re.Pattern:
    return re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))


@functools.lru_cache(maxsize=64)
def _lowercase_set(words: tuple[str, ...]) -> frozenset[str]:
    return frozenset(w.lower() for w in words)


def _count_stop_words(doc: _Doc, stop_words: tuple[str, ...]) -> int:
    # CJK function words sit inside runs of characters, so they are found in the text, not among tokens.
    if doc.cjk:
        return len(_cjk_stop_word_regex(stop_words).findall(doc.text))
    return sum(map(_lowercase_set(stop_words).__contains__, map(str.lower, doc.words)))


def _duplicate_counts(items: list[str]) -> tuple[int, int]:
    """How many items repeat an earlier one, and how many characters those repeats hold."""
    if len(set(items)) == len(items):
        return 0, 0
    seen: set[str] = set()
    duplicates = duplicate_chars = 0
    for item in items:
        if item in seen:
            duplicates += 1
            duplicate_chars += len(item)
        else:
            seen.add(item)
    return duplicates, duplicate_chars


_KEY_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def _extend_keys(ids: np.ndarray, keys: np.ndarray, positions: np.ndarray, doc_end: np.ndarray, done: int, n: int):
    """The keys of the n-grams starting at `positions`, from the keys of their first `done` words (a
    polynomial hash of word ids, wrapping): equal n-grams, equal keys. Positions too near the end of their
    document (`doc_end`, per word) go."""
    fits = positions + n <= doc_end[positions]
    keys, positions = keys[fits], positions[fits]
    with np.errstate(over="ignore"):
        for k in range(done, n):
            keys = keys * _KEY_MULTIPLIER + ids[positions + k] + np.uint64(1)
    return keys, positions


_DOC_MULTIPLIER = np.uint64(0xD6E8FEB86659FD93)


def _key_groups(keys: np.ndarray, positions: np.ndarray, docs: np.ndarray):
    """Keys sorted by a mix of key and document, their positions and documents, each one's group (same
    document, same key) size and the earliest position of its group. One sort of the mix costs a third of
    sorting by document, then key; like the keys themselves, it relies on 64-bit hashes not colliding."""
    with np.errstate(over="ignore"):
        mixed = keys ^ (docs.astype(np.uint64) * _DOC_MULTIPLIER)
    order = np.argsort(mixed)
    ordered, at, in_doc, mixed = keys[order], positions[order], docs[order], mixed[order]
    new_group = np.concatenate(([True], (mixed[1:] != mixed[:-1]) | (in_doc[1:] != in_doc[:-1])))
    starts = np.flatnonzero(new_group)
    group = np.cumsum(new_group) - 1
    sizes = np.diff(np.append(starts, len(keys)))[group]
    return ordered, at, in_doc, sizes, np.minimum.reduceat(at, starts)[group]


def _ngram_repetitions(word_lists: list[list[str]], top_sizes: list[int], dup_sizes: list[int], separator_len: int):
    """Per document and size, the characters of the most frequent n-gram (`top_sizes`) and the characters
    covered by n-grams that repeat an earlier one, each counted once (`dup_sizes`; Gopher's "fraction of
    characters in duplicate n-grams", over the union of their spans).

    The documents' words lie side by side, an n-gram never running past its document's end and grouped
    with the equal n-grams of its own document only, so that numpy is called a few times a batch, not a
    document.

    Keys grow one word at a time from size to size. An n-gram can recur only where its first n-1 words
    do, so past the top sizes only the starts of recurring n-grams are carried on to the next size."""
    n_docs = len(word_lists)
    counts = np.fromiter(map(len, word_lists), dtype=np.int64, count=n_docs)
    words = [word for doc_words in word_lists for word in doc_words]
    total = len(words)
    ids = np.fromiter(map(hash, words), dtype=np.int64, count=total).view(np.uint64)
    word_lengths = np.fromiter(map(len, words), dtype=np.int64, count=total)
    length_sums = np.concatenate(([0], np.cumsum(word_lengths)))
    doc_of = np.repeat(np.arange(n_docs), counts)
    doc_end = np.cumsum(counts)[doc_of]
    keys, positions = np.zeros(total, dtype=np.uint64), np.arange(total)
    top = {n: np.zeros(n_docs, dtype=np.int64) for n in top_sizes}
    dup = {n: np.zeros(n_docs, dtype=np.int64) for n in dup_sizes}
    done, last_top = 0, max(top_sizes, default=0)
    for n in sorted(set(top_sizes) | set(dup_sizes)):
        keys, positions = _extend_keys(ids, keys, positions, doc_end, done, n)
        done = n
        if len(keys) == 0:
            continue
        ordered, at, in_doc, sizes, first = _key_groups(keys, positions, doc_of[positions])
        if n in top:
            most = np.zeros(n_docs, dtype=np.int64)
            np.maximum.at(most, in_doc, sizes)
            # The earliest of the most frequent, as Counter would pick; one seen once is not repeated.
            is_top = sizes == most[in_doc]
            earliest = np.full(n_docs, total, dtype=np.int64)
            np.minimum.at(earliest, in_doc[is_top], first[is_top])
            repeated = np.flatnonzero(most >= 2)
            start = earliest[repeated]
            top[n][repeated] = (length_sums[start + n] - length_sums[start] + separator_len * (n - 1)) * most[repeated]
        if n in dup:
            starts = at[(sizes > 1) & (at != first)]
            edges = np.zeros(total + 1, dtype=np.int64)
            edges[starts] += 1  # starts are distinct positions, so plain indexing adds once each
            edges[starts + n] -= 1
            covered = np.cumsum(edges[:-1]) > 0
            dup[n] = np.bincount(doc_of[covered], weights=word_lengths[covered], minlength=n_docs).astype(np.int64)
            if n >= last_top:
                recurring = sizes > 1
                keys, positions = ordered[recurring], at[recurring]
    return [({n: int(top[n][i]) for n in top_sizes}, {n: int(dup[n][i]) for n in dup_sizes}) for i in range(n_docs)]


# ---------------------------------------------------------------------------------------------
# Signals per family
# ---------------------------------------------------------------------------------------------


@dataclass
class _Doc:
    """One document tokenized once and shared by all families.

    `words` are the non-symbol tokens; `n_tokens` also counts each other non-space character as a
    symbol token, as a word tokenizer that splits off punctuation would.
    """

    text: str
    lang: str
    cjk: bool
    words: list[str]
    word_chars: int
    n_tokens: int

    lines: list[str] = field(default_factory=list)
    _prose: list[bool] | None = None

    def prose_mask(self) -> list[bool]:
        """`is_prose_line` of every line, computed once per document."""
        if self._prose is None:
            self._prose = [bool(line.strip()) and is_prose_line(line) for line in self.lines]
        return self._prose

    def prose_only(self) -> _Doc:
        """The document with its other lines emptied (blank lines stay, so paragraphs stay apart)."""
        lines = [line if prose else "" for line, prose in zip(self.lines, self.prose_mask())]
        text = "\n".join(lines)
        # Words never span a line break, so the kept lines' words are those of the text they make.
        words = _find_words(text)
        return _Doc(text, self.lang, self.cjk, words, sum(map(len, words)), len(words), lines)

    @classmethod
    def parse(cls, text: str | None, lang: str | None) -> _Doc:
        text = text or ""
        words, word_chars, n_tokens = _tokenize(text)
        return cls(text, base_lang(lang), is_cjk_lang(lang), words, word_chars, n_tokens, text.split("\n"))


def _find_words(text: str) -> list[str]:
    # The same words, found faster in ASCII text by a pattern without Unicode classes.
    return (_ASCII_WORD_RE if text.isascii() else _WORD_RE).findall(text)


def _tokenize(text: str) -> tuple[list[str], int, int]:
    words = _find_words(text)
    word_chars = sum(map(len, words))
    symbols = sum(map(len, text.split())) - word_chars
    return words, word_chars, len(words) + symbols


def _column_scan(texts: list[str | None], families: set[str]) -> list[dict[str, int | bool]]:
    """Per document, what needs a scan of the whole text: sentence ends and whether it quotes a licence
    (prose family); whitespace-separated tokens and those holding a letter, list markers aside, and CJK
    characters (gopher_quality family); whether it mentions javascript, a policy or lorem ipsum (c4)."""
    column = pl.Series(texts, dtype=pl.String).fill_null("")
    lowered = column.str.to_lowercase() if families & {"prose", "c4"} else column
    scan: dict[str, pl.Series] = {}
    if "prose" in families:
        scan["sentences"] = column.str.count_matches(_SENTENCE_END_CJK_COUNT) + column.str.count_matches(_SENTENCE_END_COUNT)
        scan["licence"] = lowered.str.contains(_LICENCE_RE.pattern)
        scan["dates"] = lowered.str.count_matches(_DATE_COUNT)
        scan["text_lines"] = column.str.count_matches(_TEXT_LINE_COUNT)
    if "c4" in families:
        scan["javascript"] = lowered.str.contains("javascript", literal=True)
        scan["policy"] = lowered.str.contains(_C4_POLICY_RE.pattern)
        scan["lorem_ipsum"] = lowered.str.contains("lorem ipsum", literal=True)
    if "gopher_quality" in families:
        # Gopher's rule counts whitespace-separated words: "debian/*" or "(7.0," hold a letter or not as a
        # whole, instead of their punctuation counting as extra non-alphabetic words. A list item's marker
        # is layout, not a word.
        unmarked = column.str.replace_all(_LIST_MARKER_COUNT, "")
        scan["tokens"] = unmarked.str.count_matches(_TOKEN_COUNT)
        scan["letter_tokens"] = unmarked.str.count_matches(_LETTER_TOKEN_COUNT)
        scan["cjk_chars"] = column.str.count_matches(f"[{CJK}]")
    return pl.DataFrame(scan).to_dicts() if scan else [{}] * len(texts)


def _gopher_quality_signals(doc: _Doc, scan: dict[str, int | bool], cfg: RulesConfig) -> dict:
    words, text = doc.words, doc.text
    n_tokens = max(doc.n_tokens, 1)
    # Lines of text: the blank line between two paragraphs is not a line.
    lines = [line for line in text.splitlines() if line.strip()] or [""]
    n_spaced = scan["tokens"]
    alpha_words = scan["letter_tokens"]
    stop_list = cfg.stop_words.get(doc.lang)
    # In a text read by its words, the CJK characters quoted in it are not words of its language.
    quoted_cjk = 0 if doc.cjk else scan["cjk_chars"]
    spelled = len(words) - quoted_cjk
    return {
        "q_word_count": len(words),
        "q_mean_word_length": (doc.word_chars - quoted_cjk) / spelled if spelled > 0 else 0.0,
        "q_hash_word_ratio": text.count("#") / n_tokens,
        "q_ellipsis_word_ratio": (text.count("...") + text.count("…")) / n_tokens,
        "q_bullet_lines_ratio": sum(1 for line in lines if line.lstrip().startswith(_BULLETS)) / len(lines),
        "q_ellipsis_lines_ratio": sum(1 for line in lines if line.rstrip().endswith(_ELLIPSES)) / len(lines),
        "q_alpha_words_ratio": alpha_words / n_spaced if n_spaced else 0.0,
        "q_stop_words": _count_stop_words(doc, tuple(stop_list)) if stop_list else None,
    }


def _gopher_repetition_signals(doc: _Doc, cfg: RulesConfig) -> tuple[dict, _Doc]:
    """The paragraph and line signals, and the document whose n-grams count (see `_NgramCounter`)."""
    if cfg.repetition_skips_structure_lines:
        doc = doc.prose_only()
    text = doc.text.strip()
    text_len = max(len(doc.text), 1)
    paragraphs = _PARAGRAPH_SPLIT_RE.split(text)
    para_dups, para_dup_chars = _duplicate_counts(paragraphs)
    lines = _LINE_SPLIT_RE.split(text)
    line_dups, line_dup_chars = _duplicate_counts(lines)
    signals = {
        "q_dup_para_frac": para_dups / len(paragraphs),
        "q_dup_para_char_frac": para_dup_chars / text_len,
        "q_dup_line_frac": line_dups / len(lines),
        "q_dup_line_char_frac": line_dup_chars / text_len,
    }
    return signals, doc


# Words counted together: arrays this size sort in cache, numpy is called once for many documents, and
# only this many words of documents wait for their counts.
NGRAM_CHUNK_WORDS = 32_768


class _NgramCounter:
    """Gopher's n-gram signals, counted for runs of documents of one kind (CJK or not) about
    `NGRAM_CHUNK_WORDS` words long as documents come, and written into each document's signals."""

    def __init__(self, cfg: RulesConfig):
        self.cfg = cfg
        self.pending: dict[bool, list[tuple[dict, _Doc]]] = {False: [], True: []}
        self.words = {False: 0, True: 0}

    def add(self, signals: dict, doc: _Doc) -> None:
        self.pending[doc.cjk].append((signals, doc))
        self.words[doc.cjk] += len(doc.words)
        if self.words[doc.cjk] >= NGRAM_CHUNK_WORDS:
            self.flush(doc.cjk)

    def flush(self, cjk: bool | None = None) -> None:
        for kind in (False, True) if cjk is None else (cjk,):
            pending, cfg = self.pending[kind], self.cfg
            self.pending[kind], self.words[kind] = [], 0
            if not pending:
                continue
            size = cfg.cjk_ngram_size if kind else (lambda n: n)
            repetitions = _ngram_repetitions(
                [doc.words for _, doc in pending], [size(n) for n, _ in cfg.top_n_grams],
                [size(n) for n, _ in cfg.dup_n_grams], 0 if kind else 1,
            )
            for (signals, doc), (top, dup) in zip(pending, repetitions, strict=True):
                text_len = max(len(doc.text), 1)
                for n, _ in cfg.top_n_grams:
                    signals[f"q_top_{n}gram_frac"] = top[size(n)] / text_len
                for n, _ in sorted(cfg.dup_n_grams):
                    signals[f"q_dup_{n}gram_frac"] = dup[size(n)] / text_len


@dataclass
class _C4Outcome:
    kept_lines: list[str]
    lines_removed: int
    citations_removed: bool
    sentences: int
    lorem_ipsum: bool
    curly_bracket: bool


def _c4_line_has_too_few_words(line: str, cjk: bool, cfg: RulesConfig) -> bool:
    if cjk:
        return len(line) < cfg.c4_min_chars_per_line_cjk
    return cfg.c4_min_words_per_line > 0 and len(line.split()) < cfg.c4_min_words_per_line


def _c4_scan(doc: _Doc, scan: dict[str, int | bool], cfg: RulesConfig) -> _C4Outcome:
    """Walk lines the way C4 does: drop bad lines, flag lorem ipsum and curly brackets, count sentences.

    Flags are set whatever the config says, so they can be switched on later from stored signals.
    """
    end_marks = _C4_END_CJK if doc.cjk else _C4_END
    # What the line rules look for, found first in the whole text: most lines need no lower-casing.
    javascript = cfg.c4_filter_javascript and scan["javascript"]
    policy = cfg.c4_filter_policy and scan["policy"]
    maybe_lorem = scan["lorem_ipsum"]
    max_word = cfg.c4_max_word_length
    kept: list[str] = []
    removed = sentences = 0
    lorem = curly = cited = False
    for raw_line in doc.text.splitlines():
        line = stripped = raw_line.strip()
        if not line:
            kept.append("")  # blank lines stay: what a rule removes is lines, never paragraphs
            continue
        if max_word and len(line) > max_word and any(len(w) > max_word for w in line.split()):
            removed += 1
            continue
        if cfg.c4_remove_citations and "[" in line:
            line, citations = _CITATION_RE.subn("", line)
            cited = cited or citations > 0
        if cfg.c4_filter_no_terminal_punct and (not line.endswith(end_marks) or line.endswith("...")):
            removed += 1
            continue
        if _c4_line_has_too_few_words(line, doc.cjk, cfg):
            removed += 1
            continue
        if javascript or policy or maybe_lorem:
            lowered = line.lower()
            lorem = lorem or "lorem ipsum" in lowered
            if javascript and "javascript" in lowered:
                if not cfg.c4_javascript_notices_only or _JAVASCRIPT_NOTICE_RE.search(line):
                    removed += 1
                    continue
        curly = curly or "{" in line
        if policy and _C4_POLICY_RE.search(lowered):  # `policy` implies `lowered` was set above
            removed += 1
            continue
        if doc.cjk:
            sentences += max(1, len(_SENTENCE_END_CJK_MARKS_RE.findall(line)) + len(_SENTENCE_END_CJK_STOP_RE.findall(line)))
        else:
            sentences += max(1, len(_SENTENCE_END_RE.findall(line)))
        # The original line, indentation and all (code keeps its shape), less any citation marks.
        kept.append(line if line != stripped else raw_line.rstrip())
    return _C4Outcome(kept, removed, cited, sentences, lorem, curly)


def _c4_signals(outcome: _C4Outcome) -> dict:
    return {
        "q_c4_lorem_ipsum": outcome.lorem_ipsum,
        "q_c4_curly_bracket": outcome.curly_bracket,
        "q_c4_sentences": outcome.sentences,
        "q_c4_lines_removed": outcome.lines_removed,
    }


def _fineweb_signals(text: str, cjk: bool, n_tokens: int, cfg: RulesConfig) -> dict:
    lines = [line.strip() for line in text.split("\n")]
    lines = [line for line in lines if line]
    if not lines:
        return {"q_fw_line_punct_ratio": 0.0, "q_fw_short_line_ratio": 0.0, "q_fw_char_dup_ratio": 0.0,
                "q_fw_new_line_ratio": 0.0}
    short_length = cfg.short_line_length_cjk if cjk else cfg.short_line_length
    # Line breaks between lines of text: a blank line between paragraphs is one break, as in the
    # single-newline text the published thresholds were set on.
    breaks = len(lines) - 1
    repeated = [line for line in lines if is_prose_line(line)] if cfg.repetition_skips_structure_lines else lines
    return {
        "q_fw_line_punct_ratio": sum(1 for line in lines if line.endswith(_FINEWEB_END)) / len(lines),
        "q_fw_short_line_ratio": sum(1 for line in lines if len(line) <= short_length) / len(lines),
        "q_fw_char_dup_ratio": _duplicate_counts(repeated)[1] / max(sum(map(len, lines)), 1),
        "q_fw_new_line_ratio": breaks / max(n_tokens, 1),
    }


def _prose_signals(doc: _Doc, scan: dict[str, int | bool]) -> dict:
    """Sentences over the whole text; the share of the text (UTF-8 bytes of its non-empty lines) in lines
    of prose, not structure lines and holding a sentence end (code listings, indexes and link lists have
    little); and the share in paragraphs of licence or copyright boilerplate."""
    total = prose = 0
    for line, is_prose in zip(doc.lines, doc.prose_mask()):
        if is_prose or line.strip():
            size = len(line) if line.isascii() else len(line.encode())
            total += size
            prose += size if is_prose else 0
    licence = 0
    if scan["licence"]:
        for paragraph in _PARAGRAPH_SPLIT_RE.split(doc.text.lower()):
            if _LICENCE_RE.search(paragraph):
                licence += sum(len(line.encode()) for line in paragraph.split("\n") if line.strip())
    return {
        "q_sentences": scan["sentences"],
        "q_prose_share": prose / total if total else 0.0,
        "q_licence_share": licence / total if total else 0.0,
        # Dates per line of text, at most one.
        "q_date_line_share": min(1.0, scan["dates"] / scan["text_lines"]) if scan["text_lines"] else 0.0,
    }


def _count_tokens(text: str) -> int:
    return _tokenize(text)[2]


# ---------------------------------------------------------------------------------------------
# Signal table
# ---------------------------------------------------------------------------------------------


def _signal_schema(cfg: RulesConfig) -> dict[str, pl.DataType]:
    schema: dict[str, pl.DataType] = {"q_cjk": pl.Boolean}
    if "gopher_quality" in cfg.families:
        schema |= {"q_word_count": pl.Int64, "q_mean_word_length": pl.Float64, "q_hash_word_ratio": pl.Float64,
                   "q_ellipsis_word_ratio": pl.Float64, "q_bullet_lines_ratio": pl.Float64,
                   "q_ellipsis_lines_ratio": pl.Float64, "q_alpha_words_ratio": pl.Float64,
                   "q_stop_words": pl.Int64}
    if "gopher_repetition" in cfg.families:
        names = ["q_dup_para_frac", "q_dup_para_char_frac", "q_dup_line_frac", "q_dup_line_char_frac"]
        names += [f"q_top_{n}gram_frac" for n, _ in cfg.top_n_grams]
        names += [f"q_dup_{n}gram_frac" for n, _ in sorted(cfg.dup_n_grams)]
        schema |= dict.fromkeys(names, pl.Float64)
    if "c4" in cfg.families:
        schema |= {"q_c4_lorem_ipsum": pl.Boolean, "q_c4_curly_bracket": pl.Boolean, "q_c4_sentences": pl.Int64,
                   "q_c4_lines_removed": pl.Int64}
    if "fineweb" in cfg.families:
        schema |= dict.fromkeys(
            ["q_fw_line_punct_ratio", "q_fw_short_line_ratio", "q_fw_char_dup_ratio", "q_fw_new_line_ratio"],
            pl.Float64,
        )
    if "prose" in cfg.families:
        schema |= {"q_sentences": pl.Int64, "q_prose_share": pl.Float64, "q_licence_share": pl.Float64,
                   "q_date_line_share": pl.Float64}
    return schema


def signal_names(cfg: RulesConfig | None = None) -> list[str]:
    """The `q_*` columns `rule_signals` computes for `cfg`'s families."""
    return list(_signal_schema(cfg or RulesConfig()))


def _score(texts: list[str | None], langs: list[str | None], cfg: RulesConfig):
    """Signals for every document, plus each document's text after C4 line filtering (None if unchanged)."""
    families = set(cfg.families)
    rewrites_lines = "c4" in families and cfg.c4_filter_lines
    rows: list[dict] = []
    filtered_texts: list[str | None] = []
    ngrams = _NgramCounter(cfg)
    for text, lang, scan in zip(texts, langs, _column_scan(texts, families), strict=True):
        doc = _Doc.parse(text, lang)
        signals = {"q_cjk": doc.cjk}
        if "gopher_quality" in families:
            signals |= _gopher_quality_signals(doc, scan, cfg)
        if "gopher_repetition" in families:
            repetition, counted = _gopher_repetition_signals(doc, cfg)
            signals |= repetition
            ngrams.add(signals, counted)
        fineweb_text, fineweb_tokens, filtered = doc.text, doc.n_tokens, None
        if "c4" in families:
            outcome = _c4_scan(doc, scan, cfg)
            signals |= _c4_signals(outcome)
            if rewrites_lines:
                # FineWeb runs after C4 in the pipeline, so it sees the text C4 leaves behind.
                filtered = fineweb_text = _BLANK_RUNS_RE.sub("\n\n", "\n".join(outcome.kept_lines)).strip("\n")
                if "fineweb" in families and (outcome.lines_removed or outcome.citations_removed):
                    fineweb_tokens = _count_tokens(filtered)
        if "fineweb" in families:
            signals |= _fineweb_signals(fineweb_text, doc.cjk, fineweb_tokens, cfg)
        if "prose" in families:
            signals |= _prose_signals(doc, scan)
        rows.append(signals)
        filtered_texts.append(filtered)
    ngrams.flush()
    return pl.DataFrame(rows, schema=_signal_schema(cfg)), filtered_texts


def rule_signals(texts: list[str], langs: list[str], cfg: RulesConfig | None = None) -> pl.DataFrame:
    """One row of `q_*` signals per document, for the families enabled in `cfg`."""
    signals, _ = _score(texts, langs, cfg or RulesConfig())
    return signals


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------


# (rule name, threshold or None when switched off, threshold -> "document fails" expression)
# A rule: its name, its threshold (None: off), the signal column it reads, and when it fails.
_Rule = tuple[str, Any, str, Callable[[Any], pl.Expr]]


def _gopher_quality_rules(cfg: RulesConfig) -> list[_Rule]:
    cjk, words = pl.col("q_cjk"), pl.col("q_word_count")
    mean_len = pl.col("q_mean_word_length")
    return [
        ("min_doc_words", cfg.min_doc_words, "q_word_count", lambda t: ~cjk & (words < t)),
        ("max_doc_words", cfg.max_doc_words, "q_word_count", lambda t: ~cjk & (words > t)),
        ("min_doc_chars_cjk", cfg.min_doc_chars_cjk, "q_word_count", lambda t: cjk & (words < t)),
        ("max_doc_chars_cjk", cfg.max_doc_chars_cjk, "q_word_count", lambda t: cjk & (words > t)),
        # One character per word makes the mean word length meaningless for CJK.
        ("min_avg_word_length", cfg.min_avg_word_length, "q_mean_word_length", lambda t: ~cjk & (mean_len < t)),
        ("max_avg_word_length", cfg.max_avg_word_length, "q_mean_word_length", lambda t: ~cjk & (mean_len > t)),
        ("hash_word_ratio", cfg.max_symbol_word_ratio, "q_hash_word_ratio", _above("q_hash_word_ratio")),
        ("ellipsis_word_ratio", cfg.max_symbol_word_ratio, "q_ellipsis_word_ratio", _above("q_ellipsis_word_ratio")),
        ("bullet_lines_ratio", cfg.max_bullet_lines_ratio, "q_bullet_lines_ratio", _above("q_bullet_lines_ratio")),
        ("ellipsis_lines_ratio", cfg.max_ellipsis_lines_ratio, "q_ellipsis_lines_ratio", _above("q_ellipsis_lines_ratio")),
        ("alpha_words_ratio", cfg.max_non_alpha_words_ratio, "q_alpha_words_ratio", _below("q_alpha_words_ratio")),
        # Languages without a stop-word list have a null count and pass.
        ("min_stop_words", cfg.min_stop_words, "q_stop_words", _below("q_stop_words")),
    ]


def _above(column: str) -> Callable[[Any], pl.Expr]:
    return lambda t: pl.col(column) > t


def _below(column: str) -> Callable[[Any], pl.Expr]:
    return lambda t: pl.col(column) < t


def _gopher_repetition_rules(cfg: RulesConfig) -> list[_Rule]:
    rules: list[_Rule] = [
        (name, threshold, f"q_{name}", _above(f"q_{name}"))
        for name, threshold in (
            ("dup_para_frac", cfg.dup_para_frac),
            ("dup_para_char_frac", cfg.dup_para_char_frac),
            ("dup_line_frac", cfg.dup_line_frac),
            ("dup_line_char_frac", cfg.dup_line_char_frac),
        )
    ]
    rules += [(f"top_{n}gram", frac, f"q_top_{n}gram_frac", _above(f"q_top_{n}gram_frac")) for n, frac in cfg.top_n_grams]
    rules += [
        (f"dup_{n}gram", frac, f"q_dup_{n}gram_frac", _above(f"q_dup_{n}gram_frac")) for n, frac in sorted(cfg.dup_n_grams)
    ]
    return rules


def _c4_rules(cfg: RulesConfig) -> list[_Rule]:
    return [
        ("lorem_ipsum", cfg.c4_filter_lorem_ipsum or None, "q_c4_lorem_ipsum", lambda _: pl.col("q_c4_lorem_ipsum")),
        ("curly_bracket", cfg.c4_filter_curly_bracket or None, "q_c4_curly_bracket", lambda _: pl.col("q_c4_curly_bracket")),
        ("min_sentences", cfg.c4_min_sentences, "q_c4_sentences", _below("q_c4_sentences")),
    ]


def _too_little_line_punct(exclude_zero: bool) -> Callable[[Any], pl.Expr]:
    punct = pl.col("q_fw_line_punct_ratio")
    if exclude_zero:
        return lambda t: (punct < t) & (punct > 0)
    return lambda t: punct < t


def _fineweb_rules(cfg: RulesConfig) -> list[_Rule]:
    return [
        ("line_punct_ratio", cfg.line_punct_thr, "q_fw_line_punct_ratio", _too_little_line_punct(cfg.line_punct_exclude_zero)),
        ("short_line_ratio", cfg.short_line_thr, "q_fw_short_line_ratio", lambda t: pl.col("q_fw_short_line_ratio") >= t),
        ("char_dup_ratio", cfg.char_duplicates_ratio, "q_fw_char_dup_ratio", lambda t: pl.col("q_fw_char_dup_ratio") >= t),
        ("new_line_ratio", cfg.new_line_ratio, "q_fw_new_line_ratio", _above("q_fw_new_line_ratio")),
    ]


def _prose_rules(cfg: RulesConfig) -> list[_Rule]:
    return [
        ("min_sentences", cfg.min_sentences, "q_sentences", _below("q_sentences")),
        ("min_prose_share", cfg.min_prose_share, "q_prose_share", _below("q_prose_share")),
        ("max_licence_share", cfg.max_licence_share, "q_licence_share", _above("q_licence_share")),
    ]


def _page_rules(cfg: RulesConfig) -> list[_Rule]:
    return [
        ("listing_page", cfg.listing_page or None, "q_url_listing",
         lambda _: (pl.col("q_url_listing") == 1) & (pl.col("q_title_listing") == 1)),
        ("source_listing", cfg.source_listing or None, "q_html_code_share",
         lambda _: (pl.col("q_html_pre_share") >= SOURCE_LISTING["pre_share"])
         & (pl.col("q_html_code_share") >= SOURCE_LISTING["code_share"])),
        ("max_html_link_share", cfg.max_html_link_share, "q_html_link_share", _above("q_html_link_share")),
        ("max_html_removed_share", cfg.max_html_removed_share, "q_html_removed_share", _above("q_html_removed_share")),
    ]


# A page is a source listing when this much of its text is in `<pre>`, and this much in lines of code. On the
# labelled manuals, Sphinx's `_modules` listings have 0.44-0.73 in code; pages of Vim's help, all in `<pre>`,
# at most 0.34; tutorials with code at most 0.76 in `<pre>`.
SOURCE_LISTING = {"pre_share": 0.9, "code_share": 0.4}


# Extraction's page signals the page rules read, and their types: a frame without them (text without HTML)
# gets them as nulls, and passes.
PAGE_RULE_COLUMNS = {
    "q_url_listing": pl.Int64, "q_title_listing": pl.Int64, "q_html_link_share": pl.Float64,
    "q_html_removed_share": pl.Float64, "q_html_pre_share": pl.Float64, "q_html_code_share": pl.Float64,
}


def with_page_columns(frame: pl.DataFrame) -> pl.DataFrame:
    missing = [pl.lit(None, dtype=dtype).alias(name) for name, dtype in PAGE_RULE_COLUMNS.items() if name not in frame.columns]
    return frame.with_columns(missing) if missing else frame


_RULES_BY_FAMILY = {
    "gopher_quality": _gopher_quality_rules,
    "gopher_repetition": _gopher_repetition_rules,
    "c4": _c4_rules,
    "fineweb": _fineweb_rules,
    "prose": _prose_rules,
    "page": _page_rules,
}


def enabled_rules(cfg: RulesConfig | None = None) -> list[tuple[str, str, Any]]:
    """The enabled rules in the order they are checked: reason (`family:rule`), the signal column it reads,
    its threshold (True for a rule that reads a flag)."""
    cfg = cfg or RulesConfig()
    return [
        (f"{family}:{name}", signal, threshold)
        for family in cfg.families
        for name, threshold, signal, _ in _RULES_BY_FAMILY[family](cfg)
        if threshold is not None
    ]


def rule_reasons(cfg: RulesConfig | None = None) -> list[str]:
    """Every reason string the enabled rules can produce, in the order they are checked."""
    return [reason for reason, _, _ in enabled_rules(cfg)]


# The rules that still decide when a trained classifier judges quality: a minimum length, licence text and a
# raw source listing, which the classifier can take for prose (a licence reads as careful English, a listing's
# docstrings and comments as explanation). Of the shipped training pages' 1,126 KEEP pages they fail one.
HARD_RULES = (
    "gopher_quality:min_doc_words", "gopher_quality:min_doc_chars_cjk", "prose:max_licence_share", "page:source_listing",
)


def _verdict_exprs(cfg: RulesConfig, only: tuple[str, ...] | None = None) -> tuple[pl.Expr, pl.Expr]:
    """The first failing rule as `family:rule` (null: passes), and the value of the signal that failed it."""
    reason = score = None
    for family in cfg.families:
        for name, threshold, signal, failed in _RULES_BY_FAMILY[family](cfg):
            if threshold is None or (only is not None and f"{family}:{name}" not in only):
                continue
            condition = failed(threshold).fill_null(False)
            label, value = pl.lit(f"{family}:{name}"), pl.col(signal).cast(pl.Float64)
            reason = pl.when(condition).then(label) if reason is None else reason.when(condition).then(label)
            score = pl.when(condition).then(value) if score is None else score.when(condition).then(value)
    if reason is None:
        return pl.lit(None, dtype=pl.String), pl.lit(None, dtype=pl.Float64)
    return reason.otherwise(pl.lit(None, dtype=pl.String)), score.otherwise(pl.lit(None, dtype=pl.Float64))


def reasons_from_signals(
    signals_df: pl.DataFrame, cfg: RulesConfig | None = None, only: tuple[str, ...] | None = None
) -> pl.Series:
    """The first failing rule per document as `family:rule`, or null for documents that pass;
    `only` limits the rules to those reasons."""
    return with_page_columns(signals_df).select(_verdict_exprs(cfg or RulesConfig(), only)[0].alias("reason")).to_series()


def apply_rules(df: pl.DataFrame, cfg: RulesConfig | None = None, defer: bool = False) -> StageResult:
    """Score `df` (columns `doc_id`, `text`, `lang`), drop failing documents and keep their signals.
    Each drop's `score` is the value of the signal that failed its rule, and its `q_*` signals follow it.

    With C4 line filtering on, kept documents carry the text C4 leaves behind. With `defer`, only the
    HARD_RULES drop here; every kept document carries the rules' verdict in `rules_reason` (and the
    failing signal's value in `rules_score`) for a classifier policy to decide on.
    """
    cfg = cfg or RulesConfig()
    signals, filtered_texts = _score(df["text"].to_list(), df["lang"].to_list(), cfg)
    # Signals from an earlier run are replaced, not duplicated; extraction's page signals stay.
    earlier = [name for name in df.columns if name.startswith("q_") and not name.startswith(PAGE_SIGNAL_PREFIXES)]
    scored = pl.concat([df.drop(earlier), signals], how="horizontal")
    added = [name for name in PAGE_RULE_COLUMNS if name not in scored.columns]
    scored = with_page_columns(scored)
    if "c4" in cfg.families and cfg.c4_filter_lines:
        scored = scored.with_columns(pl.Series("text", filtered_texts, dtype=pl.String))
    reason, score = _verdict_exprs(cfg, only=HARD_RULES if defer else None)
    scored = scored.with_columns(reason.alias("_quality_reason"), score.alias("_quality_score"))
    if defer:
        rules_reason, rules_score = _verdict_exprs(cfg)
        scored = scored.with_columns(rules_reason.alias("rules_reason"), rules_score.alias("rules_score"))

    result = split_by_reason(scored, "_quality_reason", stage=STAGE, score="_quality_score")
    result.kept = result.kept.drop("_quality_reason", "_quality_score", *added)
    # The dropped documents' signals too, for the curation's histograms (curate_batches keeps only the drop).
    dropped_signals = scored.filter(pl.col("_quality_reason").is_not_null()).select(pl.col("^q_.*$"))
    result.dropped = pl.concat([result.dropped, dropped_signals], how="horizontal")
    result.stats = _stats(df.height, result, cfg)
    return result


def _stats(docs_in: int, result: StageResult, cfg: RulesConfig) -> dict:
    stats = {
        "docs_in": docs_in,
        "docs_out": result.kept.height,
        "docs_dropped": result.dropped.height,
        "dropped_by_reason": dict(result.dropped["reason"].value_counts(sort=True).rows()),
    }
    if "c4" in cfg.families:
        # Only kept documents had their text rewritten.
        removed = result.kept["q_c4_lines_removed"] if cfg.c4_filter_lines else pl.Series([], dtype=pl.Int64)
        stats["c4_lines_removed"] = int(removed.sum())
        stats["c4_docs_with_lines_removed"] = int((removed > 0).sum())
    return stats
