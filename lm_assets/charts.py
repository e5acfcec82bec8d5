"""Small SVG charts that the Dagster UI shows inline: a markdown image whose data URI holds the SVG.

The UI renders a markdown metadata value in place only while it is under 1,000 characters (longer ones
sit behind "[Show Markdown]"), so these charts are drawn in integer coordinates on a small canvas and
have their points thinned until the whole markdown fits. The numbers worth reading go in the caption.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

INLINE_LIMIT = 990  # the UI's limit is 1,000 characters of markdown
WIDTH, HEIGHT = 240, 64
COLORS = {"blue": "#17d", "orange": "#e70", "green": "#194", "red": "#d32", "grey": "#999"}

Series = Sequence[tuple[float, float]]


def data_uri(svg: str) -> str:
    """`svg` as a data URI that a markdown image can hold: the few characters a URL or markdown would
    misread are percent-encoded, quotes are single."""
    for char, code in (("%", "%25"), ("<", "%3C"), (">", "%3E"), ("#", "%23"), (" ", "%20"), ("(", "%28"),
                       (")", "%29"), ('"', "'"), ("\n", "")):  # fmt: skip
        svg = svg.replace(char, code)
    return "data:image/svg+xml," + svg


# The plot's margins: tick labels left and below, room for an edge dot right and above.
LEFT, RIGHT, TOP, BOTTOM = 26, 30, 5, 10
Ticks = Sequence[tuple[float, str]]  # (position on the plot, label)


def tick(value: float) -> str:
    """A tick label in a few characters: 0, 0.35, 2.5, 120, 3.1k, 1.2M, 7.5e-4."""
    if value != value:
        return "nan"
    size = abs(value)
    if 0 < size < 0.01:
        mantissa, exponent = f"{value:.1e}".split("e")
        return f"{mantissa.removesuffix('.0')}e{int(exponent)}"
    for limit, unit in ((1e6, "M"), (1e3, "k")):
        if size >= limit:
            return f"{value / limit:.3g}{unit}"
    return f"{value:.2g}" if size < 100 else f"{value:.0f}"


def svg(body: str, left: Ticks = (), bottom: Ticks = (), right: Ticks = (), right_color: str = "grey") -> str:
    """The plot drawn on a WIDTH × HEIGHT canvas framed by tick labels: `left` and `right` at y positions,
    `bottom` at x positions of the canvas (labels end there)."""
    labels = "".join(f"<text x='-2' y='{y + 3}'>{text}</text>" for y, text in left)
    labels += "".join(f"<text x='{x}' y='{HEIGHT + 9}'>{text}</text>" for x, text in bottom)
    labels = f"<g text-anchor='end'>{labels}</g>" if labels else ""
    labels += "".join(f"<text x='{WIDTH + 2}' y='{y + 3}' fill='{COLORS[right_color]}'>{text}</text>" for y, text in right)
    width, height = LEFT + WIDTH + RIGHT, TOP + HEIGHT + BOTTOM
    return (f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='{-LEFT} {-TOP} {width} {height}' width='{width * 2}' "
            f"height='{height * 2}' font-size='8' style='background:#fff'><path d='M0,0H{WIDTH}V{HEIGHT}H0Z' "
            f"fill='none' stroke='#ddd'/>{body}{labels}</svg>")  # fmt: skip


def scale(values: Sequence[float], low: float, high: float, size: int, flip: bool = False) -> list[int]:
    span = (high - low) or 1.0
    out = [round((v - low) / span * size) for v in values]
    return [size - v for v in out] if flip else out


def thinned(points: Series, count: int) -> list[tuple[float, float]]:
    """At most `count` of `points`, evenly spaced, the first and the last always among them."""
    points = list(points)
    if len(points) <= count or count < 2:
        return points
    picks = {round(i * (len(points) - 1) / (count - 1)) for i in range(count)}
    return [points[i] for i in sorted(picks)]


def finite(points: Series) -> list[tuple[float, float]]:
    return [(x, y) for x, y in points if y is not None and math.isfinite(x) and math.isfinite(y)]


def line_chart_svg(lines: list[tuple[Series, str]], dots: list[tuple[Series, str]] = (), count: int = 48,
                   right_axis: tuple[Series, str] | None = None, band: Series = ()) -> str:  # fmt: skip
    """Lines (and dots) sharing one x range and one y range, their ends as ticks on the axes; `right_axis` is
    a line on its own y range (a learning rate beside a loss), ticked on the right; `band` is (x, low) and
    (x, high) pairs' ranges, as (x, (low, high)) points, shaded (a chance band). `count` points at most per line."""
    band = [(x, lows) for x, lows in band if all(map(math.isfinite, (x, *lows)))]
    every = [p for series, _ in (*lines, *dots, *([right_axis] if right_axis else [])) for p in finite(series)]
    if not every:
        return svg("")
    x_low, x_high = min(x for x, _ in every), max(x for x, _ in every)
    shared = [p for series, _ in (*lines, *dots) for p in finite(series)] + [(x, y) for x, ys in band for y in ys]
    y_low, y_high = (min(y for _, y in shared), max(y for _, y in shared)) if shared else (0.0, 1.0)
    body = []

    def coords(points, low, high):
        xs = scale([x for x, _ in points], x_low, x_high, WIDTH)
        ys = scale([y for _, y in points], low, high, HEIGHT - 4, flip=True)
        return [(x, y + 2) for x, y in zip(xs, ys)]

    def polyline(points, color, low, high):
        flat = ",".join(f"{x},{y}" for x, y in coords(thinned(finite(points), count), low, high))
        return f"<polyline points='{flat}' fill='none' stroke='{COLORS[color]}' stroke-width='1.5'/>"

    if band:
        edge = coords([(x, ys[1]) for x, ys in band], y_low, y_high) + coords(
            [(x, ys[0]) for x, ys in reversed(band)], y_low, y_high)
        body.append(f"<polygon points='{','.join(f'{x},{y}' for x, y in edge)}' fill='#999' fill-opacity='.3'/>")
    right = []
    if right_axis is not None and finite(right_axis[0]):
        values = [y for _, y in finite(right_axis[0])]
        body.append(polyline(right_axis[0], right_axis[1], min(values), max(values)))
        right = [(2, tick(max(values))), (HEIGHT - 2, tick(min(values)))]
    for points, color in lines:
        body.append(polyline(points, color, y_low, y_high))
    for points, color in dots:
        marks = "".join(f"M{x},{y}h0" for x, y in coords(thinned(finite(points), count), y_low, y_high))
        body.append(f"<path d='{marks}' stroke='{COLORS[color]}' stroke-width='5' stroke-linecap='round'/>")
    left = [(2, tick(y_high)), (HEIGHT - 2, tick(y_low))]
    bottom = [(8, tick(x_low)), (WIDTH, tick(x_high))]  # end-anchored: the first reads from the left edge
    return svg("".join(body), left, bottom, right, right_axis[1] if right_axis else "grey")


