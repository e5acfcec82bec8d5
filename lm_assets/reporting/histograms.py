"""curated_shard's and curation_summary's histograms as the pages show them: an inline SVG chart per signal
(kept and dropped documents, the thresholds dashed and named), its caption, and the whole figure as an image."""

from __future__ import annotations

import base64
import math
import re

import polars as pl

from lm_assets.charts import DASH_NAMES, DASHES, fits_inline, histogram_svg, inline_image, nice_ticks, thinned, tick
from lm_assets.corpus.curation import rules
from lm_assets.corpus.curation.histograms import COUNT_SIGNALS, LANG_SCORE, QUALITY_SCORE, Histogram

FIGURE_LEGEND = "kept and dropped documents by score, thresholds dashed and named"
INLINE_LEGEND = ("kept documents green, drawn up from the line, dropped ones red, drawn down from it, each on its own "
                 "scale (so that a few dropped documents show beside many kept ones): the count of its tallest bin is "
                 "ticked top left for kept, bottom right for dropped; each panel counts the documents that reached its "
                 "step: language ID, the quality rules (after language ID) or the classifier (after the hard rules), "
                 "so the totals differ")


def histogram_panels(histograms: dict[str, Histogram], dropped: pl.DataFrame) -> dict[str, str]:
    """`hist/<signal>`: an inline chart of kept and dropped documents per signal whose rule dropped something
    on this shard, and for language ID and the classifier."""
    by_rule = dict(dropped.filter(pl.col("stage") == rules.STAGE)["reason"].value_counts().rows())
    entries = {}
    for signal, histogram in histograms.items():
        dropped_by_rule = sum(by_rule.get(reason, 0) for reason in histogram.reasons)
        if signal not in (LANG_SCORE, QUALITY_SCORE) and not dropped_by_rule:
            continue
        caption = f"{thresholds_legend(histogram)} · " + histogram_counts(histogram, dropped_by_rule)
        entries[f"hist/{signal}"] = inline_histogram(histogram, caption)
    return entries


def histogram_counts(histogram: Histogram, dropped_by_rule: int) -> str:
    """The panel's counts, which add up: the documents that reached its step (those it counts, so the totals
    differ from panel to panel), and of them the ones dropped, by its rules and at a later step (a document
    another rule or a later step dropped, the classifier say, is a dropped one in this panel, but the steps
    table counts it at the classifier), and the ones kept at the end."""
    kept, dropped = sum(histogram.kept), sum(histogram.dropped)
    where = f"at {histogram.population}: " if histogram.population else ""
    if not histogram.reasons:
        return f"{where}{kept + dropped:,} documents · kept {kept:,} · dropped {dropped:,}"
    rules = f"rule{'s' if len(histogram.reasons) > 1 else ''}"
    return (f"{where}{kept + dropped:,} documents · dropped {dropped:,} ({dropped_by_rule:,} by its {rules}, "
            f"{dropped - dropped_by_rule:,} by other rules or at later steps) · kept {kept:,} at the end")


def paired(histogram: Histogram) -> bool:
    """Whether some group of thresholds holds more than one (a min and a max): then each group is dashed
    its own way, so that the pairs read apart; thresholds one to a group (a language's cut) are told apart
    by their order along the axis, which costs the inline chart no dash patterns."""
    return len(set(histogram.mark_groups)) < len(histogram.marks)


def mark_styles(histogram: Histogram) -> list[int]:
    """Each threshold's dash pattern (`charts.DASHES`): one per group of thresholds where they are `paired`."""
    if not paired(histogram):
        return [0] * len(histogram.marks)
    groups = list(dict.fromkeys(histogram.mark_groups))
    return [groups.index(group) % len(DASHES) for group in histogram.mark_groups]


def as_range(labels: list[str]) -> str:
    """`min_doc_words 50` and `max_doc_words 100,000` as `doc_words 50–100,000`; other labels as a list."""
    names = [label.rsplit(" ", 1) for label in labels]
    if len(names) == 2 and names[0][0].startswith("min_") and names[1][0] == "max_" + names[0][0][4:]:
        return f"{names[0][0][4:]} {names[0][1]}–{names[1][1]}"
    return ", ".join(labels)


