"""Parallelism for the training program: the (pp, tp, dp) layout, its process groups,
Megatron-style tensor-parallel linears, and building the model for the layout.

Layout. `lm_assets.training.config.ParallelDims(pp, tp, dp)` with `pp * tp * dp == world size`. Ranks are
laid out by DeepSpeed's `PipeModelDataParallelTopology` (axes `pipe, data, model`, the model axis
varying fastest), so the ranks of a tensor-parallel group are adjacent (one node, in practice).

Tensor parallelism (Megatron-LM, Shoeybi et al. 2019). In each block, q/k/v and gate/up are
`ColumnParallelLinear` (output features split: each rank holds `n_heads / tp` query heads,
`n_kv_heads / tp` key/value heads and `ffn_hidden / tp` MLP columns) and o/down are
`RowParallelLinear` (input features split, partial outputs summed with one all-reduce). So a
block costs two all-reduces forward (after o_proj and down_proj) and two backward (where the
replicated input enters the column-parallel linears). The embedding, the norms and the output
head stay replicated: their gradients are identical on the ranks of a group because every
gradient that reaches them has already been summed. Sharded weights carry
`tensor_model_parallel = True`, which DeepSpeed reads to count them once per shard (and the
replicated ones once per group) in the global gradient norm. Initialization draws the full matrix
from the seed (`lm_assets.training.model` keys every weight by its name) and each rank keeps its slice, so
any layout starts from the same weights as a single process.

Model. With `pp > 1` the model is a `deepspeed.pipe.PipelineModule` of `LayerSpec`s
`[EmbeddingPipe, BlockPipe x n_layers, HeadPipe]` with the loss as `loss_fn`, blocks split evenly
across stages (`partition_method="type:BlockPipe"`); each stage builds only its own layers. With
`pp == 1` it is a plain `lm_assets.training.model.Transformer` (its state dict is the export layout), which
the ordinary DeepSpeed engine trains with any ZeRO stage. With document masks the pipeline carries
`(hidden, doc_ids, positions)` between stages (integer tensors get no gradient); each stage builds
the attention mask of a micro-batch once, from `doc_ids`, for all its blocks.

Nothing here imports Dagster or lm_assets.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as torch_dist
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from lm_assets.training import kernels
from lm_assets.training.config import ModelConfig, ParallelDims
from lm_assets.training.kernels import Kernels
from lm_assets.training.model import EAGER, Block, Embedding, Head, Transformer, cross_entropy, default_linear

# ---------------------------------------------------------------------------------------------
# Process groups
# ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(timeout_s: float = 600.0) -> None:
    """Join the job started by `torchrun` or the `deepspeed` launcher (a lone process without
    either becomes a job of one). On the CPU accelerator the backend is gloo."""
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        if os.environ["WORLD_SIZE"] != "1":
            raise RuntimeError("MASTER_PORT is not set; launch with torchrun or deepspeed")
        os.environ["MASTER_PORT"] = str(_free_port())
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    from lm_assets.training.accelerator import use_training_accelerator

    use_training_accelerator()

    backend = "gloo" if get_accelerator().device_name() == "cpu" else None
    deepspeed.init_distributed(dist_backend=backend, timeout=datetime.timedelta(seconds=timeout_s))


@dataclass
class ParallelState:
    """This rank's place in the layout and the groups it needs."""

    dims: ParallelDims
    rank: int
    topology: object  # deepspeed.runtime.pipe.topology.PipeModelDataParallelTopology
    tp_group: object | None  # None when tp == 1
    mpu: object | None  # a PipelineParallelGrid for the plain engine when tp > 1, else None

    @property
    def coord(self):
        return self.topology.get_coord(self.rank)

    @property
    def pp_rank(self) -> int:
        return self.coord.pipe

    @property
    def dp_rank(self) -> int:
        return self.coord.data

    @property
    def tp_rank(self) -> int:
        return self.coord.model


def setup_parallel(dims: ParallelDims) -> ParallelState:
    """Create the topology and the tensor-parallel groups (before any layer is built).

    Every rank creates every group, in the same order, as `torch.distributed.new_group` requires.
    """
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology, PipelineParallelGrid

    world, rank = torch_dist.get_world_size(), torch_dist.get_rank()
    dims.validate(world)
    topo = PipeModelDataParallelTopology(num_pp=dims.pp, num_mp=dims.tp, num_dp=dims.dp)
    tp_group = None
    if dims.tp > 1:
        for ranks in topo.get_axis_comm_lists("model"):
            group = torch_dist.new_group(ranks=ranks)
            if rank in ranks:
                tp_group = group
    # The pipeline engine builds its own grid; the plain engine needs one as `mpu` to reduce
    # gradients over the data axis only and to count tensor-parallel shards in the grad norm.
    mpu = PipelineParallelGrid(topology=topo) if dims.pp == 1 and dims.tp > 1 else None
    return ParallelState(dims=dims, rank=rank, topology=topo, tp_group=tp_group, mpu=mpu)


