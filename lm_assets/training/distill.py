"""Knowledge distillation in the training loop: a student learns from a teacher checkpoint's logits.

The loss of a micro-batch, over the positions whose target is not PAD, is

    alpha * T^2 * KL(teacher_T || student_T) + (1 - alpha) * CE(student, targets)

where `_T` is the softmax at temperature T (Hinton et al. 2015: the T^2 keeps the soft term's gradient
on the scale of the hard one's as T changes). The teacher is a Hugging Face Llama folder of the same
tokenizer (`distill.teacher`); the student's vocabulary is the teacher's.

The teacher's logits come in one of two ways (`distill.teacher_logits`):

- `on-the-fly`: the teacher is built beside the student on each rank (not partitioned: tensor-parallel
  and ZeRO ranks each hold all of it, in the run's precision) and runs without gradients on every
  micro-batch. Costs: the teacher's weights in device memory, and one teacher forward per micro-batch
  (the metric `teacher_s`, seconds a step spent in it). Every logit is used.
- `top-k`: before the first step the teacher scores every row of the training split once and keeps,
  at each position, its `top_k` largest logits (float16) and their ids (int32), in
  `<checkpoint.dir>/teacher/` beside the checkpoints (`values.bin`, `ids.bin`, and `identity.json`:
  what they were computed for and their sha256). Costs: one teacher pass over the split before
  training (`teacher_scoring_s`), and rows x positions x top_k x 6 bytes of disk, read by memory map
  (a 1B-token split at top_k=64 is 384 GB). Steps then hold no teacher. The KL is that of the teacher
  renormalized over its top k against the student's full distribution read at those ids: the student's
  cross-entropy against the truncated teacher, less the teacher's entropy (a constant).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from lm_assets.training.config import DistillConfig
from lm_assets.training.model import IGNORE_INDEX
from lm_assets.training.primitives import atomic_path

TEACHER_FOLDER = "teacher"
VALUES_FILE, IDS_FILE, IDENTITY_FILE = "values.bin", "ids.bin", "identity.json"


def distill_loss(student_logits: torch.Tensor, targets: torch.Tensor, teacher_logits: torch.Tensor,
                 temperature: float, alpha: float, teacher_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The distillation loss of `student_logits [..., V]` against `targets [...]`, and its parts
    `[kl, ce, positions]` (float64 sums over the kept positions, for reporting).

    `teacher_logits` is `[..., V]` (every logit), or with `teacher_ids` `[..., k]` logits of the ids
    `teacher_ids [..., k]` (the teacher's top k). Positions whose target is `IGNORE_INDEX` count in neither
    term; both are means over the kept positions."""
    keep = targets != IGNORE_INDEX
    count = keep.sum()
    s = student_logits.float()[keep] / temperature  # [N, V]
    t = teacher_logits.float()[keep] / temperature  # [N, V] or [N, k]
    log_q = torch.log_softmax(s, dim=-1)
    if teacher_ids is not None:
        log_q = log_q.gather(-1, teacher_ids[keep].long())
    log_p = torch.log_softmax(t, dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum()
    ce = F.cross_entropy(student_logits.float()[keep], targets[keep], reduction="sum")
    n = count.clamp_min(1)
    loss = alpha * temperature**2 * kl / n + (1 - alpha) * ce / n
    parts = torch.stack([kl.detach().double(), ce.detach().double(), count.double()])
    return loss, parts


def parts_dict(parts: torch.Tensor, prefix: str = "") -> dict[str, float]:
    """`distill_kl` and `distill_ce`, means per kept position, from summed `distill_loss` parts."""
    n = max(float(parts[2]), 1.0)
    return {f"{prefix}distill_kl": float(parts[0]) / n, f"{prefix}distill_ce": float(parts[1]) / n}


def load_teacher(folder: str, device: torch.device, dtype: torch.dtype, kernel, compiled: bool = False) -> torch.nn.Module:
    """The teacher in `folder` (a Hugging Face Llama folder), as our `Transformer` on `device` in `dtype`, in
    eval mode, with no parameter requiring a gradient; each block compiled as the student's are, when they are."""
    from lm_assets.training import hf_init
    from lm_assets.training.model import Transformer, compile_blocks

    cfg = hf_init.model_config(folder)
    model = Transformer(cfg, seed=None, kernels=kernel)
    hf_init.load_into(model, hf_init.weights(folder), cfg, pipeline=False, tp=1, tp_rank=0)
    model.to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    if compiled:
        compile_blocks(model)
    return model


class TeacherTopK:
    """The teacher's `top_k` largest logits and their ids at every position of every row of a split,
    memory-mapped from `folder`."""

    def __init__(self, folder: Path, rows: int, positions: int, top_k: int, mode: str = "r"):
        shape = (rows, positions, top_k)
        self.folder = folder
        self.values = np.memmap(folder / VALUES_FILE, dtype=np.float16, mode=mode, shape=shape)
        self.ids = np.memmap(folder / IDS_FILE, dtype=np.int32, mode=mode, shape=shape)

    @property
    def nbytes(self) -> int:
        return self.values.nbytes + self.ids.nbytes

    def rows(self, rows, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        index = np.asarray(rows, dtype=np.int64)
        values = torch.from_numpy(np.ascontiguousarray(self.values[index]))
        ids = torch.from_numpy(np.ascontiguousarray(self.ids[index]))
        return values.to(device), ids.to(device)

    def digests(self) -> dict[str, str]:
        out = {}
        for name in (VALUES_FILE, IDS_FILE):
            h = hashlib.sha256()
            with open(self.folder / name, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 24), b""):
                    h.update(chunk)
            out[name] = h.hexdigest()
        return out


class DistillObjective:
    """Distillation's loss and figures for `Trainer` (`lm_assets.training.engine`)."""

    def __init__(self, cfg: DistillConfig, device: torch.device, dtype: torch.dtype, kernel, dp_rank: int, dp: int,
                 micro_batch_size: int, eos_id: int | None, compiled: bool = False):  # fmt: skip
        self.cfg = cfg
        self.device = device
        self.dp_rank, self.dp = dp_rank, dp
        self.micro_batch_size = micro_batch_size
        self.eos_id = eos_id
        self.teacher = load_teacher(cfg.teacher, device, dtype, kernel, compiled)
        self.teacher_parameters = sum(p.numel() for p in self.teacher.parameters())
        self.vocab_size = self.teacher.cfg.vocab_size
        self.table: TeacherTopK | None = None
        self.scoring_s: float | None = None
        self.teacher_s = 0.0  # seconds in teacher forwards since the last `take_teacher_seconds`

    def info(self) -> dict:
        out = {"teacher_parameters": self.teacher_parameters}
        if self.table is not None:
            out |= {"topk_bytes": self.table.nbytes, "teacher_scoring_s": self.scoring_s}
        return out

    def take_teacher_seconds(self) -> float:
        spent, self.teacher_s = self.teacher_s, 0.0
        return spent

    @torch.no_grad()
    def teacher_logits(self, x: torch.Tensor, doc: torch.Tensor | None) -> torch.Tensor:
        started = time.perf_counter()
        logits = self.teacher(x, doc)
        self.teacher_s += time.perf_counter() - started
        return logits

    def micro_batch_loss(self, logits: torch.Tensor, y: torch.Tensor, x, doc, rows_and_sides) -> tuple:
        """The objective's loss of a training micro-batch and the figures it adds up (`Trainer`'s interface)."""
        return self.loss(logits, y, x, doc, rows_and_sides[0])

    def step_metrics(self, parts: torch.Tensor) -> dict[str, float]:
        """A step's figures from its micro-batches' summed loss parts, and the teacher's seconds."""
        return parts_dict(parts) | {"teacher_s": self.take_teacher_seconds()}

    def loss(self, logits: torch.Tensor, y: torch.Tensor, x: torch.Tensor, doc: torch.Tensor | None, rows):
        """The loss of one micro-batch (rows `rows` of the training split) and its parts."""
        c = self.cfg
        if self.table is not None:
            values, ids = self.table.rows(rows, logits.device)
            return distill_loss(logits, y, values, c.temperature, c.alpha, ids)
        return distill_loss(logits, y, self.teacher_logits(x, doc), c.temperature, c.alpha)

    # -- top-k ---------------------------------------------------------------------------------

    def prepare_top_k(self, dataset, folder: Path | None, identity: dict, rank: int, resumed: bool) -> None:
        """The top-k table of `dataset`: read from `folder` when a run there computed it for `identity`,
        else scored now (each data-parallel rank a share of the rows, written into one file) and the
        teacher dropped from memory."""
        from lm_assets.training import kernels

        if folder is None:
            raise ValueError("distill.teacher_logits=top-k keeps the teacher's logits beside the checkpoints: set "
                             "checkpoint.dir")  # fmt: skip
        x0, _, _ = dataset.rows([0])
        shape = (len(dataset), x0.shape[1], self.cfg.top_k)
        identity = identity | {"shape": list(shape)}
        record = folder / IDENTITY_FILE
        if record.exists():
            saved = json.loads(record.read_text())
            digests = saved.pop("sha256", None) if isinstance(saved, dict) else None
            if saved != identity:
                raise ValueError(f"the teacher's logits in {folder} were computed for {saved}, this run is {identity}; "
                                 "they cannot serve it (start the run in a new checkpoint folder)")  # fmt: skip
            self.table = TeacherTopK(folder, *shape)
            if self.table.digests() != digests:
                raise ValueError(f"the teacher's logits in {folder} are not the files the run saved (their sha256 "
                                 f"differ from {record}'s)")  # fmt: skip
        else:
            if resumed:
                raise RuntimeError(f"resumed, but the teacher's logits the run started with are not in {folder}")
            started = time.perf_counter()
            if rank == 0:
                folder.mkdir(parents=True, exist_ok=True)
                TeacherTopK(folder, *shape, mode="w+")  # sized, zero-filled
            dist.barrier()
            table = TeacherTopK(folder, *shape, mode="r+")
            mine = list(range(self.dp_rank, len(dataset), self.dp))
            with torch.no_grad():
                for start in range(0, len(mine), self.micro_batch_size):
                    rows = mine[start : start + self.micro_batch_size]
                    x, _, _ = dataset.rows(rows)
                    doc = None if self.eos_id is None else kernels.document_ids(x, self.eos_id)
                    logits = self.teacher(x.to(self.device), None if doc is None else doc.to(self.device))
                    top = logits.float().topk(self.cfg.top_k, dim=-1)
                    table.values[rows] = top.values.half().cpu().numpy()
                    table.ids[rows] = top.indices.int().cpu().numpy()
            table.values.flush()
            table.ids.flush()
            del table
            dist.barrier()
            self.table = TeacherTopK(folder, *shape)
            if not np.isfinite(self.table.values).all():  # before the record: a resume trusts what it records
                raise ValueError(f"the teacher's logits in {folder} hold values that are not finite")
            if rank == 0:
                with atomic_path(record) as tmp:
                    tmp.write_text(json.dumps(identity | {"sha256": self.table.digests()}, indent=2, sort_keys=True) + "\n")
            dist.barrier()
            self.scoring_s = time.perf_counter() - started
        self.teacher = None  # the steps read the table; the teacher's memory is freed
