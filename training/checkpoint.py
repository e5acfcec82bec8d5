"""Checkpoints: DeepSpeed's state plus what the training loop needs to continue exactly.

Layout of `<dir>/<tag>/` (tag `step_00000500`, `<dir>/latest` names the newest):

- DeepSpeed's files (`engine.save_checkpoint`): module weights (for the pipeline engine one file
  per layer and tensor-parallel rank, `layer_XX-model_YY-model_states.pt`; for the plain engine
  `mp_rank_YY_model_states.pt`), optimizer and ZeRO partitions, the LR scheduler, and our
  `client_state["trainer"]`: the data position (completed steps), tokens seen and the
  loss-spike window;
- `rng/rank_NNNNN.pt`: each rank's Python, NumPy and torch (and accelerator) RNG states;
- `train_config.json` and `ds_config.json`: the run's `TrainConfig` and the DeepSpeed JSON it
  generated, plus `layout.json` (pp, tp, dp, world size, model config).

Order: each rank writes its RNG file and rank 0 the JSON files before `engine.save_checkpoint`,
which starts with a barrier and writes `latest` last; so `latest` only ever names a complete
checkpoint. Resume (`resume`) loads `latest` into the engine, restores the trainer state and this
rank's RNG. The data order is a function of the step number alone (`training.data`), so in fp32 on
CPU the losses after a resume are identical to an uninterrupted run. Resuming needs the same
(pp, tp, dp) layout; a changed layout is refused.

`consolidated_state_dict` gathers a checkpoint's module weights, from any layout, into one
`training.model.Transformer` state dict (pipeline layer files renamed, tensor-parallel shards
concatenated; ZeRO-3 checkpoints, tp=1 only, through DeepSpeed's `zero_to_fp32`, which does
not handle pipeline checkpoints). With `model_config` it feeds `training.export.export_hf`.
"""

from __future__ import annotations

import json
import os
import random
import re
import uuid
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from training.config import ModelConfig

TAG_FORMAT = "step_{:08d}"
# Megatron-style split dimension of tensor-parallel weights, by name (the rest is replicated).
COLUMN_PARALLEL = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight")
ROW_PARALLEL = ("o_proj.weight", "down_proj.weight")


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def rng_state() -> dict:
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if acc.device_name() != "cpu":
        state["accelerator"] = acc.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    from deepspeed.accelerator import get_accelerator

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "accelerator" in state:
        get_accelerator().set_rng_state(state["accelerator"])


def latest_tag(ckpt_dir: str | os.PathLike) -> str | None:
    path = Path(ckpt_dir) / "latest"
    return path.read_text().strip() if path.exists() else None


def _layout(trainer) -> dict:
    from training.config import to_dict

    d = trainer.dims
    return {"pp": d.pp, "tp": d.tp, "dp": d.dp, "world_size": trainer.world, "model": to_dict(trainer.model_cfg)}


def save(trainer, ckpt_dir: str | os.PathLike) -> str:
    """Save `trainer` (a `training.engine.Trainer`) at its current step; returns the tag."""
    from training.engine import config_to_dict

    tag = TAG_FORMAT.format(trainer.step)
    path = Path(ckpt_dir) / tag
    (path / "rng").mkdir(parents=True, exist_ok=True)
    torch.save(rng_state(), path / "rng" / f"rank_{trainer.rank:05d}.pt")
    if trainer.rank == 0:
        _write_json(path / "train_config.json", config_to_dict(trainer.cfg))
        _write_json(path / "ds_config.json", trainer.ds_config)
        _write_json(path / "layout.json", _layout(trainer))
        _write_json(path / "metrics.json", getattr(trainer, "last_metrics", {}))
    trainer.engine.save_checkpoint(str(ckpt_dir), tag=tag, client_state={"trainer": trainer.trainer_state()})
    return tag


