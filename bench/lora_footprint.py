"""What LoRA adapters train and what they save, against a full fine-tune, on real models of our presets.

Usage::

    .venv/bin/python bench/lora_footprint.py [--presets tiny,125m,350m] [--vocab 4004] [--rank 8]
        [--targets q_proj,k_proj,v_proj,o_proj] [--smoke]

It prints figures; it checks nothing. For each preset it builds `lm_assets.training.model.Transformer` on the CPU
(`--vocab` tokens: 4004 is the demo's, its 4,000-piece tokenizer and the four chat markers), and for a full
fine-tune and for `lm_assets.training.lora.apply_lora` at `--rank` on `--targets` it counts the parameters that
train, then takes one real AdamW step (torch's, the engine's default) on gradients of ones and measures
the bytes of the gradients and optimizer states that step left: what fine-tuning holds beyond the
weights. The first preset, `tiny` with the demo's vocabulary, is the demo's model.

`--smoke` measures the tiny preset only.

The last line printed is one JSON object holding every figure.
"""

from __future__ import annotations

import argparse
import json

import torch

from lm_assets.training.config import from_preset
from lm_assets.training.lora import LoRAConfig, apply_lora
from lm_assets.training.model import Transformer


def held_bytes(model: torch.nn.Module) -> tuple[int, int]:
    """(trained parameters, bytes of their gradients and AdamW states after one step)."""
    trained = [p for p in model.parameters() if p.requires_grad]
    for p in trained:
        p.grad = torch.ones_like(p)
    optimizer = torch.optim.AdamW(trained, lr=1e-4)
    optimizer.step()
    states = sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values() if t.dim() > 0)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in trained)
    return sum(p.numel() for p in trained), states + grads


def footprint(preset: str, vocab: int, lora: LoRAConfig) -> dict:
    cfg = from_preset(preset, vocab)
    full_params, full_bytes = held_bytes(Transformer(cfg, seed=0))
    model = Transformer(cfg, seed=0)
    counts = apply_lora(model, lora)
    lora_params, lora_bytes = held_bytes(model)
    return {"preset": preset, "vocab": vocab, "parameters": counts["frozen_parameters"], "lora_trained": lora_params,
            "lora_share": lora_params / counts["frozen_parameters"], "full_trained": full_params,
            "full_grad_and_optimizer_bytes": full_bytes, "lora_grad_and_optimizer_bytes": lora_bytes,
            "saved_bytes": full_bytes - lora_bytes}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="tiny,125m,350m")
    p.add_argument("--vocab", type=int, default=4004)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    lora = LoRAConfig(rank=args.rank, alpha=2.0 * args.rank, target_modules=args.targets.split(","))
    presets = ["tiny"] if args.smoke else args.presets.split(",")
    rows = [footprint(name, args.vocab, lora) for name in presets]
    print(f"LoRA rank {args.rank} on {args.targets}, against a full fine-tune (AdamW, fp32)")
    print(f"{'preset':8} {'parameters':>13} {'LoRA trains':>12} {'share':>7} {'grads+AdamW full':>17} {'LoRA':>10} {'saved':>10}")
    for r in rows:
        print(f"{r['preset']:8} {r['parameters']:>13,} {r['lora_trained']:>12,} {r['lora_share']:>7.2%} "
              f"{r['full_grad_and_optimizer_bytes'] / 2**20:>13.1f} MiB {r['lora_grad_and_optimizer_bytes'] / 2**20:>6.2f} MiB "
              f"{r['saved_bytes'] / 2**20:>6.1f} MiB")  # fmt: skip
    print(json.dumps({"rank": args.rank, "targets": args.targets, "rows": rows}))


if __name__ == "__main__":
    main()
