"""Resuming a checkpoint under another parallel layout, ZeRO stage or precision.

`lm_assets.training.checkpoint.CheckpointManager.resume` comes here when the checkpoint was written with a
(pp, tp, dp) layout, ZeRO stage or precision other than the running job's; the same layout and
optimizer keep DeepSpeed's own `load_checkpoint`. Two steps:

- `consolidate(path)` reads the checkpoint into one whole tensor per parameter of
  `lm_assets.training.model.Transformer` (named as in its state dict, fp32, on CPU), whatever the layout:
  the weights (the fp32 master weights where the optimizer keeps them, else the module's), every
  per-element optimizer state (AdamW's `exp_avg` and `exp_avg_sq`) and each parameter's optimizer
  step count; plus the LR scheduler's state, DeepSpeed's step counters and the training loop's
  state saved with it.
- `load(engine, consolidated, layout, rank)` puts them into an engine built as usual for the new
  layout: each parameter's slice for this rank (its pipeline stage's layers, the tensor-parallel
  shard along the parameter's `partition_dim`, and, under ZeRO or bf16, the part of DeepSpeed's
  flat fp32 partition this data-parallel rank owns) goes into the module weights, the master
  weights and the optimizer state; the scheduler's state and the learning rate of each param
  group follow.

How the files are read. Model-parallel rank `mp` of a job is `stage * tp + tp_rank` (DeepSpeed's
`PipelineParallelGrid` orders a data-parallel slice by pipeline stage, then tensor-parallel rank;
the plain engine's is the tensor-parallel rank), and `mp_rank_XX_model_states.pt` is that rank's
file. Pipeline parameters are named `<layer index>.<name in the layer>` and renamed with
`lm_assets.training.parallel.pipeline_layer_name`; tensor-parallel shards are concatenated as
`lm_assets.training.checkpoint_files.merge_tp` does.

- The ZeRO-1/2 and bf16 optimizers keep, per param group, one flat fp32 partition per
  data-parallel rank; their files (`[bf16_]zero_pp_rank_D_mp_rank_XX_optim_states.pt`) hold it
  (`single_partition_of_fp32_groups`), the torch optimizer's state over it
  (`base_optimizer_state`, moments laid out like the partition) and `param_slice_mappings`: where
  each parameter's fragment lies in the partition. A parameter split across ranks has one fragment
  per rank, in rank order, so concatenating them gives the parameter.
- The fp32 ZeRO-0 engine's torch optimizer holds the module's parameters themselves; its state is
  in the model-states file, keyed by position. `CheckpointManager.save` records the names in that
  order (`client_state["optimizer_param_names"]`, see `optimizer_param_names`), and the weights
  come from the module files.

Each rank reads only the files of the model-parallel ranks that hold its parameters (where the
model-states file names them) and keeps only its parameters' state. Loading uses the mapping
DeepSpeed itself built for the new engine (each parameter's `_hp_mapping`: which elements of the
parameter this rank's flat partition holds, and where), so the partition arithmetic is
DeepSpeed's. All files are read weights-only, like the rest of `lm_assets.training.checkpoint`.

Supported: fp32 or bf16, ZeRO stage 0, 1 or 2, on either side (the pipeline engine allows ZeRO-1
at most). Refused with the reason: fp16 (its loss scale is not carried over) and ZeRO-3 (its
partitioned module weights are not rebuilt here). The global batch is checked by the caller.

Nothing here imports Dagster or lm_assets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lm_assets.training.checkpoint_files import (
    load_weights_only,
    merge_tp,
    module_pieces,
    optimizer_file_classes,
    optimizer_format,
    tp_dim,
)
from lm_assets.training.config import ModelConfig

SUPPORTED = "fp32 or bf16 with ZeRO stage 0, 1 or 2"
_OPTIM_FILE = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt")


def check_supported(ds_config: dict, what: str) -> None:
    """Raise `NotImplementedError` unless a layout change can read or write `ds_config`'s optimizer."""
    stage, precision = optimizer_format(ds_config)
    if precision == "fp16" or stage not in (0, 1, 2):
        raise NotImplementedError(
            f"resuming under another layout, ZeRO stage or precision supports {SUPPORTED}; {what} uses "
            f"{precision} with ZeRO stage {stage}. Resume it with the layout and optimizer it was saved with"
        )


def optimizer_param_names(engine) -> list[list[str]] | None:
    """The module's names of the parameters the engine's optimizer holds, per param group, when it
    holds the module's parameters themselves (fp32 ZeRO-0); None for DeepSpeed's flat optimizers,
    whose files name their parameters themselves."""
    names = {id(p): n for n, p in engine.module.named_parameters()}
    groups = [[names.get(id(p)) for p in group["params"]] for group in engine.optimizer.param_groups]
    return groups if all(n is not None for group in groups for n in group) else None


