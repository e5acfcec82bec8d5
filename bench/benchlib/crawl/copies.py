"""Injected duplicates: a page served again at a new URL, byte for byte or with a few words edited.

A page is anything with `url`, `html` and `cjk` (whether its text is mostly CJK); its copies get truth
entries in the shape `lm_assets.corpus.dedup.accuracy` reads.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .html_edits import add_mirror_notice, edit_text_nodes

MIRROR_PROBABILITY = 0.5


@dataclass(frozen=True)
class Record:
    """One HTML response of the crawl."""

    url: str
    html: str


def host(url: str) -> str:
    return url.split("/")[2]


def path(url: str) -> str:
    return url.split("/", 3)[3] if url.count("/") >= 3 else ""


def script(page) -> str:
    return "cjk" if page.cjk else "latin"


def copy_url(page, rng: random.Random, used: set[str]) -> str:
    """A new URL for a copy of `page`: a mirror host, an archive path or a query parameter."""
    site, rest = host(page.url), path(page.url)
    for attempt in range(1000):
        k = rng.randint(1, 9) + 10 * (attempt // 20)
        url = rng.choice(
            [
                f"https://mirror{k}.{site}/{rest}",
                f"https://{site}/archive/{2015 + k}/{rest}",
                f"https://docs-mirror-{k}.example/{site.split('.')[0]}/{rest}",
                f"https://{site}/{rest}?utm_source=feed&ref={k}",
            ]
        )
        if url not in used:
            used.add(url)
            return url
    raise RuntimeError(f"no free URL for a copy of {page.url}")


def exact_copy(page, url_rng: random.Random, used: set[str]) -> tuple[Record, dict]:
    url = copy_url(page, url_rng, used)
    entry = {"url": url, "original_url": page.url, "kind": "exact", "edit_rate": 0.0, "script": script(page)}
    return Record(url, page.html), entry


def near_copy(page, rate: float, rng: random.Random, url_rng: random.Random, used: set[str]) -> tuple[Record, dict]:
    """`page` with `rate` of its units edited, and half the time a mirror header and/or footer."""
    html, edits, units = edit_text_nodes(page.html, rate, page.cjk, rng)
    url = copy_url(page, url_rng, used)
    style = rng.choice(("header", "footer", "both")) if rng.random() < MIRROR_PROBABILITY else "none"
    if style != "none":
        html = add_mirror_notice(html, page.cjk, style, host(url), host(page.url))
    entry = {
        "url": url, "original_url": page.url, "kind": "near", "edit_rate": rate, "script": script(page),
        "unit": "char" if page.cjk else "word", "n_units": units, "n_edits": edits, "boilerplate": style,
    }
    return Record(url, html), entry
