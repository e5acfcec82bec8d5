"""Histograms of the scores curation decides on, kept and dropped documents apart.

One histogram per quality signal that an enabled rule compares to a threshold, one for language ID
(the share of a document in the allowed languages, which `min_score` bounds) and one for the quality
classifier's P(KEEP). Their bins are fixed by the config alone (a signal's natural range and its rule's
thresholds), never by the data, so the counts of shards curated alike add up; counts are taken batch
by batch, so memory stays that of the bins. A value outside the bins counts in the nearest end bin.
"""

from __future__ import annotations

import io
import itertools
import math
import textwrap
from dataclasses import asdict, dataclass, field

import numpy as np
import polars as pl

from lm_assets.corpus.curation.rules import RulesConfig, enabled_rules

LANG_SCORE, QUALITY_SCORE = "lang_score", "quality_score"
KEPT, DROPPED = "kept", "dropped"
COUNT_SIGNALS = {"q_word_count", "q_stop_words", "q_c4_sentences", "q_sentences"}
LENGTH_SIGNALS = {"q_mean_word_length"}
# Signals whose rules skip CJK documents, whose words are single characters.
NOT_FOR_CJK = {"q_mean_word_length"}
SHARE_BINS, LENGTH_BINS, SCORE_BINS = 30, 40, 40
# Count bins run 0, 1, 2, 3, 5, 7.5, 10, 20, 30, 50, 75, 100, ...
COUNT_STEPS = (1, 2, 3, 5, 7.5)


@dataclass
class Histogram:
    """A score's binned counts over `edges`, of kept and of dropped documents; `marks` are the thresholds and
    `mark_labels` what each is (`min_doc_words 50`), `mark_groups` the pairs they form (a threshold for zh,
    ja and ko beside one for the other languages, one per language), `rule` names the rules (or the filter)
    that compare the score to them, `reasons` are those rules' drop reasons (quality rules only), and `population` names the
    step whose documents are counted (those that reached it), so panels of different steps differ in total."""

    signal: str
    rule: str
    edges: list[float]
    marks: list[float]
    reasons: list[str] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    mark_labels: list[str] = field(default_factory=list)
    mark_groups: list[str] = field(default_factory=list)
    population: str = ""

    def __post_init__(self):
        bins = len(self.edges) - 1
        self.kept = self.kept or [0] * bins
        self.dropped = self.dropped or [0] * bins
        self.mark_labels = self.mark_labels or [number(mark) for mark in self.marks]
        self.mark_groups = self.mark_groups or [""] * len(self.marks)

    def add(self, values: pl.Series | None, group: str) -> None:
        """Count `values` (nulls and NaNs skipped) in `group`, KEPT or DROPPED."""
        if values is None or values.len() == 0:
            return
        numbers = values.cast(pl.Float64).fill_nan(None).drop_nulls().to_numpy()
        clipped = np.clip(numbers, self.edges[0], self.edges[-1])
        counts = np.histogram(clipped, bins=self.edges)[0]
        setattr(self, group, [int(a + b) for a, b in zip(getattr(self, group), counts)])

    def position(self, value: float) -> float:
        """Where `value` falls in bin units: 2.5 is halfway through the third bin."""
        edges = self.edges
        if value <= edges[0]:
            return 0.0
        if value >= edges[-1]:
            return float(len(edges) - 1)
        i = int(np.searchsorted(edges, value, side="right")) - 1
        return i + (value - edges[i]) / (edges[i + 1] - edges[i])


def linear_edges(top: float, bins: int) -> list[float]:
    return [float(round(x, 12)) for x in np.linspace(0.0, top or 1.0, bins + 1)]


def count_edges(thresholds: list[float]) -> list[float]:
    """0, then the 1-2-3-5-7.5 series up to ten times the largest threshold."""
    edges = [0.0]
    for edge in (step * 10**decade for decade in itertools.count() for step in COUNT_STEPS):
        edges.append(float(edge))
        if edge >= 10 * max(thresholds):
            return edges


def edges_for(signal: str, thresholds: list[float]) -> list[float]:
    if signal in COUNT_SIGNALS:
        return count_edges(thresholds)
    if signal in LENGTH_SIGNALS:
        return linear_edges(2 * max(thresholds), LENGTH_BINS)
    # A small threshold gets a close view (to three times it), the others the whole range.
    top = 3 * max(thresholds)
    return linear_edges(top if top <= 0.5 else 1.0, SHARE_BINS)


