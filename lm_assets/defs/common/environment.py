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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

PACKAGE_PROJECT_DIR = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Variable:
    """What an environment variable sets, and the default a setting takes when it is unset: the one home of
    that default. None: the default belongs to the code that reads the variable (a corpus dataclass's field,
    `TokenizerConfig.vocab_size` say), which passes it as the fallback."""

    description: str
    default: Any = None


# Every environment variable the code location reads, what it sets, and its default where the registry holds
# it (docs/configuration.md's table is generated from it). `from_environment` refuses a variable that is not
# here. A relative path resolves against the project folder.
VARIABLES = {
    "LM_ASSETS_PROJECT_DIR": Variable("the folder relative paths resolve against", PACKAGE_PROJECT_DIR),
    "LM_ASSETS_STORAGE_ROOT": Variable("where every stage writes: a folder or s3://bucket/prefix", "storage"),
    "LM_ASSETS_LANDING_ROOT": Variable("where shard files arrive: a folder or s3://bucket/prefix", "data/sample-crawl"),
    "LM_ASSETS_S3_ENDPOINT_URL": Variable("an S3-compatible endpoint"),
    "AWS_REGION": Variable("the S3 region"),
    "AWS_DEFAULT_REGION": Variable("the S3 region, when AWS_REGION is unset"),
    "LM_ASSETS_TOXICITY_BACKEND": Variable("the toxicity backend"),
    "LM_ASSETS_DETOXIFY_CHECKPOINT": Variable("a local Detoxify checkpoint"),
    "LM_ASSETS_DETOXIFY_HF_CONFIG": Variable("the Detoxify checkpoint's HF config and tokenizer folder"),
    "LM_ASSETS_QUALITY_POLICY": Variable("who decides quality in curated_shard"),
    # Inside the project folder; both the decontamination index and the MMLU score read it.
    "LM_ASSETS_MMLU_PATH": Variable("MMLU, for decontamination and the MMLU score", "data/eval/mmlu.zip"),
    "LM_ASSETS_CEVAL_PATH": Variable("C-Eval, for the C-Eval score", "data/eval/ceval-sample"),
    "LM_ASSETS_EVAL_TASKS_DIR": Variable(
        "the task suite's releases, a folder each (hellaswag/, arc/ARC-Easy/, ..., as data/eval/tasks/)", "data/eval/tasks"
    ),
    "LM_ASSETS_SAFETY_DIR": Variable(
        "harmful and benign look-alike prompts (AdvBench, Do-Not-Answer, XSTest layouts), as data/eval/safety/",
        "data/eval/safety",
    ),
    "LM_ASSETS_BIAS_DIR": Variable(
        "the bias sets, a folder each (crows_pairs/, bbq/, cbbq/), as data/eval/bias/", "data/eval/bias"
    ),
    "LM_ASSETS_VOCAB_SIZE": Variable("the tokenizer's vocabulary"),
    "LM_ASSETS_SEQ_LEN": Variable("the packed sequence length"),
    "LM_ASSETS_DUCKDB_TEMP_DIR": Variable("where dedup's DuckDB spills"),
    "LM_ASSETS_TRAINING_BACKEND": Variable("local or kubernetes", "local"),
    "LM_ASSETS_PIPES_BUCKET": Variable("the S3 bucket Pipes messages go through on Kubernetes"),
    "LM_ASSETS_LAUNCHPAD_DEFAULTS": Variable(
        "sample: the sample crawl's profile (defs/common/sample_defaults.py), what `make demo` runs with, is the "
        "Launchpad's defaults and what a run takes for a field it leaves unset"
    ),
    "LM_ASSETS_SHARDS_PER_RUN": Variable(
        "shards a backfill run of the per-shard stages takes at most (read when the code loads)", 50
    ),
}


def default_of(variable: str) -> Any:
    """The default the registry holds for `variable` (None where the code that reads it passes its own)."""
    return registered(variable).default


def registered(variable: str) -> Variable:
    if variable not in VARIABLES:
        raise KeyError(f"{variable} is not one of the environment variables the code location reads: {sorted(VARIABLES)}")
    return VARIABLES[variable]


# Kept under its name for the modules that read it: the registry's default.
DEFAULT_MMLU_PATH = default_of("LM_ASSETS_MMLU_PATH")


def from_environment(value: Any, variable: str, fallback: Any = None) -> Any:
    """`value` when it is set, else $`variable` when set and not empty, else `fallback`, else the registry's
    default: the one way a setting takes its environment default."""
    registry_default = registered(variable).default  # refuses a variable the registry lacks
    default = registry_default if fallback is None else fallback
    if value is not None:
        return value
    return os.environ.get(variable) or default


def unset_means(variable: str, fallback: Any = None, resolve: Callable[[Any], Any] | None = None) -> str:
    """For a field's description: what it takes when left unset ($`variable`, else `fallback`, else the
    registry's default), and what that is in the environment the definitions loaded in, so the Launchpad
    shows what a run started now would use; `resolve` turns the value into what a run uses (a relative
    folder into its place in the project folder)."""
    registry_default = registered(variable).default  # refuses a variable the registry lacks
    fallback = registry_default if fallback is None else fallback
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
    return Path(from_environment(None, "LM_ASSETS_PROJECT_DIR"))


def project_path(path: str | None) -> str | None:
    """`path` made absolute against the project folder; absolute paths and `s3://` URLs unchanged."""
    if not path or path.startswith("s3://") or os.path.isabs(path):
        return path
    return str(project_dir() / path)


def fill_from_environment(data: Any, defaults: dict[str, str | tuple[str, Any]], paths: tuple[str, ...] = ()) -> Any:
    """For a config's raw fields: each field left unset (None) takes $VAR, else its fallback (a `(VAR,
    fallback)` pair), else the registry's default (a bare `VAR`); the fields named in `paths` (a path or a
    list of them) are then made absolute with `project_path`."""
    if not isinstance(data, dict):
        return data
    filled = dict(data)
    for field, variable in defaults.items():
        variable, fallback = (variable, None) if isinstance(variable, str) else variable
        filled[field] = from_environment(filled.get(field), variable, fallback)
    for field in paths:
        value = filled.get(field)
        if isinstance(value, (list, tuple)):
            filled[field] = [project_path(v) for v in value]
        elif isinstance(value, str):
            filled[field] = project_path(value)
    return filled
