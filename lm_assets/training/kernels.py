"""The kernels the model's hot ops run on, chosen per process, and the document-masked attention.

`lm_assets.training.model` calls the functions here (`rms_norm`, `rope`, `swiglu`, `cross_entropy`,
`attention`) instead of writing the math inline, so one switch moves every layer to another kernel:

    op             "eager"                          "torch"                        "liger"
    rms_norm       fp32 rsqrt-mean, cast, * weight  `F.rms_norm` (fused on CUDA)   liger-kernel RMSNorm ("llama" casting)
    rope           rotate_half, two products        -                              liger-kernel RoPE (q and k in one kernel)
    swiglu         silu(gate) * up                  -                              liger-kernel SiLU-mul
    cross_entropy  `F.cross_entropy` in fp32        -                              liger-kernel cross-entropy (no logits grad copy)

`attention`: "sdpa" is `F.scaled_dot_product_attention` with torch's own backend choice
(FlashAttention first on CUDA for a causal mask); "flash" is SDPA held to the FlashAttention
backend (`sdpa_kernel`), which raises where FlashAttention cannot run, so a run that says "flash"
ran it; "flex" is FlexAttention with a block mask. With document masks, "sdpa" takes a dense
boolean mask (the CPU path) and "flex" a block mask built from the same document ids, which skips
the blocks the mask empties (the CUDA path); both compute the same attention.

`resolve(config, device_type, document_mask)` turns the `KernelConfig` (each field "auto" or a
name) into the `Kernels` that will run: "auto" is liger-kernel on CUDA when it is installed, else
`F.rms_norm` for the norm and eager for the others (torch.compile fuses those itself), and
FlexAttention on CUDA / dense-masked SDPA on CPU for document masks, SDPA otherwise. A name that
cannot run here (liger on CPU, flex or flash without CUDA) is refused, never swapped. A model is
built with its `Kernels` (`Transformer(cfg, kernels=...)`), and each op is called with the kernel
it runs on, so two models in one process can run on different kernels; the trainer records them in every run's metadata, and
`kernel_profile` names the kernels a profiled step (`step_profiler`) actually ran.

Document masks. `document_ids(inputs, eos_id)` numbers the documents of each packed row: a
document runs up to and including its EOS (the packer writes one after every document), so the
EOS token attends to its own document, and the token after it starts the next one. A row that
begins mid-document (a document cut across rows) starts at document 0 with position 0.
`document_positions` restarts RoPE positions at 0 for each document. A token then attends only to
earlier tokens of its own document, exactly what it would see if its document were run alone.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from lm_assets.training.config import KERNEL_CHOICES, KernelConfig

IGNORE_INDEX = -100


@dataclass(frozen=True)
class Kernels:
    """The kernel each op runs on (see the module docstring)."""

    rms_norm: str = "eager"
    rope: str = "eager"
    swiglu: str = "eager"
    cross_entropy: str = "eager"
    attention: str = "sdpa"

    def to_dict(self) -> dict:
        return asdict(self)


def liger_available() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def resolve(config: KernelConfig, device_type: str, document_mask: bool) -> Kernels:
    """The `Kernels` that `config` asks for on `device_type` ("cuda", "cpu", ...)."""
    cuda = device_type == "cuda"
    liger = cuda and liger_available()
    auto = {
        "rms_norm": "liger" if liger else "torch",
        "rope": "liger" if liger else "eager",
        "swiglu": "liger" if liger else "eager",
        "cross_entropy": "liger" if liger else "eager",
        "attention": ("flex" if cuda else "sdpa") if document_mask else "sdpa",
    }
    chosen = {}
    for op, choices in KERNEL_CHOICES.items():
        name = getattr(config, op)
        if name == "auto":
            name = auto[op]
        if name not in choices:
            raise ValueError(f"kernels.{op}={name!r}: choose one of {('auto', *choices)}")
        if name == "liger" and not liger:
            why = "it needs CUDA" if not cuda else "liger-kernel is not installed"
            raise ValueError(f"kernels.{op}=liger cannot run here: {why}")
        if name in ("flash", "flex") and not cuda:
            raise ValueError(f"kernels.attention={name} needs CUDA; use sdpa (or auto) on {device_type}")
        if name == "flash" and document_mask:
            raise ValueError("kernels.attention=flash takes only the causal mask; with document_mask use flex or sdpa")
        chosen[op] = name
    return Kernels(**chosen)


# ---------------------------------------------------------------------------------------------
# Ops
# ---------------------------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, kind: str = "eager") -> torch.Tensor:
    """`weight * (x / rms(x))`, the normalization computed in fp32 and cast back before the
    weight (HF's `LlamaRMSNorm`)."""
    if kind == "liger":
        from liger_kernel.transformers.functional import liger_rms_norm

        return liger_rms_norm(x, weight, eps, casting_mode="llama", in_place=False)
    if kind == "torch":
        return weight * F.rms_norm(x.float(), (x.size(-1),), eps=eps).to(x.dtype)
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate `x` (`[batch, heads, seq, head_dim]`) by tables broadcasting against it."""
    return x * cos + rotate_half(x) * sin


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kind: str = "eager"):
    """Rotate `q` and `k` (`[B, heads, T, head_dim]`) by `cos`/`sin` (`[T, head_dim]`, or
    `[B, T, head_dim]` for per-row positions)."""
    if kind == "liger":
        from liger_kernel.transformers.functional import liger_rope

        return liger_rope(q, k, cos if cos.dim() == 3 else cos[None], sin if sin.dim() == 3 else sin[None])
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def swiglu(gate: torch.Tensor, up: torch.Tensor, kind: str = "eager") -> torch.Tensor:
    if kind == "liger":
        from liger_kernel.transformers.functional import liger_swiglu

        return liger_swiglu(gate, up)
    return F.silu(gate) * up


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean", kind: str = "eager") -> torch.Tensor:
    """Cross-entropy of `logits [N, V]` against `targets [N]`, in fp32, skipping `IGNORE_INDEX`."""
    if kind == "liger":
        from liger_kernel.transformers.functional import liger_cross_entropy

        # Its kernel computes in fp32 whatever the logits' dtype, so no fp32 copy of the logits is made.
        return liger_cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction=reduction)
    return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX, reduction=reduction)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask=None, kind: str = "sdpa") -> torch.Tensor:
    """Causal attention of `q [B, H, T, D]` over `k`, `v` (`[B, H_kv, T, D]`, grouped-query: query
    head h reads kv head h // (H / H_kv)). `mask`: None (causal), a boolean `[B, 1, T, T]` tensor
    (True: may attend), or a FlexAttention `BlockMask`."""
    gqa = q.size(1) != k.size(1)
    if mask is None:
        if kind == "flash":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    if isinstance(mask, torch.Tensor):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    return _flex()(q, k, v, block_mask=mask, enable_gqa=gqa)


_compiled_flex = None


def _flex():
    """FlexAttention compiled once (its eager form is a slow reference implementation)."""
    global _compiled_flex
    if _compiled_flex is None:
        from torch.nn.attention.flex_attention import flex_attention

        _compiled_flex = torch.compile(flex_attention, dynamic=False) if torch.cuda.is_available() else flex_attention
    return _compiled_flex


# ---------------------------------------------------------------------------------------------
# What ran
# ---------------------------------------------------------------------------------------------

# Kernel names that say which implementation ran (FlashAttention, FlexAttention, Triton from
# torch.compile or liger-kernel, fused AdamW and norms).
NOTABLE_KERNELS = ("flash", "flex", "triton", "liger", "fused", "rms_norm", "cutlass", "sdpa", "scaled_dot_product")


def step_profiler(device: torch.device):
    """A `torch.profiler.profile` of host ops, and of device kernels on CUDA."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    return profile(activities=activities)


def kernel_profile(profiler, step: int, top: int = 15) -> dict:
    """What a profiled step ran: its `top` kernels by self time (device kernels on CUDA, aten ops
    on CPU), and every kernel whose name says which implementation ran (`NOTABLE_KERNELS`)."""
    events = [e for e in profiler.key_averages() if e.key]
    on_device = [e for e in events if getattr(e, "self_device_time_total", 0) > 0]
    if on_device:
        ranked = sorted(on_device, key=lambda e: e.self_device_time_total, reverse=True)
        timed = [(e.key, e.self_device_time_total / 1e3) for e in ranked]
    else:
        ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
        timed = [(e.key, e.self_cpu_time_total / 1e3) for e in ranked]
    notable = sorted({name for name, _ in timed if any(k in name.lower() for k in NOTABLE_KERNELS)})
    return {"step": step, "device": bool(on_device), "top_ms": [[n[:120], round(ms, 3)] for n, ms in timed[:top]],
            "notable": [n[:120] for n in notable]}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Document masks
# ---------------------------------------------------------------------------------------------


def document_ids(inputs: torch.Tensor, eos_id: int) -> torch.Tensor:
    """`[B, T]` int64: the document index of each input token within its row (see the module doc)."""
    eos = (inputs == eos_id).long()
    return torch.cumsum(eos, dim=-1) - eos


def document_positions(doc_ids: torch.Tensor) -> torch.Tensor:
    """`[B, T]` int64: each token's position within its document."""
    T = doc_ids.size(-1)
    index = torch.arange(T, device=doc_ids.device).expand_as(doc_ids)
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[..., 1:] = doc_ids[..., 1:] != doc_ids[..., :-1]
    first = torch.cummax(torch.where(starts, index, torch.zeros_like(index)), dim=-1).values
    return index - first


def document_mask(doc_ids: torch.Tensor, attention_kind: str = "sdpa"):
    """The attention mask of `doc_ids` for the attention kernel `attention_kind`: a FlexAttention
    block mask for "flex", else a dense boolean `[B, 1, T, T]` (causal and same document)."""
    B, T = doc_ids.shape
    if attention_kind == "flex":
        from torch.nn.attention.flex_attention import create_block_mask

        def same_document_causal(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (doc_ids[b, q_idx] == doc_ids[b, kv_idx])

        return create_block_mask(same_document_causal, B, None, T, T, device=doc_ids.device)
    causal = torch.ones(T, T, dtype=torch.bool, device=doc_ids.device).tril()
    return (causal & (doc_ids[:, :, None] == doc_ids[:, None, :]))[:, None]


class DocumentMaskCache:
    """The mask of the last document-id tensor seen, so the blocks of one pipeline stage build it
    once per micro-batch (they all receive the same tensor object)."""

    def __init__(self, attention_kind: str = "sdpa"):
        self.attention_kind = attention_kind
        self._ids = None
        self._mask = None

    def __call__(self, doc_ids: torch.Tensor):
        if doc_ids is not self._ids:
            self._ids, self._mask = doc_ids, document_mask(doc_ids, self.attention_kind)
        return self._mask


__all__ = [
    "DocumentMaskCache",
    "Kernels",
    "NOTABLE_KERNELS",
    "apply_rope",
    "attention",
    "cross_entropy",
    "document_ids",
    "document_mask",
    "document_positions",
    "kernel_profile",
    "liger_available",
    "resolve",
    "rms_norm",
    "rope",
    "rotate_half",
    "step_profiler",
    "swiglu",
]
