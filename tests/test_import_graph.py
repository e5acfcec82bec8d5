"""The import graph of `lm_assets` and `training` has no cycles.

Every `.py` file is parsed (not imported). A module imports another if any `import` or
`from ... import` anywhere in it, inside functions too, names that module or an attribute of it:
`import a.b.c` and `from a.b import c` resolve to the longest known module prefix of `a.b.c`, and
relative imports resolve against the importing module's package. Parent packages do not count:
the package `__init__`s here are empty or re-export their own submodules, so edges to them would
only add package-to-submodule loops that Python resolves. Cycles are the strongly connected
components (Tarjan) of that graph; a failure lists each with the import lines inside it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lm_assets",)

Graph = dict[str, dict[str, int]]  # module -> {imported module: first line naming it}


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the packages."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _base_package(module: str, path: Path, level: int) -> str:
    """The package a `level`-dot relative import in `module` starts from."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return package


def _named(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Dotted names an import statement refers to: modules, or attributes of modules."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        base = ".".join(filter(None, (_base_package(module, path, node.level), base)))
    return [base if alias.name == "*" else f"{base}.{alias.name}" for alias in node.names]


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that `name` is, or is inside."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def import_graph(modules: dict[str, Path]) -> Graph:
    graph: Graph = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            # `from pkg import name` names pkg.name: that module if it is one, else pkg.
            targets = {_resolve(name, modules) for name in _named(module, path, node)}
            for target in targets - {None, module}:
                edges.setdefault(target, node.lineno)
    return graph


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def cycles(graph: Graph) -> list[list[str]]:
    return sorted(c for c in strongly_connected(graph) if len(c) > 1)


def describe(graph: Graph, found: list[list[str]]) -> str:
    lines = []
    for component in found:
        lines.append(f"cycle of {len(component)}: {', '.join(component)}")
        members = set(component)
        for module in component:
            lines += [f"    {module}:{line} imports {target}" for target, line in sorted(graph[module].items())
                      if target in members]
    return "\n".join(lines)


def _only(graph: Graph, prefix: str) -> Graph:
    inside = lambda name: name == prefix or name.startswith(prefix + ".")  # noqa: E731
    return {m: {t: n for t, n in edges.items() if inside(t)} for m, edges in graph.items() if inside(m)}


def test_no_import_cycles():
    graph = import_graph(module_files(ROOT, PACKAGES))
    found = cycles(graph)
    assert not found, "import cycles:\n" + describe(graph, found)


def test_no_import_cycles_within_training():
    graph = _only(import_graph(module_files(ROOT, PACKAGES)), "lm_assets.training")
    found = cycles(graph)
    assert not found, "import cycles:\n" + describe(graph, found)


def test_the_training_program_imports_nothing_else_of_lm_assets():
    """lm_assets.training runs standalone under torchrun: the rest of lm_assets may import it, never the reverse."""
    graph = import_graph(module_files(ROOT, PACKAGES))
    inside = lambda name: name == "lm_assets.training" or name.startswith("lm_assets.training.")  # noqa: E731
    outside = {m: sorted(t for t in edges if not inside(t)) for m, edges in graph.items() if inside(m)}
    assert len(outside) > 15
    assert {m: t for m, t in outside.items() if t} == {}


def test_walker_finds_function_level_and_relative_cycles(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "def f():\n    from pkg.sub import b\n",
        "sub/__init__.py": "from .b import thing\n",
        "sub/b.py": "from .. import c\nthing = 1\n",
        "c.py": "import pkg.a as alias\nfrom pkg.sub.b import thing\n",
        "d.py": "from pkg import a\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(module_files(tmp_path, ["pkg"]))
    assert graph["pkg.a"] == {"pkg.sub.b": 2}
    assert graph["pkg.sub"] == {"pkg.sub.b": 1}
    assert graph["pkg.d"] == {"pkg.a": 1}
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert "pkg.sub.b:1 imports pkg.c" in describe(graph, cycles(graph))


def test_the_library_rooms_import_no_dagster():
    """corpus/, storage/, evaluation/, sft/, compression/, serving/, reporting/, text.py and lm_assets/training/ are plain
    Python: Dagster stays in defs/ and app/."""
    modules = module_files(ROOT, PACKAGES)
    plain = {m: path for m, path in modules.items() if m.startswith(
        ("lm_assets.corpus", "lm_assets.storage", "lm_assets.evaluation", "lm_assets.sft", "lm_assets.compression", "lm_assets.serving",
         "lm_assets.reporting", "lm_assets.text", "lm_assets.training"))}  # fmt: skip
    assert len(plain) > 40
    offenders = {}
    for module, path in plain.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])  # fmt: skip
            dagster = [n for n in names if n.split(".")[0].startswith("dagster") and n.split(".")[0] != "dagster_pipes"]
            if dagster:
                offenders[module] = (node.lineno, dagster)
    assert offenders == {}


def test_each_dagster_group_has_its_defs_folder_and_corpus_package():
    from lm_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    groups = {graph.get(key).group_name for key in graph.get_all_asset_keys()}
    program = {"training": ROOT / "lm_assets" / "training", "evaluation": ROOT / "lm_assets" / "evaluation", "sft": ROOT / "lm_assets" / "sft",
               "compression": ROOT / "lm_assets" / "compression"}
    for group in groups:
        assert (ROOT / "lm_assets" / "defs" / group / "assets.py").exists(), group
        assert (ROOT / "lm_assets" / "defs" / group / "definitions.py").exists(), group
        assert program.get(group, ROOT / "lm_assets" / "corpus" / group).is_dir(), group