# ---------------------------------------------------------------------------------------------
# Tensor-parallel collectives and linears
# ---------------------------------------------------------------------------------------------


class _CopyToTP(torch.autograd.Function):
    """Identity forward; all-reduce of the gradient backward (where a replicated input enters
    column-parallel linears)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        torch_dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """All-reduce forward (summing row-parallel partial outputs); identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous().clone()
        torch_dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromTP(torch.autograd.Function):
    """All-gather along the last dimension forward; keep this rank's slice backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        world = torch_dist.get_world_size(group)
        parts = [torch.empty_like(x) for _ in range(world)]
        torch_dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        world = torch_dist.get_world_size(ctx.group)
        rank = torch_dist.get_rank(ctx.group)
        return grad.chunk(world, dim=-1)[rank].contiguous(), None


def copy_to_tp(x: torch.Tensor, group) -> torch.Tensor:
    return _CopyToTP.apply(x, group)


def reduce_from_tp(x: torch.Tensor, group) -> torch.Tensor:
    return _ReduceFromTP.apply(x, group)


def gather_from_tp(x: torch.Tensor, group) -> torch.Tensor:
    return _GatherFromTP.apply(x, group)


class ColumnParallelLinear(nn.Module):
    """`y = x A^T` with A's rows (output features) split across the group: this rank holds
    `A[r*out/tp : (r+1)*out/tp]` and produces that slice of y (or the whole y if `gather_output`)."""

    def __init__(self, in_features: int, out_features: int, group, gather_output: bool = False):
        super().__init__()
        self.group = group
        self.tp = torch_dist.get_world_size(group)
        self.tp_rank = torch_dist.get_rank(group)
        if out_features % self.tp:
            raise ValueError(f"out_features {out_features} not divisible by tensor parallel degree {self.tp}")
        self.in_features, self.out_features = in_features, out_features
        self.gather_output = gather_output
        self.weight = nn.Parameter(torch.empty(out_features // self.tp, in_features))
        self.weight.tensor_model_parallel = True
        self.weight.partition_dim = 0

    @torch.no_grad()
    def load_full_weight(self, full: torch.Tensor) -> None:
        self.weight.copy_(full.chunk(self.tp, dim=0)[self.tp_rank])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(copy_to_tp(x, self.group), self.weight)
        return gather_from_tp(y, self.group) if self.gather_output else y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features // self.tp} (of {self.out_features})"


class RowParallelLinear(nn.Module):
    """`y = x A^T` with A's columns (input features) split across the group; the input arrives
    already split (the output of a column-parallel linear) and the partial products are summed."""

    def __init__(self, in_features: int, out_features: int, group):
        super().__init__()
        self.group = group
        self.tp = torch_dist.get_world_size(group)
        self.tp_rank = torch_dist.get_rank(group)
        if in_features % self.tp:
            raise ValueError(f"in_features {in_features} not divisible by tensor parallel degree {self.tp}")
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features // self.tp))
        self.weight.tensor_model_parallel = True
        self.weight.partition_dim = 1

    @torch.no_grad()
    def load_full_weight(self, full: torch.Tensor) -> None:
        self.weight.copy_(full.chunk(self.tp, dim=1)[self.tp_rank])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return reduce_from_tp(F.linear(x, self.weight), self.group)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features // self.tp} (of {self.in_features}), out_features={self.out_features}"


def tp_linear_factory(group):
    """A `lm_assets.training.model.LinearFactory` giving column/row-parallel linears over `group`
    (plain `nn.Linear` when there is no group)."""
    if group is None:
        return default_linear

    def factory(in_features: int, out_features: int, style: str) -> nn.Module:
        if style == "column":
            return ColumnParallelLinear(in_features, out_features, group)
        if style == "row":
            return RowParallelLinear(in_features, out_features, group)
        raise ValueError(f"unknown linear style {style!r}")

    return factory


# ---------------------------------------------------------------------------------------------
# Pipeline layers and the model
# ---------------------------------------------------------------------------------------------


class EmbeddingPipe(Embedding):
    """Pipeline input: ids, or `(ids, doc_ids)` with document masks; passes `(h, doc_ids,
    positions)` on so that every stage can build the mask of its micro-batch."""

    def __init__(self, cfg: ModelConfig, seed: int):
        super().__init__(cfg)
        with torch.no_grad():
            self.init_weights(seed)

    def forward(self, inputs):
        if isinstance(inputs, torch.Tensor):
            return super().forward(inputs)
        ids, doc_ids = inputs
        return super().forward(ids), doc_ids, kernels.document_positions(doc_ids)


class BlockPipe(Block):
    def __init__(self, cfg: ModelConfig, layer_id: int, seed: int, tp_group=None, masks=None, kernel: Kernels = EAGER):
        super().__init__(cfg, layer_id, tp_linear_factory(tp_group), kernel)
        self.masks = masks
        with torch.no_grad():
            self.init_weights(seed)

    def forward(self, inputs):
        if isinstance(inputs, torch.Tensor):
            return self.run(inputs, None, None)
        h, doc_ids, positions = inputs
        return self.run(h, positions, self.masks(doc_ids)), doc_ids, positions


class HeadPipe(Head):
    def __init__(self, cfg: ModelConfig, seed: int, kernel: Kernels = EAGER):
        super().__init__(cfg, kernel)
        with torch.no_grad():
            self.init_weights(seed)

    def forward(self, inputs):
        return super().forward(inputs if isinstance(inputs, torch.Tensor) else inputs[0])


class LossFn:
    """Mean next-token cross-entropy, times an optional per-step factor (`scales[step]`) that
    tests use to inject a loss spike. `step` is set by the training loop before each step."""

    def __init__(self, scales: dict[int, float] | None = None, kernel: Kernels = EAGER):
        self.scales = dict(scales or {})
        self.kernels = kernel
        self.step = 0

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.scaled(cross_entropy(logits, targets, kernel=self.kernels))

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        """`loss` times this step's injected factor, if any (any objective's loss)."""
        scale = self.scales.get(self.step)
        return loss if scale is None else loss * scale


def pipeline_layer_name(index: int, n_layers: int) -> str:
    """The `Transformer` state-dict prefix of pipeline layer `index` (0: embedding, last: head)."""
    if index == 0:
        return "embed."
    if index == n_layers + 1:
        return "head."
    return f"layers.{index - 1}."


def _checkpoint_blocks(model: Transformer) -> None:
    """Recompute each block's activations in backward (the module tree and state dict unchanged)."""
    for layer in model.layers:
        layer.forward = partial(torch_checkpoint, layer.forward, use_reentrant=False)


