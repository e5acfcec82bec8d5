"""The reference docs tell the truth: the tables generated from the code are what the code says now, every
relative link resolves, and the layout names every module."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def generator():
    spec = importlib.util.spec_from_file_location("generate_docs", ROOT / "scripts" / "generate_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_tables_are_what_the_code_says():
    drifted = generator().drifted()
    assert not drifted, f"{sorted(drifted)}: run .venv/bin/python scripts/generate_docs.py"


def test_a_generated_block_without_a_generator_fails():
    with pytest.raises(KeyError, match="no generator for block 'nonesuch'"):
        generator().render("<!-- generated:nonesuch -->\n<!-- /generated:nonesuch -->\n", "README.md")


def test_the_readme_is_short_and_keeps_its_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 12 * 1024
    assert "make demo   # " in readme and "make test   # " in readme
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for line in prose(path.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where a bracket is not a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document):
    broken = []
    for target in LINK.findall(prose(document.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.exists():
            broken.append(target)
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(target)
    assert not broken, f"{document.relative_to(ROOT)}: links that resolve to nothing: {broken}"


def test_the_layout_names_every_package_and_module():
    layout = (ROOT / "docs" / "layout.md").read_text()
    missing = [f"{p.name}/" for p in (ROOT / "lm_assets").iterdir()
               if p.is_dir() and (p / "__init__.py").exists() and f"{p.name}/" not in layout]  # fmt: skip
    for folder in ("lm_assets/training", "lm_assets/evaluation", "lm_assets/sft", "scripts"):
        missing += [f"{folder}/{p.name}" for p in sorted((ROOT / folder).glob("*.py"))
                    if p.name != "__init__.py" and not re.search(rf"^\s+{re.escape(p.name)}\s", layout, re.M)]  # fmt: skip
    assert not missing, f"docs/layout.md does not name {missing}"


def test_the_group_table_covers_every_group():
    from lm_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    groups = {graph.get(key).group_name for key in graph.get_all_asset_keys()}
    readme = (ROOT / "README.md").read_text()
    assert [g for g in sorted(groups) if f"| {g} |" not in readme] == []


def test_the_evaluation_package_names_every_module():
    import lm_assets.evaluation

    modules = [p.stem for p in (ROOT / "lm_assets" / "evaluation").glob("*.py") if p.stem != "__init__"]
    assert [m for m in sorted(modules) if f"`{m}`" not in lm_assets.evaluation.__doc__] == []
