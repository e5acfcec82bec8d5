"""Defaults that come from the environment, and relative paths, settled when a run or a resource
needs them, never when a module is imported. Only the Launchpad's view reads the environment as the
definitions load: a field's description (`unset_means`) says what a run started then would use, and a
choice's default (`loaded_default`) is that value, so that the Launchpad writes it out.

A relative path (the storage root, the landing location, MMLU, C-Eval) resolves against the project
folder: $LM_ASSETS_PROJECT_DIR, else the checkout this package sits in. So a run started from any
working directory, by `dagster dev`, the CLI or the daemon, reads and writes the same files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

# Every environment variable the code location reads, and what it sets (docs/configuration.md's table
# is generated from it). `from_environment` refuses a variable that is not here.
VARIABLES = {
    "LM_ASSETS_PROJECT_DIR": "the folder relative paths resolve against",
    "LM_ASSETS_STORAGE_ROOT": "where every stage writes: a folder or s3://bucket/prefix",
    "LM_ASSETS_LANDING_ROOT": "where shard files arrive: a folder or s3://bucket/prefix",
    "LM_ASSETS_S3_ENDPOINT_URL": "an S3-compatible endpoint",
    "AWS_REGION": "the S3 region",
    "AWS_DEFAULT_REGION": "the S3 region, when AWS_REGION is unset",
    "LM_ASSETS_TOXICITY_BACKEND": "the toxicity backend",
    "LM_ASSETS_DETOXIFY_CHECKPOINT": "a local Detoxify checkpoint",
    "LM_ASSETS_DETOXIFY_HF_CONFIG": "the Detoxify checkpoint's HF config and tokenizer folder",
    "LM_ASSETS_QUALITY_POLICY": "who decides quality in curated_shard",
    "LM_ASSETS_MMLU_PATH": "MMLU, for decontamination and the MMLU score",
    "LM_ASSETS_CEVAL_PATH": "C-Eval, for the C-Eval score",
    "LM_ASSETS_EVAL_TASKS_DIR": "the task suite's releases, a folder each (hellaswag/, arc/ARC-Easy/, ..., as data/eval/tasks/)",
    "LM_ASSETS_SAFETY_DIR": "harmful and benign look-alike prompts (AdvBench, Do-Not-Answer, XSTest layouts), as data/eval/safety/",
    "LM_ASSETS_BIAS_DIR": "the bias sets, a folder each (crows_pairs/, bbq/, cbbq/), as data/eval/bias/",
    "LM_ASSETS_VOCAB_SIZE": "the tokenizer's vocabulary",
    "LM_ASSETS_SEQ_LEN": "the packed sequence length",
    "LM_ASSETS_DUCKDB_TEMP_DIR": "where dedup's DuckDB spills",
    "LM_ASSETS_TRAINING_BACKEND": "local or kubernetes",
    "LM_ASSETS_PIPES_BUCKET": "the S3 bucket Pipes messages go through on Kubernetes",
    "LM_ASSETS_LAUNCHPAD_DEFAULTS": "sample: the Launchpad's training defaults are what `make demo` trained with",
    "LM_ASSETS_SHARDS_PER_RUN": "shards a backfill run of the per-shard stages takes at most (read when the code loads)",
}

PACKAGE_PROJECT_DIR = Path(__file__).resolve().parents[3]
# Inside the project folder; both the decontamination index and the MMLU score read it.
DEFAULT_MMLU_PATH = "data/eval/mmlu.zip"


def from_environment(value: Any, variable: str, fallback: Any = None) -> Any:
    """`value` when it is set, else $`variable` when set and not empty, else `fallback`: the one way a
    setting takes its environment default."""
    if variable not in VARIABLES:
        raise KeyError(f"{variable} is not one of the environment variables the code location reads: {sorted(VARIABLES)}")
    if value is not None:
        return value
    return os.environ.get(variable) or fallback


def unset_means(variable: str, fallback: Any, resolve: Callable[[Any], Any] | None = None) -> str:
    """For a field's description: what it takes when left unset, and what that is in the environment the
    definitions loaded in, so the Launchpad shows what a run started now would use; `resolve` turns the
    value into what a run uses (a relative folder into its place in the project folder)."""
    if variable not in VARIABLES:
        raise KeyError(f"{variable} is not one of the environment variables the code location reads: {sorted(VARIABLES)}")
    value = os.environ.get(variable)
    used = resolve(value or fallback) if resolve else value or fallback
    here = f"{used} (from ${variable})" if value else f"{used} (${variable} is not set)"
    return f"unset: ${variable}, else {fallback}; here: {here}"


def loaded_default(variable: str, fallback: Any) -> Any:
    """A run config choice's default in its schema: $`variable` as the definitions load, else `fallback`.
    Dagster's Launchpad leaves an unset (None) default out of its scaffold; this one it writes. A run
    launched without the field gets the same value, and a config built in Python still reads the
    variable when it is built (`fill_from_environment`)."""
    return from_environment(None, variable, fallback)


def project_dir() -> Path:
    return Path(from_environment(None, "LM_ASSETS_PROJECT_DIR", PACKAGE_PROJECT_DIR))


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
        filled[field] = from_environment(filled.get(field), variable, fallback)
    for field in paths:
        value = filled.get(field)
        if isinstance(value, (list, tuple)):
            filled[field] = [project_path(v) for v in value]
        elif isinstance(value, str):
            filled[field] = project_path(value)
    return filled
