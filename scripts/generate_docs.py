"""Write the reference tables of README.md and docs/ from the code they describe.

Each table sits between marker comments, `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`, and
is rebuilt from the code on every run, so that a change to the code is a change to its table:

- `groups`, `group-graph`: the Dagster groups, their assets and folders, and which group feeds which,
  from the definitions (`lm_assets.definitions.defs`);
- `assets`: every asset's key, group, partitioning and description, from the definitions;
- `automations`: the sensors and schedules, their default status and description;
- `environment`: the environment variables, from their registry (`defs/common/environment.VARIABLES`),
  each with its default as the code passes it (`from_environment`, `unset_means`, `loaded_default`,
  `fill_from_environment`), or as the registry records it where it does;
- `train-config`: every field of `lm_assets.training.config.TrainConfig`, its type, default and the comment
  beside it in `lm_assets/training/config.py`;
- `eval-tasks`, `eval-releases`: the task suite (`lm_assets.evaluation.tasks.TASKS`) with each release
  and licence, and the other benchmarks' releases (`data/eval/releases.toml`).

    .venv/bin/python scripts/generate_docs.py           # rewrite the tables in place
    .venv/bin/python scripts/generate_docs.py --check   # exit 1, naming the tables that drifted

`tests/docs/test_generated_docs.py` runs the check.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import io
import re
import sys
import tokenize
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The files that hold generated tables.
DOCUMENTS = ("README.md", "docs/architecture.md", "docs/assets.md", "docs/configuration.md", "docs/training.md",
             "docs/evaluation.md", "docs/operations.md")  # fmt: skip
MARKER = re.compile(r"(<!-- generated:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.S)

# Where each Dagster group's processing code lives (its Dagster glue is lm_assets/defs/<group>/). A group
# missing here fails the generation: say where its code is.
LIBRARY = {
    "ingest": ["lm_assets/corpus/ingest/"],
    "curation": ["lm_assets/corpus/curation/"],
    "quality": ["lm_assets/corpus/quality/", "lm_assets/quality_model/"],
    "dedup": ["lm_assets/corpus/dedup/"],
    "decontam": ["lm_assets/corpus/decontam/"],
    "tokens": ["lm_assets/corpus/tokens/"],
    "training": ["lm_assets/training/"],
    "sft": ["lm_assets/sft/", "lm_assets/training/"],
    "evaluation": ["lm_assets/evaluation/"],
    "compression": ["lm_assets/compression/", "lm_assets/reporting/", "lm_assets/training/"],
}
PARTITIONS = {"shards": "shard", "checkpoints": "checkpoint", "dedup_bands": "band range"}


def cell(text: Any) -> str:
    """One table cell: whitespace collapsed, pipes escaped, and outside code spans angle brackets too, so that
    `<split>` is not read as an HTML tag."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def link(path: str, relative_to: str) -> str:
    """A markdown link to the project path `path` from the document `relative_to`."""
    up = "../" * relative_to.count("/")
    return f"[{path}]({up}{path})"


# ---------------------------------------------------------------------------------------------
# The definitions
# ---------------------------------------------------------------------------------------------


def asset_nodes() -> list:
    """Every asset node, groups in LIBRARY's order, each group's assets in the graph's order."""
    from graphlib import TopologicalSorter

    from lm_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    keys = sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string())
    order = list(TopologicalSorter({k: sorted(graph.get(k).parent_keys, key=lambda p: p.to_user_string())
                                    for k in keys}).static_order())  # fmt: skip
    position = {k: i for i, k in enumerate(order)}
    groups = list(LIBRARY)
    for key in order:
        if graph.get(key).group_name not in groups:
            raise KeyError(f"group {graph.get(key).group_name!r} has no entry in scripts/generate_docs.py's LIBRARY: "
                           "say where its code is")
    return sorted((graph.get(k) for k in keys), key=lambda n: (groups.index(n.group_name), position[n.key]))


def partitioning(node) -> str:
    pd = node.partitions_def
    if pd is None:
        return "—"
    name = getattr(pd, "name", None)
    return PARTITIONS.get(name, name or type(pd).__name__)


def groups_block(document: str) -> str:
    by_group: dict[str, list[str]] = defaultdict(list)
    for node in asset_nodes():
        by_group[node.group_name].append(node.key.to_user_string())
    rows = []
    for group, assets in by_group.items():
        glue = f"lm_assets/defs/{group}/"
        for path in [glue, *LIBRARY[group]]:
            if not (ROOT / path).is_dir():
                raise FileNotFoundError(f"group {group!r}: {path} is not a folder")
        rows.append([group, ", ".join(f"`{a}`" for a in assets), link(glue, document),
                     ", ".join(link(p, document) for p in LIBRARY[group])])  # fmt: skip
    return table(["group", "assets", "Dagster glue", "the code that does the work"], rows)


