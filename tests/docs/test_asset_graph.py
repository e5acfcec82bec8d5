"""docs/assets.md's asset diagram is the asset graph: every dependency drawn, nothing drawn that is not one."""

import re
from pathlib import Path

from lm_assets.definitions import defs

ASSETS_DOC = Path(__file__).resolve().parents[2] / "docs" / "assets.md"
ARROW = re.compile(r"\s*--\s[^>]*?-->\s*|\s*-->\s*")  # "a -- label --> b" or "a --> b"


def drawn_edges(names: set[str]) -> set[tuple[str, str]]:
    block = ASSETS_DOC.read_text().split("```mermaid", 1)[1].split("```", 1)[0]
    edges = set()
    for line in block.strip().splitlines()[1:]:
        stations = [[re.match(r"\w+", node.strip()).group(0) for node in part.split("&")] for part in ARROW.split(line.strip())]
        for sources, targets in zip(stations, stations[1:]):
            edges |= {(a, b) for a in sources for b in targets if a in names and b in names}
    return edges


def test_the_asset_diagram_draws_every_dependency_and_no_other():
    graph = defs.resolve_asset_graph()
    names = {key.to_user_string() for key in graph.get_all_asset_keys()}
    dependencies = {(parent.to_user_string(), key.to_user_string())
                    for key in graph.get_all_asset_keys() for parent in graph.get(key).parent_keys}  # fmt: skip
    assert drawn_edges(names) == dependencies
    assert len(dependencies) > 20
