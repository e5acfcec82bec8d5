"""The training loop: the DeepSpeed config a `TrainConfig` (`lm_assets.training.config`) generates, loss-spike
detection, and `Trainer`, which runs steps on a DeepSpeed engine and reports per-step metrics.

Config. `deepspeed_config(cfg, dp)` is the JSON handed to `deepspeed.initialize`; it is written
next to every checkpoint.

Steps. Step `s` (0-based) of a job with data-parallel size `dp`, micro-batch `m` and `g`
gradient-accumulation micro-steps reads micro-batch `i` of data-parallel rank `r` as
`PackedDataset.get_batch(s*g + i, r, dp, m)`: the global batch of step `s` is the `m*dp*g`
stream positions starting at `s*m*dp*g`, whatever the layout, so runs that differ only in
(pp, tp, dp, g) with the same `m*dp*g` see the same data (and, in fp32 with no padding, the same
losses up to float rounding). The loss of a step is the mean over its micro-batches and
data-parallel ranks of each micro-batch's mean token loss.

How a step computes. `kernels` (`lm_assets/training/kernels.py`) are resolved for the device and given to the model
and the loss when they are built; `compile` (default: on for CUDA, off for CPU) compiles every
transformer block's layer with `torch.compile` before `deepspeed.initialize`, so the pipeline
stages and tensor-parallel linears are compiled the same way; the optimizer is torch's AdamW
(`kernels.fused_adamw`: its fused kernel) handed to DeepSpeed, which wraps it for ZeRO and bf16.
With `document_mask` (the default) each micro-batch carries the document ids of its rows
(`kernels.document_ids`, from the EOS the packer puts after every document) and attention stays
within documents, positions restarting per document. `debug.profile_step` records the kernels one
step ran. `run_info()` says all of this for the run's metadata.

Learning rate: linear warmup from `lr/warmup_steps` to `lr` over `warmup_steps`, then cosine decay
to `lr * min_lr_ratio` at `steps` (a `LambdaLR`, stepped once per applied update).

Loss spikes. Before each optimizer update the step's global loss is checked against the window of
the last `spike.window` accepted losses: it is a spike if it is not finite, or (once
`spike.min_history` losses are in the window) if it exceeds `mean + k_sigma * std` (std floored
at `min_std_frac * mean`). A spike's update is skipped: the gradients are dropped, the optimizer
state, weights and learning-rate schedule are left as they were, the data moves on. Spikes are
logged and reported (`"skipped": true`); after `spike.max_consecutive` consecutive spikes training
stops with `LossSpikeError`.

How the skip works, for both engines. DeepSpeed applies an update in
`engine._take_model_step`, which the pipeline engine calls from its `OptimizerStep` instruction at
the end of the schedule (after every forward and backward of the step and the gradient
reduction), and the plain engine from `engine.step()` at the accumulation boundary. `Trainer`
wraps that method on its engine instance. The wrapper first gets the step's global loss: for the
pipeline engine it calls `engine._aggregate_total_loss()` (the last stage averages the
micro-batch losses over the data-parallel group and broadcasts them along the pipeline, the same
collective `train_batch` runs afterwards), for the plain engine the loop has already all-reduced
it. Every rank sees the same number and makes the same decision. On a spike it runs DeepSpeed's
own step with the torch optimizer's `step` and the scheduler's `step` replaced by no-ops: the
DeepSpeed wrapper (ZeRO 1/2/3, bf16, fp16, or none) does its usual bookkeeping (gradient norm,
clipping, zeroing and releasing gradient buffers, copying master weights, which did not change,
back to the model), but no parameter or optimizer moment moves. This costs nothing on normal
steps; a spike costs the wasted forward and backward only. (A NaN gradient therefore never
reaches the weights: the test injects one.)

Nothing here imports Dagster or lm_assets; `report(metrics)` is the one outlet (JSON lines on
stdout by default, dagster-pipes on rank 0 later).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import sys
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from lm_assets.training import kernels
from lm_assets.training.checkpoint import CheckpointManager, random_seed, run_layout
from lm_assets.training.config import SpikeConfig, TrainConfig, apply_overrides, to_dict
from lm_assets.training.data import PackedDataset, StepPrefetcher
from lm_assets.training.forensics import SpikeForensics
from lm_assets.training.model import cross_entropy

log = logging.getLogger("lm_assets.training")

# ---------------------------------------------------------------------------------------------
# DeepSpeed config and learning-rate schedule
# ---------------------------------------------------------------------------------------------


def deepspeed_config(cfg: TrainConfig, dp: int, hidden: int | None = None) -> dict:
    """The DeepSpeed JSON for `cfg` at data-parallel size `dp` (the optimizer, `adamw`, and the
    scheduler are ours, not in it). With ZeRO-3 and the model's `hidden` size, its buckets scale with
    the model as Hugging Face's `auto` values do (hidden² elements to reduce, 0.9 hidden² to prefetch,
    parameters under 10 hidden kept whole): DeepSpeed's defaults (5e8 and 5e7 elements) cost 2 GiB
    of fp32 buffer per rank whatever the model's size."""
    o = cfg.optim
    ds: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "train_batch_size": cfg.micro_batch_size * cfg.grad_accum * dp,
        "gradient_clipping": o.grad_clip,
        "steps_per_print": 2**31 - 1,  # the training loop reports; keep DeepSpeed quiet
        "wall_clock_breakdown": False,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": cfg.precision == "bf16"},
        "fp16": {"enabled": cfg.precision == "fp16"},
    }
    if cfg.zero_stage == 3 and hidden:
        ds["zero_optimization"].update({"reduce_bucket_size": hidden * hidden,
                                        "stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
                                        "stage3_param_persistence_threshold": 10 * hidden})  # fmt: skip
    for name, key in (("optimizer", "offload_optimizer"), ("param", "offload_param")):
        device = getattr(cfg.offload, name)
        if device != "none":
            ds["zero_optimization"][key] = {"device": device, "pin_memory": cfg.offload.pin_memory,
                                            **({"nvme_path": cfg.offload.nvme_path} if device == "nvme" else {})}
    if cfg.precision == "fp16":
        f = cfg.fp16  # loss_scale 0: dynamic
        ds["fp16"].update({"loss_scale": 0, "initial_scale_power": f.initial_scale_power,
                           "loss_scale_window": f.loss_scale_window, "hysteresis": f.hysteresis,
                           "min_loss_scale": f.min_loss_scale})  # fmt: skip
    return ds


