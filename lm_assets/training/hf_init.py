"""Continued pretraining: a run's weights taken from a Hugging Face `LlamaForCausalLM` folder
(`init_from`), the model's shape from its `config.json`, every rank loading its own slice.

`model_config` reads the architecture (refusing what `lm_assets.training.model` does not build: biases, other
activations, RoPE scaling); `weights` reads `model.safetensors` (or the shards its index names) into
`Transformer` names (`export.native_state_dict`); `load_into` copies each parameter of this rank's
model (a `Transformer`, or a pipeline stage) from the full tensors, cut along its tensor-parallel
dimension. A checkpoint of the run itself, when one exists, still takes precedence: resuming replaces
these weights.

Vocabulary. The data must be tokenized with the checkpoint's own tokenizer (the tokenizer asset's
`adopt_from`), else token ids mean other pieces than the embeddings learned. `model_vocabulary`
checks it: when the run's `tokenizer_model` and the checkpoint's `tokenizer.model` are both at hand,
the run's pieces must start with the checkpoint's, id for id; without them the vocabulary sizes must
be equal. A tokenizer extended with domain pieces (ids past the checkpoint's last) grows the model:
`extend_vocabulary` gives each new row of the embedding and of the output head the mean of the
checkpoint's rows. A new piece then starts as an average input, and its logit equals the mean
logit, so its probability starts near the average piece's instead of at an arbitrary value that a
random row would give, which can dominate the softmax (Hewitt, "Initializing new word embeddings
for pretrained language models", 2021; transformers' `resize_token_embeddings` also starts from
the mean). A checkpoint whose table is larger than its tokenizer (padded for speed) keeps its size.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from lm_assets.training.config import ModelConfig
from lm_assets.training.export import CONFIG_NAME, WEIGHTS_NAME, native_state_dict, read_hf_config, read_sentencepiece
from lm_assets.training.reshard import logical_name, tp_shard


def model_config(folder: str | os.PathLike, max_seq_len: int | None = None) -> ModelConfig:
    """Our `ModelConfig` for the checkpoint in `folder`; `max_seq_len` overrides its context. A config.json
    that is not a Llama's, or not one `read_hf_config` accepts, raises ValueError naming it."""
    path = Path(folder) / CONFIG_NAME
    hf = read_hf_config(folder)
    if hf.get("model_type") != "llama":
        raise ValueError(f"{path}: init_from reads Llama checkpoints; this one is {hf.get('model_type')!r}")
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
        raise ValueError(f"{path}: the model here does not build {refused}")
    try:
        return ModelConfig(
            vocab_size=hf["vocab_size"], dim=hf["hidden_size"], n_layers=hf["num_hidden_layers"], n_heads=heads,
            n_kv_heads=hf.get("num_key_value_heads") or heads, ffn_hidden=hf["intermediate_size"],
            max_seq_len=max_seq_len or hf.get("max_position_embeddings") or 2048,
            rope_theta=float(rope.get("rope_theta") or hf.get("rope_theta") or 10_000.0),
            norm_eps=float(hf.get("rms_norm_eps") or 1e-5), tie_embeddings=bool(hf.get("tie_word_embeddings")),
        )  # fmt: skip
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def model_vocabulary(folder: str | os.PathLike, data_vocab: int, tokenizer_model: str | os.PathLike | None = None) -> int:
    """The vocabulary size of a model continued from `folder` on data of `data_vocab` ids; raises
    `ValueError` when the data's tokenizer is not the checkpoint's (see the module docstring)."""
    checkpoint_vocab = read_hf_config(folder)["vocab_size"]
    theirs_path = Path(folder) / "tokenizer.model"
    if tokenizer_model and Path(tokenizer_model).exists() and theirs_path.exists():
        theirs = [piece for piece, _ in read_sentencepiece(theirs_path.read_bytes())["pieces"]]
        ours = [piece for piece, _ in read_sentencepiece(Path(tokenizer_model).read_bytes())["pieces"]]
        differ = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), None)
        if differ is not None or len(ours) < len(theirs):
            where = f"id {differ} is {theirs[differ]!r} there, {ours[differ]!r} here" if differ is not None else (
                f"it has {len(theirs)} pieces, the run's {len(ours)}")
            raise ValueError(f"the data's tokenizer is not the one of init_from {folder} ({where}): materialize the "
                             "tokenizer with adopt_from set to that folder and tokenize the corpus again")  # fmt: skip
        return max(checkpoint_vocab, data_vocab)
    if data_vocab != checkpoint_vocab:
        raise ValueError(f"init_from {folder} has a vocabulary of {checkpoint_vocab} pieces, the data {data_vocab}: "
                         "tokenize the corpus with its tokenizer (an extended one needs tokenizer_model set and the "
                         "checkpoint's tokenizer.model, to check it)")  # fmt: skip
    return checkpoint_vocab


def extend_vocabulary(state: dict[str, torch.Tensor], vocab_size: int) -> dict[str, torch.Tensor]:
    """`state` with the embedding and output head grown to `vocab_size` rows, each new row the mean
    of the existing ones (the module docstring says why)."""
    out = dict(state)
    for name in ("embed.weight", "head.output.weight"):
        if name not in out or out[name].shape[0] >= vocab_size:
            continue
        table = out[name]
        mean = table.float().mean(dim=0, keepdim=True).to(table.dtype)
        out[name] = torch.cat([table, mean.expand(vocab_size - table.shape[0], -1)])
    return out


def read_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; one that is missing, pickled or corrupt fails naming its folder and
    file (safetensors' own error names neither)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    try:
        return load_file(path)
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"{path.name} in {path.parent} is not a readable safetensors file "
                         f"(pickled weights are never loaded): {exc}") from exc


def weights(folder: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under `Transformer` names (safetensors only: nothing is unpickled)."""
    folder = Path(folder)
    index = folder / f"{WEIGHTS_NAME}.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else [WEIGHTS_NAME]
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state |= read_safetensors(folder / name)
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
