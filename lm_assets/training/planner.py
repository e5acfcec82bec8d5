"""Which (dp, tp, pp, ZeRO stage, offload, activation checkpointing) to train a model with, from an
estimate of each layout's memory per GPU.

Per GPU, for the busiest pipeline stage (its share of the layers, plus the embedding on the first and
the output head on the last):
- model states, bytes per parameter held, with Adam: mixed precision (bf16/fp16) keeps 16-bit weights
  and gradients beside fp32 master weights, fp32 gradients and two fp32 moments (2 + 2 + 4 + 4 + 8 =
  20); ZeRO-1 divides the fp32 optimizer part (16) by dp, ZeRO-2 the gradients too (2 + 18 / dp), ZeRO-3
  everything (18 / dp, plus one gathered layer in fp32), as DeepSpeed's own estimators count them
  (`estimate_zero2_model_states_mem_needs`, `estimate_zero3_model_states_mem_needs`); offloading the
  optimizer leaves the 16-bit weights on the GPU (ZeRO-3: one gathered layer, and with the parameters
  offloaded too, only that). fp32 training: 4-byte weights and gradients, and two moments (8) that
  ZeRO-0 keeps on the weights themselves; with ZeRO 1-3 DeepSpeed's optimizer also keeps an fp32
  copy of its partition (4 more, divided by dp), as measured on CPU runs (`tests/training/test_planner.py`).
- activations of one micro-batch and layer: `s * b * h * (10 + 24 / tp)` bytes (Korthikanti et al.,
  2022, with attention that keeps no score matrix: SDPA, flash); with activation checkpointing a
  layer keeps only its 16-bit input (`2 * s * b * h`) and one layer is recomputed at a time. The first
  pipeline stage holds `min(pp, grad_accum)` micro-batches in flight (1F1B). The last stage also holds
  the fp32 logits of a micro-batch, `4 * s * b * vocab / tp`.
- with low-rank adapters (`Tuning.adapter_params`), only the adapters carry gradients and Adam's states:
  the frozen base holds its weights alone (2 bytes in mixed precision, 4 in fp32; ZeRO-3 divides them
  by dp), the adapters the full per-parameter cost above.
- for DPO with a reference model held beside the trained one (`Tuning.reference="held"`), a frozen
  copy of the weights (2 or 4 bytes per parameter, ZeRO-3: divided by dp); with the reference's
  log-probabilities precomputed, or with adapters (the base with the adapter disabled is the
  reference), nothing more.
- a fixed reserve for the CUDA context, kernels' workspaces and fragmentation (`RESERVE_GIB`); a layout
  fits when the sum is within `HEADROOM` of the GPU's memory.

Layouts are ranked by what they cost in speed, cheapest first: nothing offloaded, no recomputation,
then the least model parallelism (tensor parallel within a node, where its all-reduces stay on
NVLink; pipeline across nodes), then the lowest ZeRO stage that fits (ZeRO-1 before ZeRO-0: it
partitions the optimizer states at no extra communication). Data parallelism takes the rest.

Nothing here imports torch, Dagster or lm_assets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

GIB = 2**30
RESERVE_GIB = 2.0
HEADROOM = 0.9  # a layout fits when its estimate is within this share of the GPU's memory


@dataclass(frozen=True)
class ModelShape:
    params: float
    layers: int
    hidden: int
    heads: int
    vocab: int = 32_000
    ffn_hidden: int | None = None

    @property
    def embedding_params(self) -> float:
        return self.vocab * self.hidden

    @property
    def layer_params(self) -> float:
        """One transformer block's parameters, from the total less the embedding and the output head."""
        return max(0.0, (self.params - 2 * self.embedding_params) / self.layers)


LORA_LAYER_SHAPES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Tuning:
    """What is trained beside the layout: adapters of `adapter_params` parameters in all (None: every
    weight trains), and DPO's reference model: "none" (not DPO, or its log-probabilities precomputed)
    or "held" (a frozen copy in memory)."""

    adapter_params: float | None = None
    reference: str = "none"

    def __post_init__(self):
        if self.reference not in ("none", "held"):
            raise ValueError(f"reference must be 'none' or 'held', got {self.reference!r}")


