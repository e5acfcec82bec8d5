"""The inline charts: SVG in a data URI that fits the UI's limit for markdown shown in place, with axes that
say what the heights and positions are."""

import math
import re
import urllib.parse
import xml.etree.ElementTree as ET

from lm_assets.charts import (
    COLORS,
    DASHES,
    HEIGHT,
    INLINE_LIMIT,
    RIGHT,
    SPLIT,
    TOP,
    WIDTH,
    histogram_svg,
    inline_image,
    inline_line_chart,
    line_chart_svg,
    nice_ticks,
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


def test_axes_are_ticked_at_round_values_each_labelled_apart():
    def labels(low, high, most):
        return [label for _, label in nice_ticks(low, high, most)]

    assert labels(1.3, 9.1, 3) == ["2.5", "5", "7.5"]
    assert labels(1, 2000, 3) == ["1k", "2k"]
    assert labels(3e-6, 2.9e-4, 2) == ["1e-4", "2e-4"]
    assert labels(0, 1, 3) == ["0", "0.5", "1"]
    # A third digit where two would label neighbouring ticks alike.
    assert labels(1.0, 1.1, 3) == ["1", "1.05", "1.1"]
    assert labels(0, 0.7, 3) == ["0", "0.25", "0.5"]


def path_points(d: str) -> list[tuple[int, int]]:
    """The points of a path drawn as `Mx,y` then relative `l` steps, absolute."""
    start, _, steps = d.removeprefix("M").partition("l")
    x, y = map(int, start.split(","))
    points = [(x, y)]
    numbers = list(map(int, steps.split(","))) if steps else []
    for dx, dy in zip(numbers[::2], numbers[1::2]):
        x, y = x + dx, y + dy
        points.append((x, y))
    return points


def labelled(svg: ET.Element) -> dict[str, tuple[float, float]]:
    """Each label's text and where its middle is (labels are placed by their estimated width)."""
    return {e.text: (float(e.get("x")) + 2.2 * len(e.text), float(e.get("y"))) for e in svg.iter(f"{SVG}text")}


def test_a_long_run_is_drawn_with_many_points_and_its_axes_ticked_at_round_values():
    loss = [(step, 9 - math.log(step)) for step in range(1, 2001)]
    vals = [(step, 9.2 - math.log(step)) for step in range(100, 2001, 100)]
    caption = "loss (blue) 9.000 → 1.399 · val loss 1.599 at step 2000 (red dots)"
    markdown = inline_line_chart("loss", caption, [(loss, "blue")], [(vals, "red")])
    assert len(markdown) <= INLINE_LIMIT and markdown.startswith("![loss](data:image/svg+xml,")
    assert markdown.endswith(f"\n\n{caption}")
    svg = svg_of(markdown)
    line = [p for p in svg.iter(f"{SVG}path") if p.get("stroke") == COLORS["blue"]][0]
    points = path_points(line.get("d"))
    # Enough points to show the curve's shape, not just its ends; first and last steps kept.
    assert len(points) >= 16 and points[0][0] == 0 and points[-1][0] == WIDTH
    assert points[0][1] < points[-1][1] and all(0 <= y <= HEIGHT for _, y in points)
    # Ticks: round losses on the left, at the height of their value, and round steps below.
    at = labelled(svg)
    assert {"2.5", "5", "7.5", "1k", "2k"} <= set(at)
    span = max(y for _, y in loss + vals) - min(y for _, y in loss + vals)
    per_unit = (HEIGHT - 4) / span
    assert abs((at["2.5"][1] - at["5"][1]) - 2.5 * per_unit) <= 1 and at["5"][0] < 0 < at["2k"][1] - HEIGHT
    assert abs(at["1k"][0] - WIDTH * (1000 - 1) / (2000 - 1)) <= 1 and abs(at["2k"][0] - WIDTH) <= 1
    # Each tick has its mark on the axis.
    frame = [p for p in svg.iter(f"{SVG}path") if p.get("fill") == "none" and p.get("stroke") == "#bbb"][0].get("d")
    assert f"M{round(at['1k'][0])},{HEIGHT}v2" in frame and "M-2," in frame
    # The last validation is drawn at the right edge: its dot (radius 2.5) is inside the picture, not cut off.
    dots = [p for p in svg.iter(f"{SVG}path") if p.get("stroke-linecap") == "round"][0]
    assert dots.get("d").startswith("M") and dots.get("d").count("h0") >= 5
    left, top, width, _ = map(float, svg.get("viewBox").split(","))
    assert left + width >= WIDTH + 2.5 and top <= -2.5 and RIGHT >= 2.5 and TOP >= 2.5


def test_a_histogram_draws_kept_up_and_dropped_down_each_on_its_scale_with_its_thresholds_by_group():
    edges = [0, 10, 20, 30, 40]
    svg_text = histogram_svg(edges, [1, 50, 25, 0], [3, 0, 0, 1], marks=[25, 33, 99],
                             bottom=[(0, "0"), (20, "20"), (40, "40")], mark_styles=[0, 1, 0])  # fmt: skip
    svg = svg_of(inline_image(svg_text, "words"))
    kept, dropped = svg.find(f"{SVG}g").findall(f"{SVG}path")
    # Kept up from the line: its tallest bin (50, ending at x=120) reaches the top; its empty last bin is left out.
    assert kept.get("d") == f"M0,{SPLIT}V{SPLIT - 1}H60V2H120V{SPLIT - 20}H180V{SPLIT}"
    # Dropped down from it, on a scale of its own: 3 documents beside 50 kept still reach the bottom.
    assert dropped.get("d") == f"M0,{SPLIT}V{HEIGHT}H60V{SPLIT}H180V{SPLIT + 7}H240V{SPLIT}"
    assert kept.get("fill") == COLORS["green"] and dropped.get("fill") == COLORS["red"]
    # Each scale says its tallest bin's count: kept's top left, dropped's bottom right in red.
    at = labelled(svg)
    assert at["50"][0] < 0 and at["50"][1] < SPLIT and at["3"][0] > WIDTH and at["3"][1] > SPLIT
    assert [e.get("fill") for e in svg.iter(f"{SVG}text") if e.text == "3"] == [COLORS["red"]]
    # The x axis ticked where asked, each label centred on its mark.
    assert abs(at["20"][0] - 120) <= 1 and abs(at["0"][0]) <= 1 and abs(at["40"][0] - WIDTH) <= 1
    # Thresholds: 25 and 33 in the range, each dashed as its group is (the first pattern is the group's own);
    # 99 lies beyond the axis.
    group = [g for g in svg.iter(f"{SVG}g") if g.get("stroke") == "#000"][0]
    assert group.get("stroke-dasharray") == DASHES[0]
    lines = {p.get("stroke-dasharray"): p.get("d") for p in group.findall(f"{SVG}path")}
    assert lines == {None: f"M{round(25 / 40 * WIDTH)},0V{HEIGHT}", DASHES[1]: f"M{round(33 / 40 * WIDTH)},0V{HEIGHT}"}


def test_a_band_is_shaded_under_the_line():
    acc = [(10, 0.25), (20, 0.3), (30, 0.41)]
    band = [(10, (0.2, 0.3)), (20, (0.21, 0.31)), (30, (0.19, 0.29))]
    svg = ET.fromstring(line_chart_svg([(acc, "blue")], band=band))
    polygon = svg.find(f"{SVG}polygon")
    points = [tuple(map(int, p)) for p in zip(*[iter(polygon.get("points").split(","))] * 2)]
    assert len(points) == 6 and {x for x, _ in points} == {0, WIDTH // 2, WIDTH}
    # The y range holds the band and the line: its round values from 0.19 to 0.41.
    assert {"0.2", "0.3", "0.4"} <= set(texts(svg)) and {"10", "20", "30"} <= set(texts(svg))


def test_training_runs_curves_draw_the_loss_with_many_points_and_the_lr_on_a_chart_of_its_own():
    from lm_assets.defs.training.assets import curves_markdown, lr_markdown

    history = [{"step": s, "loss": 9 - math.log(s), "lr": 3e-4 * min(1, s / 100) * (1 - s / 2500),
                **({"val_loss": 9.2 - math.log(s)} if s % 100 == 0 else {})} for s in range(1, 2001)]  # fmt: skip
    curves, lr = curves_markdown(history), lr_markdown(history)
    assert curves.startswith("![loss](data:image/svg+xml,") and lr.startswith("![lr](data:image/svg+xml,")
    assert len(curves) <= INLINE_LIMIT and len(lr) <= INLINE_LIMIT
    assert "val loss 1.599 at step 2000 (red dots)" in curves and "lr peak 0.000288 at step 100" in lr
    loss_line = [p for p in svg_of(curves).iter(f"{SVG}path") if p.get("stroke") == COLORS["blue"]][0]
    lr_line = [p for p in svg_of(lr).iter(f"{SVG}path") if p.get("stroke") == COLORS["orange"]][0]
    assert len(path_points(loss_line.get("d"))) >= 16 and len(path_points(lr_line.get("d"))) >= 32
    assert {"1e-4", "2e-4", "1k", "2k"} <= set(texts(svg_of(lr)))


def test_an_inline_chart_is_whole_in_the_uis_metadata_column_at_1600_pixels():
    # The value column of an asset's metadata table is about 490 px wide at a 1600-pixel window.
    svg = svg_of(inline_line_chart("loss", "loss", [([(1, 2.0), (2, 1.0)], "blue")], []))
    assert 400 <= int(svg.get("width")) <= 480
