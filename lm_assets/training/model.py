"""A Llama-style decoder-only transformer, small enough to read in one sitting.

    ids -> Embedding -> Block x n_layers -> Head (RMSNorm, linear) -> logits
    Block: x + Attention(RMSNorm(x)), then x + MLP(RMSNorm(x))   (pre-norm residual blocks)

- RMSNorm computed in fp32 and cast back, then scaled by its weight (as HF's `LlamaRMSNorm`).
- Rotary position embeddings on queries and keys, HF Llama's "rotate_half" layout: dimension i pairs
  with i + head_dim/2 (not interleaved pairs), so q/k projection weights map 1:1 onto
  `LlamaForCausalLM` with no permutation. Each attention layer keeps its own cos/sin table
  (`[max_seq_len, head_dim]`, fp32, not saved in the state dict), so a block is self-contained.
- Grouped-query attention: `n_kv_heads` key/value heads, each shared by `n_heads / n_kv_heads` query
  heads (query head h uses kv head h // group, HF's `repeat_kv`), causal, through
  `kernels.attention` (SDPA, FlashAttention or FlexAttention).
- SwiGLU MLP: `down(silu(gate(x)) * up(x))`. No biases anywhere.
- Document masks: given `doc_ids` (`kernels.document_ids` of a packed row), a token attends only
  to earlier tokens of its own document and its RoPE position counts from its document's start,
  so every document is computed as if it were alone in the row.

The norm, RoPE, SwiGLU, cross-entropy and attention run on the kernels `lm_assets/training/kernels.py` has
activated for the process (eager math by default). `compile_blocks` compiles every block's layer.

Building blocks for parallel wrappers. `Embedding`, `Block` and `Head` are separate modules
(`Block.forward(x, positions=None, mask=None)`), so a pipeline-parallel wrapper can stack
`[Embedding, *Blocks, Head]` across stages; `Transformer` is that stack. The attention and MLP linears come from a
`linear_factory(in_features, out_features, style)` where style is "column" for q/k/v/gate/up
(output features may be split across tensor-parallel ranks) and "row" for o/down (input features
split, outputs summed). The attention reshapes with the head count inferred from the projection
outputs, so a column-parallel q/k/v giving `n_heads / tp` local heads works unchanged.

Initialization is deterministic from a seed and independent of how the model is split: every
weight draws from its own generator keyed by `(seed, parameter name)` (names as in
`Transformer.state_dict()`, e.g. `layers.3.attn.q_proj.weight`), so a stage holding layers 8-15
initializes them exactly as the whole model would. Weights are normal(0, init_std); the residual
output projections (`o_proj`, `down_proj`) use init_std / sqrt(2 * n_layers); norms start at 1.
A linear whose weight is a shard of the logical matrix defines `load_full_weight(full)`: the full
`[out_features, in_features]` matrix is generated (the same on every rank) and handed to it to keep
its slice. Modules built on the meta device: `to_empty(device=...)`, then `init_weights(seed)`
(which also rebuilds the RoPE tables).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import torch
from torch import nn

from lm_assets.training import kernels
from lm_assets.training.config import ModelConfig
from lm_assets.training.kernels import Kernels, apply_rope, rotate_half

EAGER = Kernels()  # the reference kernels: what a model runs on unless it is given others

IGNORE_INDEX = -100

LinearFactory = Callable[[int, int, str], nn.Module]


def default_linear(in_features: int, out_features: int, style: str) -> nn.Module:
    """A plain bias-free `nn.Linear` (single device); `style` ("column"/"row") is for parallel factories."""
    return nn.Linear(in_features, out_features, bias=False)


# ---------------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, kernel: Kernels = EAGER):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.kernels = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps, self.kernels.rms_norm)


def rope_tables(head_dim: int, max_seq_len: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`(cos, sin)`, each `[max_seq_len, head_dim]` fp32: angle `pos * theta^(-2i/head_dim)` at
    columns i and i + head_dim/2 (HF Llama's layout)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    positions = torch.arange(max_seq_len, dtype=torch.int64, device=device).float()
    angles = torch.outer(positions, inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, linear_factory: LinearFactory = default_linear, kernel: Kernels = EAGER):
        super().__init__()
        self.cfg = cfg
        self.kernels = kernel
        self.head_dim = cfg.head_dim
        q_out, kv_out = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        self.q_proj = linear_factory(cfg.dim, q_out, "column")
        self.k_proj = linear_factory(cfg.dim, kv_out, "column")
        self.v_proj = linear_factory(cfg.dim, kv_out, "column")
        self.o_proj = linear_factory(q_out, cfg.dim, "row")
        self.full_shapes = {"q_proj": (q_out, cfg.dim), "k_proj": (kv_out, cfg.dim), "v_proj": (kv_out, cfg.dim),
                            "o_proj": (cfg.dim, q_out)}  # fmt: skip
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)
        self.reset_rope()

    def reset_rope(self) -> None:
        device = self.rope_cos.device if self.rope_cos.device.type != "meta" else None
        cos, sin = rope_tables(self.head_dim, self.cfg.max_seq_len, self.cfg.rope_theta, device=device)
        self.rope_cos, self.rope_sin = cos, sin

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, mask=None) -> torch.Tensor:
        """`positions`: `[B, T]` RoPE positions (None: 0..T-1); `mask`: see `kernels.attention`."""
        B, T, _ = x.shape
        if T > self.rope_cos.size(0):
            raise ValueError(f"sequence length {T} exceeds max_seq_len {self.rope_cos.size(0)}")
        # [B, T, heads * head_dim] -> [B, heads, T, head_dim]; heads are local ones under tensor parallelism.
        q = self.q_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        if positions is None:
            cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        else:
            cos, sin = self.rope_cos[positions], self.rope_sin[positions]
        q, k = kernels.rope(q, k, cos.to(q.dtype), sin.to(q.dtype), self.kernels.rope)
        y = kernels.attention(q, k, v, mask, self.kernels.attention)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, linear_factory: LinearFactory = default_linear, kernel: Kernels = EAGER):
        super().__init__()
        self.kernels = kernel
        self.gate_proj = linear_factory(cfg.dim, cfg.ffn_hidden, "column")
        self.up_proj = linear_factory(cfg.dim, cfg.ffn_hidden, "column")
        self.down_proj = linear_factory(cfg.ffn_hidden, cfg.dim, "row")
        self.full_shapes = {"gate_proj": (cfg.ffn_hidden, cfg.dim), "up_proj": (cfg.ffn_hidden, cfg.dim),
                            "down_proj": (cfg.dim, cfg.ffn_hidden)}  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(kernels.swiglu(self.gate_proj(x), self.up_proj(x), self.kernels.swiglu))


# ---------------------------------------------------------------------------------------------
# Building blocks: Embedding, Block, Head (each forward(tensor) -> tensor)
# ---------------------------------------------------------------------------------------------


class Embedding(nn.Embedding):
    """Token ids `[B, T]` (int64) -> hidden states `[B, T, dim]`."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.vocab_size, cfg.dim)
        self.cfg = cfg

    def init_weights(self, seed: int, prefix: str = "embed.") -> None:
        _init_normal(self, self.weight.shape, self.cfg.init_std, seed, prefix + "weight")