def number(value: float) -> str:
    """A threshold as the pages write it: four significant digits (0.3175, 0.5, 50), 1,000 and up whole with
    separators."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


QUALITY_STEP = "the quality rules"


def quality_histograms(cfg: RulesConfig) -> list[Histogram]:
    """One empty histogram per signal that an enabled threshold rule reads (flag rules have none to draw)."""
    by_signal: dict[str, list[tuple[str, float]]] = {}
    for reason, signal, threshold in enabled_rules(cfg):
        if not isinstance(threshold, bool):
            by_signal.setdefault(signal, []).append((reason, threshold))
    histograms = []
    for signal, rules in by_signal.items():
        named = [(reason.split(":", 1)[1], float(t)) for reason, t in rules]
        marks, labels, groups = labelled_marks(named, lambda name: CJK_GROUP if name.endswith("_cjk") else "")
        population = QUALITY_STEP + (", zh/ja/ko left out" if signal in NOT_FOR_CJK else "")
        histograms.append(Histogram(signal, rules_text(rules), edges_for(signal, marks), marks,
                                    [reason for reason, _ in rules], mark_labels=labels, mark_groups=groups,
                                    population=population))
    return histograms


CJK_GROUP = "zh, ja, ko"


def labelled_marks(named: list[tuple[str, float]], group=lambda name: name) -> tuple[list[float], list[str], list[str]]:
    """Thresholds in order, each labelled with the names that cut there and its value (`min_doc_words 50`),
    and the group of its first name (`group(name)`: by default the name itself, as a language is)."""
    by_mark: dict[float, list[str]] = {}
    for name, mark in named:
        by_mark.setdefault(mark, []).append(name)
    marks = sorted(by_mark)
    return (marks, [f"{', '.join(by_mark[mark])} {number(mark)}" for mark in marks],
            [group(by_mark[mark][0]) for mark in marks])


def rules_text(rules: list[tuple[str, float]]) -> str:
    """`gopher_quality: min_doc_words 50, max_doc_words 100,000`: a signal's rules are of one family."""
    family = rules[0][0].split(":")[0]
    return f"{family}: " + ", ".join(f"{reason.split(':', 1)[1]} {number(t)}" for reason, t in rules)


def score_histogram(signal: str, rule: str, named_marks: list[tuple[str, float]], population: str) -> Histogram:
    """A score between 0 and 1 (language ID, the classifier), its thresholds named."""
    marks, labels, groups = labelled_marks(named_marks)
    return Histogram(signal, rule, linear_edges(1.0, SCORE_BINS), marks, mark_labels=labels, mark_groups=groups,
                     population=population)


def add_signals(histograms: dict[str, Histogram], frame: pl.DataFrame, group: str) -> None:
    """Count each quality signal of `frame`'s documents (those of `NOT_FOR_CJK` without the CJK ones)."""
    for signal, histogram in histograms.items():
        if signal in (LANG_SCORE, QUALITY_SCORE) or signal not in frame.columns:
            continue
        values = frame[signal]
        if signal in NOT_FOR_CJK and "q_cjk" in frame.columns:
            values = values.filter(~frame["q_cjk"].fill_null(False))
        histogram.add(values, group)


# Stored beside a shard's tables as JSON: {signal: Histogram's fields}.


def to_json(histograms: dict[str, Histogram]) -> dict:
    return {signal: asdict(histogram) for signal, histogram in histograms.items()}


def from_json(stored: dict) -> dict[str, Histogram]:
    return {signal: Histogram(**fields) for signal, fields in stored.items()}


def summed(shards: list[dict[str, Histogram]]) -> tuple[dict[str, Histogram], int]:
    """The shards' histograms added up, signal by signal; a shard's histogram binned otherwise than the
    first one of its signal (curated under other thresholds) is left out. Also how many were left out."""
    total: dict[str, Histogram] = {}
    left_out = 0
    for histograms in shards:
        for signal, histogram in histograms.items():
            into = total.get(signal)
            if into is None:
                total[signal] = Histogram(**asdict(histogram))
            elif into.edges != histogram.edges:
                left_out += 1
            else:
                into.kept = [a + b for a, b in zip(into.kept, histogram.kept)]
                into.dropped = [a + b for a, b in zip(into.dropped, histogram.dropped)]
                both = (dict(zip(into.marks, zip(into.mark_labels, into.mark_groups)))
                        | dict(zip(histogram.marks, zip(histogram.mark_labels, histogram.mark_groups))))
                into.marks = sorted(both)
                into.mark_labels, into.mark_groups = ([both[mark][i] for mark in into.marks] for i in (0, 1))
    return total, left_out