# ---------------------------------------------------------------------------------------------
# Names and tensor-parallel slices
# ---------------------------------------------------------------------------------------------


def logical_name(name: str, pipeline: bool, n_layers: int) -> str:
    """The `Transformer` state-dict name of an engine's parameter `name`."""
    if not pipeline:
        return name
    from lm_assets.training.parallel import pipeline_layer_name

    index, rest = name.split(".", 1)
    return pipeline_layer_name(int(index), n_layers) + rest


def tp_shard(full: torch.Tensor, dim: int | None, tp: int, tp_rank: int) -> torch.Tensor:
    """Tensor-parallel rank `tp_rank`'s part of `full`, split along `dim` (None: replicated)."""
    return full if dim is None or tp == 1 else full.chunk(tp, dim=dim)[tp_rank]


def full_shapes(cfg: ModelConfig) -> dict[str, torch.Size]:
    """Every parameter of the whole model and its shape (built on the meta device: no memory)."""
    from lm_assets.training.model import Transformer

    with torch.device("meta"):
        model = Transformer(cfg, seed=None)
    return {name: p.shape for name, p in model.named_parameters()}


# ---------------------------------------------------------------------------------------------
# Reading: flat partitions and torch optimizer state
# ---------------------------------------------------------------------------------------------


def gather_flat_partitions(state_dicts: list[dict], keep: Callable[[str], bool] | None = None) -> dict[str, dict[str, Any]]:
    """Per parameter (the engine's names; those `keep` accepts), its flattened fp32 weight
    (`"param"`), optimizer states and `"step"`, from one model-parallel rank's ZeRO-1/2 or bf16
    optimizer state dicts (DeepSpeed's `optimizer_state_dict`), one per data-parallel rank in rank
    order."""
    pieces: dict[str, dict[str, Any]] = {}
    for sd in state_dicts:
        base = sd["base_optimizer_state"]
        if not isinstance(base, dict) or "state" not in base:
            raise NotImplementedError("ZeRO elastic_checkpoint optimizer files are not supported")
        for group, mapping in enumerate(sd["param_slice_mappings"]):
            if not mapping:
                continue
            state = base["state"][group]
            flat = {"param": sd["single_partition_of_fp32_groups"][group]}
            flat |= {k: v for k, v in state.items() if k != "step" and torch.is_tensor(v) and v.dim() == 1}
            for name, address in mapping.items():
                if keep is not None and not keep(name):
                    continue
                entry = pieces.setdefault(name, {"step": float(state["step"]), **{k: [] for k in flat}})
                for key, tensor in flat.items():
                    entry[key].append(tensor.narrow(0, address.start, address.numel))
    return {
        name: {k: v if k == "step" else torch.cat(v).float() for k, v in entry.items()}
        for name, entry in pieces.items()
    }


def _torch_optimizer_state(states: dict, file: Path) -> dict[str, dict[str, Any]]:
    """Per parameter (the engine's names), the optimizer states and `"step"` of a torch optimizer's
    state dict saved in a model-states file, named by `client_state["optimizer_param_names"]`."""
    optimizer, names = states.get("optimizer"), states.get("optimizer_param_names")
    if optimizer is None:
        raise ValueError(f"{file}: holds no optimizer state")
    if names is None:
        raise ValueError(f"{file}: the optimizer's parameter names were not saved, so its state cannot be "
                         "placed in another layout; resume it with the layout it was saved with")  # fmt: skip
    out = {}
    for group, group_names in zip(optimizer["param_groups"], names, strict=True):
        for index, name in zip(group["params"], group_names, strict=True):
            state = optimizer["state"].get(index)
            if state is not None:  # absent: never updated
                out[name] = {"step": float(state["step"])} | {k: v for k, v in state.items() if k != "step"}
    return out


# ---------------------------------------------------------------------------------------------
# Consolidation
# ---------------------------------------------------------------------------------------------


@dataclass
class Consolidated:
    """A checkpoint's training state, whole: see the module doc."""

    tensors: dict[str, dict[str, torch.Tensor]]  # name -> {"param": weight, "exp_avg": ..., ...}, fp32
    steps: dict[str, float]  # name -> the optimizer's step count for it
    lr_scheduler: dict | None
    counters: dict[str, int]  # DeepSpeed's global_steps, global_samples, skipped_steps
    trainer: dict | None  # the training loop's state (`client_state["trainer"]`)


