"""Checkpoints: DeepSpeed's state plus what the training loop needs to continue exactly.

Contract. `CheckpointManager(folder, engine, rank, layout, train_config, ds_config)` is given
exactly what saving and resuming need (the DeepSpeed engine, this process's rank, the run's
`run_layout`, its config dicts) and nothing of the training loop. Every rank calls its methods
(they meet at barriers):

- `save(step, state, metrics)` writes the checkpoint of `step` completed steps and returns its
  tag. `state` is the loop's own state as plain Python data (for `lm_assets.training.engine.Trainer`: the
  completed steps, which fix the data position, the tokens seen and the loss-spike window),
  `metrics` the last step's report;
- `resume()` loads `latest` into the engine and this process's RNGs and returns the `state` it
  was saved with, for the caller to restore; None when there is no checkpoint. The checkpoint may
  come from another layout (below).

Layout of `<dir>/<tag>/` (tag `step_00000500`, `<dir>/latest` names the newest):

- DeepSpeed's files (`engine.save_checkpoint`): module weights (for the pipeline engine one file
  per layer and tensor-parallel rank, `layer_XX-model_YY-model_states.pt`; for the plain engine
  `mp_rank_YY_model_states.pt`), optimizer and ZeRO partitions, the LR scheduler, and our
  `client_state["trainer"]`: the `state` given to `save`;
- `rng/rank_NNNNN.pt`: each rank's Python, NumPy and torch (and accelerator) RNG states, as
  tensors and plain Python data;
- `train_config.json` and `ds_config.json`: the run's `TrainConfig` and the DeepSpeed JSON it
  generated, `metrics.json` (the last step's report), plus `layout.json` (pp, tp, dp, world
  size, model config).

Order: each rank writes its RNG file and its share of DeepSpeed's files, then all meet at a
barrier, and only then does rank 0 write `layout.json` and replace `latest` (DeepSpeed's own
`latest` would be written before the other ranks finish). So `latest` only ever names a complete
checkpoint, and a tag folder with `layout.json` is complete, even when the job is killed mid-save.

Resuming. `resume` loads `latest` and hands back the loop's state. It needs the same model and
the same global batch (`micro_batch_size * grad_accum * dp` sequences per step: the data order is
a function of the step number alone, `lm_assets.training.data`), and refuses a checkpoint that differs in
either. With the same (pp, tp, dp) layout, ZeRO stage and precision, DeepSpeed's `load_checkpoint`
loads it and each rank restores its own RNG file; in fp32 on CPU the losses after the resume are
identical to an uninterrupted run. Saved with another layout, ZeRO stage or precision, it is
resharded by `lm_assets.training.reshard` (fp32 or bf16, ZeRO stage 0 to 2, on both sides; fp16 and ZeRO-3
are refused): the weights, fp32 master weights, AdamW moments and step counts, the LR scheduler
and DeepSpeed's step counters are consolidated per parameter and sliced for each rank of the new
layout; the losses then match an uninterrupted run up to the float rounding of the two layouts.
Each rank restores the RNG file of its own rank number where there is one, else seeds its RNGs
from the tag and its rank, and rank 0 logs the change (`resumed step 5 from layout pp=2 tp=1 dp=2
(ZeRO-1, fp32) into pp=1 tp=2 dp=2 (ZeRO-1, fp32)`). For the fp32 ZeRO-0 optimizer, whose state
DeepSpeed saves by position only, `save` adds the parameters' names to the client state
(`optimizer_param_names`).

`consolidated_state_dict` gathers a checkpoint's module weights, from any layout, into one
`lm_assets.training.model.Transformer` state dict (pipeline layer files renamed, tensor-parallel shards
concatenated; ZeRO-3 checkpoints, tp=1 only, re-assembled from the optimizer files' flat
partitions as DeepSpeed's `zero_to_fp32` does). With `model_config` it feeds
`lm_assets.training.export.export_hf`.

Loading. A `.pt` file is a pickle, and unpickling can call any function the file names. So every
file read here (module weights, ZeRO-3 partitions, RNG states) is loaded with `weights_only=True`:
tensors and plain Python data only, plus, for optimizer files, the DeepSpeed classes they hold
(`checkpoint_files.optimizer_file_classes`: the ZeRO stage enum, the loss scalers, the fragment
address). A file with anything else is refused with its path. That holds for a resume in the
same layout too: DeepSpeed's `engine.load_checkpoint` reads its files through its checkpoint
engine, which unpickles anything, so `resume` swaps in `weights_only_checkpoint_engine`, which
reads them as above. A checkpoint copied into the run's folder from elsewhere is read no more
trustingly than any other.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from lm_assets.training import reshard
from lm_assets.training.checkpoint_files import (
    load_weights_only,
    merge_tp,
    module_pieces,
    optimizer_file_classes,
    optimizer_format,
    weights_only_checkpoint_engine,
)
from lm_assets.training.config import ModelConfig, ParallelDims, to_dict
from lm_assets.training.primitives import atomic_path

log = logging.getLogger("lm_assets.training")

TAG_FORMAT = "step_{:08d}"


def _write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _write_json(path: Path, data) -> None:
    _write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def rng_state() -> dict:
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    # NumPy's key array as a tensor: a pickled ndarray needs globals a weights-only load refuses.
    kind, key, pos, has_gauss, cached_gaussian = np.random.get_state()
    numpy_state = (kind, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, cached_gaussian)
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if acc.device_name() != "cpu":
        state["accelerator"] = acc.get_rng_state()
    return state


def random_seed(seed: int) -> None:
    """Seed Python's, NumPy's and torch's RNGs."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_rng_state(state: dict) -> None:
    from deepspeed.accelerator import get_accelerator

    random.setstate(state["python"])
    kind, key, pos, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((kind, key.numpy().astype(np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    if "accelerator" in state:
        get_accelerator().set_rng_state(state["accelerator"])


def tag_folder(ckpt_dir: str | os.PathLike, tag: str) -> Path:
    """`ckpt_dir/tag`, once it is known to be a checkpoint folder of this run: `tag` is a plain name and
    the folder, links resolved, lies inside `ckpt_dir` resolved. A tag folder that is a link to another
    run's checkpoint is refused before anything is read from it. FileNotFoundError when there is none."""
    path = Path(ckpt_dir) / tag
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", tag):
        raise ValueError(f"{tag!r} is not a folder name in {ckpt_dir}")
    if not path.is_dir():
        raise FileNotFoundError(f"no checkpoint folder {path}")
    run, resolved = Path(ckpt_dir).resolve(), path.resolve()
    if resolved == run or not resolved.is_relative_to(run):
        raise ValueError(f"{path} leads to {resolved}, outside {run}")
    return path


def latest_tag(ckpt_dir: str | os.PathLike) -> str | None:
    """The tag `ckpt_dir/latest` names, or None without the file. Only a checkpoint folder of this run is a
    tag (`tag_folder`): a path (`../other_run/step_N`, `/elsewhere`) or a link to another run's folder would
    resume from outside it, and is refused."""
    path = Path(ckpt_dir) / "latest"
    if not path.exists():
        return None
    tag = path.read_text().strip()
    try:
        tag_folder(ckpt_dir, tag)
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"{path} names {tag!r}, which is no checkpoint folder of this run: {err}") from None
    return tag


def describe_layout(layout: dict, ds_config: dict) -> str:
    """`pp=2 tp=1 dp=2 (ZeRO-1, fp32)`."""
    stage, precision = optimizer_format(ds_config)
    return f"pp={layout['pp']} tp={layout['tp']} dp={layout['dp']} (ZeRO-{stage}, {precision})"


def describe_checkpoints(ckpt_dir: str | os.PathLike, tags: list[str]) -> list[dict]:
    """Each complete checkpoint's step, the train (and validation) loss of its step, its size on disk
    and its layout, from the files saved with it."""
    out = []
    for tag in tags:
        path = Path(ckpt_dir) / tag
        metrics = json.loads((path / "metrics.json").read_text()) if (path / "metrics.json").exists() else {}
        layout = json.loads((path / "layout.json").read_text())
        ds_config = json.loads((path / "ds_config.json").read_text()) if (path / "ds_config.json").exists() else {}
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and "hf" not in f.relative_to(path).parts)
        out.append({
            "tag": tag, "step": metrics.get("step"), "train_loss": metrics.get("loss"), "val_loss": metrics.get("val_loss"),
            "bytes": size, "layout": describe_layout(layout, ds_config) if ds_config else None,
        })  # fmt: skip
    return out


def _seed_from(text: str) -> None:
    """Seed Python's, NumPy's and torch's RNGs from `text`."""
    random_seed(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & ((1 << 63) - 1))


# ---------------------------------------------------------------------------------------------
# Save and resume
# ---------------------------------------------------------------------------------------------


def run_layout(dims: ParallelDims, world_size: int, model_cfg: ModelConfig) -> dict:
    """What `layout.json` records for a run, and what a resume must match."""
    return {"pp": dims.pp, "tp": dims.tp, "dp": dims.dp, "world_size": world_size, "model": to_dict(model_cfg)}


@dataclass(frozen=True)
class CheckpointManager:
    """Saves and resumes one rank's share of a run's checkpoints under `folder`.

    `engine` is the run's DeepSpeed engine (plain or pipeline), `rank` this process's global rank,
    `layout` the run's `run_layout`, `train_config` and `ds_config` the dicts written beside each
    checkpoint. `ds_config` is the very dict given to `deepspeed.initialize`, so what is written is
    what DeepSpeed runs with.
    """

    folder: str | os.PathLike
    engine: Any
    rank: int
    layout: dict
    train_config: dict
    ds_config: dict
    trained_only: bool = False  # adapters: the frozen weights come from the run's init_from, not the checkpoint

    def save(self, step: int, state: dict, metrics: dict) -> str:
        """Save the checkpoint of `step` completed steps; returns its tag. `state` is the loop's
        state (plain Python data, what `resume` returns), `metrics` the last step's report."""
        tag = TAG_FORMAT.format(step)
        path = Path(self.folder) / tag
        self._save_rng(path)
        if self.rank == 0:
            self._save_run_files(path, metrics)
        client_state = {"trainer": state, "optimizer_param_names": reshard.optimizer_param_names(self.engine)}
        if self.trained_only:
            self.engine.save_checkpoint(str(self.folder), tag=tag, client_state=client_state, save_latest=False,
                                        exclude_frozen_parameters=True)  # fmt: skip
        else:
            self.engine.save_checkpoint(str(self.folder), tag=tag, client_state=client_state, save_latest=False)
        dist.barrier()
        if self.rank == 0:
            self._mark_complete(path, tag)
        return tag

    def resume(self) -> dict | None:
        """Load the latest checkpoint into the engine and this process's RNGs; returns the `state`
        it was saved with, or None when there is no checkpoint. Saved with another layout, ZeRO
        stage or precision, it is resharded (`lm_assets.training.reshard`) and each rank restores the RNG
        file of its own rank number where there is one, else seeds its RNGs from the tag and its
        rank (the RNG streams of a changed world size cannot be continued)."""
        tag = latest_tag(self.folder)
        if tag is None:
            return None
        path = Path(self.folder) / tag
        saved, saved_ds = self._check_resumable(path)
        if saved == self.layout and optimizer_format(saved_ds) == optimizer_format(self.ds_config):
            state = self._load_engine(path, tag)
            set_rng_state(load_weights_only(self._rng_file(path)))
        elif self.trained_only:
            raise NotImplementedError(f"checkpoint {path} holds adapter weights only; resume it with the layout it was "
                                      f"saved with ({describe_layout(saved, saved_ds)})")
        else:
            state = self._load_resharded(path, saved_ds)
            if self._rng_file(path).exists():
                set_rng_state(load_weights_only(self._rng_file(path)))
            else:
                _seed_from(f"{tag}/rank_{self.rank}")
            if self.rank == 0:
                log.info("resumed step %d from layout %s into %s", state["step"],
                         describe_layout(saved, saved_ds), describe_layout(self.layout, self.ds_config))  # fmt: skip
        dist.barrier()
        return state

    def _rng_file(self, path: Path) -> Path:
        return path / "rng" / f"rank_{self.rank:05d}.pt"

    def _save_rng(self, path: Path) -> None:
        (path / "rng").mkdir(parents=True, exist_ok=True)
        torch.save(rng_state(), self._rng_file(path))

    def _save_run_files(self, path: Path, metrics: dict) -> None:
        _write_json(path / "train_config.json", self.train_config)
        _write_json(path / "ds_config.json", self.ds_config)
        _write_json(path / "metrics.json", metrics)

    def _mark_complete(self, path: Path, tag: str) -> None:
        # Only after every rank's files are in (the barrier): see "Order" in the module doc.
        _write_json(path / "layout.json", self.layout)
        _write_text(Path(self.folder) / "latest", tag)

    def _check_resumable(self, path: Path) -> tuple[dict, dict]:
        """The checkpoint's layout and DeepSpeed config, once it is known this run can continue it:
        the same model and the same global batch (the data position is the step number times it)."""
        saved = json.loads((path / "layout.json").read_text())
        saved_ds = json.loads((path / "ds_config.json").read_text())
        if saved["model"] != self.layout["model"]:
            raise ValueError(f"checkpoint {path} holds another model: {saved['model']}, this run has {self.layout['model']}")
        batch, ours = saved_ds.get("train_batch_size"), self.ds_config.get("train_batch_size")
        if batch != ours:
            raise ValueError(
                f"checkpoint {path} was trained with a global batch of {batch} sequences per step "
                f"(micro_batch_size * grad_accum * dp), this run has {ours}; the data position and the "
                "schedule are counted in steps, so resuming needs the same global batch"
            )
        return saved, saved_ds

    def _load_resharded(self, path: Path, saved_ds: dict) -> dict:
        reshard.check_supported(saved_ds, f"checkpoint {path}")
        reshard.check_supported(self.ds_config, "this run")
        names = {name for name, _ in reshard.local_parameters(self.engine, self.layout)}
        consolidated = reshard.consolidate(path, keep=names.__contains__)
        reshard.load(self.engine, consolidated, self.layout, self.rank)
        return consolidated.trainer

    def _load_engine(self, path: Path, tag: str) -> dict:
        # DeepSpeed's own engine unpickles with weights_only=False: a planted file would run.
        self.engine.checkpoint_engine = weights_only_checkpoint_engine(getattr(self.engine, "_config", None))
        # An adapter checkpoint holds the trained weights only; the frozen ones are already in the model.
        load_path, client_state = self.engine.load_checkpoint(str(self.folder), tag=tag,
                                                              load_module_strict=not self.trained_only)
        if load_path is None:
            raise RuntimeError(f"DeepSpeed could not load checkpoint {path}")
        return client_state["trainer"]


# ---------------------------------------------------------------------------------------------
# Consolidation
# ---------------------------------------------------------------------------------------------


def _zero3_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The weights of a ZeRO-3 checkpoint (tp == 1). Each data-parallel rank's optimizer file holds
    its slice of every parameter in one flat fp32 vector, in `param_shapes` order: ceil(n / ranks)
    elements of a parameter of n, the last rank's slice padded."""
    model_states = load_weights_only(path / "zero_pp_rank_0_mp_rank_00_model_states.pt")
    rank_of = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt")
    files = sorted((int(m[1]), f) for f in path.iterdir() if (m := rank_of.fullmatch(f.name)))
    flat = [torch.cat(load_weights_only(f, optimizer_file_classes())["optimizer_state_dict"]["fp32_flat_groups"]) for _, f in files]
    state = {k: v for k, v in model_states["module"].items() if k in model_states["buffer_names"]}
    offset = 0
    for group in model_states["param_shapes"]:
        for name, shape in group.items():
            part = math.ceil(shape.numel() / len(flat))
            state[name] = torch.cat([rank[offset : offset + part] for rank in flat])[: shape.numel()].view(shape)
            offset += part
    if offset != flat[0].numel():
        raise ValueError(f"{path}: each rank holds {flat[0].numel()} elements, the parameters' slices {offset}")
    for alias, source in model_states["shared_params"].items():
        state[alias] = state[source]
    return state


def model_config(ckpt_dir: str | os.PathLike, tag: str | None = None) -> ModelConfig:
    """The `ModelConfig` a checkpoint was trained with (for `lm_assets.training.export.export_hf`)."""
    tag = tag or latest_tag(ckpt_dir)
    if tag is None:
        raise FileNotFoundError(f"no checkpoint under {ckpt_dir}")
    return ModelConfig(**json.loads((tag_folder(ckpt_dir, tag) / "layout.json").read_text())["model"])


def consolidated_state_dict(ckpt_dir: str | os.PathLike, tag: str | None = None) -> dict[str, torch.Tensor]:
    """The full `Transformer` state dict of a checkpoint written by `save` (fp32 copies on CPU)."""
    tag = tag or latest_tag(ckpt_dir)
    if tag is None:
        raise FileNotFoundError(f"no checkpoint under {ckpt_dir}")
    path = tag_folder(ckpt_dir, tag)
    layout = json.loads((path / "layout.json").read_text())
    if layout["pp"] == 1 and json.loads((path / "ds_config.json").read_text())["zero_optimization"]["stage"] == 3:
        # ZeRO-3 partitions the weights themselves, across data-parallel ranks (tp == 1 only).
        if layout["tp"] > 1:
            raise NotImplementedError(f"{path}: consolidating ZeRO-3 with tensor parallelism is not supported")
        return {k: v.float().clone() for k, v in _zero3_state_dict(path).items()}
    pieces = module_pieces(path, layout, model_config(ckpt_dir, tag))
    return {k: merge_tp(k, v).float().clone() for k, v in pieces.items()}


def adapter_settings(ckpt_dir: str | os.PathLike, tag: str) -> tuple[dict, str] | None:
    """An adapter checkpoint's `adapter` settings and the `init_from` folder of its frozen base; None for a
    checkpoint of whole weights."""
    config = json.loads((tag_folder(ckpt_dir, tag) / "train_config.json").read_text())
    adapter = config.get("adapter") or {}
    return (adapter, config["init_from"]) if adapter.get("type", "none") != "none" else None


def model_state_dict(ckpt_dir: str | os.PathLike, tag: str | None = None) -> dict[str, torch.Tensor]:
    """The whole model a checkpoint stands for: `consolidated_state_dict`, and for an adapter checkpoint
    (which holds the adapter only) its base, `init_from` with the rows the run added to the vocabulary,
    with the adapter merged in."""
    tag = tag or latest_tag(ckpt_dir)
    state = consolidated_state_dict(ckpt_dir, tag)
    settings = adapter_settings(ckpt_dir, tag)
    if settings is None:
        return state
    from lm_assets.training import hf_init
    from lm_assets.training.lora import LoRAConfig, merged_state_dict

    adapter, init_from = settings
    base = hf_init.extend_vocabulary(hf_init.weights(init_from), model_config(ckpt_dir, tag).vocab_size)
    lora = LoRAConfig(adapter["rank"], adapter["alpha"], adapter["dropout"], list(adapter["target_modules"]))
    return merged_state_dict(base | state, lora)


__all__ = [
    "TAG_FORMAT",
    "CheckpointManager",
    "adapter_settings",
    "consolidated_state_dict",
    "describe_layout",
    "latest_tag",
    "model_config",
    "model_state_dict",
    "random_seed",
    "rng_state",
    "run_layout",
    "set_rng_state",
    "tag_folder",
]