def build_model(
    cfg: ModelConfig, state: ParallelState, seed: int, loss_fn: LossFn, activation_checkpointing: bool = False,
    kernel: Kernels = EAGER,
) -> nn.Module:
    """The model for this rank, its ops on `kernel`: a `PipelineModule` when pp > 1, else a `Transformer`
    (with tensor-parallel linears when tp > 1). Both initialize identically from `seed`."""
    state.dims.check_model(cfg)
    if state.dims.pp == 1:
        model = Transformer(cfg, seed=seed, linear_factory=tp_linear_factory(state.tp_group), kernels=kernel)
        if activation_checkpointing:
            _checkpoint_blocks(model)
        return model

    from deepspeed.pipe import LayerSpec, PipelineModule

    masks = kernels.DocumentMaskCache(kernel.attention)  # shared by this stage's blocks
    specs = [
        LayerSpec(EmbeddingPipe, cfg, seed),
        *(LayerSpec(BlockPipe, cfg, i, seed, state.tp_group, masks, kernel) for i in range(cfg.n_layers)),
        LayerSpec(HeadPipe, cfg, seed, kernel),
    ]
    module = PipelineModule(
        layers=specs,
        topology=state.topology,
        loss_fn=loss_fn,
        partition_method="type:BlockPipe",
        activation_checkpoint_interval=1 if activation_checkpointing else 0,
        checkpointable_layers=["BlockPipe"],
    )
    # DeepSpeed counts a parameter in the global gradient norm when it is tensor-parallel or
    # its rank is 0 in the `mpu`'s model-parallel group. The ZeRO and bf16 optimizers take that
    # rank from the tensor-parallel axis, but the fp32 ZeRO-0 clipping (`runtime.utils.
    # clip_grad_norm_`) takes it from the pipeline grid's model-parallel group, which spans all
    # stages: only the first stage's replicated weights would count. Marking the replicated
    # weights of tensor-parallel rank 0 as model-parallel makes every path count each weight once.
    if state.tp_rank == 0:
        for p in module.parameters():
            if not getattr(p, "tensor_model_parallel", False):
                p.model_parallel = True
    return module


__all__ = [
    "BlockPipe",
    "ColumnParallelLinear",
    "EmbeddingPipe",
    "HeadPipe",
    "LossFn",
    "ParallelState",
    "RowParallelLinear",
    "build_model",
    "copy_to_tp",
    "gather_from_tp",
    "init_distributed",
    "pipeline_layer_name",
    "reduce_from_tp",
    "setup_parallel",
    "tp_linear_factory",
]