def thresholds_legend(histogram: Histogram) -> str:
    """The rule, and which threshold is which line where it has more than one group of them: by dash pattern
    where they are `paired` (`gopher_quality: dashed doc_words 50–100,000; dotted doc_chars_cjk 75–150,000`),
    else by order (`classifier: below_threshold en 0.38, others 0.401, zh 0.489 (dashed, left to right)`)."""
    groups = list(dict.fromkeys(histogram.mark_groups))
    if len(groups) <= 1:
        return histogram.rule + (" (dashed)" if histogram.marks else "")
    # The rule's words before the first threshold it names (`gopher_quality`, `classifier: below_threshold`),
    # whichever threshold that is: the classifier's rule lists its languages unsorted.
    names = [label.rsplit(" ", 1)[0].split(", ")[0] for label in histogram.mark_labels]
    found = [match.start() for name in names if (match := re.search(rf"\b{re.escape(name)}\b", histogram.rule))]
    head = histogram.rule[:min(found)].rstrip(": ,") if found else histogram.rule
    if not paired(histogram):
        return f"{head} {', '.join(histogram.mark_labels)} (dashed, left to right)"
    parts = []
    for i, group in enumerate(groups):
        labels = [label for label, g in zip(histogram.mark_labels, histogram.mark_groups) if g == group]
        parts.append(f"{DASH_NAMES[i % len(DASHES)]} {as_range(labels)}")
    return f"{head}: " + "; ".join(parts)


def inline_histogram(histogram: Histogram, caption: str) -> str:
    """The histogram drawn bin by bin (so count bins read as a log scale), its axes ticked at round values, the
    thresholds dashed by group, its neighbouring bins merged until the markdown fits the UI's inline limit
    (and, where even the coarsest bins do not, its x axis ticked at its ends only)."""
    bins = len(histogram.kept)
    ticks = value_ticks(histogram)
    for shown in (ticks, [ticks[0], ticks[-1]]):
        for merge in (1, 2, 3, 4, 5, 8, 10, 20):
            edges = [min(i * merge, bins) / merge for i in range(-(-bins // merge) + 1)]
            kept, dropped = ([sum(counts[i:i + merge]) for i in range(0, bins, merge)]
                             for counts in (histogram.kept, histogram.dropped))  # fmt: skip
            # A run of bins alike in both counts is one step.
            starts = [i for i in range(len(kept)) if i == 0 or (kept[i], dropped[i]) != (kept[i - 1], dropped[i - 1])]
            edges = [edges[i] for i in starts] + [edges[-1]]
            marks = [histogram.position(mark) / merge for mark in histogram.marks]
            at = [(histogram.position(value) / merge, label) for value, label in shown]
            svg_text = histogram_svg(edges, [kept[i] for i in starts], [dropped[i] for i in starts], marks, at,
                                     mark_styles(histogram))  # fmt: skip
            markdown = inline_image(svg_text, histogram.signal, caption)
            if fits_inline(markdown):
                return markdown
    return markdown


def value_ticks(histogram: Histogram) -> list[tuple[float, str]]:
    """Three round values along a histogram's x axis, each with its label: for a count signal (its bins a
    log scale) 0 and powers of ten evenly apart, for the others steps of 1, 2, 2.5 or 5 times a power of ten."""
    low, high = histogram.edges[0], histogram.edges[-1]
    if histogram.signal not in COUNT_SIGNALS:
        return nice_ticks(low, high, 3)
    decades = [0.0] + [10.0**k for k in range(math.floor(math.log10(high)) + 1)]
    return [(value, tick(value)) for value in thinned(decades, 3)]


def figure_markdown(png: bytes) -> str:
    """The whole figure as a markdown image whose data URI holds the PNG."""
    return f"![{FIGURE_LEGEND}](data:image/png;base64,{base64.b64encode(png).decode()})"
