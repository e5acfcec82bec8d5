"""Typed configuration for the training program.

`ModelConfig` fixes the architecture (a Llama-style decoder, see `lm_assets/training/model.py`). Presets give
Llama-like shapes; `from_preset(name, vocab_size, **overrides)` builds one for a tokenizer's
vocabulary. `override(cfg, "a.b=c")` applies a command-line override to any (nested) config
dataclass, parsing the value as the field's declared type.

`TrainConfig` is a whole run: a tree of dataclasses (parallel layout, optimizer and schedule, spike
detection, checkpointing, test hooks) around a model preset. It loads from JSON or TOML
(`load_config`), takes `a.b=value` overrides, and `validate()` refuses combinations DeepSpeed 0.19
gets wrong or rejects: fp16 with ZeRO-0 (its loss scaling never scales the gradients there) and
ZeRO-2/3 with pipeline parallelism (the pipeline engine supports ZeRO-1 at most). `dims(world_size)`
resolves its layout to a `ParallelDims`. `to_dict` turns any of these configs into a JSON-ready dict.

Standard library only, so that the launcher and lm_assets import it without torch.

Parameter counts (`lm_assets.training.model.num_params`) with a 32,000-token vocabulary, untied embeddings,
and training FLOPs per token at seq_len 2048 (`lm_assets.training.model.flops_per_token`):

    preset  dim   layers heads kv  ffn    max_seq  params                          FLOPs/token
    tiny      64     2     4    2   176    128        4.19M (130,880 at vocab 300)   -
    125m     768    12    12    4  2048   2048      124.67M (75.5M without vocab)    0.83 G
    350m    1024    24    16    8  2816   2048      348.70M (283.2M without vocab)   2.50 G
    1b      2048    16    32    8  8192   2048     1104.22M (973.1M without vocab)   7.04 G

("without vocab": less the embedding and output matrices.)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any


def swiglu_hidden(dim: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """Llama's SwiGLU width: 2/3 of 4*dim (same parameters as a 4*dim GELU MLP), rounded up to
    `multiple_of`, optionally scaled first by `ffn_dim_multiplier`."""
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


@dataclass
class ModelConfig:
    """Architecture of the decoder (see `lm_assets/training/model.py`).

    `n_kv_heads` < `n_heads` gives grouped-query attention (it must divide `n_heads`; `None` means
    `n_heads`, plain multi-head attention). `ffn_hidden` is the SwiGLU width; `None` derives it from
    `dim` and `multiple_of` with `swiglu_hidden`. `max_seq_len` sizes the precomputed RoPE table
    (and is exported as `max_position_embeddings`). `init_std` is the standard deviation of the
    normal initialization; the two residual output projections of each block use
    `init_std / sqrt(2 * n_layers)` (GPT-2's scaled residual init).
    """

    vocab_size: int = 32_000
    dim: int = 768
    n_layers: int = 12
    n_heads: int = 12
    n_kv_heads: int | None = None
    ffn_hidden: int | None = None
    multiple_of: int = 256
    max_seq_len: int = 2048
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    init_std: float = 0.02

    def __post_init__(self):
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.ffn_hidden is None:
            self.ffn_hidden = swiglu_hidden(self.dim, self.multiple_of)
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


PRESETS: dict[str, dict[str, Any]] = {
    # For CPU tests; grouped-query attention (2 query heads per kv head) is exercised.
    "tiny": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=176, multiple_of=16, max_seq_len=128),
    "125m": dict(dim=768, n_layers=12, n_heads=12, n_kv_heads=4, ffn_hidden=2048, max_seq_len=2048),
    "350m": dict(dim=1024, n_layers=24, n_heads=16, n_kv_heads=8, ffn_hidden=2816, max_seq_len=2048),
    # Llama 3.2 1B's body (dim 2048, 16 layers, 32/8 heads, ffn 8192, theta 500k).
    "1b": dict(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_hidden=8192, max_seq_len=2048, rope_theta=500_000.0),
}


def from_preset(name: str, vocab_size: int, **overrides) -> ModelConfig:
    """The preset `name` for a vocabulary of `vocab_size`, with `overrides` replacing its fields.

    Overriding `dim` or `multiple_of` without `ffn_hidden` re-derives the SwiGLU width.
    """
    try:
        shape = dict(PRESETS[name])
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}") from None
    if ("dim" in overrides or "multiple_of" in overrides) and "ffn_hidden" not in overrides:
        shape.pop("ffn_hidden", None)
    shape.update(overrides)
    return ModelConfig(vocab_size=vocab_size, **shape)


# ---------------------------------------------------------------------------------------------
# Parallel layout
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParallelDims:
    """Pipeline, tensor and data parallel degrees."""

    pp: int = 1
    tp: int = 1
    dp: int = 1

    @property
    def world_size(self) -> int:
        return self.pp * self.tp * self.dp

    def validate(self, world_size: int | None = None) -> None:
        for name in ("pp", "tp", "dp"):
            if getattr(self, name) < 1:
                raise ValueError(f"parallel.{name} must be >= 1, got {getattr(self, name)}")
        if world_size is not None and self.world_size != world_size:
            raise ValueError(
                f"pp*tp*dp = {self.pp}*{self.tp}*{self.dp} = {self.world_size} does not match the world size "
                f"{world_size} (number of processes launched)"
            )

    def check_model(self, cfg: ModelConfig) -> None:
        """Refuse layouts the model cannot be split into."""
        if self.tp > 1:
            for name in ("n_heads", "n_kv_heads", "ffn_hidden"):
                if getattr(cfg, name) % self.tp:
                    raise ValueError(f"tensor parallel degree {self.tp} must divide model {name}={getattr(cfg, name)}")
        if self.pp > cfg.n_layers:
            raise ValueError(f"pipeline degree {self.pp} exceeds the model's {cfg.n_layers} layers")
        if self.pp > 1 and cfg.tie_embeddings:
            raise ValueError("tied embeddings are not supported with pipeline parallelism (pp > 1)")


def resolve_dims(pp: int, tp: int, dp: int, world_size: int) -> ParallelDims:
    """`dp=0` means "what is left": world_size / (pp * tp)."""
    if dp == 0:
        if pp < 1 or tp < 1 or world_size % (pp * tp):
            raise ValueError(f"world size {world_size} is not a multiple of pp*tp = {pp}*{tp}")
        dp = world_size // (pp * tp)
    dims = ParallelDims(pp, tp, dp)
    dims.validate(world_size)
    return dims


# ---------------------------------------------------------------------------------------------
# The training run
# ---------------------------------------------------------------------------------------------

PRECISIONS = ("fp32", "bf16", "fp16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")


@dataclass
class ParallelConfig:
    """Pipeline, tensor and data parallel degrees; `dp=0` takes what the world size leaves."""

    pp: int = 1  # pipeline stages
    tp: int = 1  # tensor-parallel ranks
    dp: int = 0  # data-parallel ranks; 0: what the world size leaves


@dataclass
class OptimConfig:
    lr: float = 3e-4  # AdamW's peak learning rate, after linear warmup
    min_lr_ratio: float = 0.1  # cosine decay ends at this share of lr
    warmup_steps: int = 100  # linear warmup from 0 to lr
    weight_decay: float = 0.1  # AdamW's decoupled weight decay
    beta1: float = 0.9  # AdamW's first-moment decay
    beta2: float = 0.95  # AdamW's second-moment decay
    eps: float = 1e-8  # AdamW's epsilon
    grad_clip: float = 1.0  # 0 disables clipping


@dataclass
class SpikeConfig:
    k_sigma: float = 6.0  # 0 disables the k-sigma test (non-finite losses are always spikes)
    window: int = 100  # steps in the running window of losses
    min_history: int = 10  # steps before the test starts
    min_std_frac: float = 0.005  # the window's standard deviation taken as at least this share of its mean
    max_consecutive: int = 5  # spikes in a row that stop the run


OFFLOAD_DEVICES = ("none", "cpu", "nvme")


@dataclass
class OffloadConfig:
    """ZeRO-Offload (DeepSpeed's `offload_optimizer` and `offload_param`): the optimizer states (and
    their step, run by DeepSpeed's CPU Adam) and, with ZeRO-3, the parameters kept in host memory or on
    NVMe under `nvme_path`, to fit a larger model on fewer GPUs at the cost of host-device traffic."""

    optimizer: str = "none"  # none | cpu | nvme; ZeRO stage 1-3
    param: str = "none"  # none | cpu | nvme; ZeRO stage 3
    nvme_path: str = ""  # the folder for offload=nvme
    pin_memory: bool = True  # pinned host buffers for the offloaded states

    @property
    def enabled(self) -> bool:
        return self.optimizer != "none" or self.param != "none"


@dataclass
class LoaderConfig:
    """How batches reach the step: `num_workers` background threads make the next `prefetch_steps`
    steps' batches while the current one runs (0: made when the step asks); on CUDA they are copied
    into pinned memory (`pin_memory`, unset: on for CUDA), so the copy to the device overlaps compute."""

    num_workers: int = 2  # background threads making batches (0: made when the step asks)
    prefetch_steps: int = 2  # steps' batches made ahead
    pin_memory: bool | None = None  # copy batches into pinned memory; None: on for CUDA


@dataclass
class LossScaleConfig:
    """fp16's dynamic loss scale (DeepSpeed's `fp16` block): it starts at 2**initial_scale_power, halves
    after `hysteresis` overflowing steps (each skipped), doubles after `loss_scale_window` clean ones,
    and never falls below `min_loss_scale`."""

    initial_scale_power: int = 16  # teams often start at 14 (16,384)
    loss_scale_window: int = 1000  # clean steps before the scale doubles
    hysteresis: int = 2  # overflowing steps tolerated before it halves
    min_loss_scale: float = 1.0  # the scale's floor


@dataclass
class CheckpointConfig:
    dir: str | None = None  # where checkpoints go (training_run sets it)
    save_every: int = 0  # 0: only at the end (when dir is set)
    resume: bool = True  # continue from the latest checkpoint in dir, if any


@dataclass
class ValidationConfig:
    """The loss on the packed data's `split` (the packer's held-out documents), over `batches`
    micro-batches per data-parallel rank, at every checkpoint and at the last step; `every` > 0 also
    every that many steps; `batches=0` turns it off."""

    split: str = "val"  # the packed split the validation loss is measured on
    batches: int = 8  # micro-batches per data-parallel rank (0: no validation)
    every: int = 0  # also every this many steps (0: only at checkpoints and the last step)


KERNEL_CHOICES = {
    "rms_norm": ("eager", "torch", "liger"),
    "rope": ("eager", "liger"),
    "swiglu": ("eager", "liger"),
    "cross_entropy": ("eager", "liger"),
    "attention": ("sdpa", "flash", "flex"),
}


@dataclass
class KernelConfig:
    """The kernel of each hot op: "auto" or one of `KERNEL_CHOICES[op]` (`lm_assets/training/kernels.py`
    says what each is). "auto" takes liger-kernel on CUDA when it is installed, FlexAttention on
    CUDA for document masks, torch's own kernels otherwise."""

    rms_norm: str = "auto"  # auto | eager | torch (F.rms_norm) | liger
    rope: str = "auto"  # auto | eager | liger
    swiglu: str = "auto"  # auto | eager | liger
    cross_entropy: str = "auto"  # auto | eager | liger
    attention: str = "auto"  # auto | sdpa | flash (causal only) | flex; auto: flex on CUDA with document masks
    fused_adamw: bool = True  # torch's fused AdamW (one kernel for all parameters; CPU and CUDA)


