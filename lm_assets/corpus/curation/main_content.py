"""Main-content extraction: one walk over lexbor's DOM, decisions on element statistics, then layout.

resiliparse's `main_content=True` drops short text nodes between inline elements (so
"安裝 <code>a</code> 和 <code>b</code>" becomes "ab"), drops bulleted lists, and keeps link bars such as
"Prev Up Home Next". Here boilerplate goes as whole elements instead, and the text that is left is
laid out with its paragraphs, headings, list items, table rows and `<pre>` blocks, its text nodes
joined exactly as they stand, so no word is ever glued to its neighbour.

The page is parsed by lexbor (through selectolax) and walked once (`_Page`). The walk records every
element's tag, class and id, its text length and link-text length, and the stream of open, close and
text events. Elements that are never read (scripts, forms fields, hidden elements) are not walked.
The decisions are then made on those numbers, without touching the DOM again:

1. Page chrome (`nav`, `aside`, `footer`, `form`, banner and navigation ARIA roles) goes, unless one
   holds most of the page's prose (a page that wraps its content in a mislabelled landmark).
2. Blocks whose text is mostly link text (menus, tables of contents, link lists, "Prev/Next" bars) go,
   innermost first, so a menu inside a content block goes and the block stays.
3. The content root is chosen as Mozilla Readability chooses it: every paragraph-like element of at
   least 25 characters scores 1 + its commas + one per 100 characters (at most 3) and passes that to
   its ancestors (the parent in full, the grandparent half, further ones less); an ancestor starts from
   a score for its tag and class names and ends scaled by one minus its link density. The best one,
   widened to the ancestor of several nearly-as-good ones and to the parent of an only child (headings
   aside: a section is its heading and its body), is the root; siblings that score well or
   read as prose stay beside it. Without a clear root, or with a short one holding less than half the
   text, the whole body stays.
   When the root is, or is outweighed by, elements that Readability's own list names as chrome (a
   gallery inside an article), it is chosen again without them, as Readability always does.
4. Inside what stays (the root and the siblings beside it), elements whose class or id names chrome
   (comments, sharing, related links, breadcrumbs, mirror footers, ...) go, unless one holds half of
   the text.

Lengths count UTF-8 bytes of text that is not only white space, so a CJK character weighs about as much
as a short word.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

# Never read by a visitor: not walked at all.
_UNREAD = frozenset(
    {"script", "style", "noscript", "template", "svg", "iframe", "object", "embed", "canvas", "dialog",
     "button", "select", "textarea", "input", "label", "head", "title", "meta", "link", "option", "datalist"}
)
_UNREAD_ROLES = frozenset({"dialog", "alertdialog", "alert", "img", "tooltip"})
# Attributes that can hide an element (`_unread`; `hidden` and inline styles in `_Page._walk`).
_HIDING = frozenset({"hidden", "aria-hidden", "role", "style"})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden")  # on lower-cased styles
# Site chrome, by element or ARIA role.
_CHROME_TAGS = frozenset({"nav", "aside", "footer", "form"})
_CHROME_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar", "toolbar"}
)
# Class or id names of chrome (after Readability's "unlikely candidates"), unless they also name content.
_UNLIKELY = re.compile(
    r"-ad-|advert|ai2html|banner|breadcrumb|combx|comment|communit|cookie|cover-wrap|disqus|extra|footer|"
    r"gdpr|header|legends|menu|related|remark|replies|rss|shoutbox|sidebar|skyscraper|social|sponsor|"
    r"supplemental|ad-break|agegate|pagination|pager|popup|yom-remote|share|navbar|navigation|\bnav|nav\b|"
    r"toolbar|newsletter|subscribe|promo|skip-?link|byline|masthead|signup"
)
# Readability's own list, which it removes before it scores: narrower, so it spares an article whose
# wrapper is named after its share buttons. Less "sidebar": DocBook's sidebar is a box of the text.
_READABILITY_UNLIKELY = re.compile(
    r"-ad-|ai2html|banner|breadcrumbs|combx|comment|community|cover-wrap|disqus|extra|footer|gdpr|header|"
    r"legends|menu|related|remark|replies|rss|shoutbox|skyscraper|social|sponsor|supplemental|"
    r"ad-break|agegate|pagination|pager|popup|yom-remote"
)
_MAYBE_CONTENT = re.compile(r"and|article|body|column|content|main|mathjax|shadow")
_POSITIVE = re.compile(
    r"article|body|content|entry|hentry|h-entry|main|page|post|text|blog|story|section|chapter|document"
)
_NEGATIVE = re.compile(
    r"-ad-|hidden|banner|combx|comment|com-|contact|foot|gdpr|masthead|media|meta|outbrain|promo|related|"
    r"scroll|share|shoutbox|sidebar|skyscraper|sponsor|shopping|tags|tool|widget|nav|menu|breadcrumb"
)
_BLOCKS = frozenset(
    {"p", "div", "ul", "ol", "dl", "table", "pre", "blockquote", "section", "article", "h1", "h2", "h3", "h4",
     "h5", "h6", "hr", "header", "figure", "main", "aside", "nav", "footer", "form", "li", "tr"}
)
# An `<a>` with only these attributes is a jump target, not a link. XHTML's `<a id="x"/>` (DocBook's pages), read
# as HTML, is a target left open, which the parser carries on around every paragraph after it. An `<a>` with a
# class, a script or no attribute at all may be a link that a script follows: it still counts as one.
_TARGET_ATTRIBUTES = frozenset({"id", "name"})
_SCORED = frozenset({"p", "pre", "td", "blockquote", "section", "h2", "h3", "h4", "h5", "h6"})
_LINK_BLOCKS = frozenset({"ul", "ol", "dl", "table", "div", "section", "header"})
_TAG_SCORE = {
    "div": 5, "article": 10, "main": 10, "section": 3, "pre": 3, "td": 3, "blockquote": 3,
    "address": -3, "ol": -3, "ul": -3, "dl": -3, "dd": -3, "dt": -3, "li": -3, "form": -3,
    "h1": -5, "h2": -5, "h3": -5, "h4": -5, "h5": -5, "h6": -5, "th": -5,
}
_COMMAS = (",", "，", "、", ";", "；")
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_CONTAINERS = frozenset({"div", "section", "aside", "header", "footer", "nav", "ul", "ol", "dl", "table", "figure", "p", "form"})
_VERBATIM = frozenset({"table", "pre", "code"})
_PROSE_BLOCKS = frozenset({"p", "pre", "blockquote", "ul", "ol", "dl", "table", "h2", "h3", "h4", "h5", "h6"})
_SENTENCE_END = (".", "!", "?", ":", "。", "！", "？", "：")

# Layout: what starts a new paragraph (a blank line) or a new line.
_PARAGRAPH_BREAK = frozenset(
    {"p", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "ul", "ol", "dl", "table", "figure", "hr",
     "section", "article", "main", "header", "address", "details", "fieldset", "figcaption"}
)
_LINE_BREAK = frozenset(
    {"div", "li", "dt", "dd", "tr", "caption", "summary", "legend", "center", "body", "menu", "nav", "aside",
     "footer", "form"}
)
_GAP = {tag: 2 for tag in _PARAGRAPH_BREAK} | {tag: 1 for tag in _LINE_BREAK}
_LISTS = frozenset({"ul", "ol"})
_NESTED_LISTS = frozenset({"ul", "ol", "dl"})
_CELLS = frozenset({"td", "th"})
_SPACES = re.compile(r"[ \t\n\r\f\v]+")
# Code lines are read only where this much of the kept text is in `<pre>`: a source listing is nearly all of
# it, and tutorials, whose `<pre>` blocks are examples, are spared the cost.
CODE_READ_PRE_SHARE = 0.5
# A line of program text (`is_code_line`) starts with a statement keyword of Python, C, JavaScript or shell,
# ends in a brace, semicolon or closing bracket, opens a block, assigns, or calls.
_CODE_START = re.compile(
    r"\s*(?:def |class |import |from \S+ import |return\b|elif\b|else\s*[:{]|try\s*[:{]|except\b|raise |"
    r"yield\b|async |await |@\w|#include|#define|#!|//|/\*|\*/|\$ |>>> |var |let |const |function\b|"
    r"public |private |static |void |[}{])"
)
_CODE_BLOCK = re.compile(r"\s*(?:if|for|while|with)\b")
_CODE_ASSIGNMENT = re.compile(r"\s*[A-Za-z_][\w.]*(?:\[[^\]]*\])?\s*[-+*/|&]?=\s*\S")
_CODE_CALL = re.compile(r"[A-Za-z_]\w*\([^()]*\)")
_CODE_ENDS = frozenset(";{})")
_ASCII_SPACES = frozenset(" \t\n\r\f\v")


def is_code_line(line: str) -> bool:
    """Whether a line of `<pre>` text reads as program text. The line's ends are looked at first and a
    pattern is tried only where it can match: one pattern searched along every line cost five times as much."""
    stripped = line.rstrip()
    if stripped[-1:] in _CODE_ENDS:
        return True
    if stripped.endswith(":") and (stripped[:-1].rstrip().endswith(")") or _CODE_BLOCK.match(line)):
        return True
    return bool(
        _CODE_START.match(line)
        or ("=" in line and _CODE_ASSIGNMENT.match(line))
        or ("(" in line and _CODE_CALL.search(line))
    )


@dataclass(frozen=True)
class MainContentConfig:
    min_paragraph_chars: int = 25
    # A block whose text is more than this share link text is navigation.
    max_link_density: float = 0.5
    # Below this score the page has no clear root and the whole (pruned) body is kept.
    min_root_score: float = 20.0
    # A root shorter than this that holds less than half the text is not trusted.
    min_root_chars: int = 500
    # Siblings of the root scoring at least this share of it stay.
    sibling_share: float = 0.2


# A form holding this share of the page's text is the page's wrapper, not a search or login box beside it.
WRAPPER_SHARE = 0.9


# What the page itself says about its kind, measured on the walk (see `page_signals`). A portal or
# listing page reduced to its headlines reads like prose; its HTML does not.
PAGE_SIGNALS = {
    "q_html_link_share": float,  # share of the visible text that is link text
    "q_html_links_per_kb": float,  # links per 1,000 bytes of visible text
    "q_html_text_ratio": float,  # visible text bytes over HTML bytes
    "q_html_removed_share": float,  # share of the visible text that extraction removed
    "q_html_link_blocks": int,  # blocks removed for being mostly links (menus, link lists, headline lists)
    "q_html_pre_share": float,  # share of the kept text inside `<pre>`
    "q_html_code_share": float,  # share of the kept text in lines of code inside `<pre>` (0.0 below `CODE_READ_PRE_SHARE`)
}


# A `<noscript>` holding more text than this ("Please enable JavaScript", a tracking pixel) may hold the page.
NOSCRIPT_MIN_BYTES = 500


def extract_main_text(html: str, config: MainContentConfig | None = None) -> str:
    """The main content of an HTML page as plain text, with its paragraphs, headings, lists and code."""
    return extract_main_content(html, config)[0]


def extract_main_content(
    html: str, config: MainContentConfig | None = None, html_bytes: int | None = None
) -> tuple[str, dict]:
    """The main text, and the page's `PAGE_SIGNALS` (`html_bytes`: the page's size, when known)."""
    config = config or MainContentConfig()
    body = LexborHTMLParser(html).body
    if body is None:
        return "", page_signals(None, "", html, html_bytes)
    page = _Page(body)
    text = page.main_text(config)
    if page.hid_content and not text.strip():
        # Nothing left but what inline styles or `hidden` hide: the page shows its content with a script
        # (LibreOffice's help shows the text written for the application it is opened from).
        page = _Page(body, read_hidden=True)
        text = page.main_text(config)
    if page.noscript_text > max(NOSCRIPT_MIN_BYTES, len(text.encode())):
        # The page's content is what it shows without scripts: a forum's or a shop's copy for crawlers
        # and script-less browsers (Discourse's crawler view), its own page an empty shell for a script.
        page = _Page(body, read_hidden=page.hid_content and not text.strip(), read_noscript=True)
        text = page.main_text(config)
    return text, page_signals(page, text, html, html_bytes)


def walked_page(html: str) -> _Page | None:
    """The page walked but not pruned: for the signals of a page another extractor reads."""
    body = LexborHTMLParser(html).body
    return _Page(body) if body is not None else None


def page_signals(page: _Page | None, text: str, html: str, html_bytes: int | None = None) -> dict:
    if html_bytes is None:
        html_bytes = len(html) if html.isascii() else len(html.encode())
    visible = page.visible_text if page is not None else 0
    kept = len(text) if text.isascii() else len(text.encode())
    pre, code = page.pre_shares() if page is not None else (0.0, 0.0)
    return {
        "q_html_link_share": page.visible_links / visible if visible else 0.0,
        "q_html_links_per_kb": 1000 * page.anchors / visible if visible else 0.0,
        "q_html_text_ratio": visible / html_bytes if html_bytes else 0.0,
        "q_html_removed_share": max(0.0, 1 - kept / visible) if visible else 0.0,
        "q_html_link_blocks": page.link_blocks if page is not None else 0,
        "q_html_pre_share": pre,
        "q_html_code_share": code,
    }


# The name patterns are matched against lower-cased names: case-insensitive alternations cost several
# times as much, and ids are mostly unique, so a cache does not help them.
@functools.lru_cache(maxsize=4096)
def _name_weight(name: str | None) -> int:
    if not name:
        return 0
    name = name.lower()
    return 25 * (bool(_POSITIVE.search(name)) - bool(_NEGATIVE.search(name)))


@functools.lru_cache(maxsize=4096)
def _chrome_lists(names: str) -> tuple[bool, bool]:
    """Whether class and id names are chrome by Readability's list, and by the wider one."""
    names = names.lower()
    if _UNLIKELY.search(names) is None or _MAYBE_CONTENT.search(names) is not None:
        return False, False
    return _READABILITY_UNLIKELY.search(names) is not None, True


