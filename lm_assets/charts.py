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
LEFT, RIGHT, TOP, BOTTOM = 28, 30, 5, 11
Ticks = Sequence[tuple[float, str]]  # (position on the plot, label)


def tick(value: float, digits: int = 2) -> str:
    """A tick label in a few characters: 0, 0.35, 2.5, 120, 3.1k, 1.2M, 7.5e-4; `digits` significant
    digits where more than two tell neighbouring ticks apart (1.05 beside 1.1)."""
    if value != value:
        return "nan"
    size = abs(value)
    if 0 < size < 0.01:
        mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    for limit, unit in ((1e6, "M"), (1e3, "k")):
        if size >= limit:
            return f"{value / limit:.{max(digits, 3)}g}{unit}"
    return f"{value:.{digits}g}" if size < 100 else f"{value:.0f}"


def nice_ticks(low: float, high: float, most: int = 3) -> list[tuple[float, str]]:
    """Round values from `low` to `high` (multiples of 1, 2, 2.5 or 5 times a power of ten), at most `most`
    of them, each with its label."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high <= low:
        return [(low, tick(low))]
    exponent = math.floor(math.log10((high - low) / most))
    # Steps grow until few enough fit (ten times the first always does); 2.5 keeps a third tick where
    # steps of 2 give four and steps of 5 one.
    for step in (m * 10.0**e for e in (exponent, exponent + 1) for m in (1, 2, 2.5, 5)):
        first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
        if last - first + 1 <= most:
            break
    values = [k * step for k in range(first, last + 1)]
    largest = max((abs(v) for v in values), default=0) or step
    digits = max(2, math.floor(math.log10(largest) + 1e-9) - math.floor(math.log10(step) + 1e-9) + 1)
    return [(v, tick(v, digits)) for v in values]


def label(x: float, y: float, text: str, attributes: str = "") -> str:
    """`text` centred on x by its width, a digit's being about 4.4 at the charts' font size: text-anchor
    would cost each chart an attribute or a group of the few characters it has."""
    return f"<text x='{round(x - 2.2 * len(text))}' y='{y}'{attributes}>{text}</text>"


def svg(body: str, left: Ticks = (), bottom: Ticks = (), right: Ticks = (), right_color: str = "grey",
        baseline: str = "") -> str:  # fmt: skip
    """The plot drawn on a WIDTH × HEIGHT canvas, framed, with tick marks and their labels (centred on them,
    those beside the plot in its margins): `left` and `right` at y positions, `bottom` at x positions of the
    canvas; `baseline` is path commands drawn as the frame is."""
    marks = baseline + "".join(f"M-2,{y}h2" for y, _ in left) + "".join(f"M{x},{HEIGHT}v2" for x, _ in bottom)
    marks += "".join(f"M{WIDTH},{y}h2" for y, _ in right)
    labels = "".join(label(-13, y + 3, text) for y, text in left)
    labels += "".join(label(x, HEIGHT + 10, text) for x, text in bottom)
    labels += "".join(label(WIDTH + 12, y + 3, text, f" fill='{COLORS[right_color]}'") for y, text in right)
    width, height = LEFT + WIDTH + RIGHT, TOP + HEIGHT + BOTTOM
    # Drawn at 1.5 times its size, to be read (447 px: whole in the UI's metadata value column at a 1600-pixel
    # window, where twice its size was cut); its height follows from the viewBox.
    return (f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='{-LEFT},{-TOP},{width},{height}' width='{width * 3 // 2}' "
            f"font-size='8' style='background:#fff'><path d='M0,0H{WIDTH}V{HEIGHT}H0Z{marks}' fill='none' "
            f"stroke='#bbb'/>{body}{labels}</svg>")  # fmt: skip


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
                   band: Series = ()) -> str:  # fmt: skip
    """Lines (and dots) sharing one x range and one y range, ticked at round values; `band` is (x, low) and
    (x, high) pairs' ranges, as (x, (low, high)) points, shaded (a chance band). `count` points at most per
    line, half as many dots (each costs more characters than a line's point)."""
    band = [(x, lows) for x, lows in band if all(map(math.isfinite, (x, *lows)))]
    shared = [p for series, _ in (*lines, *dots) for p in finite(series)]
    if not shared:
        return svg("")
    x_low, x_high = min(x for x, _ in shared), max(x for x, _ in shared)
    shared += [(x, y) for x, ys in band for y in ys]
    y_low, y_high = min(y for _, y in shared), max(y for _, y in shared)

    def y_of(values):
        return [y + 2 for y in scale(values, y_low, y_high, HEIGHT - 4, flip=True)]

    def coords(points):
        xs = scale([x for x, _ in points], x_low, x_high, WIDTH)
        return list(zip(xs, y_of([y for _, y in points])))

    def relative(points, most):
        """The first point's position, then each next one's step from the one before as `dx,dy`: small
        numbers, so more points fit inline (drawn with the relative commands `l` and `m`)."""
        xy = coords(thinned(finite(points), most))
        return xy[0], [f"{x - a},{y - b}" for (a, b), (x, y) in zip(xy, xy[1:])]

    body = []
    if band:
        edge = coords([(x, ys[1]) for x, ys in band] + [(x, ys[0]) for x, ys in reversed(band)])
        body.append(f"<polygon points='{','.join(f'{x},{y}' for x, y in edge)}' fill='#999' fill-opacity='.3'/>")
    for points, color in lines:
        if finite(points):
            (x, y), steps = relative(points, count)
            body.append(f"<path d='M{x},{y}{'l' if steps else ''}{','.join(steps)}' fill='none' "
                        f"stroke='{COLORS[color]}' stroke-width='1.5'/>")  # fmt: skip
    for points, color in dots:
        if finite(points):
            (x, y), steps = relative(points, max(2, count // 2))
            marks = f"M{x},{y}h0" + "".join(f"m{step}h0" for step in steps)
            body.append(f"<path d='{marks}' stroke='{COLORS[color]}' stroke-width='5' stroke-linecap='round'/>")
    values = nice_ticks(y_low, y_high, 3)
    left = list(zip(y_of([v for v, _ in values]), (text for _, text in values)))
    bottom = [(scale([x], x_low, x_high, WIDTH)[0], text) for x, text in nice_ticks(x_low, x_high, 3)]
    return svg("".join(body), left, bottom)


# The dash patterns that tell groups of thresholds apart (dashed, dotted, long dashes), in the order
# `DASH_NAMES` names them for a caption.
DASHES, DASH_NAMES = ("3", "1,2", "7,2"), ("dashed", "dotted", "long dashes")


# Where a histogram's kept documents (drawn up) meet its dropped ones (drawn down).
SPLIT = 42


def histogram_svg(edges: Sequence[float], kept: Sequence[int], dropped: Sequence[int], marks: Sequence[float] = (),
                  bottom: Ticks = (), mark_styles: Sequence[int] = ()) -> str:  # fmt: skip
    """Binned counts over `edges`: kept documents drawn up from a line, dropped ones down from it, each on a
    scale of its own, so that a few dropped documents beside many kept ones still show (kept ticked on the
    left, dropped on the right in red). Vertical lines at `marks` (thresholds) on the same x axis, each dashed
    as `DASHES[mark_styles[i]]` (so a caption can say which is which). `bottom` labels x positions given in
    `edges`' units."""
    low, high = edges[0], edges[-1]
    xs = scale(edges, low, high, WIDTH)

    def drawn(counts, color, size, direction):
        """The counts as a filled step outline from the line, `size` high at most, and its tallest bin's count
        ticked at its end."""
        most = max(counts, default=0)
        top = most or 1
        # One V and H per run of bins of one height: a run of empty bins costs no more than one.
        runs = []
        for x0, height, x in zip(xs, scale(counts, 0, top, size), xs[1:]):
            if runs and runs[-1][1] == SPLIT + direction * height:
                runs[-1][2] = x
            else:
                runs.append([x0, SPLIT + direction * height, x])
        # Empty bins at either end are left out: the outline starts and ends on the line.
        while runs and runs[-1][1] == SPLIT:
            runs.pop()
        while runs and runs[0][1] == SPLIT:
            runs.pop(0)
        start = runs[0][0] if runs else 0
        path = f"M{start},{SPLIT}" + "".join(f"V{y}H{x}" for _, y, x in runs) + f"V{SPLIT}"
        return f"<path d='{path}' fill='{COLORS[color]}'/>", [(SPLIT + direction * size, tick(most))]

    kept_path, left = drawn(kept, "green", SPLIT - 2, -1)
    dropped_path, right = drawn(dropped, "red", HEIGHT - SPLIT, 1)
    body = [f"<g fill-opacity='.6'>{kept_path}{dropped_path}</g>"]
    styles = [*mark_styles, *[0] * len(marks)]
    dashed = ""
    for style, dash in enumerate(DASHES):
        lines = "".join(f"M{scale([mark], low, high, WIDTH)[0]},0V{HEIGHT}"
                        for mark, s in zip(marks, styles) if s == style and low <= mark <= high)
        own = f" stroke-dasharray='{dash}'" if style else ""
        dashed += f"<path d='{lines}'{own}/>" if lines else ""
    if dashed:
        # The first dash pattern is the group's, the others the paths' own.
        body.append(f"<g stroke='#000' stroke-dasharray='{DASHES[0]}'>{dashed}</g>")
    ticks = [(scale([at], low, high, WIDTH)[0], text) for at, text in bottom]
    return svg("".join(body), left, ticks, right, "red", f"M0,{SPLIT}H{WIDTH}")


def inline_image(svg_text: str, alt: str, caption: str = "") -> str:
    """The markdown that shows `svg_text` in place: the image, then the caption under it."""
    return f"![{alt}]({data_uri(svg_text)})" + (f"\n\n{caption}" if caption else "")


def fits_inline(markdown: str) -> bool:
    return len(markdown) <= INLINE_LIMIT


def inline_line_chart(alt: str, caption: str, lines, dots=(), band=()) -> str:
    """A line chart's markdown with as many points per line as fit under the UI's inline limit."""
    for count in range(64, 1, -1):
        markdown = inline_image(line_chart_svg(lines, dots, count, band), alt, caption)
        if fits_inline(markdown):
            return markdown
    return markdown
