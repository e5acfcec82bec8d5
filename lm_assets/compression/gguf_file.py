"""A GGUF file (llama.cpp's format) from an exported checkpoint, with `gguf` (pure Python), not llama.cpp's
converter, which needs the gguf-py of its own commit.

    write_gguf(hf_dir, "model-f16.gguf", "F16")     # or "Q8_0", "F32"

The file holds a `llama` architecture: the HF folder's settings (`config.json`), its SentencePiece
vocabulary (`tokenizer.model`, pieces, scores and kinds, padded with unused tokens to the embedding's
rows, the chat markers marked CONTROL so that llama.cpp keeps each one token), its chat template, and
its weights under llama.cpp's names. What llama.cpp's converter does and a plain writer misses:
- q and k rows are permuted from HF's rotate-half RoPE layout to llama.cpp's interleaved one (the file
  loads without it, and writes garbage);
- with tied embeddings there is no `output` tensor;
- norms stay F32; a matrix whose rows do not split into Q8_0 blocks of 32 stays F16 (`kept_f16` says
  which).

transformers reads the file back (`from_pretrained(folder, gguf_file=name)`), undoing the permutation.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TYPES = ("F32", "F16", "Q8_0")
# The fine-tuning format's markers (lm_assets.sft.chat), kept whole by llama.cpp only as CONTROL tokens.
CHAT_MARKERS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
TENSOR_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
LAYER_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
}  # fmt: skip


@dataclass(frozen=True)
class GGUFWritten:
    path: Path
    type: str
    bytes: int
    kept_f16: tuple[str, ...]  # matrices that a Q8_0 file keeps in F16 (rows not a multiple of 32)


def gguf_name(hf_name: str) -> str:
    if hf_name in TENSOR_NAMES:
        return TENSOR_NAMES[hf_name]
    parts = hf_name.split(".")
    if parts[:2] != ["model", "layers"] or parts[-1] != "weight":
        raise ValueError(f"no GGUF name for the tensor {hf_name!r}")
    return f"blk.{parts[2]}.{LAYER_NAMES['.'.join(parts[3:-1])]}.weight"


def rope_permuted(weight: np.ndarray, heads: int) -> np.ndarray:
    """q or k rows from HF's rotate-half layout to llama.cpp's interleaved pairs (its converter's `permute`)."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def rope_theta(config: dict) -> float:
    parameters = config.get("rope_parameters") or {}
    return float(parameters.get("rope_theta", config.get("rope_theta", 10_000.0)))


def add_tokenizer(writer, folder: Path, rows: int) -> None:
    import gguf
    import sentencepiece as spm

    from lm_assets.training.export import read_sentencepiece

    model = (folder / "tokenizer.model").read_bytes()
    sp = spm.SentencePieceProcessor(model_proto=model)
    # SentencePiece's piece types (normal 1, unknown 2, control 3, user-defined 4, unused 5, byte 6) are GGUF's.
    spec = read_sentencepiece(model)
    types = [gguf.TokenType.CONTROL if piece in CHAT_MARKERS else gguf.TokenType(kind) for piece, kind in spec["pieces"]]
    tokens = [sp.id_to_piece(i).encode("utf-8") for i in range(sp.get_piece_size())]
    scores = [sp.get_score(i) for i in range(sp.get_piece_size())]
    if len(tokens) > rows:
        raise ValueError(f"{folder / 'tokenizer.model'}: {len(tokens)} pieces, the embedding {rows} rows")
    for i in range(sp.get_piece_size(), rows):  # the embedding has rows the tokenizer does not use
        tokens.append(f"[PAD{i}]".encode())
        scores.append(-1000.0)
        types.append(gguf.TokenType.UNUSED)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    for special, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                         ("pad", writer.add_pad_token_id), ("unk", writer.add_unk_token_id)):  # fmt: skip
        token = getattr(sp, f"{special}_id")()
        if token >= 0:
            add(token)
    writer.add_add_space_prefix(spec["add_dummy_prefix"])
    writer.add_add_bos_token(False)  # the training stream has no BOS (lm_assets/training/export.py)
    writer.add_add_eos_token(False)
    settings = folder / "tokenizer_config.json"
    template = json.loads(settings.read_text()).get("chat_template") if settings.exists() else None
    if template:
        writer.add_chat_template(template)


def write_gguf(hf_dir: str | os.PathLike, out: str | os.PathLike, type: str = "F16") -> GGUFWritten:
    """The exported checkpoint in `hf_dir` as one GGUF file at `out`, its matrices in `type`."""
    import gguf
    from safetensors.numpy import load_file

    from lm_assets.training.export import read_hf_config

    if type not in TYPES:
        raise ValueError(f"GGUF type {type!r}: one of {', '.join(TYPES)}")
    folder, out = Path(hf_dir), Path(out)
    config = read_hf_config(folder)
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    state = load_file(str(folder / "model.safetensors"))
    rows = state["model.embed_tokens.weight"].shape[0]
    tmp = out.with_name(out.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name(folder.parent.name if folder.name == "hf" else folder.name)
    writer.add_context_length(config.get("max_position_embeddings", 2048))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(rope_theta(config))
    writer.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-5))
    writer.add_vocab_size(rows)
    writer.add_file_type({"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
                          "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[type])  # fmt: skip
    add_tokenizer(writer, folder, rows)
    kept_f16 = []
    for hf_name, tensor in state.items():
        if hf_name == "lm_head.weight" and config.get("tie_word_embeddings"):
            continue
        data = tensor.astype(np.float32)
        if hf_name.endswith("self_attn.q_proj.weight"):
            data = rope_permuted(data, heads)
        elif hf_name.endswith("self_attn.k_proj.weight"):
            data = rope_permuted(data, kv_heads)
        name = gguf_name(hf_name)
        if data.ndim == 1 or type == "F32":
            writer.add_tensor(name, data)
        elif type == "Q8_0" and data.shape[-1] % 32 == 0:
            quantized = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, quantized, raw_shape=quantized.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            if type == "Q8_0":
                kept_f16.append(name)
            writer.add_tensor(name, data.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return GGUFWritten(out, type, out.stat().st_size, tuple(kept_f16))


__all__ = ["CHAT_MARKERS", "TYPES", "GGUFWritten", "gguf_name", "rope_permuted", "write_gguf"]
