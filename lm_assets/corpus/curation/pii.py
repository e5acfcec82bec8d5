"""PII redaction with typed placeholders, for English and Chinese text.

Patterns run in a fixed order on the progressively redacted text: e-mail first (addresses often
contain phone numbers), then ID numbers and credit cards before any phone pattern, so an 18-digit
resident ID is never half-eaten as a phone number. Chinese text has no word boundaries, so every
pattern is fenced by lookarounds on ASCII letters and digits instead of `\\b`.

Credit cards must pass the Luhn check and start like a major network's number (2-6); resident IDs
must have a known province code, a real birth date and a valid ISO 7064 MOD 11-2 check character.

Dotted numbers that are not anyone's address stay: section and version numbers ("see Section
4.1.2.4", "第 4.1.2.4 节", "release 1.2.3.4"), the documentation ranges (192.0.2.0/24,
198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32), loopback, unspecified, broadcast and netmasks.
Private and link-local addresses are redacted: they can name a person's machine on a network.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import polars as pl

from lm_assets.corpus.stage import StageResult

PII_TYPES = ("EMAIL", "CN_ID", "CREDIT_CARD", "IP", "CN_PHONE", "PHONE")
PLACEHOLDERS: dict[str, str] = {pii_type: f"<{pii_type}>" for pii_type in PII_TYPES}

# Not preceded / followed by an ASCII letter or digit; CJK characters count as a boundary.
_START = r"(?<![0-9A-Za-z])"
_END = r"(?![0-9A-Za-z])"

_EMAIL_RE = re.compile(
    r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}"
    + _END
)
_CN_ID_RE = re.compile(
    _START + r"[1-9]\d{5}(?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[0-9Xx]" + _END
)
# Contiguous 13-19 digits, 4-4-4-4 groups, or the 4-6-5 / 4-6-4 layout of Amex and Diners.
_CREDIT_CARD_RE = re.compile(
    r"(?<![0-9A-Za-z+])"
    r"(?:\d{13,19}|\d{4}(?:[ \-]\d{4}){3}|\d{4}[ \-]\d{6}[ \-]\d{4,5})"
    + _END
)
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# Neither part of a longer dotted number (1.2.3.4.5) nor of a version string.
_IPV4_RE = re.compile(r"(?<![0-9A-Za-z.])" + rf"{_OCTET}(?:\.{_OCTET}){{3}}" + r"(?![0-9A-Za-z]|\.\d)")
# Loose candidates; `IPv6Address` decides.
_IPV6_RE = re.compile(
    r"(?<![0-9A-Za-z:])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|\d{1,3}(?:\.\d{1,3}){3})?(?![0-9A-Za-z:])"
)
# Mainland mobiles: 1[3-9]x xxxx xxxx, optionally after +86 / 0086.
_CN_PHONE_RE = re.compile(r"(?<![0-9A-Za-z+])(?:(?:\+|00)86[ \-]?)?1[3-9]\d(?:[ \-]?\d{4}){2}" + _END)
_PHONE_RE = re.compile(
    r"(?<![0-9A-Za-z+])(?:"
    # international: +CC, optional (area), then digit groups separated by space, dot or dash
    r"\+\d{7,15}|\+\d{1,3}(?:[ .\-]?\(\d{1,4}\))?[ .\-]?\d{1,5}(?:[ .\-]\d{2,5}){0,5}"
    # North American: (415) 555-0132, 415-555-0132, 415.555.0132, optionally with a leading 1
    r"|(?:1[ .\-])?\([2-9]\d{2}\) ?[2-9]\d{2}[ .\-]\d{4}"
    # bare groups need one consistent dash or dot, so runs of spaced numbers are left alone
    r"|(?:1[.\-])?[2-9]\d{2}([.\-])[2-9]\d{2}\1\d{4}"
    r")" + _END
)

# Each whole run of 7+ digits with phone/card punctuation between them; without one, no number pattern can
# match, and a pattern needing more digits than a run holds cannot match inside it (`_Detector.min_digits`).
_NUMBER_LIKE_RE = re.compile(r"\d(?:[ ().+\-]{0,3}\d){6,}")
_NUMBER_PUNCTUATION = str.maketrans("", "", " ().+-")
# Three numbers joined by dots: the middle of every IPv4 address.
_DOTTED_DIGITS_RE = re.compile(r"\d\.\d{1,3}\.\d")
# A numbered part of a document or a release just before the number: not an address.
_NUMBERING_BEFORE_RE = re.compile(
    r"(?:section|sect\.|sec\.|§|chapter|chap\.|clause|paragraph|para\.|appendix|table|figure|fig\.|"
    r"step|item|part|rule|version|ver\.|release|revision|rev\.|build|patch|v|第)[\s(]*$",
    re.I,
)
_NUMBERING_AFTER_RE = re.compile(r"^\s*(?:节|章|条|款)")
_NOT_PERSONAL_NETWORKS = tuple(
    ip_network(net)
    for net in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "127.0.0.0/8", "0.0.0.0/8",
                "255.255.255.255/32", "2001:db8::/32", "::1/128", "::/128")
)
_NETMASK_OCTETS = frozenset({0, 128, 192, 224, 240, 248, 252, 254, 255})

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK_CHARS = "10X98765432"
_PROVINCE_CODES = frozenset(
    {11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46,
     50, 51, 52, 53, 54, 61, 62, 63, 64, 65, 71, 81, 82, 83}
)


def luhn_valid(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def cn_id_check_char(first17: str) -> str:
    """The ISO 7064 MOD 11-2 check character of a resident ID's first 17 digits."""
    return _ID_CHECK_CHARS[sum(int(d) * w for d, w in zip(first17, _ID_WEIGHTS, strict=True)) % 11]


