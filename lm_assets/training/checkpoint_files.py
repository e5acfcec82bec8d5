"""Reading a checkpoint's files, for `lm_assets.training.checkpoint` and `lm_assets.training.reshard`.

- `load_weights_only`: `torch.load` that unpickles tensors and plain Python data only (see
  "Loading" in `lm_assets.training.checkpoint`), plus `optimizer_file_classes` for DeepSpeed's optimizer files;
  `weights_only_checkpoint_engine`, DeepSpeed's checkpoint engine loading that way;
- tensor-parallel weights by name: `COLUMN_PARALLEL` (split along dim 0), `ROW_PARALLEL` (dim 1),
  the rest replicated; `tp_dim` and `merge_tp`;
- `module_pieces`: a checkpoint's module weights by `Transformer` name, one per tensor-parallel
  rank (pipeline layer files renamed);
- `optimizer_format`: (ZeRO stage, precision) of a DeepSpeed config.

Nothing here imports Dagster or lm_assets.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import torch

from lm_assets.training.config import ModelConfig

# Megatron-style split dimension of tensor-parallel weights, by name (the rest is replicated).
COLUMN_PARALLEL = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight")
ROW_PARALLEL = ("o_proj.weight", "down_proj.weight")


def load_weights_only(file: Path, allowed_classes: tuple = ()):
    """`torch.load` of tensors and plain Python data (and `allowed_classes`) only, so that unpickling
    cannot run code; any other file raises `pickle.UnpicklingError` naming it."""
    try:
        with torch.serialization.safe_globals(list(allowed_classes)):
            return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"WeightsUnpickler error: (.*?)(?: Please use .*)?$", str(err), re.MULTILINE)
        detail = found[1] if found else str(err)
        raise pickle.UnpicklingError(f"{file}: refused, it holds more than tensors and plain data: {detail}") from None


def optimizer_file_classes() -> tuple:
    """The DeepSpeed classes a ZeRO or bf16 optimizer file holds besides tensors and plain data."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return (ZeroStageEnum, LossScaler, DynamicLossScaler, fragment_address)


def weights_only_checkpoint_engine(config=None):
    """DeepSpeed's torch checkpoint engine, but every file it loads (module, layer, optimizer and ZeRO
    files of a same-layout resume) is read by `load_weights_only` with the optimizer files' classes:
    a planted pickle is refused, naming the file, instead of run. Saving is DeepSpeed's own."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    class WeightsOnlyCheckpointEngine(TorchCheckpointEngine):
        def load(self, path: str, map_location=None):
            return load_weights_only(Path(path), optimizer_file_classes())

    return WeightsOnlyCheckpointEngine(config)


def tp_dim(name: str) -> int | None:
    """The dimension a tensor-parallel parameter is split along (None: replicated). An adapter
    (`lm_assets.training.lora`) follows its layer: `B` of a column-parallel layer by its output rows, `A` of a
    row-parallel one by its input columns; the base weight it wraps (`q_proj.base.weight`) as the layer's."""
    name = name.replace(".base.", ".")
    if name.endswith(".lora_B"):
        return 0 if (name[: -len("lora_B")] + "weight").endswith(COLUMN_PARALLEL) else None
    if name.endswith(".lora_A"):
        return 1 if (name[: -len("lora_A")] + "weight").endswith(ROW_PARALLEL) else None
    if name.endswith(COLUMN_PARALLEL):
        return 0
    if name.endswith(ROW_PARALLEL):
        return 1
    return None


def merge_tp(name: str, shards: list[torch.Tensor]) -> torch.Tensor:
    """One tensor from its tensor-parallel shards (in rank order), by the name's split dimension."""
    if len(shards) == 1:
        return shards[0]
    dim = tp_dim(name)
    return shards[0] if dim is None else torch.cat(shards, dim=dim)  # None: replicated


def module_pieces(path: Path, layout: dict, cfg: ModelConfig, keep=None) -> dict[str, list[torch.Tensor]]:
    """The module weights of a (non-ZeRO-3) checkpoint, by `Transformer` name: one tensor per
    tensor-parallel rank, in rank order; only the names `keep` accepts, when given."""
    pieces: dict[str, list[torch.Tensor]] = {}
    if layout["pp"] > 1:
        from lm_assets.training.parallel import pipeline_layer_name

        pattern = re.compile(r"layer_(\d+)-model_(\d+)-model_states\.pt")
        files = sorted((int(m[1]), int(m[2]), f) for f in path.iterdir() if (m := pattern.fullmatch(f.name)))
        for layer, _mp, file in files:
            prefix = pipeline_layer_name(layer, cfg.n_layers)
            for key, value in load_weights_only(file).items():
                if keep is None or keep(prefix + key):
                    pieces.setdefault(prefix + key, []).append(value)
    else:
        for mp in range(layout["tp"]):
            states = load_weights_only(path / f"mp_rank_{mp:02d}_model_states.pt")
            for key, value in states["module"].items():
                if keep is None or keep(key):
                    pieces.setdefault(key, []).append(value)
    return pieces


def optimizer_format(ds_config: dict) -> tuple[int, str]:
    """(ZeRO stage, precision) of a DeepSpeed config."""
    if ds_config.get("bf16", {}).get("enabled"):
        precision = "bf16"
    elif ds_config.get("fp16", {}).get("enabled"):
        precision = "fp16"
    else:
        precision = "fp32"
    return int(ds_config.get("zero_optimization", {}).get("stage", 0)), precision


__all__ = [
    "COLUMN_PARALLEL",
    "ROW_PARALLEL",
    "load_weights_only",
    "weights_only_checkpoint_engine",
    "merge_tp",
    "module_pieces",
    "optimizer_file_classes",
    "optimizer_format",
    "tp_dim",
]