class Block(nn.Module):
    """One pre-norm transformer layer, `[B, T, dim] -> [B, T, dim]`. `layer_id` keys its init."""

    def __init__(self, cfg: ModelConfig, layer_id: int, linear_factory: LinearFactory = default_linear,
                 kernel: Kernels = EAGER):  # fmt: skip
        super().__init__()
        self.cfg = cfg
        self.layer_id = layer_id
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps, kernel)
        self.attn = Attention(cfg, linear_factory, kernel)
        self.mlp_norm = RMSNorm(cfg.dim, cfg.norm_eps, kernel)
        self.mlp = MLP(cfg, linear_factory, kernel)

        self.run = self.layer  # `compile_blocks` swaps in the compiled layer

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, mask=None) -> torch.Tensor:
        return self.run(x, positions, mask)

    def layer(self, x: torch.Tensor, positions: torch.Tensor | None, mask) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), positions, mask)
        return x + self.mlp(self.mlp_norm(x))

    def init_weights(self, seed: int, prefix: str | None = None) -> None:
        prefix = f"layers.{self.layer_id}." if prefix is None else prefix
        residual_std = self.cfg.init_std / math.sqrt(2 * self.cfg.n_layers)
        for part, sub in (("attn", self.attn), ("mlp", self.mlp)):
            for name, shape in sub.full_shapes.items():
                std = residual_std if name in ("o_proj", "down_proj") else self.cfg.init_std
                _init_normal(getattr(sub, name), shape, std, seed, f"{prefix}{part}.{name}.weight")
        for norm in (self.attn_norm, self.mlp_norm):
            nn.init.ones_(norm.weight)
        self.attn.reset_rope()


