"""Export a trained `Transformer` as a Hugging Face Llama checkpoint directory.

`export_hf(model_or_state_dict, cfg, out_dir, tokenizer_model_path=None)` writes

- `model.safetensors`: all weights in one file, named as `LlamaForCausalLM` names them (no
  permutation: `lm_assets/training/model.py` uses HF's rotate_half RoPE layout);
- `config.json` (+ `generation_config.json`): a `LlamaConfig`, so
  `transformers.LlamaForCausalLM.from_pretrained(out_dir)` loads it with no conversion script;
- with a SentencePiece model: `tokenizer.model` (a copy), `tokenizer.json`, `tokenizer_config.json`
  and `special_tokens_map.json`, so `AutoTokenizer.from_pretrained(out_dir)` (and
  `LlamaTokenizer`/`LlamaTokenizerFast`, `PreTrainedTokenizerFast`) loads offline.

Tokenizer. transformers 5 would build its fast tokenizer from `tokenizer.model` through protobuf,
which fails when the installed protobuf runtime is older than the gencode sentencepiece ships
("Detected incompatible Protobuf Gencode/Runtime versions"), and then falls back to a tiktoken
reader. So the export writes `tokenizer.json` itself, with the `tokenizers` library: the BPE vocabulary
and merges come from the SentencePiece model (read with a few lines of protobuf wire-format
parsing, no protobuf package), the merges ranked by the id of the merged piece as HF's own
SentencePiece converter does; control and unknown pieces become special tokens, user-defined
pieces (the project's "\\n") added tokens, byte pieces the BPE byte fallback. No normalizer, a
Metaspace pre-tokenizer that prepends "▁" only if the model's `add_dummy_prefix` is set. The
export then encodes and decodes a set of probe texts (spaces, indentation, newlines, digits, CJK,
emoji, the "▁" character) with both SentencePiece and the written tokenizer and refuses to finish
if any id or decoded string differs. Only BPE models without normalization or whitespace
collapsing (the project's tokenizer) are supported; others raise `ValueError`.

`add_bos_token` is false: the training stream has no BOS (documents are separated by EOS), so
`tokenizer(text)` gives the ids the model was trained on. The ids bos/eos/pad = 2/3/0 are written
into `config.json` and checked against the tokenizer.

Writes are atomic per file (temporary name in `out_dir`, then `os.replace`); `config.json` is
written last, so a directory that has it is complete. The state dict must use `Transformer`'s
parameter names (`embed.weight`, `layers.N.attn.q_proj.weight`, ...), consolidated onto one
process: under ZeRO-3 gather it first (e.g. DeepSpeed's `get_fp32_state_dict_from_zero_checkpoint`);
`module.` and `_orig_mod.` prefixes (DDP/DeepSpeed, torch.compile) are stripped.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from torch import nn

from lm_assets.training.config import ModelConfig
from lm_assets.training.primitives import atomic_path, read_varint

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
CHAT_TEMPLATE_NAME = "chat_template.jinja"  # beside tokenizer.model: the export's `chat_template`
BOS_ID, EOS_ID, PAD_ID = 2, 3, 0

_LAYER = re.compile(r"layers\.(\d+)\.(.+)")
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn.q_proj.weight": "self_attn.q_proj.weight",
    "attn.k_proj.weight": "self_attn.k_proj.weight",
    "attn.v_proj.weight": "self_attn.v_proj.weight",
    "attn.o_proj.weight": "self_attn.o_proj.weight",
    "mlp_norm.weight": "post_attention_layernorm.weight",
    "mlp.gate_proj.weight": "mlp.gate_proj.weight",
    "mlp.up_proj.weight": "mlp.up_proj.weight",
    "mlp.down_proj.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {"embed.weight": "model.embed_tokens.weight", "head.norm.weight": "model.norm.weight",
              "head.output.weight": "lm_head.weight"}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Weights and config
# ---------------------------------------------------------------------------------------------


def hf_name(name: str) -> str:
    """The `LlamaForCausalLM` name of a `Transformer` parameter."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    m = _LAYER.fullmatch(name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    raise KeyError(f"no Hugging Face name for parameter {name!r}")