def _is_real_date(yyyymmdd: str) -> bool:
    try:
        date(int(yyyymmdd[:4]), int(yyyymmdd[4:6]), int(yyyymmdd[6:]))
    except ValueError:
        return False
    return True


def cn_id_valid(candidate: str) -> bool:
    return (
        int(candidate[:2]) in _PROVINCE_CODES
        and _is_real_date(candidate[6:14])
        and cn_id_check_char(candidate[:17]) == candidate[17].upper()
    )


def credit_card_valid(candidate: str) -> bool:
    digits = re.sub(r"[ \-]", "", candidate)
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn_valid(digits)


def _personal_address(value: str) -> bool:
    """An address that can point at someone's machine: not documentation, loopback or a netmask."""
    address = ip_address(value)
    if any(address in network for network in _NOT_PERSONAL_NETWORKS):
        return False
    if isinstance(address, IPv4Address):
        octets = [int(part) for part in value.split(".")]
        if octets[0] == 255 and all(o in _NETMASK_OCTETS for o in octets):
            return False
    return True


def _ipv6_valid(candidate: str) -> bool:
    # Rejects clock times, MAC addresses and C++ scopes such as "a::b" (no digit).
    if len(candidate) < 6 or not any(c.isdigit() for c in candidate):
        return False
    try:
        IPv6Address(candidate)
    except ValueError:
        return False
    return _personal_address(candidate)


_PHONE_GROUP_END_RE = re.compile(r"\d(?=[ .\-]\d)")


def _phone_length(candidate: str) -> int:
    """Length of the longest prefix, cut after a digit group, holding 7 to 15 digits (E.164); 0 if none.

    A number followed by more digit groups ("+1 415 555 0132 2026") is cut back instead of skipped.
    """
    ends = [m.end() for m in _PHONE_GROUP_END_RE.finditer(candidate)]
    end = len(candidate)
    while True:
        digits = sum(c.isdigit() for c in candidate[:end])
        if digits <= 15:
            return end if digits >= 7 else 0
        if not ends:
            return 0
        end = ends.pop()


def _whole_if(is_valid: Callable[[str], bool]) -> Callable[[str], int]:
    return lambda candidate: len(candidate) if is_valid(candidate) else 0