def _unread(tag: str, attributes: dict) -> bool:
    """Hidden from a reader for good by its attributes, or an anchor of a heading ("¶"). (`hidden` and inline
    styles hide until a script shows: `_Page._walk` skips them unless the page is nothing without them.)"""
    if attributes.get("aria-hidden") == "true":
        return True
    if attributes.get("role") in _UNREAD_ROLES:
        return True
    return tag == "a" and "headerlink" in (attributes.get("class") or "")


def _style_hides(attributes: dict) -> bool:
    style = attributes.get("style")
    return bool(style and ("none" in (style := style.lower()) or "hidden" in style) and _HIDDEN_STYLE.search(style))


def _pre_text(pre) -> str:
    """A `<pre>`'s text verbatim, in one call where it can be (highlighted code holds an element per token),
    with its `<br>` as line ends; none for a highlighter's gutter of line numbers beside the code."""
    text = pre.text()
    if pre.css_first("br") is not None:
        text = "".join(
            "\n" if node.tag == "br" else node.text_content or ""
            for node in pre.traverse(include_text=True) if node.is_text_node or node.tag == "br"
        )
    return "" if text.lstrip()[:1].isdigit() and _line_numbers(text) else text


def _line_numbers(text: str) -> bool:
    """Consecutive line numbers and nothing else."""
    numbers = text.split()
    if len(numbers) < 2 or not all(number.isdigit() for number in numbers):
        return False
    first = int(numbers[0])
    return numbers == [str(line) for line in range(first, first + len(numbers))]