# The dash patterns that tell groups of thresholds apart (dashed, dotted, long dashes), in the order
# `DASH_NAMES` names them for a caption.
DASHES, DASH_NAMES = ("3", "1,2", "7,2"), ("dashed", "dotted", "long dashes")


def histogram_svg(edges: Sequence[float], groups: list[tuple[Sequence[int], str]], marks: Sequence[float] = (),
                  bottom: Ticks = (), mark_styles: Sequence[int] = ()) -> str:  # fmt: skip
    """Step outlines of binned counts (`groups`: the counts over `edges` and a colour), and vertical lines at
    `marks` (thresholds) on the same x axis, each dashed as `DASHES[mark_styles[i]]` (so a caption can say
    which is which). `bottom` labels x positions given in `edges`' units. The first group's counts are
    ticked on the left; a later group too small to see beside it (under a quarter of its height) is drawn on
    its own scale, ticked on the right in its colour."""
    low, high = edges[0], edges[-1]
    xs = scale(edges, low, high, WIDTH)
    tops = [max(counts, default=0) or 1 for counts, _ in groups]
    steps, right, right_color = [], [], "grey"
    for i, (counts, color) in enumerate(groups):
        top = tops[0]
        if i and tops[i] * 4 < tops[0]:
            top, right, right_color = tops[i], [(2, tick(tops[i]))], color
        ys = scale(counts, 0, top, HEIGHT - 2, flip=True)
        path = f"M0,{HEIGHT}" + "".join(f"V{y + 2}H{x}" for y, x in zip(ys, xs[1:])) + f"V{HEIGHT}"
        steps.append(f"<path d='{path}' fill='{COLORS[color]}' stroke='{COLORS[color]}'/>")
    body = [f"<g fill-opacity='.3'>{''.join(steps)}</g>"]
    styles = [*mark_styles, *[0] * len(marks)]
    dashed = ""
    for style, dash in enumerate(DASHES):
        lines = "".join(f"M{scale([mark], low, high, WIDTH)[0]},0V{HEIGHT}"
                        for mark, s in zip(marks, styles) if s == style and low <= mark <= high)
        dashed += f"<path d='{lines}' stroke-dasharray='{dash}'/>" if lines else ""
    if dashed:
        body.append(f"<g stroke='#000'>{dashed}</g>")
    ticks = [(scale([at], low, high, WIDTH)[0], text) for at, text in bottom]
    return svg("".join(body), [(2, tick(tops[0]))], ticks, right, right_color)


def inline_image(svg_text: str, alt: str, caption: str = "") -> str:
    """The markdown that shows `svg_text` in place: the image, then the caption under it."""
    return f"![{alt}]({data_uri(svg_text)})" + (f"\n\n{caption}" if caption else "")


def fits_inline(markdown: str) -> bool:
    return len(markdown) <= INLINE_LIMIT


def inline_line_chart(alt: str, caption: str, lines, dots=(), right_axis=None, band=()) -> str:
    """A line chart's markdown with as many points per line as fit under the UI's inline limit."""
    for count in (64, 48, 36, 28, 20, 14, 10, 6, 2):
        markdown = inline_image(line_chart_svg(lines, dots, count, right_axis, band), alt, caption)
        if fits_inline(markdown):
            return markdown
    return markdown