def group_graph_block(document: str) -> str:
    nodes = asset_nodes()
    group_of = {n.key: n.group_name for n in nodes}
    edges: list[tuple[str, str]] = []
    for node in nodes:
        for parent in sorted(node.parent_keys, key=lambda k: k.to_user_string()):
            edge = (group_of[parent], node.group_name)
            if edge[0] != edge[1] and edge not in edges:
                edges.append(edge)
    lines = ["```mermaid", "graph LR"]
    lines += [f"  {a} --> {b}" for a, b in sorted(edges, key=lambda e: (list(LIBRARY).index(e[0]), list(LIBRARY).index(e[1])))]
    return "\n".join(lines) + "\n```\n"


def assets_block(document: str) -> str:
    rows = [[f"`{n.key.to_user_string()}`", n.group_name, partitioning(n), n.description or ""] for n in asset_nodes()]
    return table(["asset", "group", "partitioned by", "what it is"], rows)


def automations_block(document: str) -> str:
    from lm_assets.definitions import defs

    repository = defs.get_repository_def()
    rows = []
    for sensor in sorted(repository.sensor_defs, key=lambda s: s.name):
        status = "on" if sensor.default_status.value == "RUNNING" else "off"
        rows.append([f"`{sensor.name}`", "sensor", status, sensor.description or ""])
    for schedule in sorted(repository.schedule_defs, key=lambda s: s.name):
        status = "on" if schedule.default_status.value == "RUNNING" else "off"
        rows.append([f"`{schedule.name}`", f"schedule (`{schedule.cron_schedule}`)", status, schedule.description or ""])
    return table(["name", "kind", "default", "what it does"], rows)


# ---------------------------------------------------------------------------------------------
# Environment variables
# ---------------------------------------------------------------------------------------------

# The calls that read a variable: which argument is the variable, which its fallback.
ENVIRONMENT_CALLS = {"from_environment": (1, 2), "unset_means": (0, 1), "loaded_default": (0, 1),
                     "evaluation_data": (1, 2)}


def _value_of(node: ast.AST, namespace: dict) -> Any:
    """A literal, a module-level name or an attribute of one (`TOXICITY_DEFAULTS.backend`), or the code's own
    fallback of `launchpad_default` (the sample profile's settings are not the code's defaults); anything else
    (another call, a local) is not a default this can read."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in namespace:
            raise LookupError(node.id)
        return namespace[node.id]
    if isinstance(node, ast.Attribute):
        return getattr(_value_of(node.value, namespace), node.attr)
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "launchpad_default" and len(node.args) == 3:
        return _value_of(node.args[2], namespace)  # a profile's setting, else the code's own: the latter
    raise LookupError(ast.dump(node))


def code_defaults() -> dict[str, list[Any]]:
    """Each variable's fallbacks, as the calls that read it pass them, across lm_assets/."""
    found: dict[str, list[Any]] = defaultdict(list)
    for path in sorted((ROOT / "lm_assets").rglob("*.py")):
        source = path.read_text()
        if not any(name + "(" in source for name in [*ENVIRONMENT_CALLS, "fill_from_environment"]):
            continue
        pairs = []
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in ENVIRONMENT_CALLS:
                v, d = ENVIRONMENT_CALLS[name]
                if len(node.args) > max(v, d):
                    pairs.append((node.args[v], node.args[d]))
            elif name == "fill_from_environment" and len(node.args) > 1 and isinstance(node.args[1], ast.Dict):
                pairs += [tuple(t.elts) for t in node.args[1].values if isinstance(t, ast.Tuple) and len(t.elts) == 2]
        if not pairs:
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        namespace = vars(importlib.import_module(module))
        for variable_node, default_node in pairs:
            try:
                variable, default = _value_of(variable_node, namespace), _value_of(default_node, namespace)
            except (LookupError, AttributeError):
                continue
            if isinstance(variable, str) and default not in (None, "") and default not in found[variable]:
                found[variable].append(default)
    return found


def registry_default(entry: Any) -> Any:
    """A default the registry records itself, in whichever form it takes: an object with `default`, a mapping
    with "default", or a (description, default) pair."""
    if isinstance(entry, dict):
        return entry.get("default")
    if isinstance(entry, tuple) and len(entry) >= 2:
        return entry[1]
    return getattr(entry, "default", None)


def registry_description(entry: Any) -> str:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        return entry.get("description", "")
    if isinstance(entry, tuple):
        return entry[0]
    return getattr(entry, "description", str(entry))


def show_default(value: Any) -> str:
    text = str(value)
    if text == str(ROOT):
        return "this checkout"
    if text.startswith(str(ROOT) + "/"):
        return f"`{text[len(str(ROOT)) + 1:]}`"
    return text if " " in text else f"`{text}`"


def environment_block(document: str) -> str:
    from lm_assets.defs.common import environment

    found = code_defaults()
    rows = []
    for variable, entry in environment.VARIABLES.items():
        own = registry_default(entry)
        defaults = [own] if own is not None else found.get(variable, [])
        rows.append([f"`{variable}`", "; ".join(show_default(d) for d in defaults) or "unset",
                     registry_description(entry)])  # fmt: skip
    return table(["variable", "default", "what it sets"], rows)


