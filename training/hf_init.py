"""Continued pretraining: a run's weights taken from a Hugging Face `LlamaForCausalLM` folder
(`init_from`), the model's shape from its `config.json`, every rank loading its own slice.

`model_config` reads the architecture (refusing what `training.model` does not build: biases, other
activations, RoPE scaling); `weights` reads `model.safetensors` (or the shards its index names) into
`Transformer` names (`export.native_state_dict`); `load_into` copies each parameter of this rank's
model (a `Transformer`, or a pipeline stage) from the full tensors, cut along its tensor-parallel
dimension. A checkpoint of the run itself, when one exists, still takes precedence: resuming replaces
these weights.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from training.config import ModelConfig
from training.export import CONFIG_NAME, WEIGHTS_NAME, native_state_dict
from training.reshard import logical_name, tp_shard


def model_config(folder: str | os.PathLike, max_seq_len: int | None = None) -> ModelConfig:
    """Our `ModelConfig` for the checkpoint in `folder`; `max_seq_len` overrides its context."""
    hf = json.loads((Path(folder) / CONFIG_NAME).read_text())
    if hf.get("model_type") != "llama":
        raise ValueError(f"{folder}: init_from reads Llama checkpoints; this one is {hf.get('model_type')!r}")
    refused = {key: hf[key] for key in ("attention_bias", "mlp_bias") if hf.get(key)}
    if hf.get("hidden_act", "silu") != "silu":
        refused["hidden_act"] = hf["hidden_act"]
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
        refused["rope"] = rope
    heads = hf["num_attention_heads"]
    if hf.get("head_dim") not in (None, hf["hidden_size"] // heads):
        refused["head_dim"] = hf["head_dim"]
    if refused:
        raise ValueError(f"{folder}: the model here does not build {refused}")
    return ModelConfig(
        vocab_size=hf["vocab_size"], dim=hf["hidden_size"], n_layers=hf["num_hidden_layers"], n_heads=heads,
        n_kv_heads=hf.get("num_key_value_heads") or heads, ffn_hidden=hf["intermediate_size"],
        max_seq_len=max_seq_len or hf.get("max_position_embeddings", 2048),
        rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10_000.0))),
        norm_eps=float(hf.get("rms_norm_eps", 1e-5)), tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
    )


def weights(folder: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under `Transformer` names (safetensors only: nothing is unpickled)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    index = folder / f"{WEIGHTS_NAME}.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else [WEIGHTS_NAME]
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state |= load_file(folder / name)
    return native_state_dict(state)


@torch.no_grad()
def load_into(model: torch.nn.Module, state: dict[str, torch.Tensor], cfg: ModelConfig, pipeline: bool, tp: int,
              tp_rank: int) -> int:
    """Copy this rank's slice of `state` into `model`'s parameters; returns how many were set."""
    count = 0
    for name, p in model.named_parameters():
        full_name = logical_name(name, pipeline, cfg.n_layers)
        if full_name == "head.output.weight" and cfg.tie_embeddings and full_name not in state:
            full_name = "embed.weight"
        if full_name not in state:
            raise ValueError(f"the checkpoint has no weights for {full_name}")
        dim = p.partition_dim if getattr(p, "tensor_model_parallel", False) else None
        piece = tp_shard(state[full_name], dim, tp, tp_rank)
        if piece.shape != p.shape:
            raise ValueError(f"{full_name}: the checkpoint's slice has shape {tuple(piece.shape)}, the model's {tuple(p.shape)}")
        p.copy_(piece.to(p.dtype))
        count += 1
    return count
