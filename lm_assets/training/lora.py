"""Low-rank adapters (LoRA, Hu et al. 2021) on the model's linear layers, in PEFT's form.

`apply_lora(model, config)` freezes every weight of the model and wraps each targeted linear layer
(`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`) in a `LoRALinear`:

    y = base(x) + (dropout(x) A^T) B^T * alpha / rank

with `A` (rank x in) drawn as PEFT draws it (Kaiming-uniform, a = sqrt(5)) and `B` (out x rank) zero,
so training starts from the base model exactly. Only `A` and `B` train, and only they are saved
(`adapter_state_dict`). Under tensor parallelism the adapter follows its layer's split: after a
column-parallel layer `B` holds this rank's output rows and `A` is whole; after a row-parallel layer
`A` holds this rank's input columns, the rank-sized partial products are summed across the group and
`B` is whole. `lm_assets.training.export.export_peft_adapter` writes the adapter as a PEFT folder, and
`merged_state_dict` folds it into the base weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from lm_assets.training.config import check_adapter_settings

ADAPTER_PARAMS = ("lora_A", "lora_B")


@dataclass
class LoRAConfig:
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def validate(self) -> None:
        check_adapter_settings(self.rank, self.alpha, self.dropout, self.target_modules)


class LoRALinear(nn.Module):
    """A frozen linear layer (plain, column- or row-parallel) plus a trainable low-rank update."""

    def __init__(self, base: nn.Module, config: LoRAConfig, generator: torch.Generator | None = None):
        super().__init__()
        from lm_assets.training.parallel import ColumnParallelLinear, RowParallelLinear

        self.base = base
        self.disabled = False
        self.scaling = config.scaling
        self.dropout = nn.Dropout(config.dropout) if config.dropout else nn.Identity()
        self.style = ("column" if isinstance(base, ColumnParallelLinear) else
                      "row" if isinstance(base, RowParallelLinear) else "plain")  # fmt: skip
        self.group = getattr(base, "group", None)
        local_out, local_in = base.weight.shape
        rank = config.rank
        a_in = local_in if self.style == "row" else base.weight.shape[1]
        b_out = local_out
        self.lora_A = nn.Parameter(torch.empty(rank, a_in, dtype=base.weight.dtype, device=base.weight.device))
        self.lora_B = nn.Parameter(torch.zeros(b_out, rank, dtype=base.weight.dtype, device=base.weight.device))
        full_in = getattr(base, "in_features", a_in)
        self._init_a(full_in, generator)
        if self.style == "column":
            self.lora_B.tensor_model_parallel, self.lora_B.partition_dim = True, 0
        elif self.style == "row":
            self.lora_A.tensor_model_parallel, self.lora_A.partition_dim = True, 1

    @torch.no_grad()
    def _init_a(self, full_in: int, generator: torch.Generator | None) -> None:
        # PEFT's init: kaiming_uniform_(a=sqrt(5)) on the whole A, i.e. U(-1/sqrt(in), 1/sqrt(in)).
        bound = 1.0 / math.sqrt(full_in)
        full = torch.empty(self.lora_A.shape[0], full_in).uniform_(-bound, bound, generator=generator)
        if self.style == "row":
            from torch import distributed as dist

            rank, world = dist.get_rank(self.group), dist.get_world_size(self.group)
            full = full.chunk(world, dim=1)[rank]
        self.lora_A.copy_(full.to(self.lora_A.dtype))

    @property
    def weight(self) -> torch.Tensor:
        return self.base.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from lm_assets.training.parallel import copy_to_tp, reduce_from_tp

        y = self.base(x)
        if self.disabled:
            return y
        h = F.linear(self.dropout(x), self.lora_A)
        if self.style == "column":
            h = copy_to_tp(h, self.group)  # A is whole: its gradient sums every rank's output rows
        elif self.style == "row":
            h = reduce_from_tp(h, self.group)
        return y + F.linear(h, self.lora_B) * self.scaling


def apply_lora(model: nn.Module, config: LoRAConfig, seed: int = 0) -> dict:
    """Freeze `model` and put an adapter on each targeted linear layer; returns the counts the run reports."""
    config.validate()
    total = sum(p.numel() for p in model.parameters())
    for p in model.parameters():
        p.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    wrapped = 0
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if name in config.target_modules and not isinstance(parent, LoRALinear) and hasattr(child, "weight"):
                setattr(parent, name, LoRALinear(child, config, generator))
                wrapped += 1
    if not wrapped:
        raise ValueError(f"adapter.target_modules {config.target_modules} match no layer of the model")
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"adapted_layers": wrapped, "trained_parameters": trained, "frozen_parameters": total,
            "trained_share": trained / total}  # fmt: skip


@contextmanager
def adapters_disabled(model: nn.Module):
    """Within: every adapter of `model` is switched off, so the model is its frozen base (DPO's reference
    with adapters, as PEFT's `disable_adapter()`)."""
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    for layer in layers:
        layer.disabled = True
    try:
        yield
    finally:
        for layer in layers:
            layer.disabled = False


def is_adapter_param(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ADAPTER_PARAMS


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter weights only, under the model's names (`layers.0.attn.q_proj.lora_A`)."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if is_adapter_param(name)}


def base_name(name: str) -> str:
    """The base model's name of a wrapped layer's weight: `layers.0.attn.q_proj.base.weight` -> `...q_proj.weight`."""
    return name.replace(".base.", ".")


def merged_state_dict(state: Mapping[str, torch.Tensor], config: LoRAConfig) -> dict[str, torch.Tensor]:
    """Whole (consolidated) weights with each adapter folded in: W + B A * alpha / rank, under the base names."""
    out = {base_name(k): v for k, v in state.items() if not is_adapter_param(k)}
    for name in state:
        if name.endswith(".lora_A"):
            layer = name[: -len(".lora_A")]
            a, b = state[name].float(), state[f"{layer}.lora_B"].float()
            weight = out[f"{layer}.weight"]
            out[f"{layer}.weight"] = (weight.float() + (b @ a) * config.scaling).to(weight.dtype)
    return out


def optimizer_state_bytes(parameters: int, bytes_per_state: int = 8) -> int:
    """Adam's two fp32 moments per trained parameter (plus nothing for frozen ones)."""
    return parameters * bytes_per_state