def _whole(candidate: str) -> int:
    return len(candidate)


@dataclass(frozen=True)
class _Detector:
    pii_type: str
    pattern: re.Pattern
    # How much of a candidate match is PII, from its start; 0 rejects it.
    valid_length: Callable[[str], int]
    # Every match the pattern can accept overlaps a match of `anchor` and is shorter than `_MAX_MATCH`:
    # the pattern is searched only around the anchor's matches, and not at all in a text without one.
    anchor: re.Pattern | None = None
    # Without an anchor: a cheap test that the pattern could match at all.
    applies: Callable[[str], bool] | None = None
    # Dotted numbers: a section or version number reads like one, by the words around it.
    numbered: bool = False
    # The fewest digits a match holds: runs of `_NUMBER_LIKE_RE` with fewer are not searched.
    min_digits: int = 0


def _has_at(text: str) -> bool:
    return "@" in text


# Longer than any match of an anchored pattern (the longest, IPv6's, is 50 characters; PHONE's 47).
_MAX_MATCH = 64
# Two or more address groups in a row: every IPv6 candidate holds one.
_IPV6_ANCHOR_RE = re.compile(r":[0-9A-Fa-f]{0,4}:")

_DETECTORS = (
    _Detector("EMAIL", _EMAIL_RE, _whole, applies=_has_at),
    # An accepted ID, card or phone holds 7 or more digits with at most 3 of " ().+-" between two.
    _Detector("CN_ID", _CN_ID_RE, _whole_if(cn_id_valid), anchor=_NUMBER_LIKE_RE, min_digits=17),
    _Detector("CREDIT_CARD", _CREDIT_CARD_RE, _whole_if(credit_card_valid), anchor=_NUMBER_LIKE_RE, min_digits=13),
    _Detector("IP", _IPV4_RE, _whole_if(_personal_address), anchor=_DOTTED_DIGITS_RE, numbered=True),
    _Detector("IP", _IPV6_RE, _whole_if(_ipv6_valid), anchor=_IPV6_ANCHOR_RE),
    _Detector("CN_PHONE", _CN_PHONE_RE, _whole, anchor=_NUMBER_LIKE_RE, min_digits=11),
    _Detector("PHONE", _PHONE_RE, _phone_length, anchor=_NUMBER_LIKE_RE),
)


def _is_numbering(text: str, start: int, end: int) -> bool:
    """"Section 4.1.2.4", "v1.2.3.4", "第 4.1.2.4 节": the number of a part or a release."""
    return bool(_NUMBERING_BEFORE_RE.search(text[max(0, start - 16) : start])) or bool(
        _NUMBERING_AFTER_RE.match(text[end : end + 4])
    )


@dataclass
class _Anchors:
    """The spans an anchor pattern finds in a text (`finditer`'s: any match of it overlaps one)."""

    starts: list[int]
    ends: list[int]
    digits: list[int]  # for `_NUMBER_LIKE_RE`'s runs, the digits each holds

    @classmethod
    def find(cls, anchor: re.Pattern, text: str) -> _Anchors:
        matches = list(anchor.finditer(text))
        digits = [len(m.group().translate(_NUMBER_PUNCTUATION)) for m in matches] if anchor is _NUMBER_LIKE_RE else []
        return cls([m.start() for m in matches], [m.end() for m in matches], digits)

    def holding(self, min_digits: int) -> _Anchors:
        """The runs holding at least `min_digits` digits."""
        if not min_digits or all(n >= min_digits for n in self.digits):
            return self
        kept = [i for i, n in enumerate(self.digits) if n >= min_digits]
        return _Anchors([self.starts[i] for i in kept], [self.ends[i] for i in kept], [self.digits[i] for i in kept])