def consolidate(path: str | Path, keep: Callable[[str], bool] | None = None) -> Consolidated:
    """The training state of the checkpoint folder `path` (`<dir>/<tag>`), for the parameters whose
    `Transformer` name `keep` accepts (all by default)."""
    path = Path(path)
    layout = json.loads((path / "layout.json").read_text())
    ds_config = json.loads((path / "ds_config.json").read_text())
    check_supported(ds_config, f"checkpoint {path}")
    cfg = ModelConfig(**layout["model"])
    shapes = full_shapes(cfg)
    keep = keep or (lambda name: True)
    tp, pipeline = layout["tp"], layout["pp"] > 1
    classes = optimizer_file_classes()
    optim_files: dict[int, list[tuple[int, Path]]] = {}
    for file in path.iterdir():
        if m := _OPTIM_FILE.fullmatch(file.name):
            optim_files.setdefault(int(m[2]), []).append((int(m[1]), file))

    def keep_engine_name(name: str) -> bool:
        return keep(logical_name(name, pipeline, cfg.n_layers))

    per_rank: dict[str, dict[int, dict[str, Any]]] = {}  # name -> tp rank -> local state
    first = None
    for mp in range(layout["pp"] * tp):
        file = path / f"mp_rank_{mp:02d}_model_states.pt"
        states = load_weights_only(file, classes)
        first = states if first is None else first
        held = _names_held(states)
        if held is not None and not any(map(keep_engine_name, held)):
            continue
        if optim_files:
            files = [f for _, f in sorted(optim_files.get(mp, []))]
            if len(files) != layout["dp"]:
                raise ValueError(f"{path}: {len(files)} optimizer files of model-parallel rank {mp}, expected {layout['dp']}")
            local = gather_flat_partitions([load_weights_only(f, classes)["optimizer_state_dict"] for f in files], keep_engine_name)
        else:
            local = _torch_optimizer_state(states, file)
        for engine_name, state in local.items():
            if keep_engine_name(engine_name):
                per_rank.setdefault(logical_name(engine_name, pipeline, cfg.n_layers), {})[mp % tp] = state
    if not optim_files:  # fp32 ZeRO-0: the module's weights are the ones the optimizer updates
        for name, pieces in module_pieces(path, layout, cfg, keep).items():
            for tp_rank, piece in enumerate(pieces):
                per_rank.get(name, {}).get(tp_rank, {})["param"] = piece

    tensors, steps = {}, {}
    for name, shape in shapes.items():
        if not keep(name):
            continue
        ranks = per_rank.get(name, {})
        if sorted(ranks) != list(range(tp)) or any("param" not in s for s in ranks.values()):
            raise ValueError(f"{path}: the state of parameter {name} is incomplete")
        ordered = [ranks[r] for r in range(tp)]
        local_shape = _local_shape(name, shape, tp)
        tensors[name] = {
            key: merge_tp(name, [s[key].reshape(local_shape).float() for s in ordered]).clone()
            for key in ordered[0]
            if key != "step"
        }
        steps[name] = ordered[0]["step"]
    counters = {k: int(first.get(k) or 0) for k in ("global_steps", "global_samples", "skipped_steps")}
    return Consolidated(tensors, steps, first.get("lr_scheduler"), counters, first.get("trainer"))


def _names_held(states: dict) -> list[str] | None:
    """The engine's names of the parameters a model-states file's rank holds, where it says
    (None: unknown, as for the bf16 optimizer without ZeRO, whose `param_shapes` is not saved)."""
    if states.get("param_shapes"):
        return [name for group in states["param_shapes"] for name in group]
    if states.get("optimizer_param_names"):
        return [name for group in states["optimizer_param_names"] for name in group]
    return None


def _local_shape(name: str, shape: torch.Size, tp: int) -> list[int]:
    local = list(shape)
    dim = tp_dim(name)
    if dim is not None:
        local[dim] //= tp
    return local


# ---------------------------------------------------------------------------------------------
# Loading into an engine
# ---------------------------------------------------------------------------------------------


def scatter_to_partition(params, values: dict[int, torch.Tensor], flat: torch.Tensor) -> None:
    """Write into `flat` (a flat partition of a DeepSpeed ZeRO-1/2 or bf16 optimizer) the elements it
    owns of each parameter, `values[id(param)]` (the parameter's shape), using the `_hp_mapping`
    DeepSpeed linked to the parameter."""
    for p in params:
        mapping = getattr(p, "_hp_mapping", None)
        if mapping is None:  # no element of p in this partition
            continue
        lp, hp = mapping.lp_fragment_address, mapping.hp_fragment_address
        flat.narrow(0, hp.start, hp.numel).copy_(values[id(p)].reshape(-1).narrow(0, lp.start, lp.numel))


def _flat_groups(optimizer) -> tuple[list[list[torch.nn.Parameter]], list[torch.Tensor]]:
    """The module's parameters per group and this rank's flat fp32 partition per group."""
    if hasattr(optimizer, "single_partition_of_fp32_groups"):  # ZeRO 1 and 2, any precision
        return optimizer.bit16_groups, optimizer.single_partition_of_fp32_groups
    if hasattr(optimizer, "fp32_groups_flat_partition"):  # bf16 without ZeRO
        return optimizer.bf16_groups, optimizer.fp32_groups_flat_partition
    raise NotImplementedError(f"resharding into a {type(optimizer).__name__} is not supported ({SUPPORTED})")


