"""The inline charts: SVG in a data URI that fits the UI's limit for markdown shown in place."""

import math
import re
import urllib.parse
import xml.etree.ElementTree as ET

from lm_assets.charts import HEIGHT, INLINE_LIMIT, WIDTH, histogram_svg, inline_image, inline_line_chart


def svg_of(markdown: str) -> ET.Element:
    uri = re.search(r"\]\((data:image/svg\+xml,[^)]*)\)", markdown).group(1)
    assert not set(uri) & set(" ()<>#\"\n")  # nothing a markdown image's destination would misread
    return ET.fromstring(urllib.parse.unquote(uri.removeprefix("data:image/svg+xml,")))


def test_a_long_run_is_thinned_to_fit_in_place():
    loss = [(step, 9 - math.log(step)) for step in range(1, 2001)]
    lr = [(step, 3e-4 * min(1, step / 100)) for step in range(1, 2001)]
    vals = [(step, 9.2 - math.log(step)) for step in range(100, 2001, 100)]
    markdown = inline_line_chart("loss", "loss 9 → 1.4", [(loss, "blue")], [(vals, "red")], (lr, "grey"))
    assert len(markdown) <= INLINE_LIMIT and markdown.startswith("![loss](data:image/svg+xml,")
    assert markdown.endswith("\n\nloss 9 → 1.4")
    svg = svg_of(markdown)
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2  # the lr, then the loss
    loss_points = [tuple(map(int, p)) for p in zip(*[iter(lines[1].get("points").split(","))] * 2)]
    # First and last steps kept; the loss falls, so y (measured downwards) rises from top to bottom.
    assert loss_points[0][0] == 0 and loss_points[-1][0] == WIDTH
    assert loss_points[0][1] < loss_points[-1][1] and all(0 <= y <= HEIGHT for _, y in loss_points)
    dots = svg.find("{http://www.w3.org/2000/svg}path").get("d")
    assert dots.count("h0") == len(vals)


def test_a_histogram_draws_each_group_and_the_threshold():
    edges = [0, 10, 20, 30, 40]
    svg_text = histogram_svg(edges, [([1, 4, 2, 0], "green"), ([3, 0, 0, 1], "red")], marks=[25, 99])
    svg = svg_of(inline_image(svg_text, "words"))
    paths = svg.findall("{http://www.w3.org/2000/svg}path")
    assert len(paths) == 3  # two groups and the one threshold inside the range
    assert "V2H120" in paths[0].get("d")  # the tallest bar (4, the second bin, ending at x=20) reaches the top
    assert paths[2].get("d") == f"M{round(25 / 40 * WIDTH)},0V{HEIGHT}"