# The figure's grid: two panels a row, each this wide and tall (inches), its title in type of this size
# (points), which reads where the UI shows the figure scaled to its column. Two panels at 72 dpi are 922 px
# wide, inside the UI's metadata dialog at 1600 px; three (1382 px) were cut there.
COLUMNS, PANEL_WIDTH, PANEL_HEIGHT, TITLE_SIZE = 2, 6.4, 4.6, 15


def figure_title(histogram: Histogram, taller: int) -> str:
    """A panel's title: its signal; the step whose documents it counts; how many of them it kept and dropped;
    its rule, wrapped to the panel's width."""
    counted = f"documents reaching {histogram.population}:" if histogram.population else "documents:"
    counts = f"kept {sum(histogram.kept):,} · dropped {sum(histogram.dropped):,}"
    counts += f" (drawn ×{taller})" if taller > 1 else ""
    return "\n".join([histogram.signal, counted, counts, textwrap.fill(histogram.rule, 50)])


def figure_png(histograms: dict[str, Histogram], title: str = "", columns: int = COLUMNS, dpi: int = 72) -> bytes:
    """One panel per histogram in a grid: kept documents as steps up from a line, dropped ones down from it
    (drawn taller by a factor the title gives where they would not show beside the kept ones), the
    thresholds as vertical lines named at their top and dashed by group, each titled by `figure_title` in
    type that reads at the figure's size; count signals on a logarithmic x axis."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
    from PIL import Image

    rows = max(1, math.ceil(len(histograms) / columns))
    height = PANEL_HEIGHT * rows + 1.2
    figure = Figure(figsize=(PANEL_WIDTH * columns, height), dpi=dpi)
    FigureCanvasAgg(figure)
    # A fixed layout: matplotlib's constrained one measures every tick label and takes half the time. Each
    # panel's title (five lines, or six where a rule wraps twice) takes the top 40 % of its row.
    axes = figure.subplots(rows, columns, squeeze=False, gridspec_kw={
        "left": 0.02, "right": 0.98, "bottom": 0.35 / height, "top": 1 - 3.1 / height, "wspace": 0.1, "hspace": 0.75,
    }).ravel()
    for ax, histogram in zip(axes, histograms.values()):
        edges = np.array(histogram.edges)
        kept_top, dropped_top = max(histogram.kept, default=0), max(histogram.dropped, default=0)
        taller = max(1, kept_top // (2 * dropped_top)) if dropped_top else 1
        ax.stairs(histogram.kept, edges, fill=True, alpha=0.55, color="#1e8e3e")
        ax.stairs([-n * taller for n in histogram.dropped], edges, fill=True, alpha=0.55, color="#d93025")
        ax.axhline(0, color="#888", linewidth=0.8)
        groups = list(dict.fromkeys(histogram.mark_groups))
        for i, (mark, label, group) in enumerate(zip(histogram.marks, histogram.mark_labels, histogram.mark_groups)):
            ax.axvline(mark, color="black", linestyle=("--", ":", "-.")[groups.index(group) % 3], linewidth=1.2)
            # Left of the line in the right half of the axis, so that the label stays inside the panel.
            right_half = histogram.position(mark) > (len(edges) - 1) / 2
            ax.annotate(label, (mark, 1 - 0.09 * (i % 4)), xycoords=("data", "axes fraction"), fontsize=12,
                        xytext=(-3 if right_half else 3, -2), textcoords="offset points", va="top",
                        ha="right" if right_half else "left")
        if histogram.signal in COUNT_SIGNALS:
            ax.set_xscale("symlog", linthresh=1)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(5))
        # Heights read against each other, the totals in the title: a y axis would double the time a figure of
        # 26 panels takes to draw, which every shard pays. Room above the tallest bin for the threshold names.
        ax.yaxis.set_visible(False)
        ax.set_ylim(-1.15 * (dropped_top * taller or 1), 1.5 * (kept_top or 1))
        ax.set_xlim(edges[0], edges[-1])
        ax.set_title(figure_title(histogram, taller), fontsize=TITLE_SIZE)
        ax.tick_params(labelsize=13)
    for ax in axes[len(histograms):]:
        ax.set_axis_off()
    legend = "(kept green, up; dropped red, down; values beyond an axis count in its end bin)"
    figure.suptitle(f"{title}\n{legend}".strip(), fontsize=18)
    drawn = io.BytesIO()
    figure.savefig(drawn, format="png")
    # 256 colours draw these plots as well as millions, in a third of the bytes.
    out = io.BytesIO()
    Image.open(drawn).convert("RGB").quantize(256).save(out, format="PNG", optimize=True)
    return out.getvalue()