def _rank_coords(layout: dict, rank: int):
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

    return PipeModelDataParallelTopology(num_pp=layout["pp"], num_mp=layout["tp"], num_dp=layout["dp"]).get_coord(rank)


def local_parameters(engine, layout: dict) -> list[tuple[str, torch.nn.Parameter]]:
    """The engine's parameters as (`Transformer` name, parameter)."""
    pipeline, n_layers = layout["pp"] > 1, layout["model"]["n_layers"]
    return [(logical_name(n, pipeline, n_layers), p) for n, p in engine.module.named_parameters()]


@torch.no_grad()
def load(engine, state: Consolidated, layout: dict, rank: int) -> None:
    """Set `engine` (built for `layout`, this process being global `rank`) to `state`."""
    tp, tp_rank = layout["tp"], _rank_coords(layout, rank).model
    params = local_parameters(engine, layout)
    local: dict[int, dict[str, torch.Tensor]] = {}
    steps: dict[int, float] = {}
    for name, p in params:
        if name not in state.tensors:
            raise ValueError(f"the checkpoint has no state for parameter {name}")
        dim = p.partition_dim if getattr(p, "tensor_model_parallel", False) else None
        local[id(p)] = {k: tp_shard(v, dim, tp, tp_rank).contiguous() for k, v in state.tensors[name].items()}
        steps[id(p)] = state.steps[name]
        if local[id(p)]["param"].shape != p.shape:
            raise ValueError(f"{name}: the checkpoint's slice has shape {tuple(local[id(p)]['param'].shape)}, "
                             f"this rank's parameter {tuple(p.shape)}")  # fmt: skip
        p.copy_(local[id(p)]["param"])

    optimizer, base = engine.optimizer, engine.basic_optimizer
    keys = [k for k in next(iter(state.tensors.values())) if k != "param"]
    per_param: dict[int, dict[str, torch.Tensor]] = {}
    if optimizer is base:  # a torch optimizer over the module's parameters (fp32, ZeRO-0)
        for _, p in params:
            per_param[id(p)] = {"step": torch.tensor(steps[id(p)])} | {k: local[id(p)][k] for k in keys}
    else:
        lp_groups, flats = _flat_groups(optimizer)
        for lp_params, flat in zip(lp_groups, flats, strict=True):
            group_steps = {steps[id(p)] for p in lp_params}
            if len(group_steps) != 1:
                raise ValueError(f"parameters of one param group have different optimizer steps {sorted(group_steps)}")
            scatter_to_partition(lp_params, {id(p): local[id(p)]["param"] for p in lp_params}, flat)
            per_param[id(flat)] = {"step": torch.tensor(group_steps.pop())}
            for key in keys:
                per_param[id(flat)][key] = torch.zeros_like(flat)
                scatter_to_partition(lp_params, {id(p): local[id(p)][key] for p in lp_params}, per_param[id(flat)][key])
    _load_optimizer_state(engine, base, per_param, state.lr_scheduler)
    for key, value in state.counters.items():
        setattr(engine, key, value)


def _load_optimizer_state(engine, base, per_param: dict[int, dict], lr_scheduler: dict | None) -> None:
    """Load `per_param` (by id of the torch optimizer's parameters) into `base` through its own
    `load_state_dict` (which places `step` where fused or capturable AdamW wants it), and the
    scheduler's state with each group's current learning rate."""
    lrs = None
    if engine.lr_scheduler is not None and lr_scheduler is not None:
        engine.lr_scheduler.load_state_dict(dict(lr_scheduler))
        lrs = engine.lr_scheduler.get_last_lr()
        if len(lrs) != len(base.param_groups):
            raise ValueError(f"the checkpoint's LR scheduler has {len(lrs)} param groups, the optimizer {len(base.param_groups)}")
    sd = base.state_dict()
    index = 0
    sd["state"] = {}
    for g, group in enumerate(base.param_groups):
        for p in group["params"]:
            if id(p) not in per_param:
                raise ValueError(f"no optimizer state for a parameter of param group {g}")
            sd["state"][index] = per_param[id(p)]
            index += 1
        if lrs is not None:
            sd["param_groups"][g]["lr"] = lrs[g]
    base.load_state_dict(sd)


__all__ = [
    "SUPPORTED",
    "Consolidated",
    "check_supported",
    "consolidate",
    "gather_flat_partitions",
    "load",
    "local_parameters",
    "logical_name",
    "optimizer_param_names",
    "scatter_to_partition",
    "tp_shard",
]