# ---------------------------------------------------------------------------------------------
# TrainConfig
# ---------------------------------------------------------------------------------------------


def field_comments(path: Path) -> dict[tuple[str, str], str]:
    """(class, field) -> the comment on the field's line, else the comment lines just above it."""
    source = path.read_text()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    found = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                text = comments.get(item.lineno, "")
                if not text:
                    above, line = [], item.lineno - 1
                    while line >= 1 and lines[line - 1].strip().startswith("#"):
                        above.insert(0, comments[line])
                        line -= 1
                    text = " ".join(above)
                found[(node.name, item.target.id)] = text
    return found


def annotations(path: Path) -> dict[tuple[str, str], str]:
    source = path.read_text()
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    found[(node.name, item.target.id)] = ast.get_source_segment(source, item.annotation)
    return found


def show_value(value: Any) -> str:
    if value is None:
        return "`none`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, list)):
        return f"`{','.join(map(str, value))}`" if value else "`()`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def train_config_block(document: str) -> str:
    from lm_assets.training import config

    path = ROOT / "lm_assets" / "training" / "config.py"
    comments, types = field_comments(path), annotations(path)
    rows = []

    def walk(obj, prefix: str) -> None:
        cls = type(obj).__name__
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            comment = comments.get((cls, f.name), "")
            if dataclasses.is_dataclass(value):
                doc = " ".join((type(value).__doc__ or "").split()) if type(value).__doc__ and \
                    not type(value).__doc__.startswith(type(value).__name__ + "(") else ""  # fmt: skip
                rows.append([f"`{prefix}{f.name}`", f"`{types[(cls, f.name)]}`", "",
                             "; ".join(t for t in (comment, doc) if t)])  # fmt: skip
                walk(value, f"{prefix}{f.name}.")
            else:
                rows.append([f"`{prefix}{f.name}`", f"`{types[(cls, f.name)]}`", show_value(value), comment])

    walk(config.TrainConfig(), "")
    return table(["field", "type", "default", "what it sets"], rows)


# ---------------------------------------------------------------------------------------------
# Evaluation data
# ---------------------------------------------------------------------------------------------

RELEASE = re.compile(r"^(?P<where>.*?)\s*\((?P<licence>[^()]*)\)$")


def eval_tasks_block(document: str) -> str:
    from lm_assets.evaluation.tasks import TASKS

    rows = []
    for task in TASKS.values():
        match = RELEASE.match(task.release)
        where, licence = (match["where"], match["licence"]) if match else (task.release, "")
        rows.append([task.name, task.language, ", ".join(task.metrics), f"`{task.eval_files[0]}`",
                     f"`{task.fewshot_files[0]}`" if task.fewshot_files else "—", where, licence])  # fmt: skip
    return table(["task", "language", "metrics", "scored file", "few-shot file", "release", "licence"], rows)


def eval_releases_block(document: str) -> str:
    records = tomllib.loads((ROOT / "data" / "eval" / "releases.toml").read_text())["release"]
    rows = [[f"`{r['asset']}`", r["benchmark"], r["release"], r["files"], r["licence"],
             link(r["sample"], document) if r.get("sample") else "—"] for r in records]  # fmt: skip
    return table(["asset", "benchmark", "release", "files read", "licence", "sample shipped"], rows)


BLOCKS: dict[str, Callable[[str], str]] = {
    "groups": groups_block,
    "group-graph": group_graph_block,
    "assets": assets_block,
    "automations": automations_block,
    "environment": environment_block,
    "train-config": train_config_block,
    "eval-tasks": eval_tasks_block,
    "eval-releases": eval_releases_block,
}


def render(text: str, document: str, cache: dict | None = None) -> str:
    """`text` with every generated block rebuilt; an unknown block name fails."""
    cache = {} if cache is None else cache

    def replace(match: re.Match) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise KeyError(f"{document}: no generator for block {name!r}; known: {sorted(BLOCKS)}")
        if (name, document) not in cache:
            cache[(name, document)] = BLOCKS[name](document)
        return match.group(1) + cache[(name, document)] + match.group(4)

    return MARKER.sub(replace, text)


def drifted() -> dict[str, str]:
    """Each document whose generated blocks differ from the code, with its text as it should be."""
    cache: dict = {}
    out = {}
    for document in DOCUMENTS:
        text = (ROOT / document).read_text()
        fresh = render(text, document, cache)
        if fresh != text:
            out[document] = fresh
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table drifted")
    args = parser.parse_args(argv)
    changed = drifted()
    for document, text in changed.items():
        if args.check:
            print(f"{document}: generated tables differ from the code; run scripts/generate_docs.py")
        else:
            (ROOT / document).write_text(text)
            print(f"{document}: rewritten")
    return 1 if changed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