class _Page:
    """Elements by index in document order (so an element's subtree is the index range up to its
    `last`), their statistics, and the walk's events: an element's index when it opens, its bitwise
    complement when it closes, a string for a text node."""

    # Deeper than this, a subtree's text is taken flat: the walk recurses, and pages can nest deeper
    # than Python's stack.
    MAX_DEPTH = 200

    def __init__(self, body, read_hidden: bool = False, read_noscript: bool = False):
        self.tag: list[str] = []
        self.parent: list[int] = []
        self.attrs: list[dict] = []
        self.text: list[int] = []  # text length, less what has been removed inside
        self.links: list[int] = []  # link text length, likewise
        self.has_block: list[bool] = []
        self.start: list[int] = []  # event index of the open event
        self.end: list[int] = []  # event index of the close event
        self.last: list[int] = []  # index of the last element of the subtree
        self.chrome: list[int] = []
        self.named: list[int] = []  # containers with a class or id
        self.pre: list[int] = []
        self.events: list = []
        self.removed: set[int] = set()
        self.root: int | None = None
        self.kept_beside: set[int] = set()
        self.link_blocks = 0
        self.hid_content = False  # whether `hidden` or an inline style hid an element from the walk
        self.noscript_text = 0  # text bytes in the `<noscript>` elements the walk skipped
        self._walk(body, read_hidden, read_noscript)
        self.walked_text = self.text[:]  # before anything is removed
        self.visible_text, self.visible_links = self.text[0], self.links[0]
        self.anchors = self.tag.count("a")

    def _walk(self, body, read_hidden: bool, read_noscript: bool) -> None:
        tags, parents, attrs, text, links = self.tag, self.parent, self.attrs, self.text, self.links
        has_block, starts, ends, lasts, events = self.has_block, self.start, self.end, self.last, self.events
        chrome, named, pres = self.chrome, self.named, self.pre
        max_depth = self.MAX_DEPTH

        def visit(node, index: int, in_link: bool, depth: int) -> None:
            for child in node.iter(include_text=True):
                if child.is_text_node:
                    value = child.text_content
                    if value:
                        events.append(value)
                        if not value.isspace():
                            length = len(value) if value.isascii() else len(value.encode())
                            text[index] += length
                            if in_link:
                                links[index] += length
                    continue
                tag = child.tag
                if not tag or tag[0] == "-" or tag in _UNREAD and not (read_noscript and tag == "noscript"):
                    if tag == "noscript":
                        self.noscript_text += len(child.text(deep=True).encode())
                    continue
                attributes = child.attributes
                if attributes and (tag == "a" or not _HIDING.isdisjoint(attributes)):
                    if _unread(tag, attributes):
                        continue
                    if not read_hidden and (
                        "hidden" in attributes or "style" in attributes and _style_hides(attributes)
                    ):
                        self.hid_content = True
                        continue
                new = len(tags)
                tags.append(tag)
                parents.append(index)
                attrs.append(attributes)
                text.append(0)
                links.append(0)
                has_block.append(False)
                starts.append(len(events))
                ends.append(0)
                lasts.append(0)
                events.append(new)
                if tag in _BLOCKS:
                    has_block[index] = True
                if tag in _CHROME_TAGS or ("role" in attributes and attributes["role"] in _CHROME_ROLES):
                    chrome.append(new)
                if tag in _CONTAINERS and attributes and ("class" in attributes or "id" in attributes):
                    named.append(new)
                if tag == "pre":
                    pres.append(new)
                    flat = _pre_text(child)
                    events.append(flat)
                    text[new] += 0 if flat.isspace() else len(flat) if flat.isascii() else len(flat.encode())
                elif depth < max_depth:
                    link = tag == "a" and not (attributes and attributes.keys() <= _TARGET_ATTRIBUTES)
                    visit(child, new, in_link or link, depth + 1)
                else:
                    flat = child.text(separator=" ")
                    events.append(flat)
                    text[new] += len(flat.encode())
                ends[new] = len(events)
                lasts[new] = len(tags) - 1
                events.append(~new)
                text[index] += text[new]
                links[index] += links[new]

        tags.append("body")
        parents.append(-1)
        attrs.append({})
        text.append(0)
        links.append(0)
        has_block.append(False)
        starts.append(0)
        ends.append(0)
        lasts.append(0)
        events.append(0)
        visit(body, 0, False, 0)
        visit = None  # noqa: F841 - the recursive closure refers to itself; break the cycle for refcounting
        ends[0] = len(events)
        lasts[0] = len(tags) - 1
        events.append(~0)

    def main_text(self, config: MainContentConfig) -> str:
        self.remove_chrome(config)
        self.remove_link_blocks(config)
        self.choose_root(config)
        return self.layout()

    # Decisions -----------------------------------------------------------------------------------
    def _gone(self, index: int) -> bool:
        """Removed, or inside a removed element."""
        while index >= 0:
            if index in self.removed:
                return True
            index = self.parent[index]
        return False

    def _remove(self, index: int) -> None:
        """Remove an element; its ancestors' lengths no longer count its text."""
        text, links = self.text[index], self.links[index]
        self.removed.add(index)
        parent = self.parent[index]
        while parent >= 0:
            self.text[parent] -= text
            self.links[parent] -= links
            parent = self.parent[parent]

    def _density(self, index: int) -> float:
        return min(self.links[index] / self.text[index], 1.0) if self.text[index] > 0 else 0.0

    def remove_chrome(self, config: MainContentConfig) -> None:
        """Remove landmarks of chrome, except one that is the page's content under the wrong name (more than
        half its text, a paragraph's worth at least, mostly not links), and a form that wraps the whole page
        (an ASP.NET page is one `<form>`): the chrome inside it goes later, as anywhere else."""
        for index in self.chrome:
            if self._gone(index):
                continue
            content = (
                self.text[index] > self.text[0] / 2
                and self.text[index] >= config.min_root_chars / 2
                and self._density(index) <= config.max_link_density
            )
            wrapper = self.tag[index] == "form" and self.text[index] >= WRAPPER_SHARE * self.text[0]
            if not (content or wrapper):
                self._remove(index)

    def remove_link_blocks(self, config: MainContentConfig) -> None:
        # Innermost first (reverse document order): an element's lengths already leave out the blocks
        # removed inside it.
        for index in range(len(self.tag) - 1, 0, -1):
            if (
                self.tag[index] in _LINK_BLOCKS
                and self.links[index] > 0
                and self._density(index) > config.max_link_density
                and not self._gone(index)
            ):
                self._remove(index)
                self.link_blocks += 1

    def _element_text(self, index: int) -> str:
        return "".join(event for event in self.events[self.start[index]:self.end[index]] if event.__class__ is str)

    def _class_weight(self, index: int) -> int:
        attributes = self.attrs[index]
        return _name_weight(attributes.get("class")) + _name_weight(attributes.get("id"))

    def _gone_flags(self) -> list[bool]:
        """`_gone` of every element at once: parents come before their children."""
        gone = [False] * len(self.tag)
        parent, removed = self.parent, self.removed
        for index in range(len(gone)):
            gone[index] = index in removed or (index > 0 and gone[parent[index]])
        return gone

    def content_root(self, config: MainContentConfig) -> int | None:
        scores: dict[int, float] = {}
        gone, has_block, text, minimum = self._gone_flags(), self.has_block, self.text, config.min_paragraph_chars
        for index, tag in enumerate(self.tag):
            if not (tag in _SCORED or (tag == "div" and not has_block[index])):
                continue
            if text[index] < minimum or gone[index]:
                continue
            paragraph = self._element_text(index)
            commas = sum(paragraph.count(comma) for comma in _COMMAS)
            points = 1 + commas + min(text[index] // 100, 3)
            ancestor, level = self.parent[index], 0
            while ancestor > 0 and level < 5:  # 0 is the body
                if ancestor not in scores:
                    scores[ancestor] = _TAG_SCORE.get(self.tag[ancestor], 0) + self._class_weight(ancestor)
                scores[ancestor] += points / (1 if level == 0 else 2 if level == 1 else level * 3)
                ancestor, level = self.parent[ancestor], level + 1
        for index, score in scores.items():
            scores[index] = score * (1 - self._density(index))
        if not scores:
            return None
        ranked = sorted(scores.items(), key=lambda item: -item[1])[:5]
        best_index, best = ranked[0]
        if best < config.min_root_score:
            return None
        close = [index for index, score in ranked[1:] if score >= 0.75 * best]
        root = self._widen(best_index, best, close, scores)
        if self.text[root] < config.min_root_chars and self.text[root] < self.text[0] / 2:
            return None
        self.root = root
        self._keep_beside(root, scores, best, config)
        return root

    def _ancestors(self, index: int) -> list[int]:
        out = []
        index = self.parent[index]
        while index > 0:
            out.append(index)
            index = self.parent[index]
        return out

    def _widen(self, root: int, best: float, close: list[int], scores: dict[int, float]) -> int:
        """Readability's corrections to the best candidate: the ancestor of three candidates scoring nearly
        as well (an article cut into steps or sections), a parent that scores better, an only child's parent
        (a section's body is its only child but for its heading, so a manual whose one section outscores the
        rest is read whole: its sections are siblings)."""
        if len(close) >= 3:
            lineages = [set(self._ancestors(index)) for index in close]
            for ancestor in self._ancestors(root):
                if sum(1 for lineage in lineages if ancestor in lineage) >= 3:
                    root = ancestor
                    break
        last = scores.get(root, best)
        for parent in self._ancestors(root):
            score = scores.get(parent)
            if score is not None:
                if score < best / 3:
                    break
                if score > last:
                    root = parent
                    break
                last = score
        while self.parent[root] > 0 and self._only_child(root):
            root = self.parent[root]
        return root

    def _children(self, index: int) -> list[int]:
        return [
            child for child in range(index + 1, self.last[index] + 1)
            if self.parent[child] == index and child not in self.removed
        ]

    def _only_child(self, index: int) -> bool:
        """The only child of its parent, but for headings: a section is its heading and its body."""
        others = [child for child in self._children(self.parent[index]) if child != index]
        return all(self.tag[child] in _HEADINGS for child in others)

    def _keep_beside(self, root: int, scores: dict[int, float], best: float, config: MainContentConfig) -> None:
        """Siblings of the root that score at least `sibling_share` of it (more easily when they share
        its class), or are paragraphs, lists or tables of prose, stay beside it."""
        threshold = max(10.0, max(scores.get(root, 0.0), 0.0) * config.sibling_share)
        root_class = self.attrs[root].get("class")
        for sibling in self._children(self.parent[root]):
            if sibling == root:
                continue
            bonus = best * 0.2 if root_class and self.attrs[sibling].get("class") == root_class else 0
            if scores.get(sibling, -1e9) + bonus >= threshold or self._reads_as_prose(sibling):
                self.kept_beside.add(sibling)

    def _reads_as_prose(self, index: int) -> bool:
        if self.tag[index] not in _PROSE_BLOCKS or not self.text[index] or self._density(index) >= 0.25:
            return False
        return self.text[index] >= 80 or self._element_text(index).rstrip().endswith(_SENTENCE_END)

    def _kept(self) -> list[int]:
        """The elements whose text is laid out: the root and the siblings beside it, or the body."""
        return sorted([self.root, *self.kept_beside]) if self.root is not None else [0]

    def _names(self) -> list[tuple[int, str]]:
        """Each container's class and id, as the chrome patterns read them."""
        out = []
        for index in self.named:
            attributes = self.attrs[index]
            names, ident = attributes.get("class") or "", attributes.get("id")
            # Generated documentation takes ids from headings ("comments", "related-work"): an element
            # that opens with a heading is judged by its class alone.
            if ident and not self._opens_with_heading(index):
                names = f"{names} {ident}"
            if names:
                out.append((index, names))
        return out

    def _opens_with_heading(self, index: int) -> bool:
        """Whether the element's first text is a heading's. Empty elements may come first (Sphinx's
        `<section id=..><span id=..></span><h2>`), and wrappers that hold only the heading (DocBook's
        `<div class="titlepage"><div><h2>`); a sidebar whose first widget opens with a heading does not,
        even once the widget's links are gone."""
        events, tags, text = self.events, self.tag, self.walked_text
        if index < self.last[index] and tags[index + 1] in _HEADINGS:
            return True
        at, end, wrapper = self.start[index] + 1, self.end[index], None
        while at < end:
            event = events[at]
            if event.__class__ is str:
                if not event.isspace():
                    return False
            elif event >= 0:
                if tags[event] in _HEADINGS:
                    return wrapper is None or text[wrapper] == text[event]
                if text[event] == 0:
                    at = self.end[event]  # past its close
                elif wrapper is None:
                    wrapper = event
            at += 1
        return False

    def _chrome_named(self) -> tuple[list[int], list[int]]:
        """The containers whose names are chrome by Readability's list, and by the wider one, outside any
        table or code. (Chrome comes in containers; inline elements, list items and rows are not judged
        by name.)"""
        readability, wider = [], []
        for index, names in self._names():
            narrow, wide = _chrome_lists(names)
            if wide and not any(self.tag[a] in _VERBATIM for a in self._ancestors(index)):
                wider.append(index)
                if narrow:
                    readability.append(index)
        return readability, wider

    def choose_root(self, config: MainContentConfig) -> None:
        """The content root, then chrome removed inside what stays.

        When the root is, or lies inside, an element that Readability's list names as chrome, or such
        elements hold more than half of the root (a gallery or a comment thread inside an article can
        outweigh it), the root is chosen again without them, as Readability always does, and kept if it
        holds `min_root_chars`. Then elements that the wider list names as chrome go from the root, and
        siblings kept beside it, unless one holds half of the text kept."""
        readability, wider = self._chrome_named()
        root = self.content_root(config)
        suspects = [index for index in readability if self.text[index] > 0 and not self._wraps_page(index, root)]
        if root is not None and suspects and self._outweighed(root, suspects):
            saved = self.text[:], self.links[:], set(self.removed), self.root, set(self.kept_beside)
            self.root, self.kept_beside = None, set()
            for index in suspects:
                if not self._gone(index):
                    self._remove(index)
            again = self.content_root(config)
            if again is None or self.text[again] < config.min_root_chars:
                self.text, self.links, self.removed, self.root, self.kept_beside = saved
        kept = self._kept()
        half = sum(self.text[index] for index in kept) / 2
        for index in wider:
            if (
                self.text[index] <= half
                and any(top < index <= self.last[top] or index == top != self.root for top in kept)
                and not self._gone(index)
            ):
                self._remove(index)

    def _wraps_page(self, index: int, root: int | None) -> bool:
        """An ancestor of the root holding two thirds of the page's text is the page's wrapper, whatever its
        name says ("Page-ad-margins")."""
        return root is not None and index < root <= self.last[index] and self.text[index] >= 2 * self.text[0] / 3

    def _outweighed(self, root: int, suspects: list[int]) -> bool:
        """`root` lies in one of `suspects`, or those inside it hold more than half of its text."""
        inside = 0
        for index in suspects:
            if index <= root <= self.last[index]:
                return True
            if root < index <= self.last[root]:
                inside += self.text[index]
        return inside > self.text[root] / 2

    def pre_shares(self) -> tuple[float, float]:
        """Shares of the kept text (the root and what stays beside it, or the body) inside `<pre>`, and in
        lines of code there: a source listing is nearly all code; a manual set in `<pre>` (Vim's help) is
        prose there. Lines are read only on a page at least `CODE_READ_PRE_SHARE` in `<pre>` (else 0.0)."""
        kept = self._kept()
        total = sum(self.text[top] for top in kept)
        if not self.pre or total <= 0:
            return 0.0, 0.0
        inside = [
            index for index in self.pre if any(top <= index <= self.last[top] for top in kept) and not self._gone(index)
        ]
        pre = min(sum(self.text[index] for index in inside) / total, 1.0)
        if pre < CODE_READ_PRE_SHARE:
            return pre, 0.0
        code = sum(
            len(line) if line.isascii() else len(line.encode())
            for index in inside for line in self.events[self.start[index] + 1].split("\n") if is_code_line(line)
        )
        return pre, min(code / total, 1.0)

    # Layout --------------------------------------------------------------------------------------
    def layout(self) -> str:
        return _layout(self, [(self.start[top], self.end[top]) for top in self._kept()])


def _layout(page: _Page, spans: list[tuple[int, int]]) -> str:
    """Plain text of the event spans, with its structure: a blank line between paragraphs, headings,
    lists, tables and code blocks; one line per list item, table row, `<br>` or `<div>`; `<pre>` text
    verbatim. A div that holds only inline content is a paragraph. Text nodes are joined as they stand;
    runs of white space outside `<pre>` become one space, as a browser renders them. Removed elements
    are skipped with everything inside them."""
    layout = _TextLayout(page)
    for events in _shown_runs(page, spans):
        layout.write(events)
    return layout.finish()


def _shown_runs(page: _Page, spans: list[tuple[int, int]]) -> Iterator[list]:
    """The runs of events in the spans that lie outside removed elements. Each span is an element's, so a
    removed element that opens in it closes in it."""
    removed = sorted(page.removed)  # in document order, so their open events are in order too
    opens = [page.start[index] for index in removed]
    for first, last in spans:
        at = first
        for index in removed[bisect_left(opens, first):bisect_right(opens, last)]:
            if page.start[index] >= at:  # not inside one skipped already
                yield page.events[at:page.start[index]]
                at = page.end[index] + 1
        yield page.events[at:last + 1]


def _collapse_spaces(text: str) -> str:
    """Runs of white space as one space, as a browser renders them."""
    if "\n" not in text and "  " not in text and "\t" not in text and "\r" not in text and "\f" not in text:
        return text
    if not text.isascii():
        return _SPACES.sub(" ", text)
    # str.split collapses the same runs (and the rare \x1c-\x1f controls), faster.
    collapsed = " ".join(text.split())
    if text[0] in _ASCII_SPACES:
        collapsed = " " + collapsed
    if text[-1] in _ASCII_SPACES:
        collapsed += " "
    return collapsed


class _TextLayout:
    """The page's text as lines, written event by event (see `_layout`)."""

    def __init__(self, page: _Page):
        self.tags = page.tag
        # Newlines each element asks for around itself; a div of inline content is a paragraph.
        self.gaps = [
            (1 if block else 2) if tag == "div" else _GAP.get(tag, 0) for tag, block in zip(page.tag, page.has_block)
        ]
        self.out: list[str] = []  # finished lines, each preceded by "\n" or "\n\n" once one is written
        self.line: list[str] = []
        self.gap = 0  # newlines owed before the next line
        self.prefix = ""  # a list item's marker, waiting for the item's first text
        self.lists: list[int] = []  # per open list: its last item's number, or -1 for bullets
        self.pre = 0  # open `<pre>` elements

    def write(self, events: list) -> None:
        for event in events:
            if event.__class__ is str:
                if self.pre:
                    self.verbatim_text(event)
                else:
                    self.flowing_text(event)
            elif event >= 0:
                self.open(event)
            else:
                self.close(~event)

    def finish(self) -> str:
        self.end_line()
        return "".join(self.out)

    def end_line(self, keep_empty: bool = False) -> None:
        text = "".join(self.line).rstrip()
        self.line = []
        if keep_empty or text.strip():
            if self.out:
                self.out.append("\n\n" if self.gap >= 2 else "\n")
            self.out.append(text)
            self.gap = 1

    def flowing_text(self, event: str) -> None:
        """Text outside `<pre>`: its runs of white space one space, none where the line starts or has one."""
        line = self.line
        if event.isspace():
            if line and line[-1][-1] != " ":
                line.append(" ")
            return
        text = _collapse_spaces(event)
        if not line or line[-1].endswith(" "):
            text = text.lstrip(" ")
        if text:
            self._append(text)

    def verbatim_text(self, event: str) -> None:
        """Text inside `<pre>`: its line ends kept, empty lines too."""
        head, *rest = event.split("\n")
        self._append(head)
        for text in rest:
            self.end_line(keep_empty=True)
            self.line.append(text)

    def _append(self, text: str) -> None:
        """Add text to the line, after the list item's marker when it is the item's first."""
        if self.prefix and not self.line:
            self.line.append(self.prefix)
            self.prefix = ""
        self.line.append(text)

    def open(self, index: int) -> None:
        tag = self.tags[index]
        if tag == "br":
            if self.pre:
                self.end_line(keep_empty=True)
            else:
                self._break(tag, 1)
            return
        if self.gaps[index]:
            self._break(tag, self.gaps[index])
        if tag in _LISTS:
            self.lists.append(0 if tag == "ol" else -1)
        elif tag == "li" and self.lists:
            self.prefix = self._item_marker()
        elif tag in _CELLS and self.line:
            self.line.append("\t")
        elif tag == "pre":
            self.pre += 1

    def close(self, index: int) -> None:
        if not self.gaps[index]:
            return
        tag = self.tags[index]
        if tag in _LISTS and self.lists:
            self.lists.pop()
        elif tag == "pre":
            self.pre -= 1
        self._break(tag, self.gaps[index])

    def _break(self, tag: str, newlines: int) -> None:
        """End the line, and owe at least `newlines` before the next one."""
        if newlines == 2 and self.lists and tag in _NESTED_LISTS:
            newlines = 1  # a nested list stays with its item
        if self.line:
            self.end_line()
        self.gap = max(self.gap, newlines)

    def _item_marker(self) -> str:
        """The next item's marker in the innermost list, indented by the list's depth."""
        indent = "  " * (len(self.lists) - 1)
        if self.lists[-1] < 0:
            return indent + "• "
        self.lists[-1] += 1
        return indent + f"{self.lists[-1]}. "
