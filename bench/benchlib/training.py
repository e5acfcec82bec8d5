"""The benches' training pieces: a synthetic packed dataset, and one plain-torch step of our model to
measure the DeepSpeed engine against (`train_gpu.py`, `train_cpu.py`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

def write_synthetic_packed(out_dir: str | os.PathLike, n_seq: int, seq_len: int, vocab_size: int,
                           seed: int = 0, split: str = "train", mean_doc_tokens: int = 0) -> Path:  # fmt: skip
    """A packed dataset of `n_seq` rows of `seq_len` uniform random ids in [1, vocab_size) (id 0 is
    the pad id and never occurs), little-endian uint16, with the manifest PackedDataset reads.
    `mean_doc_tokens` > 0 cuts the rows into documents of that mean length (geometric): each token
    is the EOS (id 1) with probability 1/mean_doc_tokens, and no other token is."""
    import numpy as np

    if not 2 <= vocab_size <= 2**16:
        raise ValueError("vocab_size must lie in [2, 65536] for uint16 tokens")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, vocab_size, size=(n_seq, seq_len), dtype=np.uint16)
    if mean_doc_tokens > 0:
        rows[rows == 1] = 2
        rows[rng.random(size=rows.shape) < 1.0 / mean_doc_tokens] = 1
    rows.astype("<u2").tofile(out / f"{split}.bin")
    manifest = {
        "format": "synthetic",
        "dtype": "uint16",
        "byte_order": "little",
        "seq_len": seq_len,
        "pad_id": 0,
        "eos_id": 1,
        "vocab_size": vocab_size,
        "splits": {split: {"sequences": n_seq}},
        "files": {split: {"bin": f"{split}.bin", "shape": [n_seq, seq_len], "bytes": rows.nbytes}},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return out


class PlainLoop:
    """One training step of `lm_assets.training.model.Transformer` in plain torch, configured as `Trainer`
    configures DeepSpeed: AdamW with the decay / no-decay groups, the warmup-cosine `LambdaLR`,
    global gradient-norm clipping at `optim.grad_clip`.

    fp32: the parameters are the optimizer's (`fused`: torch's fused AdamW, as the engine's default). bf16: the model runs in bf16 and fp32 master copies are updated
    (fused AdamW on a GPU), then copied back, as DeepSpeed's bf16 path does. `compile=True`
    compiles each block on its own and the head together with the loss.
    """

    def __init__(self, cfg, vocab_size: int, device, precision: str = "fp32", compile: bool = False,
                 fused: bool = False):  # fmt: skip
        import torch

        from lm_assets.training.engine import lr_lambda
        from lm_assets.training.model import Transformer, cross_entropy

        self.torch = torch
        self.model_cfg = cfg.model_config(vocab_size)
        torch.manual_seed(cfg.seed)
        model = Transformer(self.model_cfg, seed=cfg.seed)
        self.dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
        self.model = model.to(device=device, dtype=self.dtype)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if self.dtype == torch.float32:
            self.master = self.params
        else:
            self.master = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        o = cfg.optim
        decay = [m for m, p in zip(self.master, self.params) if p.dim() >= 2]
        no_decay = [m for m, p in zip(self.master, self.params) if p.dim() < 2]
        groups = [g for g in ({"params": decay}, {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
        kwargs = {"fused": True} if fused else {}
        self.opt = torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                                     weight_decay=o.weight_decay, **kwargs)  # fmt: skip
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lr_lambda(o.warmup_steps, cfg.steps, o.min_lr_ratio)
        )
        self.grad_clip = o.grad_clip

        m = self.model

        def head_loss(h, y):
            return cross_entropy(m.head(h), y)

        if compile:
            import torch._dynamo

            torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
            for layer in m.layers:
                layer.compile()
            head_loss = torch.compile(head_loss)
        self.head_loss = head_loss

    def loss(self, x, y):
        h = self.model.embed(x)
        for layer in self.model.layers:
            h = layer(h)
        return self.head_loss(h, y)

    def step(self, x, y):
        """One update; returns the loss tensor (not synchronized)."""
        torch = self.torch
        loss = self.loss(x, y)
        loss.backward()
        if self.master is not self.params:
            for mp, p in zip(self.master, self.params):
                mp.grad = p.grad.float()
                p.grad = None
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.master, self.grad_clip)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        if self.master is not self.params:
            with torch.no_grad():
                torch._foreach_copy_([p.data for p in self.params], self.master)
        return loss.detach()


def with_curriculum(packed: str | os.PathLike, out_dir: str | os.PathLike, fraction: float = 0.25, seed: int = 0) -> Path:
    """`packed` (its rows linked, not copied) with a seeded random difficulty per train sequence and
    an easy-to-hard curriculum over `fraction` of the first epoch, as `packed_dataset` writes one, so
    training's first epoch reads the rows in the curriculum's order."""
    import numpy as np

    src, out = Path(packed), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((src / "manifest.json").read_text())
    n = manifest["splits"]["train"]["sequences"]
    (out / "train.bin").symlink_to((src / "train.bin").resolve())
    np.random.default_rng(seed).random(n, dtype=np.float32).astype("<f4").tofile(out / "train_difficulty.bin")
    manifest["files"]["train"]["difficulty"] = "train_difficulty.bin"
    manifest["curriculum"] = {"schedule": "easy_to_hard", "score": "synthetic", "fraction": fraction,
                              "harder_is": "a seeded random score"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return out