def resume(trainer, ckpt_dir: str | os.PathLike) -> dict | None:
    """Load the latest checkpoint under `ckpt_dir` into `trainer`; None when there is none."""
    tag = latest_tag(ckpt_dir)
    if tag is None:
        return None
    path = Path(ckpt_dir) / tag
    saved = json.loads((path / "layout.json").read_text())
    now = _layout(trainer)
    if saved != now:
        raise ValueError(f"checkpoint {path} was written with layout {saved}, this run has {now}; resume needs it")
    load_path, client_state = trainer.engine.load_checkpoint(str(ckpt_dir), tag=tag)
    if load_path is None:
        raise RuntimeError(f"DeepSpeed could not load checkpoint {path}")
    state = client_state["trainer"]
    trainer.load_trainer_state(state)
    rng_file = path / "rng" / f"rank_{trainer.rank:05d}.pt"
    set_rng_state(torch.load(rng_file, weights_only=False))
    dist.barrier()
    return state


# ---------------------------------------------------------------------------------------------
# Consolidation
# ---------------------------------------------------------------------------------------------


def _merge_tp(name: str, shards: list[torch.Tensor]) -> torch.Tensor:
    if len(shards) == 1:
        return shards[0]
    if name.endswith(COLUMN_PARALLEL):
        return torch.cat(shards, dim=0)
    if name.endswith(ROW_PARALLEL):
        return torch.cat(shards, dim=1)
    return shards[0]  # replicated


def model_config(ckpt_dir: str | os.PathLike, tag: str | None = None) -> ModelConfig:
    """The `ModelConfig` a checkpoint was trained with (for `training.export.export_hf`)."""
    tag = tag or latest_tag(ckpt_dir)
    if tag is None:
        raise FileNotFoundError(f"no checkpoint under {ckpt_dir}")
    return ModelConfig(**json.loads((Path(ckpt_dir) / tag / "layout.json").read_text())["model"])


def consolidated_state_dict(ckpt_dir: str | os.PathLike, tag: str | None = None) -> dict[str, torch.Tensor]:
    """The full `Transformer` state dict of a checkpoint written by `save` (fp32 copies on CPU)."""
    tag = tag or latest_tag(ckpt_dir)
    if tag is None:
        raise FileNotFoundError(f"no checkpoint under {ckpt_dir}")
    path = Path(ckpt_dir) / tag
    layout = json.loads((path / "layout.json").read_text())
    cfg = model_config(ckpt_dir, tag)
    tp = layout["tp"]
    pieces: dict[str, list[torch.Tensor]] = {}
    if layout["pp"] > 1:
        from training.parallel import pipeline_layer_name

        pattern = re.compile(r"layer_(\d+)-model_(\d+)-model_states\.pt")
        files = sorted((int(m[1]), int(m[2]), f) for f in path.iterdir() if (m := pattern.fullmatch(f.name)))
        for layer, _mp, file in files:
            prefix = pipeline_layer_name(layer, cfg.n_layers)
            for key, value in torch.load(file, map_location="cpu", weights_only=False).items():
                pieces.setdefault(prefix + key, []).append(value)
    elif json.loads((path / "ds_config.json").read_text())["zero_optimization"]["stage"] == 3:
        # ZeRO-3 partitions the weights themselves; DeepSpeed's own tool gathers them (tp == 1 only).
        if tp > 1:
            raise NotImplementedError(f"{path}: consolidating ZeRO-3 with tensor parallelism is not supported")
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        return {k: v.float().clone() for k, v in get_fp32_state_dict_from_zero_checkpoint(str(ckpt_dir), tag).items()}
    else:
        for mp in range(tp):
            states = torch.load(path / f"mp_rank_{mp:02d}_model_states.pt", map_location="cpu", weights_only=False)
            for key, value in states["module"].items():
                pieces.setdefault(key, []).append(value)
    return {k: _merge_tp(k, v).float().clone() for k, v in pieces.items()}


__all__ = [
    "TAG_FORMAT",
    "consolidated_state_dict",
    "latest_tag",
    "model_config",
    "resume",
    "rng_state",
    "save",
    "set_rng_state",
]