def lora_params(shape: ModelShape, rank: int, targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")) -> float:
    """Parameters of rank-`rank` adapters on `targets` of every layer: rank * (in + out) each (k and v
    counted full width: an upper bound under grouped-query attention)."""
    h, f = shape.hidden, shape.ffn_hidden or 4 * shape.hidden
    sizes = {"q_proj": 2 * h, "k_proj": 2 * h, "v_proj": 2 * h, "o_proj": 2 * h, "gate_proj": h + f, "up_proj": h + f,
             "down_proj": h + f}
    unknown = sorted(set(targets) - sizes.keys())
    if unknown:
        raise ValueError(f"unknown adapter targets {unknown}; choose from {list(LORA_LAYER_SHAPES)}")
    return shape.layers * rank * sum(sizes[t] for t in targets)


@dataclass(frozen=True)
class Layout:
    dp: int
    tp: int
    pp: int
    zero_stage: int
    offload_optimizer: bool = False
    offload_param: bool = False
    activation_checkpointing: bool = False

    def describe(self) -> str:
        parts = [f"dp={self.dp} tp={self.tp} pp={self.pp} ZeRO-{self.zero_stage}"]
        if self.offload_optimizer or self.offload_param:
            parts.append("offload " + "+".join(n for n, on in (("optimizer", self.offload_optimizer),
                                                                ("param", self.offload_param)) if on))
        if self.activation_checkpointing:
            parts.append("activation checkpointing")
        return ", ".join(parts)


@dataclass(frozen=True)
class Estimate:
    layout: Layout
    model_states_gib: float
    activations_gib: float
    total_gib: float
    fits: bool


def model_state_bytes_per_param(zero_stage: int, dp: int, mixed: bool, offload_optimizer: bool, offload_param: bool) -> float:
    """Bytes a GPU holds per parameter of its model-parallel share (the gathered ZeRO-3 layer apart)."""
    if not mixed:  # fp32 weights, gradients and two moments (ZeRO 1-3: and the partition's fp32 copy)
        weights, grads, optimizer = 4.0, 4.0, 8.0 if zero_stage == 0 else 12.0
        if offload_optimizer:
            optimizer = 0.0
        if zero_stage >= 3:
            return (0.0 if offload_param else weights / dp) + grads / dp + optimizer / dp
        if zero_stage == 2:
            return weights + grads / dp + optimizer / dp
        return weights + grads + (optimizer / dp if zero_stage == 1 else optimizer)
    if zero_stage >= 3:
        if offload_param:
            return 0.0
        return 2.0 / dp if offload_optimizer else 18.0 / dp
    if offload_optimizer:
        return 2.0
    if zero_stage == 2:
        return 2.0 + 18.0 / dp
    if zero_stage == 1:
        return 4.0 + 16.0 / dp
    return 20.0


def estimate(shape: ModelShape, layout: Layout, seq: int, micro_batch: int, grad_accum: int, gpu_memory_gib: float,
             mixed: bool = True, tuning: Tuning = Tuning()) -> Estimate:
    """Memory per GPU of `layout` on its busiest pipeline stage."""
    t, p = layout.tp, layout.pp
    stage_layers = -(-shape.layers // p)
    stage_params = stage_layers * shape.layer_params + shape.embedding_params * (2 if p == 1 else 1)
    local = stage_params / t
    per_param = model_state_bytes_per_param(layout.zero_stage, layout.dp, mixed, layout.offload_optimizer,
                                            layout.offload_param)
    weight_bytes = 2.0 if mixed else 4.0
    frozen_bytes = 0.0 if layout.offload_param else weight_bytes / (layout.dp if layout.zero_stage >= 3 else 1)
    if tuning.adapter_params is None:
        states = local * per_param
    else:  # the base frozen: its weights only; the adapters (this stage's share) train
        states = local * frozen_bytes + tuning.adapter_params * stage_layers / shape.layers / t * per_param
    if tuning.reference == "held" and tuning.adapter_params is None:
        states += local * frozen_bytes
    if layout.zero_stage == 3:
        states += 4 * shape.layer_params / t  # one layer gathered in fp32
    s, b, h = seq, micro_batch, shape.hidden
    full_layer = s * b * h * (10 + 24 / t)
    in_flight = min(p, grad_accum)
    if layout.activation_checkpointing:
        activations = in_flight * stage_layers * 2 * s * b * h + full_layer
    else:
        activations = in_flight * stage_layers * full_layer
    activations += 4 * s * b * shape.vocab / t
    total = (states + activations) / GIB + RESERVE_GIB
    return Estimate(layout, states / GIB, activations / GIB, total, total <= HEADROOM * gpu_memory_gib)


def layouts(shape: ModelShape, gpus: int, gpus_per_node: int) -> list[Layout]:
    """Every layout the training program runs: dp * tp * pp = gpus, tp within a node dividing the heads,
    pp dividing the layers, ZeRO 0-1 with pipeline parallelism (2-3 without), offload only without it."""
    out = []
    for tp in (d for d in range(1, gpus_per_node + 1) if gpus_per_node % d == 0 and gpus % d == 0 and shape.heads % d == 0):
        for pp in (d for d in range(1, shape.layers + 1) if shape.layers % d == 0 and (gpus // tp) % d == 0):
            dp = gpus // (tp * pp)
            for zero in ((0, 1) if pp > 1 else (0, 1, 2, 3)):
                offloads = [(False, False)] if pp > 1 else [(False, False), (True, False)] + ([(True, True)] if zero == 3 else [])
                for optimizer, param in offloads:
                    if optimizer and zero == 0:
                        continue
                    for ckpt in (False, True):
                        out.append(Layout(dp, tp, pp, zero, optimizer, param, ckpt))
    return out


def cost(layout: Layout) -> tuple:
    """What a layout costs in speed, for ranking (lower first)."""
    zero_order = {1: 0, 0: 1, 2: 2, 3: 3}
    return (layout.offload_param, layout.offload_optimizer, layout.activation_checkpointing,
            layout.tp * layout.pp, layout.pp, zero_order[layout.zero_stage])


def plan(shape: ModelShape, gpus: int, gpu_memory_gib: float, seq: int, micro_batch: int = 1, grad_accum: int = 8,
         gpus_per_node: int = 8, mixed: bool = True, tuning: Tuning = Tuning()) -> list[Estimate]:
    """Every layout's estimate, those that fit first, cheapest first."""
    estimates = [estimate(shape, layout, seq, micro_batch, grad_accum, gpu_memory_gib, mixed, tuning)
                 for layout in layouts(shape, gpus, gpus_per_node)]
    return sorted(estimates, key=lambda e: (not e.fits, cost(e.layout), e.total_gib))


def reason(best: Estimate, gpus_per_node: int) -> str:
    layout = best.layout
    why = []
    why.append(f"tensor parallel tp={layout.tp} within a node of {gpus_per_node} GPUs, where its all-reduces stay on "
               "NVLink" if layout.tp > 1 else "no tensor parallelism: the model's share fits without it")
    why.append(f"pipeline pp={layout.pp} across nodes, point-to-point only" if layout.pp > 1 else "no pipeline: no bubble")
    why.append(f"data parallel dp={layout.dp} for the rest, ZeRO-{layout.zero_stage}"
               + (" partitioning the optimizer states at no extra communication" if layout.zero_stage == 1 else ""))
    if layout.activation_checkpointing:
        why.append("activation checkpointing: without it the activations do not fit")
    if layout.offload_optimizer:
        why.append("the optimizer offloaded to the host: nothing else fits")
    return "; ".join(why) + f". Estimated {best.total_gib:.1f} GiB per GPU (model states {best.model_states_gib:.1f}, " \
        f"activations {best.activations_gib:.1f}, reserve {RESERVE_GIB:.0f})."


def training_run_config(best: Estimate, micro_batch: int, grad_accum: int) -> dict:
    """The recommended layout as `training_run`'s config (Dagster run config `ops.training_run.config`)."""
    layout = best.layout
    overrides = []
    if layout.activation_checkpointing:
        overrides.append("activation_checkpointing=true")
    if layout.offload_optimizer:
        overrides.append("offload.optimizer=cpu")
    if layout.offload_param:
        overrides.append("offload.param=cpu")
    return {"pp": layout.pp, "tp": layout.tp, "dp": layout.dp, "zero_stage": layout.zero_stage, "precision": "bf16",
            "micro_batch_size": micro_batch, "grad_accum": grad_accum, "overrides": overrides}


def as_row(e: Estimate) -> dict:
    return {**asdict(e.layout), "model_states_gib": round(e.model_states_gib, 2), "activations_gib": round(e.activations_gib, 2),
            "total_gib": round(e.total_gib, 2), "fits": e.fits}
