"""Edits inside an HTML page's text nodes: comments, scripts, styles, textareas and tags stay as they are."""

from __future__ import annotations

import html as html_lib
import random
import re

from lm_assets.text import CJK, CJK_CHAR

MARKUP = re.compile(
    r"<!--.*?-->|<script\b.*?</script\s*>|<style\b.*?</style\s*>|<textarea\b.*?</textarea\s*>|<[^>]*>",
    re.S | re.I,
)
WHITESPACE_SPLIT = re.compile(r"(\s+)")
WORD_CHAR = re.compile(r"\w")
NON_CJK_WORD = re.compile(rf"[^\W{CJK}]+")
AFFIXES = re.compile(r"^(\W*)(.*?)(\W*)$", re.S)
VOCABULARY_WORD = re.compile(r"^[^\W\d_]{2,}$")


def split_markup(html: str) -> list[tuple[bool, str]]:
    """(is_text_node, piece) segments that join back into `html`."""
    segments, position = [], 0
    for match in MARKUP.finditer(html):
        if match.start() > position:
            segments.append((True, html[position : match.start()]))
        segments.append((False, match.group(0)))
        position = match.end()
    if position < len(html):
        segments.append((True, html[position:]))
    return segments


def visible_text(html: str) -> str:
    """The text nodes, entities decoded and white space collapsed: a crude render, independent of the pipeline."""
    return " ".join(html_lib.unescape(" ".join(piece for is_text, piece in split_markup(html) if is_text)).split())


def mostly_cjk(text: str) -> bool:
    """CJK characters outnumber the other words."""
    return len(CJK_CHAR.findall(text)) > len(NON_CJK_WORD.findall(text))


def text_units(segments: list[tuple[bool, str]], cjk: bool) -> tuple[dict[int, list[str]], list[tuple[int, int]]]:
    """Each text node cut into pieces, and the (segment, piece) positions of its editable units."""
    pieces, units = {}, []
    for index, (is_text, segment) in enumerate(segments):
        if not is_text or not segment.strip():
            continue
        parts = list(segment) if cjk else WHITESPACE_SPLIT.split(segment)
        pieces[index] = parts
        for position, part in enumerate(parts):
            if CJK_CHAR.fullmatch(part) if cjk else (part and "&" not in part and WORD_CHAR.search(part)):
                units.append((index, position))
    return pieces, units


def vocabulary(pieces: dict[int, list[str]], units: list[tuple[int, int]], cjk: bool) -> list[str]:
    if cjk:
        return [pieces[i][p] for i, p in units]
    cores = (AFFIXES.match(pieces[i][p]).group(2) for i, p in units)
    return [core for core in cores if VOCABULARY_WORD.match(core)] or ["the", "data", "value", "file"]


def edit_text_nodes(html: str, rate: float, cjk: bool, rng: random.Random) -> tuple[str, int, int]:
    """Substitute (50%), delete (25%) or insert after (25%) `round(rate * units)` units (at least 1), where a
    unit is a word, or a CJK character when `cjk`; replacements come from the page's own words.

    Returns (new_html, edits, units)."""
    segments = split_markup(html)
    pieces, units = text_units(segments, cjk)
    if not units:
        return html, 0, 0
    words = vocabulary(pieces, units, cjk)
    edits = min(len(units), max(1, round(rate * len(units))))

    def other_word(old: str) -> str:
        for _ in range(8):
            new = rng.choice(words)
            if new != old:
                return new
        return new

    separator = "" if cjk else " "
    for index, position in sorted(rng.sample(units, edits)):
        old = pieces[index][position]
        prefix, core, suffix = ("", old, "") if cjk else AFFIXES.match(old).groups()
        operation = rng.random()
        if operation < 0.5:
            pieces[index][position] = prefix + other_word(core) + suffix
        elif operation < 0.75:
            pieces[index][position] = ""
        else:
            pieces[index][position] = old + separator + other_word(core)
    edited = ("".join(pieces[i]) if i in pieces else segment for i, (_, segment) in enumerate(segments))
    return "".join(edited), edits, len(units)


def add_mirror_notice(html: str, cjk: bool, style: str, mirror: str, origin: str) -> str:
    """A mirror-site header and/or footer paragraph just inside <body>."""
    if cjk:
        header = f'<div class="mirror-notice"><p>本页面为 {origin} 官方文档的镜像，内容可能不是最新版本。</p></div>'
        footer = f'<p class="mirror-footer">由 {mirror} 提供镜像服务，权威版本请访问 {origin}。</p>'
    else:
        header = (
            f'<div class="mirror-notice"><p>This page mirrors the official documentation at {origin}. '
            "Content may be out of date.</p></div>"
        )
        footer = f'<p class="mirror-footer">Hosted by {mirror}; see {origin} for the canonical version.</p>'
    if style in ("header", "both"):
        opening = re.search(r"<body\b[^>]*>", html, re.I)
        html = html[: opening.end()] + header + html[opening.end() :] if opening else header + html
    if style in ("footer", "both"):
        closing = html.lower().rfind("</body")
        html = html[:closing] + footer + html[closing:] if closing >= 0 else html + footer
    return html
