"""The duplicates a set of pages already holds, before any are injected: same text, or Jaccard >= a threshold
of their shingles."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence

WORD = re.compile(r"\w+")


def shingles(text: str, cjk: bool, n: int = 5) -> set:
    """Word n-grams, or when `cjk` n-character strings of the text without white space."""
    if cjk:
        chars = "".join(text.split())
        return {chars[i : i + n] for i in range(max(1, len(chars) - n + 1))}
    words = WORD.findall(text)
    return {tuple(words[i : i + n]) for i in range(max(1, len(words) - n + 1))}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / max(1, len(a | b))


def same_text_groups(urls: Sequence[str], texts: Sequence[str]) -> list[list[str]]:
    """Groups (two or more URLs) of pages with the same text, sorted."""
    by_text: dict[str, list[str]] = {}
    for url, text in zip(urls, texts, strict=True):
        by_text.setdefault(text, []).append(url)
    return sorted(group for group in by_text.values() if len(group) > 1)


def similar_pairs(sets: Sequence[set], kinds: Sequence[Hashable], threshold: float) -> list[tuple[int, int, float]]:
    """Every pair (i, j, jaccard), i < j, of sets of the same kind whose Jaccard is at least `threshold`.

    Exact, by prefix filtering: with elements ordered rarest first, two sets at Jaccard >= t share an element
    among the first |s| - ceil(t |s|) + 1 of the smaller one; candidates are then verified exactly.
    """
    frequency: Counter = Counter()
    for members in sets:
        frequency.update(members)
    shared = sorted((count, repr(element), element) for element, count in frequency.items() if count > 1)
    rank = {element: position for position, (_, _, element) in enumerate(shared)}
    size = [len(members) for members in sets]
    index: dict[int, list[int]] = defaultdict(list)
    pairs = []
    for x in sorted(range(len(sets)), key=lambda i: (size[i], i)):
        ranks = sorted(rank[element] for element in sets[x] if element in rank)
        prefix = size[x] - math.ceil(threshold * size[x]) + 1 - (size[x] - len(ranks))
        candidates: set[int] = set()
        for r in ranks[: max(prefix, 0)]:
            candidates.update(index[r])
            index[r].append(x)
        for y in candidates:
            if kinds[y] != kinds[x] or size[y] < threshold * size[x]:
                continue
            overlap = len(sets[x] & sets[y])
            jaccard = overlap / (size[x] + size[y] - overlap)
            if jaccard >= threshold:
                pairs.append((min(x, y), max(x, y), jaccard))
    return sorted(pairs)
