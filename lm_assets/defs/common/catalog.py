"""What the asset catalog says of each asset beyond its graph: who owns it, its tags, and the version
of the code that makes it.

The code version is a hash of the source of the plain-Python modules that do the asset's work (a
package counts with every module in it). It changes when that code does, so Dagster marks what was
made by earlier code as made by another code version; edits to the Dagster layer (metadata, checks)
leave it alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

import dagster as dg

CORPUS_TEAM = "team:corpus"
TRAINING_TEAM = "team:training"
EVALUATION_TEAM = "team:evaluation"


def source_version(*modules: ModuleType) -> str:
    digest = hashlib.sha256()
    for module in modules:
        path = Path(module.__file__)
        files = sorted(path.parent.glob("*.py")) if hasattr(module, "__path__") else [path]
        for file in files:
            digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:12]


def partitioned_by(spec: dg.AssetSpec) -> str:
    return spec.partitions_def.name if isinstance(spec.partitions_def, dg.DynamicPartitionsDefinition) else "none"


def catalogued(assets: Iterable, owner: str, code_versions: Mapping[str, str]) -> list:
    """`assets` with `owner`, the tags `domain` (their group) and `partitioned_by` (shards, dedup_bands,
    checkpoints or none), and their code version from `code_versions` (by asset name; every asset must have one)."""

    def entry(spec: dg.AssetSpec) -> dg.AssetSpec:
        return spec.replace_attributes(
            owners=[owner],
            tags={**spec.tags, "domain": spec.group_name, "partitioned_by": partitioned_by(spec)},
            code_version=code_versions[spec.key.to_user_string()],
        )

    return dg.map_asset_specs(entry, list(assets))
