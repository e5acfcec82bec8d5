"""Compressed variants of an exported checkpoint, written to disk and loaded back as our own model.

    variants = write_variants(hf_dir, out_dir)            # GGUF F16 and Q8_0, torchao int8 weight-only
    em = load_variant(variants[1], hf_dir)                 # an EvalModel: every evaluation runs on it

A GGUF variant is loaded as transformers reads it back (dequantized to float32, the RoPE permutation
undone) into `lm_assets.training.model.Transformer`, so its scores are those of the weights the file holds. The
int8 variant is torchao's weight-only int8 (`Int8WeightOnlyConfig`) applied to our model; on disk it is
the Hugging Face folder transformers writes for that config (safetensors, `quantization_config` in
`config.json`), which `from_pretrained` reads with torchao installed.
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from lm_assets.compression.gguf_file import write_gguf

KINDS = ("gguf-f16", "gguf-q8_0", "int8")
BITS = {"gguf-f16": 16, "gguf-q8_0": 8, "int8": 8}


@dataclass(frozen=True)
class Variant:
    kind: str  # one of KINDS
    path: Path  # the file (GGUF) or folder (int8)
    bytes: int
    note: str  # what the writer kept as it was, if anything


def folder_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def write_int8(hf_dir: Path, out: Path) -> Path:
    """torchao's int8 weight-only variant as a Hugging Face folder, with the tokenizer files beside it."""
    import torch
    from torchao.quantization import Int8WeightOnlyConfig
    from transformers import AutoModelForCausalLM, TorchAoConfig

    model = AutoModelForCausalLM.from_pretrained(hf_dir, quantization_config=TorchAoConfig(Int8WeightOnlyConfig()),
                                                 dtype=torch.float32)  # fmt: skip
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for name in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (hf_dir / name).exists():
            shutil.copy2(hf_dir / name, tmp / name)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def write_variants(hf_dir: str | os.PathLike, out_dir: str | os.PathLike, kinds=KINDS) -> list[Variant]:
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    variants = []
    for kind in kinds:
        if kind.startswith("gguf-"):
            written = write_gguf(hf_dir, out_dir / f"model-{kind.removeprefix('gguf-')}.gguf", kind.removeprefix("gguf-").upper())
            note = f"kept in F16 (rows not a multiple of 32): {', '.join(written.kept_f16)}" if written.kept_f16 else ""
            variants.append(Variant(kind, written.path, written.bytes, note))
        elif kind == "int8":
            path = write_int8(hf_dir, out_dir / "int8")
            variants.append(Variant(kind, path, folder_bytes(path), "embeddings, norms and the output layer kept in float32"))
        else:
            raise ValueError(f"compressed variant {kind!r}: one of {', '.join(KINDS)}")
    return variants


def load_variant(variant: Variant, hf_dir: str | os.PathLike):
    """The variant as an `EvalModel` on the CPU: the GGUF's weights read back by transformers, or our model
    quantized by torchao as the int8 folder was."""
    import torch

    from lm_assets.evaluation.checkpoint import EvalModel, build_model, load_model

    base = load_model(hf_dir)
    if variant.kind.startswith("gguf-"):
        from transformers import AutoModelForCausalLM

        read_back = AutoModelForCausalLM.from_pretrained(variant.path.parent, gguf_file=variant.path.name, dtype=torch.float32)
        state = {name: tensor.detach().contiguous() for name, tensor in read_back.state_dict().items()}
        model = build_model(base.cfg, state)
    elif variant.kind == "int8":
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        model = copy.deepcopy(base.model)
        quantize_(model, Int8WeightOnlyConfig())
    else:
        raise ValueError(f"compressed variant {variant.kind!r}: one of {', '.join(KINDS)}")
    return EvalModel(model=model, tokenizer=base.tokenizer, path=variant.path, chat_template=base.chat_template)


__all__ = ["BITS", "KINDS", "Variant", "load_variant", "write_variants"]