def _expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    d, q, kv, f = cfg.dim, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim, cfg.ffn_hidden
    shapes = {"embed.weight": (cfg.vocab_size, d), "head.norm.weight": (d,)}
    if not cfg.tie_embeddings:
        shapes["head.output.weight"] = (cfg.vocab_size, d)
    per_layer = {"attn_norm.weight": (d,), "attn.q_proj.weight": (q, d), "attn.k_proj.weight": (kv, d),
                 "attn.v_proj.weight": (kv, d), "attn.o_proj.weight": (d, q), "mlp_norm.weight": (d,),
                 "mlp.gate_proj.weight": (f, d), "mlp.up_proj.weight": (f, d), "mlp.down_proj.weight": (d, f)}  # fmt: skip
    for i in range(cfg.n_layers):
        shapes.update({f"layers.{i}.{k}": v for k, v in per_layer.items()})
    return shapes


def _strip_prefixes(name: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in ("module.", "_orig_mod."):
            if name.startswith(prefix):
                name, changed = name[len(prefix) :], True
    return name


def hf_state_dict(state: nn.Module | Mapping[str, torch.Tensor], cfg: ModelConfig, dtype=None) -> dict[str, torch.Tensor]:
    """The weights under `LlamaForCausalLM` names, as contiguous CPU tensors (cast to `dtype` if given).

    Checks that every parameter of `Transformer(cfg)` is present with its shape and nothing else
    is; with tied embeddings `lm_head.weight` is left out (HF ties it to the embedding on load).
    """
    if isinstance(state, nn.Module):
        state = state.state_dict()
    dtype = _torch_dtype(dtype)
    sd = {_strip_prefixes(k): v for k, v in state.items()}
    expected = _expected_shapes(cfg)
    if cfg.tie_embeddings:
        sd.pop("head.output.weight", None)
    missing = sorted(set(expected) - set(sd))
    unexpected = sorted(set(sd) - set(expected))
    if missing or unexpected:
        raise ValueError(f"state dict does not match the config: missing {missing[:8]}, unexpected {unexpected[:8]}")
    out = {}
    for name, shape in expected.items():
        tensor = sd[name]
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{name}: shape {tuple(tensor.shape)}, the config implies {shape}")
        tensor = tensor.detach().to("cpu", dtype=dtype if dtype is not None else tensor.dtype, copy=True)
        out[hf_name(name)] = tensor.contiguous()
    return out


def native_state_dict(hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of `hf_state_dict`'s renaming: `Transformer` names for `LlamaForCausalLM` weights."""
    inverse = {v: k for k, v in _TOP_NAMES.items()}
    out = {}
    for name, tensor in hf_state.items():
        if name in inverse:
            out[inverse[name]] = tensor
            continue
        m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", name)
        native = {v: k for k, v in _LAYER_NAMES.items()}.get(m.group(2)) if m else None
        if native is None:
            raise KeyError(f"no Transformer name for {name!r}")
        out[f"layers.{m.group(1)}.{native}"] = tensor
    return out


def hf_config(cfg: ModelConfig, dtype="float32", bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID) -> dict:
    """`config.json` for `LlamaForCausalLM` (transformers 4.x reads `rope_theta`, 5.x `rope_parameters`)."""
    dtype_name = str(_torch_dtype(dtype) or torch.float32).removeprefix("torch.")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn_hidden,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": cfg.init_std,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "tie_word_embeddings": cfg.tie_embeddings,
        "torch_dtype": dtype_name,
        "dtype": dtype_name,
        "use_cache": True,
    }


# What a config.json the loaders read may hold: its size, and each size setting's largest value (enough for
# any released Llama-shaped model; more would only build a model no machine holds, or take hours to).
MAX_CONFIG_BYTES = 1 << 20
HF_CONFIG_SIZES = {  # setting: (required, largest)
    "vocab_size": (True, 1 << 22),
    "hidden_size": (True, 1 << 16),
    "num_hidden_layers": (True, 1024),
    "num_attention_heads": (True, 1024),
    "intermediate_size": (True, 1 << 20),
    "num_key_value_heads": (False, 1024),
    "max_position_embeddings": (False, 1 << 20),
    "head_dim": (False, 1 << 12),
}
MAX_ROPE_ROWS = 1 << 24  # layers x positions: each layer of `lm_assets.training.model` keeps its own RoPE tables
HF_CONFIG_NUMBERS = {"rope_theta": "positive", "rms_norm_eps": "positive", "initializer_range": "non-negative"}
HF_CONFIG_FLAGS = ("tie_word_embeddings", "attention_bias", "mlp_bias")
HF_CONFIG_NAMES = ("model_type", "hidden_act")
HF_CONFIG_ROPE = ("rope_parameters", "rope_scaling")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number_problem(key: str, value, sign: str) -> str | None:
    ok = type(value) in (int, float) and math.isfinite(value) and (value > 0 if sign == "positive" else value >= 0)
    return None if ok else f"{key} must be a finite {sign} number, got {_shown(value)}"


def _shape_problems(config: dict) -> list[str]:
    """Head counts that do not divide as attention needs, and RoPE tables over `MAX_ROPE_ROWS` (for a
    config.json whose sizes are integers in bounds, where present)."""
    problems = []
    width, heads = config.get("hidden_size"), config.get("num_attention_heads")
    kv_heads = config.get("num_key_value_heads") or heads
    if width and heads and width % heads:
        problems.append(f"hidden_size {width} is not a multiple of num_attention_heads {heads}")
    elif heads and heads % kv_heads:
        problems.append(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    layers, positions = config.get("num_hidden_layers"), config.get("max_position_embeddings") or 2048
    if layers and layers * positions > MAX_ROPE_ROWS:
        problems.append(f"num_hidden_layers {layers} x max_position_embeddings {positions} is over {MAX_ROPE_ROWS} "
                        "rows of RoPE tables")  # fmt: skip
    return problems


def read_hf_config(folder: str | os.PathLike, complete: bool = True) -> dict:
    """A Hugging Face folder's `config.json`, once every setting the loaders here read is known to be of its
    type and within bounds (`HF_CONFIG_SIZES`, `MAX_ROPE_ROWS`) and the head counts divide as the model
    needs: a hostile file fails here with a ValueError naming it, not as a TypeError later, or as a model
    too large to build. The file is read only when it is a regular file of at most `MAX_CONFIG_BYTES`.
    `complete`: the model's sizes must all be there (else only those present are checked). Settings no
    loader reads pass unchecked."""
    path = Path(folder) / CONFIG_NAME
    with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise ValueError(f"{path} holds {info.st_size} bytes; a model's settings take a few thousand")
        raw = file.read(MAX_CONFIG_BYTES + 1)
    try:
        config = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{path} is not valid JSON: {type(err).__name__}: {err}") from None
    if type(config) is not dict:
        raise ValueError(f"{path} holds a JSON {type(config).__name__}, not an object of model settings")
    problems = []
    for key, (required, largest) in HF_CONFIG_SIZES.items():
        value = config.get(key)
        if value is None:
            if required and complete:
                problems.append(f"{key} is missing")
        elif type(value) is not int or not 1 <= value <= largest:
            problems.append(f"{key} must be an integer from 1 to {largest}, got {_shown(value)}")
    for key, sign in HF_CONFIG_NUMBERS.items():
        if config.get(key) is not None and (problem := _number_problem(key, config[key], sign)):
            problems.append(problem)
    problems += [f"{key} must be true or false, got {_shown(config[key])}"
                 for key in HF_CONFIG_FLAGS if config.get(key) is not None and type(config[key]) is not bool]  # fmt: skip
    problems += [f"{key} must be a string, got {_shown(config[key])}"
                 for key in HF_CONFIG_NAMES if config.get(key) is not None and type(config[key]) is not str]  # fmt: skip
    for key in HF_CONFIG_ROPE:
        rope = config.get(key)
        if rope is None:
            continue
        if type(rope) is not dict:
            problems.append(f"{key} must be an object, got {_shown(rope)}")
            continue
        problems += [f"{key}.{name} must be a string, got {_shown(rope[name])}"
                     for name in ("rope_type", "type") if rope.get(name) is not None and type(rope[name]) is not str]  # fmt: skip
        theta = rope.get("rope_theta")
        if theta is not None and (problem := _number_problem("rope_theta", theta, "positive")):
            problems.append(f"{key}.{problem}")
    if not problems:
        problems += _shape_problems(config)
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return config


def export_hf(
    model_or_state_dict: nn.Module | Mapping[str, torch.Tensor],
    cfg: ModelConfig,
    out_dir: str | os.PathLike,
    tokenizer_model_path: str | os.PathLike | None = None,
    dtype: torch.dtype | str | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    pad_id: int | None = None,
) -> Path:
    """Write a `LlamaForCausalLM` checkpoint (and tokenizer, if given) to `out_dir`; returns it.

    `dtype` casts the weights (e.g. `torch.bfloat16`); by default they keep theirs, and
    `torch_dtype` in the config records what was written. The special ids default to the
    tokenizer's (`tokenizer_special_ids`), else to the project's own (BOS 2, EOS 3, PAD 0).
    """
    from safetensors.torch import save

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if tokenizer_model_path is not None:
        bos_id, eos_id, pad_id = export_tokenizer(tokenizer_model_path, out, cfg.vocab_size, cfg.max_seq_len,
                                                  bos_id, eos_id, pad_id)  # fmt: skip
    bos_id, eos_id, pad_id = (BOS_ID if bos_id is None else bos_id, EOS_ID if eos_id is None else eos_id,
                              PAD_ID if pad_id is None else pad_id)  # fmt: skip
    weights = hf_state_dict(model_or_state_dict, cfg, dtype)
    written = {t.dtype for t in weights.values()}
    weights_dtype = written.pop() if len(written) == 1 else torch.float32
    _atomic_write(out / WEIGHTS_NAME, save(weights, metadata={"format": "pt"}))
    del weights
    generation = {"bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id}
    _atomic_write(out / "generation_config.json", _json(generation))
    _atomic_write(out / CONFIG_NAME, _json(hf_config(cfg, weights_dtype, bos_id, eos_id, pad_id)))
    return out


ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME = "adapter_config.json", "adapter_model.safetensors"


def peft_name(name: str) -> str:
    """PEFT's saved name of an adapter weight: `layers.0.attn.q_proj.lora_A` ->
    `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`."""
    layer, part = name.rsplit(".", 1)
    return f"base_model.model.{hf_name(layer + '.weight').removesuffix('.weight')}.{part}.weight"


def export_peft_adapter(adapter_state: Mapping[str, torch.Tensor], rank: int, alpha: float, dropout: float,
                        target_modules: Iterable[str], out_dir: str | os.PathLike,
                        base_model: str | os.PathLike | None = None) -> Path:  # fmt: skip
    """Write LoRA weights (consolidated, under the model's names) as a PEFT adapter folder, which
    `peft.PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base), out_dir)` loads."""
    from safetensors.torch import save

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    weights = {peft_name(k): v.detach().to("cpu").contiguous() for k, v in adapter_state.items()}
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha, "lora_dropout": dropout,
        "target_modules": sorted(target_modules), "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
        "use_rslora": False, "init_lora_weights": True, "modules_to_save": None,
        "base_model_name_or_path": str(base_model) if base_model is not None else None,
    }
    _atomic_write(out / ADAPTER_WEIGHTS_NAME, save(weights, metadata={"format": "pt"}))
    _atomic_write(out / ADAPTER_CONFIG_NAME, _json(config))
    return out


def _torch_dtype(dtype) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    return value


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode()


def _create_private(tmp: Path) -> int:
    # Exported files have always been owner-only (0600, as tempfile.mkstemp made them).
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)


def _atomic_write(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        with os.fdopen(_create_private(tmp), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def _atomic_copy(src: Path, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        os.close(_create_private(tmp))
        shutil.copyfile(src, tmp)


# ---------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------

# SentencePiece piece types (sentencepiece_model.proto).
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
_BPE = 2

PROBE_TEXTS = (
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "two  spaces and   three",
    "line one\nline two\n\nafter a blank line\n",
    "def f(x):\n    return x ** 2  # indented\n\tand a tab",
    "digits 1234567890 and 3.14159, 1,000,000",
    "café naïve résumé Ångström",
    "中文字符 日本語 한국어",
    "emoji 😀🚀 and symbols © ™ ∑",
    "the ▁ marker and <s> </s> <pad> <unk> as plain text",
    "\r\n windows line end",
    "",
    " ",
    "\n",
)


def _proto_fields(data: bytes):
    """(field number, value) of each field of a protobuf message: ints, or bytes for wire type 2."""
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = read_varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield field, value


def read_sentencepiece(model: bytes) -> dict:
    """Pieces (text, type) and the settings the HF tokenizer must reproduce, from a model file's bytes."""
    pieces, trainer, normalizer = [], {}, {}
    for field, value in _proto_fields(model):
        if field == 1:  # repeated SentencePiece {piece = 1, score = 2, type = 3}
            sub = dict(_proto_fields(value))
            pieces.append((sub.get(1, b"").decode("utf-8"), sub.get(3, _NORMAL)))
        elif field == 2:  # TrainerSpec {model_type = 3}
            trainer = dict(_proto_fields(value))
        elif field == 3:  # NormalizerSpec {name 1, charsmap 2, add_dummy_prefix 3, remove_extra_whitespaces 4}
            normalizer = dict(_proto_fields(value))
    return {
        "pieces": pieces,
        "model_type": trainer.get(3, 1),
        "normalizer": normalizer.get(1, b"nmt_nfkc").decode(),
        "has_charsmap": bool(normalizer.get(2)),
        "add_dummy_prefix": bool(normalizer.get(3, 1)),
        "remove_extra_whitespaces": bool(normalizer.get(4, 1)),
        "escape_whitespaces": bool(normalizer.get(5, 1)),
    }


def build_hf_tokenizer(model: bytes):
    """A `tokenizers.Tokenizer` equivalent to the SentencePiece BPE model `model` (its bytes)."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    spec = read_sentencepiece(model)
    problems = []
    if spec["model_type"] != _BPE:
        problems.append("model_type is not BPE")
    if spec["has_charsmap"] or spec["normalizer"] != "identity":
        problems.append(f"normalization {spec['normalizer']!r} (only 'identity' is supported)")
    if spec["remove_extra_whitespaces"]:
        problems.append("remove_extra_whitespaces is set")
    if not spec["escape_whitespaces"]:
        problems.append("escape_whitespaces is off")
    if problems:
        raise ValueError(f"cannot export this SentencePiece model as a HF tokenizer: {'; '.join(problems)}")
    pieces = spec["pieces"]
    vocab = {piece: i for i, (piece, _) in enumerate(pieces)}
    mergeable = {piece: i for i, (piece, kind) in enumerate(pieces) if kind == _NORMAL}
    merges = []  # (left, right) for each split of each normal piece into two normal pieces, by merged id
    for piece, rank in mergeable.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in mergeable and right in mergeable:
                merges.append((rank, mergeable[left], mergeable[right], left, right))
    merges.sort()
    unk = next((p for p, kind in pieces if kind == _UNKNOWN), None)
    tok = Tokenizer(BPE(vocab=vocab, merges=[(m[3], m[4]) for m in merges], unk_token=unk, fuse_unk=True,
                        byte_fallback=True))  # fmt: skip
    tok.normalizer = None
    prepend = "first" if spec["add_dummy_prefix"] else "never"
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend, split=False)
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if spec["add_dummy_prefix"]:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    tok.decoder = decoders.Sequence(steps)
    tok.add_special_tokens(
        [AddedToken(p, special=True, normalized=False) for p, kind in pieces if kind in (_CONTROL, _UNKNOWN)]
    )
    user = [AddedToken(p, special=False, normalized=False) for p, kind in pieces if kind == _USER_DEFINED]
    if user:
        tok.add_tokens(user)
    # SentencePiece reads "<s>" in text as characters, not as the control piece. This switch is not
    # saved in tokenizer.json; tokenizer_config.json's `split_special_tokens` sets it in transformers.
    tok.encode_special_tokens = True
    return tok, spec


def verify_tokenizer(hf_tokenizer, sp, texts: Iterable[str] = PROBE_TEXTS) -> None:
    """Raise `ValueError` unless `hf_tokenizer` (a `tokenizers.Tokenizer`) encodes every text to the
    SentencePiece processor `sp`'s ids and decodes those ids to the same string."""
    for text in texts:
        want = sp.encode(text)
        got = hf_tokenizer.encode(text, add_special_tokens=False).ids
        if got != want:
            raise ValueError(f"HF tokenizer disagrees with SentencePiece on {text!r}: {got} != {want}")
        if hf_tokenizer.decode(got, skip_special_tokens=False) != sp.decode(want):
            raise ValueError(f"HF tokenizer decodes {text!r} differently from SentencePiece")


def export_tokenizer(
    tokenizer_model_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    vocab_size: int | None = None,
    model_max_length: int | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    pad_id: int | None = None,
    verify_texts: Iterable[str] = PROBE_TEXTS,
) -> tuple[int, int, int]:
    """Write `tokenizer.model`, `tokenizer.json`, `tokenizer_config.json` and `special_tokens_map.json`;
    returns the (bos, eos, pad) ids written. Ids given must be the tokenizer's own. A
    `chat_template.jinja` beside the model file becomes the config's `chat_template`, so that
    `tokenizer.apply_chat_template` renders the format the model was fine-tuned on."""
    import sentencepiece as spm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = Path(tokenizer_model_path).read_bytes()
    sp = spm.SentencePieceProcessor(model_proto=model)
    n = sp.get_piece_size()
    if vocab_size is not None and n > vocab_size:
        raise ValueError(f"the tokenizer has {n} pieces but the model's vocab_size is {vocab_size}")
    ids = tokenizer_special_ids(sp)
    asked = {"bos": bos_id, "eos": eos_id, "pad": pad_id}
    if any(v is not None and v != ids[k] for k, v in asked.items()):
        raise ValueError(f"tokenizer special ids {ids} differ from bos/eos/pad {bos_id}/{eos_id}/{pad_id}")
    hf, spec = build_hf_tokenizer(model)
    verify_tokenizer(hf, sp, probe_texts(verify_texts, spec))
    special = {
        "bos_token": sp.id_to_piece(ids["bos"]),
        "eos_token": sp.id_to_piece(ids["eos"]),
        "unk_token": sp.id_to_piece(sp.unk_id()),
        "pad_token": sp.id_to_piece(ids["pad"]),
    }
    config = {
        "tokenizer_class": "LlamaTokenizer",
        **special,
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": spec["add_dummy_prefix"],
        "legacy": False,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": True,
        "sp_model_kwargs": {},
    }
    if model_max_length is not None:
        config["model_max_length"] = model_max_length
    template = Path(tokenizer_model_path).with_name(CHAT_TEMPLATE_NAME)  # a fine-tuning tokenizer's chat format
    if template.exists():
        config["chat_template"] = template.read_text()
    _atomic_copy(Path(tokenizer_model_path), out / "tokenizer.model")
    _atomic_write(out / "tokenizer.json", hf.to_str(pretty=True).encode())
    _atomic_write(out / "special_tokens_map.json", _json(special))
    _atomic_write(out / "tokenizer_config.json", _json(config))
    return ids["bos"], ids["eos"], ids["pad"]


def tokenizer_special_ids(sp) -> dict[str, int]:
    """BOS, EOS and PAD of a SentencePiece processor; without a pad piece (Llama's tokenizer) the
    unk piece pads, as the corpus pipeline pads with it."""
    pad = sp.pad_id() if sp.pad_id() >= 0 else sp.unk_id()
    return {"bos": sp.bos_id(), "eos": sp.eos_id(), "pad": pad}


def probe_texts(texts: Iterable[str], spec: dict) -> list[str]:
    """The texts to verify an export on. User-defined pieces are probed inside a text. With a dummy
    prefix, a text that begins with whitespace or with a user-defined piece is left out: SentencePiece
    puts "▁" in front of it, Hugging Face's Metaspace (as in transformers' own Llama tokenizers) does
    not, so the ids there differ by that one leading token; everywhere else they agree."""
    user = [piece for piece, kind in spec["pieces"] if kind == _USER_DEFINED and not piece.isspace()]
    probes = [*texts, *(f"a {piece} b{piece}c" for piece in user)]
    if not spec["add_dummy_prefix"]:
        return probes
    return [t for t in probes if not (t[:1].isspace() or any(t.startswith(piece) for piece in user))]


__all__ = [
    "PROBE_TEXTS",
    "build_hf_tokenizer",
    "export_hf",
    "export_tokenizer",
    "hf_config",
    "hf_name",
    "hf_state_dict",
    "native_state_dict",
    "probe_texts",
    "read_hf_config",
    "read_sentencepiece",
    "tokenizer_special_ids",
    "verify_tokenizer",
]
