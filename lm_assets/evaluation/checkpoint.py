"""Load an exported checkpoint (`lm_assets/training/export.py`'s Hugging Face folder) as our own `Transformer`.

`load_model(hf_dir)` reads

- `config.json` (a `LlamaConfig`) into a `lm_assets.training.config.ModelConfig`: hidden_size, layers, heads,
  kv heads, intermediate_size, max_position_embeddings, rms_norm_eps, rope theta
  (`rope_parameters.rope_theta`, else `rope_theta`), tie_word_embeddings, initializer_range; checked
  first by `lm_assets.training.export.read_hf_config` (types and bounds), a bad file refused naming it;
- `model.safetensors`, renamed to `Transformer` names with `lm_assets.training.export.native_state_dict`
  (with tied embeddings the output projection is the embedding matrix);
- `tokenizer.model` with `sentencepiece`.

Tokenization. lm-evaluation-harness encodes with the exported HF tokenizer as
`tokenizer.encode(text, add_special_tokens=False)` (its `add_bos_token` defaults to false for
causal models, and our `tokenizer_config.json` says `add_bos_token: false` too), so no BOS or EOS is
added. The export verifies that tokenizer against SentencePiece, so `SentencePieceProcessor.encode(text)`
(which adds nothing either) gives the same ids.

The model's context length, the `max_length` lm-evaluation-harness truncates to, is the config's
`max_position_embeddings` (our `max_seq_len`).

Weights are cast to `dtype`; the rotary tables stay float32 (the model casts them per call), as in
training.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
import torch

from lm_assets.training.config import ModelConfig
from lm_assets.training.export import CONFIG_NAME, WEIGHTS_NAME, native_state_dict, read_hf_config
from lm_assets.training.model import Transformer

TOKENIZER_NAME = "tokenizer.model"


@dataclass
class EvalModel:
    """A model in eval mode and its tokenizer: what the scoring functions take."""

    model: Transformer
    tokenizer: spm.SentencePieceProcessor
    path: Path | None = None
    chat_template: str | None = None  # a fine-tuned checkpoint's (tokenizer_config.json): prompts are chat turns

    def chat_prompt(self, text: str) -> str:
        """`text` as a user turn followed by the assistant's opening, as the chat template renders it."""
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(self.chat_template)
        return template.render(messages=[{"role": "user", "content": text}], add_generation_prompt=True)

    @property
    def stop_id(self) -> int:
        """Where a continuation ends: a chat model's end-of-turn piece, else EOS."""
        end = self.tokenizer.piece_to_id("<|end|>") if self.chat_template else self.tokenizer.unk_id()
        return end if end != self.tokenizer.unk_id() else self.tokenizer.eos_id()

    @property
    def cfg(self) -> ModelConfig:
        return self.model.cfg

    @property
    def max_length(self) -> int:
        return self.model.cfg.max_seq_len

    @property
    def device(self) -> torch.device:
        return self.model.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed.weight.dtype

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, no BOS/EOS (lm-evaluation-harness's `tok_encode` for a causal LM)."""
        return self.tokenizer.encode(text)

    def encode_batch(self, texts: list[str], num_threads: int | None = None) -> list[list[int]]:
        """`encode` of each text; SentencePiece spreads a list over `num_threads` threads (default:
        torch's intra-op thread count)."""
        return self.tokenizer.encode(texts, num_threads=num_threads or torch.get_num_threads())

    @property
    def prefix_token_id(self) -> int:
        """The token that stands in for an empty context (BOS, else EOS)."""
        bos = self.tokenizer.bos_id()
        return bos if bos >= 0 else self.tokenizer.eos_id()


def model_config_from_hf(config: dict) -> ModelConfig:
    """The `ModelConfig` of a `LlamaForCausalLM` config.json (as written by `lm_assets.training.export.hf_config`), its
    settings already checked by `lm_assets.training.export.read_hf_config`."""
    if config.get("model_type", "llama") != "llama":
        raise ValueError(f"expected a llama config, got model_type {config.get('model_type')!r}")
    rope = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    for spec in (rope, scaling):
        kind = spec.get("rope_type", spec.get("type", "default"))
        if kind != "default":
            raise ValueError(f"rope type {kind!r} is not supported by lm_assets.training.model.Transformer")
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {config['hidden_act']!r} is not supported")
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise ValueError("biases are not supported by lm_assets.training.model.Transformer")
    if config.get("max_position_embeddings") is None:
        raise ValueError("max_position_embeddings is missing: the model's context length")
    n_heads = config["num_attention_heads"]
    cfg = ModelConfig(
        vocab_size=config["vocab_size"],
        dim=config["hidden_size"],
        n_layers=config["num_hidden_layers"],
        n_heads=n_heads,
        n_kv_heads=config.get("num_key_value_heads") or n_heads,
        ffn_hidden=config["intermediate_size"],
        max_seq_len=config["max_position_embeddings"],
        rope_theta=float(rope.get("rope_theta") or config.get("rope_theta") or 10_000.0),
        norm_eps=config.get("rms_norm_eps") or 1e-5,
        tie_embeddings=bool(config.get("tie_word_embeddings")),
        init_std=0.02 if config.get("initializer_range") is None else config["initializer_range"],
    )
    head_dim = config.get("head_dim")
    if head_dim is not None and head_dim != cfg.head_dim:
        raise ValueError(f"head_dim {head_dim} != hidden_size / num_attention_heads = {cfg.head_dim}")
    return cfg


def _reset_rope(model: Transformer) -> None:
    for layer in model.layers:
        layer.attn.reset_rope()


def build_model(
    cfg: ModelConfig, hf_state: dict[str, torch.Tensor], device="cpu", dtype: torch.dtype = torch.float32
) -> Transformer:
    """A `Transformer(cfg)` holding the weights of an HF Llama state dict, on `device` in `dtype`, eval mode."""
    state = native_state_dict(hf_state)
    if cfg.tie_embeddings:
        state.setdefault("head.output.weight", state["embed.weight"])
    with torch.device("meta"):
        model = Transformer(cfg, seed=None)
    model.load_state_dict(state, strict=True, assign=True)
    _reset_rope(model)  # non-persistent buffers, still on the meta device
    model.to(device=device, dtype=dtype)
    _reset_rope(model)  # float32 tables on the target device
    return model.eval().requires_grad_(False)


def load_model(
    hf_dir: str | os.PathLike, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> EvalModel:
    """Our `Transformer` and the SentencePiece tokenizer from an exported HF folder (see the module docstring)."""
    from lm_assets.training.hf_init import read_safetensors

    path = Path(hf_dir)
    config = read_hf_config(path)  # types and sizes checked, refusals naming the file
    try:
        cfg = model_config_from_hf(config)
    except ValueError as err:
        raise ValueError(f"{path / CONFIG_NAME}: {err}") from None
    model = build_model(cfg, read_safetensors(path / WEIGHTS_NAME), device=device, dtype=dtype)
    tokenizer = spm.SentencePieceProcessor(model_file=str(path / TOKENIZER_NAME))
    if tokenizer.get_piece_size() > cfg.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.get_piece_size()} pieces, the model {cfg.vocab_size}")
    settings = path / "tokenizer_config.json"
    chat = json.loads(settings.read_text()).get("chat_template") if settings.exists() else None
    return EvalModel(model=model, tokenizer=tokenizer, path=path, chat_template=chat)


def ensure_hf_export(checkpoint_dir: str | Path, tag: str, tokenizer_model: str | Path) -> Path:
    """`<checkpoint_dir>/<tag>/hf`, the HF export of a saved checkpoint, made now from its DeepSpeed
    files if the run did not make it; FileNotFoundError when there is no such checkpoint."""
    from lm_assets.training import checkpoint
    from lm_assets.training.export import export_hf

    folder = checkpoint.tag_folder(checkpoint_dir, tag)  # a link to another run's checkpoint is refused
    out = folder / "hf"
    if not (out / "config.json").exists():
        if not (folder / "layout.json").exists():
            raise FileNotFoundError(folder / "layout.json")
        state = checkpoint.model_state_dict(checkpoint_dir, tag)  # an adapter checkpoint: merged into its base
        export_hf(state, checkpoint.model_config(checkpoint_dir, tag), out, tokenizer_model_path=str(tokenizer_model))
    return out


__all__ = ["EvalModel", "build_model", "ensure_hf_export", "load_model", "model_config_from_hf"]