def check_compile_mode(mode: str, compiled: bool, device_type: str) -> str:
    """The compile mode, refused where it cannot do what it says: `reduce-overhead` captures CUDA graphs,
    which exist on CUDA only."""
    if mode != "default" and not compiled:
        raise ValueError(f"compile_mode={mode} needs compile=true on {device_type} (compile is off there by default)")
    if mode == "reduce-overhead" and device_type != "cuda":
        raise ValueError(f"compile_mode=reduce-overhead captures CUDA graphs, which {device_type} has not; "
                         "use default or max-autotune")
    return mode


def adamw(groups: list[dict], cfg: TrainConfig) -> torch.optim.Optimizer:
    """torch's AdamW over the parameter `groups`; `kernels.fused_adamw` takes its fused kernel
    (one launch for every parameter; on CPU too). DeepSpeed wraps it for ZeRO and bf16. With the
    optimizer offloaded, DeepSpeed's CPU Adam (built on first use), which runs the step on the host."""
    o = cfg.optim
    if cfg.offload.optimizer != "none":
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return DeepSpeedCPUAdam(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay,
                                adamw_mode=True)
    return torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay,
                             fused=cfg.kernels.fused_adamw or None)  # fmt: skip


def lr_lambda(warmup_steps: int, total_steps: int, min_ratio: float) -> Callable[[int], float]:
    """Multiplier of the base lr at update `step` (0-based): linear warmup, then cosine decay."""

    def f(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


# ---------------------------------------------------------------------------------------------
# Loss-spike detection
# ---------------------------------------------------------------------------------------------


class LossSpikeError(RuntimeError):
    pass


class SpikeDetector:
    """k-sigma test of a loss against the window of recent accepted losses (see the module doc)."""

    def __init__(self, cfg: SpikeConfig):
        self.cfg = cfg
        self.history: deque[float] = deque(maxlen=cfg.window)
        self.consecutive = 0
        self.total = 0

    def check(self, loss: float) -> str | None:
        """Why `loss` is a spike, or None."""
        if not math.isfinite(loss):
            return f"non-finite loss {loss}"
        if self.cfg.k_sigma > 0 and len(self.history) >= self.cfg.min_history:
            mean = float(np.mean(self.history))
            std = max(float(np.std(self.history)), self.cfg.min_std_frac * abs(mean))
            limit = mean + self.cfg.k_sigma * std
            if loss > limit:
                return (f"loss {loss:.4f} > mean {mean:.4f} + {self.cfg.k_sigma:g} * std {std:.4f} = {limit:.4f} "
                        f"(window of {len(self.history)})")  # fmt: skip
        return None

    def record(self, loss: float, reason: str | None, step: int) -> None:
        """Account for step `step`'s outcome; raise after too many consecutive spikes."""
        if reason is None:
            self.history.append(loss)
            self.consecutive = 0
            return
        self.consecutive += 1
        self.total += 1
        if self.consecutive >= self.cfg.max_consecutive:
            raise LossSpikeError(
                f"{self.consecutive} consecutive loss spikes (spike.max_consecutive={self.cfg.max_consecutive}), "
                f"last at step {step}: {reason}; stopping"
            )

    def state_dict(self) -> dict:
        return {"history": list(self.history), "consecutive": self.consecutive, "total": self.total}

    def load_state_dict(self, state: dict) -> None:
        self.history = deque(state["history"], maxlen=self.cfg.window)
        self.consecutive = int(state["consecutive"])
        self.total = int(state["total"])


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def print_json(metrics: dict) -> None:
    """The default `report`: one JSON object per line on stdout."""
    sys.stdout.write(json.dumps(metrics, allow_nan=True) + "\n")
    sys.stdout.flush()


def _finite_or_none(x) -> float | None:
    return None if x is None else float(x)


# ---------------------------------------------------------------------------------------------
# Trainer
# ---------------------------------------------------------------------------------------------


@contextmanager
def _no_update(engine):
    """Within: the torch optimizer's and the LR scheduler's `step` do nothing."""
    inner = engine.basic_optimizer
    sched = engine.lr_scheduler
    inner.step = lambda *a, **k: None
    if sched is not None:
        sched.step = lambda *a, **k: None
    try:
        yield
    finally:
        del inner.step
        if sched is not None:
            del sched.step


def live_tensor_bytes() -> int:
    """Bytes of the distinct tensor storages alive in this process. Between steps that is the model
    states (weights, gradients, optimizer states, ZeRO's partitions and buffers): what
    `lm_assets.training.planner` estimates, measured on any device."""
    import gc

    storages: dict[int, int] = {}
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and not obj.is_meta:
                storage = obj.untyped_storage()
                storages[storage.data_ptr()] = max(storages.get(storage.data_ptr(), 0), storage.nbytes())
        except (RuntimeError, ReferenceError):  # a tensor without storage (sparse, a freed weak proxy)
            continue
    return sum(storages.values())


def validation_dataset(cfg: TrainConfig) -> PackedDataset | None:
    """The split validation losses are measured on; None when the packed data has none (or too few
    sequences for one micro-batch on every data-parallel rank, found later) or validation is off."""
    if cfg.validation.batches <= 0 or cfg.validation.split == cfg.split:
        return None
    try:
        dataset = PackedDataset(cfg.data, cfg.validation.split, seed=cfg.data_seed)
    except KeyError:
        return None
    return dataset if len(dataset) else None


def _dataset_vocab_size(manifest: dict) -> int | None:
    if "vocab_size" in manifest:
        return int(manifest["vocab_size"])
    for item in manifest.get("inputs", []):
        version = item.get("version") or {}
        if "vocab_size" in version:
            return int(version["vocab_size"])
    return None



class NextTokenObjective:
    """Pretraining's and fine-tuning's objective: the mean next-token cross-entropy, nothing added up beside it.
    DPO (`dpo.DpoObjective`) and distillation (`distill.DistillObjective`) answer the same two calls."""

    def __init__(self, kernel: kernels.Kernels):
        self.kernels = kernel

    def micro_batch_loss(self, logits: torch.Tensor, y: torch.Tensor, x, doc, rows_and_sides) -> tuple:
        return cross_entropy(logits, y, kernel=self.kernels), None

    def step_metrics(self, sums) -> dict[str, float]:
        return {}

class Trainer:
    """Runs `cfg` in this process (one rank of a job launched by torchrun or deepspeed).

    `report` gets each step's metrics on global rank 0. Call `train()`; it returns the list of
    reported metrics (rank 0) and leaves the process group up (the caller ends it).
    """

    def __init__(self, cfg: TrainConfig, report: Callable[[dict], None] = print_json):
        from deepspeed.runtime.pipe.engine import PipelineEngine

        from lm_assets.training.parallel import LossFn, setup_parallel

        cfg.validate()
        self.cfg = cfg
        self.report = report
        if not cfg.data:
            raise ValueError("no data: set data=<packed dataset directory>")
        dims = self._join_process_group()

        random_seed(cfg.seed)
        self.dataset = PackedDataset(cfg.data, cfg.split, seed=cfg.data_seed)
        self.val_dataset = validation_dataset(cfg)
        self.model_cfg = self._model_config()
        self.tokens_per_row = self.dataset.seq_len - 1
        if self.tokens_per_row > self.model_cfg.max_seq_len:
            raise ValueError(
                f"data rows of {self.tokens_per_row} tokens exceed max_seq_len {self.model_cfg.max_seq_len}"
            )
        device_type = self._choose_kernels()

        self.state = setup_parallel(dims)
        self.loss_fn = LossFn(cfg.debug.loss_scales(), self.kernels)
        self.engine = self._deepspeed_engine(self._build_model(dims), dims)
        self.pipeline = isinstance(self.engine, PipelineEngine)
        self.dims = dims
        self.dpo = self._dpo_objective(dims)
        self.distill = self._distill_objective(dims)
        self.objective = self.dpo or self.distill or NextTokenObjective(self.kernels)
        self._init_progress()
        self.forensics = None
        if cfg.checkpoint.dir:  # what a spiked step trained on: <checkpoint.dir>/spikes.jsonl
            self.forensics = SpikeForensics(cfg.checkpoint.dir, self.dataset, cfg.split, cfg.grad_accum, dims.dp,
                                            cfg.micro_batch_size, cfg.tokenizer_model or None)
        pin = self.cfg.loader.pin_memory
        self.pin_memory = device_type == "cuda" if pin is None else bool(pin) and device_type == "cuda"
        self._install_step_guard()
        self.checkpoints = self._checkpoint_manager()

    def _join_process_group(self):
        """Joins the job's process group; the layout (pp, tp, dp) of its world, checked against the config."""
        from lm_assets.training.parallel import init_distributed

        init_distributed()
        self.world = dist.get_world_size()
        self.rank = dist.get_rank()
        dims = self.cfg.dims(self.world)
        self.cfg.validate(self.world)
        return dims

    def _model_config(self):
        """The model's architecture: the preset's for the data's vocabulary, or the checkpoint's when continuing
        pretraining (`vocab_added`: the rows its vocabulary grows by), with the teacher's vocabulary when
        distilling."""
        cfg = self.cfg
        vocab = cfg.vocab_size or _dataset_vocab_size(self.dataset.manifest)
        if vocab is None:
            raise ValueError("vocab_size is not in the data manifest; set vocab_size=")
        if cfg.init_from:  # continued pretraining: the checkpoint's architecture, not the preset's
            from lm_assets.training.hf_init import model_config as hf_model_config
            from lm_assets.training.hf_init import model_vocabulary

            model_cfg = apply_overrides(hf_model_config(cfg.init_from), cfg.model_overrides)
            checkpoint_vocab = model_cfg.vocab_size
            model_cfg = replace(model_cfg, vocab_size=model_vocabulary(cfg.init_from, vocab, cfg.tokenizer_model))
            self.vocab_added = model_cfg.vocab_size - checkpoint_vocab
        else:
            model_cfg = cfg.model_config(vocab)
        if cfg.objective == "distill":  # the student speaks the teacher's vocabulary
            from lm_assets.training.export import read_hf_config

            teacher_vocab = read_hf_config(cfg.distill.teacher)["vocab_size"]
            if teacher_vocab < vocab or (cfg.init_from and model_cfg.vocab_size != teacher_vocab):
                raise ValueError(f"distill.teacher {cfg.distill.teacher} has a vocabulary of {teacher_vocab} pieces, "
                                 f"the student {model_cfg.vocab_size} and the data {vocab}: distill on data of the "
                                 "teacher's tokenizer")  # fmt: skip
            model_cfg = replace(model_cfg, vocab_size=teacher_vocab)
        return model_cfg

    def _choose_kernels(self) -> str:
        """The kernels, compilation and document masks this device runs with; the device type."""
        from deepspeed.accelerator import get_accelerator

        cfg = self.cfg
        device_type = get_accelerator().device_name()
        self.kernels = kernels.resolve(cfg.kernels, device_type, cfg.document_mask)
        self.compiled = device_type == "cuda" if cfg.compile is None else cfg.compile
        self.compile_mode = check_compile_mode(cfg.compile_mode, self.compiled, device_type)
        self.eos_id = self.dataset.manifest.get("eos_id") if cfg.document_mask else None
        if cfg.document_mask and self.eos_id is None:
            raise ValueError("document_mask needs the data manifest's eos_id; set document_mask=false")
        return device_type

    def _build_model(self, dims):
        """This rank's part of the model: built from the seed, or initialized from a Hugging Face checkpoint,
        with low-rank adapters if configured (`adapter_counts`), and its blocks compiled if `compiled`."""
        from lm_assets.training.model import compile_blocks
        from lm_assets.training.parallel import build_model

        cfg = self.cfg
        model = build_model(self.model_cfg, self.state, cfg.seed, self.loss_fn, cfg.activation_checkpointing, self.kernels)
        if cfg.init_from:
            from lm_assets.training import hf_init

            state = hf_init.extend_vocabulary(hf_init.weights(cfg.init_from), self.model_cfg.vocab_size)
            loaded = hf_init.load_into(model, state, self.model_cfg, dims.pp > 1, dims.tp, self.state.tp_rank)
            if self.rank == 0:
                log.info("initialized %d parameter tensors from %s, %d vocabulary rows added (mean of the rest)",
                         loaded, cfg.init_from, self.vocab_added)  # fmt: skip
        self.adapter_counts = None
        if cfg.adapter.enabled:
            from lm_assets.training.lora import LoRAConfig, apply_lora

            a = cfg.adapter
            self.adapter_counts = apply_lora(model, LoRAConfig(a.rank, a.alpha, a.dropout, list(a.target_modules)), cfg.seed)
        if self.compiled:
            compile_blocks(model, **({} if self.compile_mode == "default" else {"mode": self.compile_mode}))
        return model

    def _deepspeed_engine(self, model, dims):
        """The DeepSpeed engine over `model`: AdamW with weight decay on the matrices only, the warmup and
        cosine schedule, the config `deepspeed_config` generates (`ds_config`)."""
        import deepspeed

        cfg = self.cfg
        self.ds_config = deepspeed_config(cfg, dims.dp, self.model_cfg.dim)
        decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
        groups = [g for g in ({"params": decay}, {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
        schedule = lr_lambda(cfg.optim.warmup_steps, cfg.steps, cfg.optim.min_lr_ratio)
        engine, _, _, _ = deepspeed.initialize(
            model=model,
            optimizer=adamw(groups, cfg),
            config=self.ds_config,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule),
            mpu=self.state.mpu,
        )
        return engine

    def _dpo_objective(self, dims):
        """DPO's objective when `objective=dpo`, else None."""
        cfg = self.cfg
        if cfg.objective != "dpo":
            return None
        from lm_assets.training.dpo import DpoObjective

        if self.dataset.sides is None and len(self.dataset):
            raise ValueError(f"objective=dpo needs preference data (a pair to a row, with sides); {cfg.data} has none")
        dp_group = self.state.mpu.get_data_parallel_group() if self.state.mpu is not None else None
        return DpoObjective(cfg.dpo, self.engine.module, self.engine.device, self.state.dp_rank, dims.dp,
                            dp_group, cfg.micro_batch_size, self.eos_id, cfg.split)  # fmt: skip

    def _distill_objective(self, dims):
        """Distillation's objective when `objective=distill`, else None."""
        cfg = self.cfg
        if cfg.objective != "distill":
            return None
        from lm_assets.training.distill import DistillObjective

        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision, torch.float32)
        return DistillObjective(cfg.distill, self.engine.device, dtype, self.kernels, self.state.dp_rank,
                                dims.dp, cfg.micro_batch_size, self.eos_id, self.compiled)  # fmt: skip

    def _init_progress(self) -> None:
        """Where the run stands before its first step: counters, spike detection, the last metrics."""
        self._step_sums = None  # what the objective adds up over the last step's micro-batches
        self.dpo_val_start: dict | None = None  # DPO's validation figures before the first update
        self.spikes = SpikeDetector(self.cfg.spike)
        self.step = 0  # completed steps == the next step's index
        self.tokens_seen = 0
        self.started_at = 0
        self.last_metrics: dict = {}
        self.val_losses: list[tuple[int, float]] = []
        self._pending_loss: float | None = None
        self.profile: dict | None = None
        self._last: dict = {}
        self._last_skipped_steps = 0
        self._loader: StepPrefetcher | None = None

    def _checkpoint_manager(self) -> CheckpointManager | None:
        if not self.cfg.checkpoint.dir:
            return None
        return CheckpointManager(
            folder=self.cfg.checkpoint.dir,
            engine=self.engine,
            rank=self.rank,
            layout=run_layout(self.dims, self.world, self.model_cfg),
            train_config=to_dict(self.cfg),
            ds_config=self.ds_config,
            trained_only=self.cfg.adapter.enabled,
        )

    # -- data ----------------------------------------------------------------------------------

    def host_batches(self, step: int) -> list[tuple]:
        """`(inputs, doc_ids, targets, pairs)` of each micro-batch of `step`, in host memory (pinned when the
        loader pins); `doc_ids` is None without document masks, `pairs` None but for DPO, where it is the
        rows' indices and each target's side. Made by the loader's threads."""
        g = self.cfg.grad_accum
        out = []
        for i in range(g):
            rows = self.dataset.batch_indices(step * g + i, self.state.dp_rank, self.dims.dp, self.cfg.micro_batch_size)
            x, y, sides = self.dataset.rows(rows)
            doc = None if self.eos_id is None else kernels.document_ids(x, self.eos_id)
            if self.pin_memory:
                x, y, doc = x.pin_memory(), y.pin_memory(), doc.pin_memory() if doc is not None else None
            out.append((x, doc, y, (rows, sides) if self.dpo is not None or self.distill is not None else None))
        return out

    def micro_batches(self, step: int) -> tuple[list[tuple], float]:
        """The micro-batches of `step` on the device, and the seconds the step waited for them."""
        if self._loader is None or self._loader.next != step:
            if self._loader is not None:
                self._loader.close()
            loader = self.cfg.loader
            self._loader = StepPrefetcher(self.host_batches, step, loader.num_workers, loader.prefetch_steps)
        batches, waited = self._loader.get(step)
        device = self.engine.device
        move = lambda t: None if t is None else t.to(device, non_blocking=self.pin_memory)  # noqa: E731
        return [(move(x), move(doc), move(y), None if pairs is None else (pairs[0], move(pairs[1])))
                for x, doc, y, pairs in batches], waited

    def run_info(self) -> dict:
        """How this run computes: compilation, kernels, document masks, the profiled step's kernels
        and the accelerator's peak memory (the run's metadata)."""
        info = {"compiled": self.compiled, "compile_mode": self.compile_mode if self.compiled else None,
                "document_mask": self.cfg.document_mask,
                "kernels": self.kernels.to_dict() | {"fused_adamw": self.cfg.kernels.fused_adamw}}  # fmt: skip
        if self.profile is not None:
            info["profile"] = self.profile
        if self.cfg.init_from:
            info["init_from"] = {"folder": self.cfg.init_from, "vocab_size": self.model_cfg.vocab_size,
                                 "vocab_rows_added": self.vocab_added, "added_rows_init": "mean of the checkpoint's rows"}  # fmt: skip
        if self.engine.device.type == "cuda":
            info["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(self.engine.device) / 2**30, 2)
        if self.model_state_bytes is not None:
            info["model_state_bytes"] = self.model_state_bytes
        info["objective"] = self.cfg.objective
        if self.dpo is not None:
            info["dpo"] = to_dict(self.cfg.dpo)
        if self.distill is not None:
            info["distill"] = to_dict(self.cfg.distill) | self.distill.info()
        if self.adapter_counts is not None:
            from lm_assets.training.lora import optimizer_state_bytes

            counts = self.adapter_counts
            info["adapter"] = to_dict(self.cfg.adapter) | counts | {
                # AdamW's two fp32 moments and an fp32 gradient per trained parameter, against a full fine-tune's.
                "optimizer_state_bytes": optimizer_state_bytes(counts["trained_parameters"]),
                "optimizer_state_bytes_full": optimizer_state_bytes(counts["frozen_parameters"]),
                "memory_saved_bytes": optimizer_state_bytes(counts["frozen_parameters"] - counts["trained_parameters"], 12),
            }
        return info

    @property
    def tokens_per_step(self) -> int:
        return self.cfg.micro_batch_size * self.cfg.grad_accum * self.dims.dp * self.tokens_per_row

    # -- the update guard ----------------------------------------------------------------------

    def _install_step_guard(self) -> None:
        engine = self.engine
        self.model_state_bytes = None  # measured once, before an optimizer step that has states to update
        original = engine._take_model_step

        def guarded(lr_kwargs=None):
            if self.pipeline:
                loss = float(engine._aggregate_total_loss())
            else:
                loss = self._pending_loss
            reason = self.spikes.check(loss)
            norm = self._plain_grad_norm()
            if self.model_state_bytes is None and engine.global_steps >= 1:  # the optimizer's states exist
                self.model_state_bytes = live_tensor_bytes()
            if reason is None:
                original(lr_kwargs)
            else:
                with _no_update(engine):
                    original(lr_kwargs)
            if norm is None:
                norm = engine.get_global_grad_norm()
            self._last = {"loss": loss, "reason": reason, "grad_norm": _finite_or_none(norm)}

        engine._take_model_step = guarded

    def _plain_grad_norm(self) -> float | None:
        """The global gradient norm where DeepSpeed does not compute one (ZeRO-0 in fp32, whose
        gradients are still on the parameters, already averaged over data-parallel ranks): each
        weight counted once, summed over the tensor-parallel ranks and pipeline stages."""
        if self.cfg.zero_stage != 0 or self.cfg.precision != "fp32":
            return None
        tp_rank = self.state.tp_rank
        total = torch.zeros((), dtype=torch.float64, device=self.engine.device)
        for p in self.engine.module.parameters():
            if p.grad is not None and (tp_rank == 0 or getattr(p, "tensor_model_parallel", False)):
                total += p.grad.detach().double().pow(2).sum()
        group = self.engine.grid.get_model_parallel_group() if self.pipeline else self.state.tp_group
        if self.state.dims.pp * self.state.dims.tp > 1:
            dist.all_reduce(total, group=group)
        return float(total.sqrt())

    # -- one step ------------------------------------------------------------------------------

    def train_step(self) -> dict:
        step = self.step
        engine = self.engine
        if self.cfg.debug.fail_at_step == step and self.rank == self.cfg.debug.fail_rank:
            raise RuntimeError(f"injected failure before step {step} on rank {self.rank} (debug.fail_at_step)")
        self.loss_fn.step = step
        lr = float(engine.get_lr()[0])
        batches, data_wait = self.micro_batches(step)
        profiling = self.cfg.debug.profile_step == step
        profiler = kernels.step_profiler(engine.device) if profiling else contextlib.nullcontext()
        t0 = time.perf_counter()
        with profiler:
            self._run_step(batches)
        dt = time.perf_counter() - t0
        if profiling:
            self.profile = kernels.kernel_profile(profiler, step)
        metrics = self._after_step(step, lr, dt)
        metrics["data_wait_s"] = data_wait
        return metrics

    def _run_step(self, batches: list[tuple]) -> None:
        engine = self.engine
        if self.pipeline:
            engine.train_batch(iter(((x, doc) if doc is not None else x, y) for x, doc, y, _ in batches))
        else:
            losses, sums = [], None
            for i, (x, doc, y, rows_and_sides) in enumerate(batches):
                loss, parts = self.objective.micro_batch_loss(engine(x, doc), y, x, doc, rows_and_sides)
                loss = self.loss_fn.scaled(loss)
                if parts is not None:
                    sums = parts if sums is None else sums + parts
                engine.backward(loss)
                losses.append(loss.detach().float())
                if i < len(batches) - 1:
                    engine.step()
            mean = torch.stack(losses).mean()
            dp_group = self.state.mpu.get_data_parallel_group() if self.state.mpu is not None else None
            dist.all_reduce(mean, group=dp_group)
            if sums is not None and self.dims.dp > 1:
                dist.all_reduce(sums, group=dp_group)
            self._step_sums = sums
            self._pending_loss = float(mean) / self.dims.dp
            engine.step()

    def _after_step(self, step: int, lr: float, dt: float) -> dict:
        engine = self.engine
        last = self._last
        self.spikes.record(last["loss"], last["reason"], step)
        if last["reason"] is not None:
            log.warning("step %d: loss spike, update skipped: %s", step, last["reason"])
            if self.rank == 0 and self.forensics is not None:
                self.forensics.record(step, last["reason"], last["loss"])
        self.step += 1
        self.tokens_seen += self.tokens_per_step
        tokens_per_s = self.tokens_per_step / dt
        metrics = {
            "step": self.step,
            "loss": last["loss"],
            "lr": lr,
            "grad_norm": last["grad_norm"],
            "tokens_per_s": tokens_per_s,
            "mfu": self._mfu(tokens_per_s),
            "step_time_s": dt,
            "tokens": self.tokens_seen,
            "skipped": last["reason"] is not None,
        }
        if last["reason"] is not None:
            metrics["spike_reason"] = last["reason"]
        if self._step_sums is not None:
            metrics |= self.objective.step_metrics(self._step_sums)
        if self.cfg.precision == "fp16":
            scale = getattr(engine.optimizer, "cur_scale", None) or getattr(engine.optimizer, "loss_scale", None)
            metrics["loss_scale"] = _finite_or_none(scale)
            # DeepSpeed skips the update of a step whose gradients overflowed, and counts it.
            metrics["overflow_skipped_steps"] = int(engine.skipped_steps)
            metrics["overflow"] = engine.skipped_steps > self._last_skipped_steps
            self._last_skipped_steps = engine.skipped_steps
        return metrics

    def _mfu(self, tokens_per_s: float) -> float | None:
        if self.cfg.peak_flops is None:
            return None
        from lm_assets.training.model import mfu

        return mfu(self.model_cfg, self.tokens_per_row, tokens_per_s, self.cfg.peak_flops * self.world)

    # -- the run -------------------------------------------------------------------------------

    def trainer_state(self) -> dict:
        state = {"step": self.step, "tokens": self.tokens_seen, "spikes": self.spikes.state_dict()}
        return state | ({"dpo_val_start": self.dpo_val_start} if self.dpo_val_start is not None else {})

    def load_trainer_state(self, state: dict) -> None:
        self.step = int(state["step"])
        self.tokens_seen = int(state["tokens"])
        self.spikes.load_state_dict(state["spikes"])
        self.dpo_val_start = state.get("dpo_val_start")

    # -- DPO's reference -----------------------------------------------------------------------

    def dpo_val_rows(self) -> list[list[int]]:
        from lm_assets.training.dpo import validation_rows

        if self.val_dataset is None:
            return []
        return validation_rows(len(self.val_dataset), self.cfg.validation.batches, self.dims.dp, self.cfg.micro_batch_size)

    def prepare_reference(self, resumed: bool) -> None:
        """DPO's precomputed reference: read from `<checkpoint.dir>/reference/` when a run in this folder
        scored it, else scored now by the model the run starts from (refused after a resume: that model is gone)."""
        from lm_assets.training.dpo import IDENTITY_FILE, REFERENCE_FOLDER, ReferenceScores

        if self.cfg.dpo.reference != "precomputed":
            return
        val_split = self.val_dataset.split if self.val_dataset is not None else None
        datasets = {self.cfg.split: self.dataset} | ({val_split: self.val_dataset} if val_split else {})
        manifest = (self.dataset.path / "manifest.json").read_bytes()
        identity = {"data_manifest_sha256": hashlib.sha256(manifest).hexdigest(), "init_from": self.cfg.init_from,
                    "model": to_dict(self.model_cfg), "splits": {k: len(v) for k, v in datasets.items()},
                    "val_rows": self.dpo_val_rows()}  # fmt: skip
        val_positions = self.dpo.scored_positions(self.val_dataset, identity["val_rows"]) if val_split else {}
        folder = Path(self.cfg.checkpoint.dir) / REFERENCE_FOLDER if self.cfg.checkpoint.dir else None
        if folder is not None and (folder / IDENTITY_FILE).exists():
            self.dpo.reference = ReferenceScores.load(folder, identity, val_positions)
            return
        if resumed:
            raise RuntimeError(f"resumed at step {self.step}, but the reference scores the run started with are not in "
                               f"{folder}; without them DPO cannot continue exactly")
        started = time.perf_counter()
        self.dpo.reference = self.dpo.score_reference(datasets, val_split, self.dpo_val_rows())
        self.dpo.reference.check(identity["splits"], val_positions, self.model_cfg.vocab_size, "the starting model's scores")
        if folder is not None:
            if self.rank == 0:
                self.dpo.reference.save(folder, identity)
            dist.barrier()
        if self.rank == 0:
            log.info("scored the reference on %s pairs in %.1f s", identity["splits"], time.perf_counter() - started)

    def prepare_teacher_top_k(self, resumed: bool) -> None:
        """Distillation's top-k teacher logits of the training split, in `<checkpoint.dir>/teacher/`."""
        from lm_assets.training.distill import TEACHER_FOLDER

        manifest = (self.dataset.path / "manifest.json").read_bytes()
        teacher_config = (Path(self.cfg.distill.teacher) / "config.json").read_bytes()
        identity = {"data_manifest_sha256": hashlib.sha256(manifest).hexdigest(), "split": self.cfg.split,
                    "teacher": self.cfg.distill.teacher,
                    "teacher_config_sha256": hashlib.sha256(teacher_config).hexdigest()}  # fmt: skip
        started = time.perf_counter()
        self.distill.prepare_top_k(self.dataset, Path(self.cfg.checkpoint.dir) / TEACHER_FOLDER, identity, self.rank,
                                   resumed)  # fmt: skip
        if self.rank == 0:
            log.info("teacher's top-%d logits of %d rows ready in %.1f s (%d bytes)", self.cfg.distill.top_k,
                     len(self.dataset), time.perf_counter() - started, self.distill.table.nbytes)  # fmt: skip

    # -- validation ----------------------------------------------------------------------------

    def validating(self, saving: bool) -> bool:
        """Whether the step just completed gets a validation loss: a checkpoint's, the last, every `every`."""
        v = self.cfg.validation
        if self.val_dataset is None or self.validation_batches() == 0:
            return False
        return saving or self.step == self.cfg.steps or bool(v.every and self.step % v.every == 0)

    def validation_status(self) -> str | None:
        """Why no validation loss is measured, for the run's metadata; None when one is."""
        v = self.cfg.validation
        if v.batches <= 0:
            return "off: validation.batches=0"
        if v.split == self.cfg.split:
            return f"off: validation.split is the training split ({v.split!r})"
        if self.val_dataset is None:
            return f"none: the packed data has no {v.split!r} split with sequences"
        if self.validation_batches() == 0:
            return (f"none: the {v.split!r} split holds fewer than one micro-batch ({self.cfg.micro_batch_size}) per "
                    f"data-parallel rank ({self.dims.dp})")
        return None

    def validation_batches(self) -> int:
        if self.dpo is not None:  # DPO reads every held-back pair, in micro-batches the last of which may be short
            return len(self.dpo_val_rows())
        per_batch = self.dims.dp * self.cfg.micro_batch_size
        return min(self.cfg.validation.batches, len(self.val_dataset) // per_batch)

    def validation_figures(self) -> dict:
        """The validation loss (`val_loss`), and for DPO its reward and KL figures (`val_*`)."""
        if self.dpo is not None:
            return self.dpo.validate(self.val_dataset, self.dpo_val_rows())
        return {"val_loss": self.validation_loss()}

    @torch.no_grad()
    def validation_loss(self) -> float:
        """Mean loss over the first micro-batches of the validation split (the same ones every time), on
        every rank; the engine is back in training mode after."""
        n = self.validation_batches()
        device = self.engine.device
        batches = []
        for i in range(n):
            x, y = self.val_dataset.get_batch(i, self.state.dp_rank, self.dims.dp, self.cfg.micro_batch_size)
            doc = None if self.eos_id is None else kernels.document_ids(x, self.eos_id)
            batches.append((x.to(device), None if doc is None else doc.to(device), y.to(device)))
        scaled_step, self.loss_fn.step = self.loss_fn.step, None  # injected loss spikes are for training steps
        try:
            if self.pipeline:
                loss = self.engine.eval_batch(
                    iter(((x, doc) if doc is not None else x, y) for x, doc, y in batches), num_micro_batches=n
                )
                value = float(loss)
            else:
                self.engine.eval()
                losses = torch.stack([self.loss_fn(self.engine(x, doc), y).float() for x, doc, y in batches]).mean()
                dp_group = self.state.mpu.get_data_parallel_group() if self.state.mpu is not None else None
                dist.all_reduce(losses, group=dp_group)
                value = float(losses) / self.dims.dp
        finally:
            self.engine.train()
            self.loss_fn.step = scaled_step
        return value

    def save(self) -> None:
        self.checkpoints.save(self.step, self.trainer_state(), self.last_metrics)

    def train_from_checkpoint(self) -> int:
        """Train to `cfg.steps`, resuming from the latest checkpoint; returns the step it started at."""
        self.train()
        return self.started_at

    def train(self) -> list[dict]:
        c = self.cfg.checkpoint
        if c.dir and c.resume:
            state = self.checkpoints.resume()
            if state is not None:
                self.load_trainer_state(state)
                if self.rank == 0:
                    log.info("resumed from %s at step %d", c.dir, self.step)
        if self.dpo is not None:
            self.prepare_reference(resumed=self.step > 0)
            if self.dpo_val_start is None and self.val_dataset is not None and self.dpo_val_rows():
                self.dpo_val_start = self.dpo.validate(self.val_dataset, self.dpo_val_rows())  # before any update
        if self.distill is not None and self.cfg.distill.teacher_logits == "top-k":
            self.prepare_teacher_top_k(resumed=self.step > 0)
        reported = []
        self.started_at = self.step
        self._last_skipped_steps = getattr(self.engine, "skipped_steps", 0)  # a resume restores DeepSpeed's count
        last_saved = self.step if (c.dir and c.resume) else None
        while self.step < self.cfg.steps:
            metrics = self.train_step()
            saving = bool(c.dir and c.save_every and self.step % c.save_every == 0)
            if self.validating(saving):
                metrics |= self.validation_figures()
                self.val_losses.append((self.step, metrics["val_loss"]))
            self.last_metrics = metrics
            if self.rank == 0:
                self.report(metrics)
                reported.append(metrics)
            if saving:
                self.save()
                last_saved = self.step
        if c.dir and last_saved != self.step:
            self.save()
        if self._loader is not None:
            self._loader.close()
            self._loader = None
        return reported


__all__ = [
    "LossSpikeError",
    "SpikeDetector",
    "Trainer",
    "deepspeed_config",
    "lr_lambda",
    "print_json",
]