ADAPTER_TYPES = ("none", "lora")
ADAPTER_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DPO_LOSS_TYPES = ("sigmoid", "robust")
OBJECTIVES = ("lm", "dpo", "distill")
TEACHER_LOGITS = ("on-the-fly", "top-k")
DPO_REFERENCES = ("precomputed", "adapter-disabled")


def check_adapter_settings(rank: int, alpha: float, dropout: float, target_modules) -> None:
    if rank < 1:
        raise ValueError(f"adapter.rank must be at least 1, got {rank}")
    if not alpha > 0:
        raise ValueError(f"adapter.alpha must be positive, got {alpha}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"adapter.dropout must be in [0, 1), got {dropout}")
    unknown = sorted(set(target_modules) - set(ADAPTER_TARGETS))
    if unknown or not target_modules:
        raise ValueError(f"adapter.target_modules must be a non-empty subset of {list(ADAPTER_TARGETS)}; unknown: {unknown}")


def check_loss_settings(beta: float, label_smoothing: float, loss_type: str) -> None:
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(f"dpo.loss_type must be one of {list(DPO_LOSS_TYPES)}, got {loss_type!r}")
    if not beta > 0:
        raise ValueError(f"dpo.beta must be positive, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"dpo.label_smoothing must be in [0, 0.5), got {label_smoothing}")


@dataclass
class AdapterConfig:
    """Low-rank adapters (`lm_assets/training/lora.py`): with `type="lora"` the model's weights are frozen and
    only a rank-`rank` update of each of `target_modules` trains (scaled by alpha / rank) and is saved."""

    type: str = "none"  # none | lora
    rank: int = 8  # the rank r of each low-rank update
    alpha: float = 16.0  # the update is scaled by alpha / rank
    dropout: float = 0.0  # dropout on the adapter's input
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")  # the linear layers that get an adapter

    @property
    def enabled(self) -> bool:
        return self.type != "none"


@dataclass
class DpoConfig:
    """Direct preference optimization (`lm_assets/training/preference.py`), with `objective="dpo"` on preference
    data (a pair to a row). The reference is the model the run starts from: `precomputed`, its
    log-probabilities of every pair computed once before the first step and kept beside the
    checkpoints (so one model is held, and a resume reads the same numbers); `adapter-disabled`, with
    an adapter, the same model with the adapter switched off, run beside each step."""

    beta: float = 0.1  # DPO's beta: how far the policy may move from the reference
    label_smoothing: float = 0.0  # > 0: conservative DPO (labels flipped with this probability)
    loss_type: str = "sigmoid"  # sigmoid | robust
    reference: str = "precomputed"  # precomputed | adapter-disabled


@dataclass
class DistillConfig:
    """Knowledge distillation (`lm_assets/training/distill.py`), with `objective="distill"`: the loss is
    alpha * T^2 * KL(teacher || student) at temperature T, plus (1 - alpha) times the next-token loss.
    `teacher` is a Hugging Face Llama folder of the data's tokenizer; the student takes its vocabulary.
    Its logits are computed `on-the-fly` each micro-batch, or once before the first step as each
    position's `top_k` largest (`top-k`, kept beside the checkpoints)."""

    teacher: str = ""  # a Hugging Face Llama folder of the data's tokenizer
    temperature: float = 2.0  # T, softening both distributions
    alpha: float = 0.5  # weight of the KL term; 1 - alpha weighs the next-token loss
    teacher_logits: str = "on-the-fly"  # on-the-fly | top-k
    top_k: int = 64  # logits kept per position with teacher_logits=top-k


@dataclass
class DebugConfig:
    """Fault injection for tests, and a profiled step."""

    profile_step: int | None = None  # record the kernels this 0-based step runs (torch.profiler), in the summary
    loss_scale: str = ""  # "step:factor,...": multiply the loss of 0-based step `step` by `factor` (nan allowed)
    fail_at_step: int | None = None  # raise before running this 0-based step ...
    fail_rank: int = 0  # ... on this global rank

    def loss_scales(self) -> dict[int, float]:
        out = {}
        for item in filter(None, (t.strip() for t in self.loss_scale.split(","))):
            step, sep, factor = item.partition(":")
            if not sep:
                raise ValueError(f"debug.loss_scale item {item!r} is not step:factor")
            out[int(step)] = float(factor)
        return out


@dataclass
class TrainConfig:
    data: str = ""  # a packed dataset directory (manifest.json + <split>.bin)
    tokenizer_model: str = ""  # the SentencePiece model, copied beside the HF export
    split: str = "train"  # the packed split trained on
    data_seed: int = 0  # the seed of the data order (not of the packing)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    model: str = "tiny"  # a preset of lm_assets.training.config.PRESETS
    init_from: str = ""  # a Hugging Face Llama folder: its architecture and weights replace the preset's
    run_asset: str = "training_run"  # the Dagster assets rank 0 reports the run and its checkpoints as, through Pipes
    checkpoint_asset: str = "checkpoint"  # the asset its checkpoints are reported as
    model_overrides: tuple[str, ...] = ()  # "field=value" applied to the preset's ModelConfig
    vocab_size: int | None = None  # default: from the data manifest
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    precision: str = "fp32"  # fp32 | bf16 | fp16
    fp16: LossScaleConfig = field(default_factory=LossScaleConfig)  # read with precision=fp16 only
    zero_stage: int = 0  # ZeRO 0-3: optimizer states, + gradients, + weights partitioned; at most 1 with pp > 1
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    micro_batch_size: int = 1  # sequences per rank per micro-step
    grad_accum: int = 1  # micro-steps per optimizer step; the global batch is their product times dp
    optim: OptimConfig = field(default_factory=OptimConfig)  # AdamW, linear warmup then cosine decay
    # recompute each block in the backward pass: less memory, about a third more compute
    activation_checkpointing: bool = False
    compile: bool | None = None  # torch.compile each transformer block; None: on for CUDA, off for CPU
    # torch.compile's mode: default | reduce-overhead (CUDA graphs: CUDA only) | max-autotune
    compile_mode: str = "default"
    document_mask: bool = True  # attend within documents only, positions restarting per document
    objective: str = "lm"  # lm: next-token loss (pretraining, SFT) | dpo: preference pairs | distill: a teacher's logits
    dpo: DpoConfig = field(default_factory=DpoConfig)  # read with objective=dpo only
    distill: DistillConfig = field(default_factory=DistillConfig)  # read with objective=distill only
    adapter: AdapterConfig = field(default_factory=AdapterConfig)
    kernels: KernelConfig = field(default_factory=KernelConfig)
    seed: int = 0  # the seed of the weights' initialization
    steps: int = 100  # the optimizer step the run ends at
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)  # where and how often checkpoints are saved
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    peak_flops: float | None = None  # peak FLOP/s of one device, for MFU
    log_every: int = 10  # a progress line every this many steps (lm_assets/training/monitor.py)
    spike: SpikeConfig = field(default_factory=SpikeConfig)  # a loss spike skips its step; too many in a row stop the run
    debug: DebugConfig = field(default_factory=DebugConfig)

    def validate(self, world_size: int | None = None) -> None:
        """Raise `ValueError` on an invalid or unsupported combination."""
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if self.precision == "fp16" and self.zero_stage == 0:
            raise ValueError(
                "fp16 with ZeRO stage 0 is refused: DeepSpeed 0.19.8 never scales the gradients there, "
                "so loss scaling is wrong; use zero_stage >= 1 or bf16"
            )
        self._validate_offload()
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode must be one of {COMPILE_MODES}, got {self.compile_mode!r}")
        if self.compile_mode != "default" and self.compile is False:
            raise ValueError(f"compile_mode={self.compile_mode} needs compile (it is off)")
        if self.loader.num_workers < 0 or self.loader.prefetch_steps < 1:
            raise ValueError("loader: need num_workers >= 0 and prefetch_steps >= 1")
        f = self.fp16
        if not 0 <= f.initial_scale_power <= 32 or f.loss_scale_window < 1 or f.hysteresis < 1 or not f.min_loss_scale > 0:
            raise ValueError("fp16: need 0 <= initial_scale_power <= 32, loss_scale_window >= 1, hysteresis >= 1 "
                             "and min_loss_scale > 0")
        p = self.parallel
        for name in ("pp", "tp"):
            if getattr(p, name) < 1:
                raise ValueError(f"parallel.{name} must be >= 1, got {getattr(p, name)}")
        if p.dp < 0:
            raise ValueError(f"parallel.dp must be >= 0 (0: inferred), got {p.dp}")
        if p.pp > 1 and self.zero_stage > 1:
            raise ValueError(
                f"ZeRO stage {self.zero_stage} with pipeline parallelism (pp={p.pp}) is refused: "
                "DeepSpeed's pipeline engine supports ZeRO stage 0 or 1; use zero_stage=1 or pp=1"
            )
        if world_size is not None:
            self.dims(world_size)
        if self.init_from and not (Path(self.init_from) / "config.json").exists():
            raise ValueError(f"init_from {self.init_from!r} holds no config.json (a Hugging Face Llama folder)")
        if self.model not in PRESETS:
            raise ValueError(f"unknown model preset {self.model!r}; choose from {sorted(PRESETS)}")
        for name in ("micro_batch_size", "grad_accum", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        o = self.optim
        if not o.lr > 0:
            raise ValueError(f"optim.lr must be positive, got {o.lr}")
        if not 0 <= o.min_lr_ratio <= 1:
            raise ValueError(f"optim.min_lr_ratio must lie in [0, 1], got {o.min_lr_ratio}")
        if o.warmup_steps < 0 or o.grad_clip < 0 or o.weight_decay < 0:
            raise ValueError("optim.warmup_steps, grad_clip and weight_decay must be >= 0")
        s = self.spike
        if s.k_sigma < 0 or s.window < 2 or s.max_consecutive < 1 or not 2 <= s.min_history <= s.window:
            raise ValueError(
                "spike: need k_sigma >= 0, window >= 2, 2 <= min_history <= window and max_consecutive >= 1"
            )
        c = self.checkpoint
        if c.save_every < 0:
            raise ValueError(f"checkpoint.save_every must be >= 0, got {c.save_every}")
        if c.save_every and not c.dir:
            raise ValueError("checkpoint.save_every needs checkpoint.dir")
        if self.peak_flops is not None and not self.peak_flops > 0:
            raise ValueError("peak_flops must be positive (FLOP/s of one device)")
        for op, choices in KERNEL_CHOICES.items():
            if getattr(self.kernels, op) not in ("auto", *choices):
                raise ValueError(f"kernels.{op}={getattr(self.kernels, op)!r}: choose one of {('auto', *choices)}")
        self.debug.loss_scales()
        self._validate_objective()

    def _validate_objective(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        a = self.adapter
        if a.type not in ADAPTER_TYPES:
            raise ValueError(f"adapter.type must be one of {ADAPTER_TYPES}, got {a.type!r}")
        if a.enabled:
            check_adapter_settings(a.rank, a.alpha, a.dropout, a.target_modules)
            if not self.init_from:
                raise ValueError("an adapter adapts a trained model: set init_from (a Hugging Face Llama folder)")
            if self.parallel.pp > 1:
                raise ValueError(f"adapter with pipeline parallelism (pp={self.parallel.pp}) is refused: adapters wrap "
                                 "the layers of the plain model; use pp=1 (tp, dp and ZeRO 0-2 are fine)")
            if self.zero_stage == 3:
                raise ValueError("adapter with ZeRO stage 3 is refused: adapter checkpoints hold the trained weights "
                                 "only, and ZeRO-3 partitions the frozen ones too; use zero_stage 0, 1 or 2")
        if self.objective == "distill":
            self._validate_distill()
        if self.objective != "dpo":
            return
        d = self.dpo
        check_loss_settings(d.beta, d.label_smoothing, d.loss_type)
        if d.reference not in DPO_REFERENCES:
            raise ValueError(f"dpo.reference must be one of {DPO_REFERENCES}, got {d.reference!r}")
        if d.reference == "adapter-disabled" and not a.enabled:
            raise ValueError("dpo.reference=adapter-disabled needs an adapter (adapter.type=lora); without one use "
                             "precomputed")
        if self.parallel.pp > 1:
            raise ValueError(
                f"objective=dpo with pipeline parallelism (pp={self.parallel.pp}) is refused: DPO's loss compares the "
                "two answers of each pair, and DeepSpeed's pipeline engine hands the last stage one loss per "
                "micro-batch, not the per-pair rewards the run reports; use pp=1 with tp, dp and ZeRO")

    def _validate_distill(self) -> None:
        d = self.distill
        if not d.teacher:
            raise ValueError("objective=distill needs distill.teacher (a Hugging Face Llama folder)")
        if not (Path(d.teacher) / "config.json").exists():
            raise ValueError(f"distill.teacher {d.teacher!r} holds no config.json (a Hugging Face Llama folder)")
        if not d.temperature > 0:
            raise ValueError(f"distill.temperature must be positive, got {d.temperature}")
        if not 0.0 <= d.alpha <= 1.0:
            raise ValueError(f"distill.alpha must lie in [0, 1], got {d.alpha}")
        if d.teacher_logits not in TEACHER_LOGITS:
            raise ValueError(f"distill.teacher_logits must be one of {TEACHER_LOGITS}, got {d.teacher_logits!r}")
        if d.top_k < 1:
            raise ValueError(f"distill.top_k must be at least 1, got {d.top_k}")
        if d.teacher_logits == "top-k" and not self.checkpoint.dir:
            raise ValueError("distill.teacher_logits=top-k keeps the teacher's logits beside the checkpoints: set "
                             "checkpoint.dir")
        if self.parallel.pp > 1:
            raise ValueError(
                f"objective=distill with pipeline parallelism (pp={self.parallel.pp}) is refused: DeepSpeed's pipeline "
                "engine computes the loss on the last stage from the targets alone, where the teacher's logits never "
                "reach; use pp=1 with tp, dp and ZeRO")

    def _validate_offload(self) -> None:
        o = self.offload
        for name in ("optimizer", "param"):
            if getattr(o, name) not in OFFLOAD_DEVICES:
                raise ValueError(f"offload.{name} must be one of {OFFLOAD_DEVICES}, got {getattr(o, name)!r}")
        if not o.enabled:
            return
        if self.parallel.pp > 1:
            raise ValueError(
                f"offload with pipeline parallelism (pp={self.parallel.pp}) is refused: DeepSpeed's pipeline engine "
                "runs ZeRO stage 0 or 1 only, and offloads under ZeRO-2 and ZeRO-3; use pp=1 (tp and dp are fine)"
            )
        if o.optimizer != "none" and self.zero_stage < 1:
            raise ValueError("offload.optimizer needs ZeRO stage 1, 2 or 3 (zero_stage >= 1)")
        if o.param != "none" and self.zero_stage != 3:
            raise ValueError(f"offload.param needs ZeRO stage 3 (it partitions the parameters), got zero_stage={self.zero_stage}")
        if "nvme" in (o.optimizer, o.param) and not o.nvme_path:
            raise ValueError("offload to nvme needs offload.nvme_path (a folder on the NVMe drive)")

    def dims(self, world_size: int) -> ParallelDims:
        return resolve_dims(self.parallel.pp, self.parallel.tp, self.parallel.dp, world_size)

    def model_config(self, vocab_size: int) -> ModelConfig:
        return apply_overrides(from_preset(self.model, vocab_size), self.model_overrides)


# ---------------------------------------------------------------------------------------------
# Command-line overrides
# ---------------------------------------------------------------------------------------------

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_NONE = {"none", "null"}


def _parse(text: str, tp: Any, where: str) -> Any:
    """`text` as a value of the annotated type `tp` (int, float, bool, str, Optional/Union, tuple/list)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and text.strip().lower() in _NONE:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _parse(text, arg, where)
            except (TypeError, ValueError) as err:
                errors.append(str(err))
        raise ValueError(f"{where}: cannot parse {text!r} as {tp}: {'; '.join(errors)}")
    if origin in (tuple, list):
        (item,) = {a for a in typing.get_args(tp) if a is not Ellipsis} or {str}
        items = [_parse(t.strip(), item, where) for t in text.split(",") if t.strip()]
        return origin(items)
    if tp is bool:
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"{where}: {text!r} is not a boolean")
    if tp is int:
        return int(text.replace("_", ""))
    if tp is float:
        return float(text.replace("_", ""))
    if tp is str or tp is Any:
        return text
    raise TypeError(f"{where}: cannot parse a value of type {tp} from the command line")


def override(cfg, assignment: str):
    """A copy of the dataclass `cfg` with one `"a.b=c"` assignment applied.

    The dotted path walks nested dataclass fields; the value is parsed as the field's declared
    type (`"none"` gives `None` for optional fields, commas separate tuple/list items). A field
    holding `None` whose type is a dataclass is filled with that dataclass's defaults first.
    Setting a `ModelConfig`'s `dim` or `multiple_of` re-derives `ffn_hidden` (as `from_preset`
    does); to set both, give `ffn_hidden` after `dim`.
    """
    key, sep, value = assignment.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {assignment!r} is not of the form key=value")
    return _set(cfg, key.strip().split("."), value.strip(), key.strip())


def apply_overrides(cfg, assignments):
    """`override` applied for each assignment in order."""
    for assignment in assignments:
        cfg = override(cfg, assignment)
    return cfg


def _set(obj, path: list[str], value: str, key: str):
    if not is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"{key}: {type(obj).__name__} is not a config dataclass")
    names = {f.name: f for f in fields(obj)}
    name = path[0]
    if name not in names:
        raise KeyError(f"{key}: {type(obj).__name__} has no field {name!r}; fields: {sorted(names)}")
    tp = typing.get_type_hints(type(obj))[name]
    if len(path) == 1:
        new = _parse(value, tp, key)
    else:
        child = getattr(obj, name)
        if child is None:
            child = _dataclass_in(tp, key)()
        new = _set(child, path[1:], value, key)
    if name in ("dim", "multiple_of") and "ffn_hidden" in names and isinstance(obj, ModelConfig):
        # The derived SwiGLU width follows dim unless it is set explicitly later.
        return replace(obj, **{name: new, "ffn_hidden": None})
    return replace(obj, **{name: new})


def _dataclass_in(tp, key: str):
    for arg in typing.get_args(tp) or (tp,):
        if is_dataclass(arg):
            return arg
    raise TypeError(f"{key}: field is not a config dataclass")


# ---------------------------------------------------------------------------------------------
# Loading and saving
# ---------------------------------------------------------------------------------------------


def _from_dict(cls, data: dict, where: str = ""):
    names = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise KeyError(f"{where or cls.__name__}: unknown keys {unknown}; fields: {sorted(names)}")
    kwargs = {}
    for name, value in data.items():
        default = getattr(cls(), name)
        if is_dataclass(default) and isinstance(value, dict):
            value = _from_dict(type(default), value, f"{where}{name}.")
        elif isinstance(default, tuple) and isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def config_from_dict(data: dict) -> TrainConfig:
    return _from_dict(TrainConfig, data)


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """A `TrainConfig` from a JSON or TOML file (or the defaults), then `a.b=value` overrides."""
    cfg = TrainConfig()
    if path is not None:
        text = Path(path).read_text()
        data = tomllib.loads(text) if str(path).endswith(".toml") else json.loads(text)
        cfg = config_from_dict(data)
    return apply_overrides(cfg, overrides)


def to_dict(cfg) -> dict:
    """A JSON-ready dict of a (nested) config dataclass."""
    return dataclasses.asdict(cfg)


__all__ = [
    "AdapterConfig",
    "CheckpointConfig",
    "DebugConfig",
    "DpoConfig",
    "KERNEL_CHOICES",
    "KernelConfig",
    "ModelConfig",
    "OptimConfig",
    "PRECISIONS",
    "PRESETS",
    "ParallelConfig",
    "ParallelDims",
    "SpikeConfig",
    "TrainConfig",
    "apply_overrides",
    "config_from_dict",
    "from_preset",
    "load_config",
    "override",
    "resolve_dims",
    "swiglu_hidden",
    "to_dict",
]
