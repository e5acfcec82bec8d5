"""The training settings `make demo` runs the sample crawl with. Where $LM_ASSETS_LAUNCHPAD_DEFAULTS is `sample`
(`make ui` sets it), they are the Launchpad's defaults too, so that the Launchpad offers what the demo ran;
unset, the defaults are the training program's own."""

from __future__ import annotations

from typing import Any

from lm_assets.defs.common.environment import loaded_default

VARIABLE = "LM_ASSETS_LAUNCHPAD_DEFAULTS"
SAMPLE = {
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
}
PROFILES = {"sample": SAMPLE}


def profile() -> dict[str, dict[str, Any]]:
    name = loaded_default(VARIABLE, "")
    if name and name not in PROFILES:
        raise ValueError(f"${VARIABLE}={name!r}: use one of {sorted(PROFILES)}, or leave it unset")
    return PROFILES.get(name, {})


def launchpad_default(op: str, field: str, fallback: Any) -> Any:
    """The default of `op`'s config field `field` in the profile $LM_ASSETS_LAUNCHPAD_DEFAULTS names, else
    `fallback`."""
    return profile().get(op, {}).get(field, fallback)


def defaults_note(op: str) -> str:
    """For a description: whose defaults the Launchpad shows."""
    name = loaded_default(VARIABLE, "")
    if op in profile():
        return f"; the defaults here are the {name} crawl's (${VARIABLE}={name}), as `make demo` trained"
    return ""