def _next_match(text: str, pattern: re.Pattern, search_from: int, anchors: _Anchors | None):
    """The leftmost match of `pattern` at or after `search_from`; with `anchors`, the leftmost that overlaps
    one of them (no other can be accepted)."""
    if anchors is None:
        return pattern.search(text, search_from)
    for i in range(bisect.bisect_right(anchors.ends, search_from), len(anchors.ends)):
        start, end = anchors.starts[i], anchors.ends[i]
        # Past the end of any match starting before `end`, and two characters for its end's lookahead.
        window_end = min(len(text), end + _MAX_MATCH + 2)
        match = pattern.search(text, max(search_from, start - _MAX_MATCH), window_end)
        if match is not None and match.start() < end:
            return match
    return None


def _replace_matches(
    text: str, detector: _Detector, on_match: Callable[[str], None], anchors: _Anchors | None = None
) -> str:
    pieces: list[str] = []
    copied_up_to = search_from = 0
    while (match := _next_match(text, detector.pattern, search_from, anchors)) is not None:
        length = detector.valid_length(match.group())
        if length and detector.numbered and _is_numbering(text, match.start(), match.end()):
            length = 0
        if not length:
            # A rejected candidate ("2024 4111 1111 1111") may hide a real one starting inside it.
            search_from = match.start() + 1
            continue
        end = match.start() + length
        on_match(text[match.start() : end])
        pieces += (text[copied_up_to : match.start()], PLACEHOLDERS[detector.pii_type])
        copied_up_to = search_from = end
    if not pieces:
        return text
    pieces.append(text[copied_up_to:])
    return "".join(pieces)


def _redact(text: str, found: list[tuple[str, str]] | None = None) -> tuple[str, dict[str, int]]:
    counts = dict.fromkeys(PII_TYPES, 0)
    found_anchors: dict[re.Pattern, _Anchors] = {}  # of the text as it stands
    for detector in _DETECTORS:
        anchors = None
        if detector.anchor is not None:
            if detector.anchor not in found_anchors:
                found_anchors[detector.anchor] = _Anchors.find(detector.anchor, text)
            anchors = found_anchors[detector.anchor].holding(detector.min_digits)
            if not anchors.ends:
                continue
        elif not detector.applies(text):
            continue

        def record(value: str, pii_type: str = detector.pii_type) -> None:
            counts[pii_type] += 1
            if found is not None:
                found.append((pii_type, value))

        redacted = _replace_matches(text, detector, record, anchors)
        if redacted is not text:
            found_anchors.clear()
        text = redacted
    return text, counts


def redact(text: str) -> tuple[str, dict[str, int]]:
    """Replace every detected PII span with its placeholder; also return how many of each type."""
    return _redact(text)


def find_pii(text: str) -> list[tuple[str, str]]:
    """(type, matched text) for every PII span `redact` would replace; empty for fully redacted text."""
    found: list[tuple[str, str]] = []
    _redact(text, found)
    return found


def count_column(pii_type: str) -> str:
    return f"pii_{pii_type.lower()}"


def redact_frame(df: pl.DataFrame, column: str = "text") -> StageResult:
    """Redact `column` in every row; nothing is dropped. Adds `pii_<type>` counts per document."""
    texts: list[str | None] = []
    per_type: dict[str, list[int]] = {pii_type: [] for pii_type in PII_TYPES}
    for text in df[column].to_list():
        redacted, counts = _redact(text) if text else (text, dict.fromkeys(PII_TYPES, 0))
        texts.append(redacted)
        for pii_type, n in counts.items():
            per_type[pii_type].append(n)
    kept = df.with_columns(
        pl.Series(column, texts, dtype=pl.String),
        *(pl.Series(count_column(t), per_type[t], dtype=pl.Int64) for t in PII_TYPES),
    )
    docs_with_pii = sum(1 for row in zip(*per_type.values()) if any(row))
    stats = {
        "docs_in": df.height,
        "docs_with_pii": docs_with_pii,
        "redacted": {pii_type: sum(per_type[pii_type]) for pii_type in PII_TYPES},
    }
    return StageResult(kept=kept, stats=stats)
