"""The inline charts: SVG in a data URI that fits the UI's limit for markdown shown in place, with axes that
say what the heights and positions are."""

import math
import re
import urllib.parse
import xml.etree.ElementTree as ET

from lm_assets.charts import (
    DASHES,
    HEIGHT,
    INLINE_LIMIT,
    RIGHT,
    TOP,
    WIDTH,
    histogram_svg,
    inline_image,
    inline_line_chart,
    tick,
)

SVG = "{http://www.w3.org/2000/svg}"


def svg_of(markdown: str) -> ET.Element:
    uri = re.search(r"\]\((data:image/svg\+xml,[^)]*)\)", markdown).group(1)
    assert not set(uri) & set(" ()<>#\"\n")  # nothing a markdown image's destination would misread
    return ET.fromstring(urllib.parse.unquote(uri.removeprefix("data:image/svg+xml,")))


def texts(svg: ET.Element) -> list[str]:
    return [element.text for element in svg.iter(f"{SVG}text")]


def test_ticks_read_in_a_few_characters():
    assert [tick(v) for v in (0, 0.35, 2.5, 120, 3100, 100_000, 1.2e6, 7.5e-4, 3e-6)] == [
        "0", "0.35", "2.5", "120", "3.1k", "100k", "1.2M", "7.5e-4", "3e-6"]


def test_a_long_run_is_thinned_to_fit_in_place_with_its_axes_ticked():
    loss = [(step, 9 - math.log(step)) for step in range(1, 2001)]
    lr = [(step, 3e-4 * min(1, step / 100)) for step in range(1, 2001)]
    vals = [(step, 9.2 - math.log(step)) for step in range(100, 2001, 100)]
    markdown = inline_line_chart("loss", "loss 9 → 1.4", [(loss, "blue")], [(vals, "red")], (lr, "grey"))
    assert len(markdown) <= INLINE_LIMIT and markdown.startswith("![loss](data:image/svg+xml,")
    assert markdown.endswith("\n\nloss 9 → 1.4")
    svg = svg_of(markdown)
    lines = svg.findall(f"{SVG}polyline")
    assert len(lines) == 2  # the lr, then the loss
    loss_points = [tuple(map(int, p)) for p in zip(*[iter(lines[1].get("points").split(","))] * 2)]
    # First and last steps kept; the loss falls, so y (measured downwards) rises from top to bottom.
    assert loss_points[0][0] == 0 and loss_points[-1][0] == WIDTH
    assert loss_points[0][1] < loss_points[-1][1] and all(0 <= y <= HEIGHT for _, y in loss_points)
    dots = [p for p in svg.findall(f"{SVG}path") if "h0" in p.get("d")][0].get("d")
    assert 2 <= dots.count("h0") <= len(vals) and "M240," in dots  # the last validation is drawn
    # Ticks: the loss's range on the left, the steps below, the lr's range on the right.
    assert {"9", "1.4", "1", "2k", "3e-4", "3e-6"} <= set(texts(svg))
    # A dot at the right edge (radius 2.5) and at the top is inside the picture, not cut off.
    left, top, width, height = map(float, svg.get("viewBox").split())
    assert left + width >= WIDTH + 2.5 and top <= -2.5 and RIGHT >= 2.5 and TOP >= 2.5


def test_a_histogram_draws_each_group_its_thresholds_by_group_and_its_axes():
    edges = [0, 10, 20, 30, 40]
    svg_text = histogram_svg(edges, [([1, 40, 20, 0], "green"), ([3, 0, 0, 1], "red")], marks=[25, 33, 99],
                             bottom=[(0, "0"), (40, "40")], mark_styles=[0, 1, 0])  # fmt: skip
    svg = svg_of(inline_image(svg_text, "words"))
    steps = svg.find(f"{SVG}g").findall(f"{SVG}path")
    assert len(steps) == 2 and "V2H120" in steps[0].get("d")  # the tallest bar (40, ending at x=20) reaches the top
    # The dropped counts (at most 3 beside 40) are drawn on their own scale, so they are seen: their
    # tallest bin reaches the top too, and the right axis says its height in red.
    assert "V2H60" in steps[1].get("d") and "3" in texts(svg)
    thresholds = {p.get("stroke-dasharray"): p.get("d") for p in svg.iter(f"{SVG}path") if p.get("stroke-dasharray")}
    # 25 and 33 in the range, each dashed as its group is; 99 lies beyond the axis.
    assert thresholds == {DASHES[0]: f"M{round(25 / 40 * WIDTH)},0V{HEIGHT}", DASHES[1]: f"M{round(33 / 40 * WIDTH)},0V{HEIGHT}"}
    assert {"40", "0"} <= set(texts(svg))


def test_a_band_is_shaded_under_the_line():
    from lm_assets.charts import line_chart_svg

    acc = [(10, 0.25), (20, 0.3), (30, 0.41)]
    band = [(10, (0.2, 0.3)), (20, (0.21, 0.31)), (30, (0.19, 0.29))]
    svg = ET.fromstring(line_chart_svg([(acc, "blue")], band=band))
    polygon = svg.find(f"{SVG}polygon")
    points = [tuple(map(int, p)) for p in zip(*[iter(polygon.get("points").split(","))] * 2)]
    assert len(points) == 6 and {x for x, _ in points} == {0, WIDTH // 2, WIDTH}
    assert {"0.41", "0.19"} <= set(texts(svg))  # the y range holds the band and the line
