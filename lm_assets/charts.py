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
COLORS = {"blue": "#1f6fd1", "orange": "#e8710a", "green": "#1e8e3e", "red": "#d93025", "grey": "#999"}

Series = Sequence[tuple[float, float]]


def data_uri(svg: str) -> str:
    """`svg` as a data URI that a markdown image can hold: the few characters a URL or markdown would
    misread are percent-encoded, quotes are single."""
    for char, code in (("%", "%25"), ("<", "%3C"), (">", "%3E"), ("#", "%23"), (" ", "%20"), ("(", "%28"),
                       (")", "%29"), ('"', "'"), ("\n", "")):  # fmt: skip
        svg = svg.replace(char, code)
    return "data:image/svg+xml," + svg


def svg(body: str) -> str:
    return (f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='-1 -1 {WIDTH + 2} {HEIGHT + 2}' width='{WIDTH * 2}' "
            f"height='{HEIGHT * 2}'><rect width='{WIDTH}' height='{HEIGHT}' fill='#fff' stroke='#ddd'/>{body}</svg>")  # fmt: skip


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
                   right_axis: tuple[Series, str] | None = None) -> str:  # fmt: skip
    """Lines (and dots) sharing one x range and one y range; `right_axis` is a line on its own y range
    (a learning rate beside a loss). `count` points at most per line."""
    every = [p for series, _ in (*lines, *dots, *([right_axis] if right_axis else [])) for p in finite(series)]
    if not every:
        return svg("")
    x_low, x_high = min(x for x, _ in every), max(x for x, _ in every)
    shared = [p for series, _ in (*lines, *dots) for p in finite(series)]
    y_low, y_high = (min(y for _, y in shared), max(y for _, y in shared)) if shared else (0.0, 1.0)
    body = []

    def coords(points, low, high):
        xs = scale([x for x, _ in points], x_low, x_high, WIDTH)
        ys = scale([y for _, y in points], low, high, HEIGHT - 4, flip=True)
        return [(x, y + 2) for x, y in zip(xs, ys)]

    def polyline(points, color, low, high):
        flat = ",".join(f"{x},{y}" for x, y in coords(thinned(finite(points), count), low, high))
        return f"<polyline points='{flat}' fill='none' stroke='{COLORS[color]}' stroke-width='1.5'/>"

    if right_axis is not None and finite(right_axis[0]):
        values = [y for _, y in finite(right_axis[0])]
        body.append(polyline(right_axis[0], right_axis[1], min(values), max(values)))
    for points, color in lines:
        body.append(polyline(points, color, y_low, y_high))
    for points, color in dots:
        marks = "".join(f"M{x},{y}h0" for x, y in coords(finite(points), y_low, y_high))
        body.append(f"<path d='{marks}' stroke='{COLORS[color]}' stroke-width='5' stroke-linecap='round'/>")
    return svg("".join(body))


def histogram_svg(edges: Sequence[float], groups: list[tuple[Sequence[int], str]], marks: Sequence[float] = ()) -> str:
    """Step outlines of binned counts (`groups`: the counts over `edges` and a colour), and dashed
    vertical lines at `marks` (thresholds) on the same x axis."""
    low, high = edges[0], edges[-1]
    top = max((max(counts) for counts, _ in groups if len(counts)), default=0) or 1
    xs = scale(edges, low, high, WIDTH)
    body = []
    for counts, color in groups:
        ys = scale(counts, 0, top, HEIGHT - 2, flip=True)
        path = f"M0,{HEIGHT}" + "".join(f"V{y + 2}H{x}" for y, x in zip(ys, xs[1:])) + f"V{HEIGHT}"
        body.append(f"<path d='{path}' fill='{COLORS[color]}' fill-opacity='.25' stroke='{COLORS[color]}'/>")
    for mark in marks:
        if low <= mark <= high:
            x = scale([mark], low, high, WIDTH)[0]
            body.append(f"<path d='M{x},0V{HEIGHT}' stroke='#000' stroke-dasharray='3'/>")
    return svg("".join(body))


def inline_image(svg_text: str, alt: str, caption: str = "") -> str:
    """The markdown that shows `svg_text` in place: the image, then the caption under it."""
    return f"![{alt}]({data_uri(svg_text)})" + (f"\n\n{caption}" if caption else "")


def fits_inline(markdown: str) -> bool:
    return len(markdown) <= INLINE_LIMIT


def inline_line_chart(alt: str, caption: str, lines, dots=(), right_axis=None) -> str:
    """A line chart's markdown with as many points per line as fit under the UI's inline limit."""
    for count in (64, 48, 36, 28, 20, 14, 10, 6, 2):
        markdown = inline_image(line_chart_svg(lines, dots, count, right_axis), alt, caption)
        if fits_inline(markdown):
            return markdown
    return markdown