class Head(nn.Module):
    """Final RMSNorm and the output projection: `[B, T, dim] -> [B, T, vocab_size]` logits."""

    def __init__(self, cfg: ModelConfig, kernel: Kernels = EAGER):
        super().__init__()
        self.cfg = cfg
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps, kernel)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.norm(x))

    def init_weights(self, seed: int, prefix: str = "head.") -> None:
        nn.init.ones_(self.norm.weight)
        if not self.cfg.tie_embeddings:  # tied: the embedding's init is the output's
            _init_normal(self.output, self.output.weight.shape, self.cfg.init_std, seed, prefix + "output.weight")


class Transformer(nn.Module):
    """The whole decoder: `forward(ids [B, T] int64) -> logits [B, T, vocab_size]`.

    `seed=None` skips initialization (e.g. before `load_state_dict`, or on the meta device). `kernels`:
    what its ops run on (`lm_assets/training/kernels.py`; `use_kernels` changes them).
    """

    def __init__(self, cfg: ModelConfig, seed: int | None = 0, linear_factory: LinearFactory = default_linear,
                 kernels: Kernels = EAGER):  # fmt: skip
        super().__init__()
        self.cfg = cfg
        self.kernels = kernels
        self.embed = Embedding(cfg)
        self.layers = nn.ModuleList(Block(cfg, i, linear_factory, kernels) for i in range(cfg.n_layers))
        self.head = Head(cfg, kernels)
        if cfg.tie_embeddings:
            self.head.output.weight = self.embed.weight
        if seed is not None:
            self.init_weights(seed)

    def forward(self, ids: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """`doc_ids` (`[B, T]`, `kernels.document_ids`): attend within documents only, positions
        restarting at each document; None: one causal sequence per row."""
        h = self.embed(ids)
        positions = mask = None
        if doc_ids is not None:
            positions, mask = kernels.document_positions(doc_ids), kernels.document_mask(doc_ids, self.kernels.attention)
        for layer in self.layers:
            h = layer(h, positions, mask)
        return self.head(h)

    def loss(self, inputs: torch.Tensor, targets: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Mean cross-entropy of the next-token predictions over non-ignored targets."""
        return cross_entropy(self(inputs, doc_ids), targets, kernel=self.kernels)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        self.head.init_weights(seed)
        self.embed.init_weights(seed)
        for layer in self.layers:
            layer.init_weights(seed)


def _generator(seed: int, name: str) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


@torch.no_grad()
def _init_normal(module: nn.Module, full_shape, std: float, seed: int, name: str) -> None:
    """Draw the full `full_shape` matrix on the CPU from the generator keyed by `(seed, name)` and
    give it to `module` (its `load_full_weight` when it holds a shard, else copied into `.weight`)."""
    full = torch.empty(tuple(full_shape), dtype=torch.float32).normal_(0.0, std, generator=_generator(seed, name))
    if hasattr(module, "load_full_weight"):
        module.load_full_weight(full)
    elif tuple(module.weight.shape) == tuple(full.shape):
        module.weight.copy_(full)
    else:
        raise ValueError(
            f"{name}: weight {tuple(module.weight.shape)} is not the full {tuple(full.shape)}; "
            "a sharded linear must define load_full_weight(full)"
        )


# ---------------------------------------------------------------------------------------------
# Loss, parameter count, FLOPs
# ---------------------------------------------------------------------------------------------


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean", kernel: Kernels = EAGER) -> torch.Tensor:
    """Cross-entropy of `logits [..., V]` against `targets [...]` (int64), computed in fp32, skipping
    targets equal to -100 (`IGNORE_INDEX`, the loader's PAD targets).

    "mean" averages over the kept targets (NaN if there are none); for gradient accumulation or
    data parallelism weighted by token count, take reduction="sum" and divide by the global count
    of `targets != IGNORE_INDEX`.
    """
    return kernels.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction, kernel.cross_entropy)


def use_kernels(model: nn.Module, kernel: Kernels) -> nn.Module:
    """`model` with every one of its modules running on `kernel` from now on."""
    for module in model.modules():
        if hasattr(module, "kernels") and isinstance(module.kernels, Kernels):
            module.kernels = kernel
    return model


def compile_blocks(model: nn.Module, **options) -> int:
    """`torch.compile` the layer of every `Block` in `model` (regional compilation: blocks share
    one compiled graph; weights, names and state dict unchanged); returns how many."""
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    for block in blocks:
        block.run = torch.compile(block.layer, **options)
    return len(blocks)


def _layer_matmul_params(cfg: ModelConfig) -> int:
    q_out, kv_out = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    attention = cfg.dim * q_out + 2 * cfg.dim * kv_out + q_out * cfg.dim
    mlp = 3 * cfg.dim * cfg.ffn_hidden
    return attention + mlp


def num_params(cfg: ModelConfig, embedding: bool = True) -> int:
    """Trainable parameters of `Transformer(cfg)`, a tied matrix counted once.

    `embedding=False` leaves out the input embedding table (an untied output projection stays in).
    """
    per_layer = _layer_matmul_params(cfg) + 2 * cfg.dim  # two RMSNorm weights
    body = cfg.n_layers * per_layer + cfg.dim  # + final norm
    vocab = cfg.vocab_size * cfg.dim
    if cfg.tie_embeddings:
        return body + vocab
    return body + (2 * vocab if embedding else vocab)


def flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """Training FLOPs (forward + backward) per token, the PaLM (Chowdhery et al. 2022, app. B) model-FLOPs
    convention used for MFU: `6 * N + 12 * L * H * Q * T`.

    N counts the parameters that take part in matrix multiplies: all q/k/v/o and gate/up/down
    weights plus the output projection (vocab x dim, also when tied); the embedding lookup and the
    norm weights cost no matmul FLOPs and are left out. Each such weight costs 2 FLOPs per token
    forward and 4 backward, hence 6N. The attention term is the QK^T and attention-times-V products:
    2 * 2 * L * H * Q * T forward per token (L layers, H query heads, Q head_dim, T = seq_len),
    times 3 for forward + backward. As in PaLM it counts the full T x T score matrix, not half for
    the causal mask, and no activation recomputation (that makes hardware FLOPs, not model FLOPs).
    """
    n = cfg.n_layers * _layer_matmul_params(cfg) + cfg.vocab_size * cfg.dim
    return 6 * n + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len


def mfu(cfg: ModelConfig, seq_len: int, tokens_per_second: float, peak_flops: float) -> float:
    """Model FLOPs utilization: achieved model FLOP/s over the hardware peak (both summed over devices)."""
    return flops_per_token(cfg, seq_len) * tokens_per_second / peak_flops


__all__ = [
    "EAGER",
    "IGNORE_INDEX",
    "MLP",
    "Attention",
    "Block",
    "Embedding",
    "Head",
    "LinearFactory",
    "RMSNorm",
    "Transformer",
    "apply_rope",
    "compile_blocks",
    "cross_entropy",
    "default_linear",
    "flops_per_token",
    "mfu",
    "num_params",
    "rope_tables",
    "rotate_half",
    "use_kernels",
]
