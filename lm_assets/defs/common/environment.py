"""Defaults that come from the environment, and relative paths, settled when a run or a resource
needs them, never when a module is imported.

A relative path (the storage root, the landing location, MMLU, C-Eval) resolves against the project
folder: $LM_ASSETS_PROJECT_DIR, else the checkout this package sits in. So a run started from any
working directory, by `dagster dev`, the CLI or the daemon, reads and writes the same files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

PACKAGE_PROJECT_DIR = Path(__file__).resolve().parents[3]
# Inside the project folder; both the decontamination index and the MMLU score read it.
DEFAULT_MMLU_PATH = "data/eval/mmlu.zip"


def project_dir() -> Path:
    return Path(os.environ.get("LM_ASSETS_PROJECT_DIR") or PACKAGE_PROJECT_DIR)


def project_path(path: str | None) -> str | None:
    """`path` made absolute against the project folder; absolute paths and `s3://` URLs unchanged."""
    if not path or path.startswith("s3://") or os.path.isabs(path):
        return path
    return str(project_dir() / path)


def fill_from_environment(data: Any, defaults: dict[str, tuple[str, Any]], paths: tuple[str, ...] = ()) -> Any:
    """For a config's raw fields: each field left unset (None) takes $VAR, else its fallback; the
    fields named in `paths` (a path or a list of them) are then made absolute with `project_path`."""
    if not isinstance(data, dict):
        return data
    filled = dict(data)
    for field, (variable, fallback) in defaults.items():
        if filled.get(field) is None:
            filled[field] = os.environ.get(variable) or fallback
    for field in paths:
        value = filled.get(field)
        if isinstance(value, (list, tuple)):
            filled[field] = [project_path(v) for v in value]
        elif isinstance(value, str):
            filled[field] = project_path(value)
    return filled
