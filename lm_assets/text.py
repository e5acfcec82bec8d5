"""Text primitives every stage shares: scripts, languages, units and unit hashes.

A unit is what dedup, decontamination and the tokenizer's fertility count: after NFKC normalisation
and case folding, one CJK character (Han, kana or Hangul) or a run of other letters and digits;
punctuation, symbols, underscores and white space only separate units. Unit hashes are
deterministic across processes and machines (no Python `hash()`): 64 bits from a unit's code points.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Sequence

import numpy as np

from lm_assets.training.primitives import fmix64

# Inclusive code point ranges. Han: the unified ideographs, extension A, the compatibility
# ideographs and the supplementary ideographic planes (extensions B to H).
HAN_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3FFFF))
# Hiragana, katakana, katakana phonetic extensions, half-width katakana.
KANA_RANGES = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))
# Jamo, compatibility jamo, syllables.
HANGUL_RANGES = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF))
CJK_RANGES = tuple(sorted(HAN_RANGES + KANA_RANGES + HANGUL_RANGES))
# CJK symbols and punctuation, half-width and full-width forms: marks that stand alone, not units.
CJK_PUNCTUATION_RANGES = ((0x3000, 0x303F), (0xFF00, 0xFFEF))


def char_class(ranges: Sequence[tuple[int, int]]) -> str:
    """The inside of a regex character class matching the code point ranges."""
    return "".join(f"{chr(first)}-{chr(last)}" for first, last in ranges)


CJK = char_class(CJK_RANGES)
HAN = char_class(HAN_RANGES)
CJK_CHAR = re.compile(f"[{CJK}]")
HAN_CHAR = re.compile(f"[{HAN}]")
_UNIT = re.compile(rf"[{CJK}]|[^\W_{CJK}]+")

# Languages by base code: those written without spaces between words, and ISO 639-2/3 aliases.
CJK_LANGS = frozenset({"zh", "ja", "ko"})
_LANG_ALIASES = {"zho": "zh", "cmn": "zh", "yue": "zh", "wuu": "zh", "jpn": "ja", "kor": "ko", "eng": "en"}


@functools.lru_cache(maxsize=1024)
def base_lang(lang: str | None) -> str:
    """"zh-Hant" -> "zh", "cmn" -> "zh"; unknown or missing -> ""."""
    if not lang:
        return ""
    code = re.split(r"[-_]", lang.strip().lower(), maxsplit=1)[0]
    return _LANG_ALIASES.get(code, code)


def is_cjk_lang(lang: str | None) -> bool:
    return base_lang(lang) in CJK_LANGS


# ---------------------------------------------------------------------------------------------
# Units
# ---------------------------------------------------------------------------------------------

# What a code point is to a unit: it separates units, is part of a word, or is a CJK unit on its own.
SEPARATOR, WORD_CHAR, CJK_UNIT_CHAR = 0, 1, 2
# The characters that most often keep web text from being NFKC-normal: no-break, ideographic and
# thin spaces, the ellipsis and full-width punctuation.
_COMMON_DECOMPOSITIONS = {
    char: unicodedata.normalize("NFKD", char)
    for char in "\u00a0\u2009\u3000\u2026\uff01\uff08\uff09\uff0c\uff1a\uff1b\uff1f"
}
# ASCII letters lower-cased, digits kept, every other byte a separator: the unit rule on ASCII text.
_ASCII_WORD_BYTES = bytes(
    c + 32 if 65 <= c <= 90 else c if (97 <= c <= 122 or 48 <= c <= 57) else 32 for c in range(256)
)
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xFF51AFD7ED558CCD
_MIX2 = 0xC4CEB9FE1A85EC53


def folded(text: str | None) -> str:
    """The NFKC-normalised, case-folded text whose units `normalized_units` lists."""
    if not text:
        return ""
    if not text.isascii() and not unicodedata.is_normalized("NFKC", text):
        # Replacing a character by its compatibility decomposition leaves the NFKC form as it is,
        # and the check is much cheaper than normalising text that is then already normal.
        for char, decomposition in _COMMON_DECOMPOSITIONS.items():
            text = text.replace(char, decomposition)
        if not unicodedata.is_normalized("NFKC", text):
            text = unicodedata.normalize("NFKC", text)
    return text.casefold()


def normalized_units(text: str | None) -> str:
    """The text's units joined by single spaces. CJK characters are units whatever the text's
    language, so Chinese text that language ID called English (or the reverse) stays comparable."""
    if not text:
        return ""
    if text.isascii():
        # Same result as the general path, several times faster: NFKC is the identity on ASCII.
        return " ".join(text.encode().translate(_ASCII_WORD_BYTES).decode().split())
    return " ".join(_UNIT.findall(folded(text)))


def mix64(x: int) -> int:
    """`lm_assets.training.primitives.fmix64` on one Python int."""
    x ^= x >> 33
    x = (x * _MIX1) & _MASK64
    x ^= x >> 33
    x = (x * _MIX2) & _MASK64
    return x ^ (x >> 33)


def unit_hash(unit: str) -> int:
    """64-bit hash of one unit: a position-keyed sum of its mixed code points."""
    total = 0
    for offset, char in enumerate(unit):
        total += mix64(ord(char) ^ ((offset * _GOLDEN) & _MASK64))
    return mix64((total ^ (len(unit) * _MIX2)) & _MASK64)


@functools.cache
def char_kinds() -> np.ndarray:
    """`SEPARATOR`, `WORD_CHAR` or `CJK_UNIT_CHAR` for every code point, as the unit rule treats it."""
    code_points = range(sys.maxunicode + 1)
    # `\w` is `str.isalnum()` or the underscore, which units exclude.
    kinds = np.fromiter((chr(c).isalnum() for c in code_points), dtype=np.uint8, count=len(code_points))
    for first, last in CJK_RANGES:
        kinds[first : last + 1] = CJK_UNIT_CHAR
    kinds.flags.writeable = False
    return kinds


def unit_hashes(texts: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """`unit_hash` of every unit of `normalized_units(text)` for each text, concatenated, and how many
    units each text has; computed on the code points, without building the normalised strings."""
    folded_texts = [folded(text) for text in texts]
    # A space between texts keeps units from spanning two of them. A lone surrogate, which the unit
    # rule skips, passes as its code point, a separator.
    code_points = np.frombuffer(" ".join(folded_texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    spans = np.array([len(text) + 1 for text in folded_texts], dtype=np.int64)
    text_start = np.cumsum(spans) - spans
    kinds = char_kinds()[code_points]
    in_word = kinds == WORD_CHAR
    starts_unit = kinds == CJK_UNIT_CHAR
    starts_unit[:1] |= in_word[:1]
    starts_unit[1:] |= in_word[1:] & ~in_word[:-1]
    unit_start = np.flatnonzero(starts_unit)
    unit_counts = np.diff(np.searchsorted(unit_start, text_start), append=len(unit_start))
    if not len(unit_start):
        return np.empty(0, dtype=np.uint64), unit_counts
    return _hash_units(code_points, kinds != SEPARATOR, starts_unit), unit_counts


def joined_unit_hashes(joined: str) -> np.ndarray:
    """`unit_hash` of each unit of `joined`, units as `normalized_units` joins them (single spaces)."""
    if not joined:
        return np.empty(0, dtype=np.uint64)
    code_points = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    in_unit = code_points != 32
    starts_unit = in_unit.copy()
    starts_unit[1:] &= ~in_unit[:-1]
    return _hash_units(code_points, in_unit, starts_unit)


def _hash_units(code_points: np.ndarray, in_unit: np.ndarray, starts_unit: np.ndarray) -> np.ndarray:
    """`unit_hash` of each unit, given which code points belong to a unit and which start one."""
    chars = code_points[in_unit].astype(np.uint64)
    first_char = np.flatnonzero(starts_unit[in_unit])
    unit_length = np.diff(first_char, append=len(chars))
    offset = np.arange(len(chars)) - np.repeat(first_char, unit_length)
    totals = np.add.reduceat(fmix64(chars ^ (offset.astype(np.uint64) * np.uint64(_GOLDEN))), first_char)
    return fmix64(totals ^ (unit_length.astype(np.uint64) * np.uint64(_MIX2)))


WRAP_MARK = "↪ "


def display_width(char: str) -> int:
    """Columns a character takes in a monospace font: two for wide (CJK) characters, else one."""
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def hard_wrapped(text: str, width: int = 100) -> str:
    """`text` with every line wider than `width` columns broken, at the last space that fits when there is
    one in its second half (CJK text breaks between characters); each continuation starts with `↪ `, so the
    line breaks of the text itself stay told apart from the wrapping. One pass over the characters."""
    out = []
    for line in text.split("\n"):
        start, used, space = 0, 0, -1  # where the current piece starts, its columns, its last space
        i = 0
        while i < len(line):
            char = line[i]
            if used + display_width(char) > width and i > start:
                if space > start + width // 2:
                    out.append(line[start:space])
                    start = space + 1
                else:
                    out.append(line[start:i])
                    start = i
                line = line[:start] + WRAP_MARK + line[start:]
                i, used, space = start, 0, -1
                continue
            if char == " ":
                space = i
            used += display_width(char)
            i += 1
        out.append(line[start:])
    return "\n".join(out)
