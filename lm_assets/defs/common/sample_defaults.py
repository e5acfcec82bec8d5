"""The sample crawl's profile: every setting `make demo` runs the shipped sample crawl with, in one place.

`make demo` runs with it (lm_assets/app/demo.py selects it and passes `demo_run_config()`), and `make ui` selects
it with $LM_ASSETS_LAUNCHPAD_DEFAULTS=sample: the Launchpad's defaults, and the runs launched without those
fields (by the daemon's sensors and automation, say), are then what the demo ran. Unset, the defaults are the
code's own. A setting's environment variable ($LM_ASSETS_VOCAB_SIZE, $LM_ASSETS_TOXICITY_BACKEND, ...) still
comes before the profile where it has one.

`SAMPLE_PROFILE` is keyed by what takes the settings: an op's config (`tokenizer`, `training_run`, ...) or a
resource (`toxicity`). `DEMO_ONLY` holds what the demo runs besides, to stay quick on a laptop; the Launchpad
keeps the assets' own defaults for those.
"""

from __future__ import annotations

import copy
from typing import Any

from lm_assets.defs.common.environment import loaded_default

VARIABLE = "LM_ASSETS_LAUNCHPAD_DEFAULTS"
SAMPLE_PROFILE: dict[str, dict[str, Any]] = {
    # The offline toxicity model: Detoxify would download its release model (the `toxicity` resource).
    "toxicity": {"backend": "profanity_check"},
    # The sample crawl holds about 200 documents: a small vocabulary, short sequences.
    "tokenizer": {"vocab_size": 4000},
    "packed_dataset": {"seq_len": 257},
    "sft_dataset": {"seq_len": 257},
    # The tiny model as a 2-stage pipeline: two CPU processes on gloo, one per core. Its context holds 5-shot
    # prompts whole (C-Eval's reach 1,200 tokens), so evaluation sees the examples. A higher lr with a short
    # warmup, so that 40 steps visibly learn; a checkpoint (validation loss and every evaluation) each 20
    # steps, so that the scores' trend across checkpoints shows.
    "training_run": {"model": "tiny", "steps": 40, "pp": 2, "tp": 1, "dp": 1, "save_every": 20, "max_seq_len": 2048,
                     "zero_stage": 1, "micro_batch_size": 4, "lr": 3e-3, "warmup_steps": 4},
    # Fine-tuning the last checkpoint on the shipped instruction set: a few steps, one process.
    "sft_run": {"steps": 40, "lr": 3e-3, "micro_batch_size": 4, "warmup_steps": 4},
    # Aligning the fine-tuned checkpoint on the shipped preference pairs: a few passes over them, one process.
    "dpo_run": {"steps": 30, "lr": 1e-4, "micro_batch_size": 4, "warmup_steps": 3},
    # Distilling the last pretraining checkpoint into a one-layer student: one process, one checkpoint at the end.
    "distill_run": {"steps": 50, "lr": 3e-3, "micro_batch_size": 4, "warmup_steps": 4, "save_every": 0},
}
# The resources the profile sets; the other keys of SAMPLE_PROFILE are ops.
PROFILE_RESOURCES = ("toxicity",)
DEMO_ONLY: dict[str, dict[str, Any]] = {
    # A larger val split of the sample crawl's few documents.
    "packed_dataset": {"val_fraction": 0.05},
    # A few MMLU subjects keep the demo quick; the asset's default is all 57.
    "mmlu_score": {"subjects": ["abstract_algebra", "high_school_geography", "world_religions"]},
    # HumanEval's first 10 problems: generating and judging all 164 for each of the demo's four checkpoints
    # is its slowest evaluation; the asset's default is all 164 (bench/humaneval_agreement.py runs them).
    "humaneval_score": {"limit": 10},
    # The compressed variants of the latest checkpoint, compared on a few questions of each benchmark.
    "compressed_checkpoint": {"questions_per_task": 1, "max_sequences": 16, "new_tokens": 16, "serve_tokens": 8},
    # The model card shows the licences of the sample crawl's sources, as its PROVENANCE.md gives them.
    "model_card": {"data_licences_file": "data/licences/sample-crawl.yaml"},
}
PROFILES = {"sample": SAMPLE_PROFILE}


def profile_name() -> str:
    name = loaded_default(VARIABLE, "")
    if name and name not in PROFILES:
        raise ValueError(f"${VARIABLE}={name!r}: use one of {sorted(PROFILES)}, or leave it unset")
    return name


def profile() -> dict[str, dict[str, Any]]:
    """The settings of the profile $LM_ASSETS_LAUNCHPAD_DEFAULTS names (read now), else none."""
    return PROFILES.get(profile_name(), {})


def launchpad_default(name: str, field: str, fallback: Any) -> Any:
    """The default of `field` of `name` (an op's config or a resource) in the profile $LM_ASSETS_LAUNCHPAD_DEFAULTS
    names, read when this is called, else `fallback`."""
    return copy.deepcopy(profile().get(name, {}).get(field, fallback))


def defaults_note(name: str) -> str:
    """For a description: whose defaults the Launchpad shows."""
    if name in profile():
        label = profile_name()
        return f"; the defaults here are the {label} crawl's (${VARIABLE}={label}), as `make demo` ran"
    return ""


def demo_run_config() -> dict[str, Any]:
    """`make demo`'s run config: the sample profile's op settings and DEMO_ONLY's, as `{"ops": {op: {"config": ...}}}`
    (the profile's resources reach the runs through $LM_ASSETS_LAUNCHPAD_DEFAULTS, which the demo sets)."""
    ops: dict[str, dict[str, Any]] = {}
    for source in (SAMPLE_PROFILE, DEMO_ONLY):
        for op, settings in source.items():
            if op not in PROFILE_RESOURCES:
                ops.setdefault(op, {}).update(copy.deepcopy(settings))
    return {"ops": {op: {"config": settings} for op, settings in ops.items()}}
