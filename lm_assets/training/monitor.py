"""Watching a run: rank 0's per-step metrics as TensorBoard event files, a progress line every few
steps, averages over the run, and a PNG of the loss and learning-rate curves.

`RunMonitor(folder, total_steps, warmup_steps, log_every)` takes each step's metrics (`step`,
`loss`, `lr`, `grad_norm`, `tokens_per_s`, `step_time_s`, `mfu`, and with fp16 `loss_scale` and
`overflow_skipped_steps`); `summary()` gives the run's
averages with the warm-up steps left out (they carry compilation and allocator warm-up, not the
steady pace), `plot(path)` writes the curves (with the validation losses of the steps that have one)
and `write_steps(path)` every step's metrics as JSON lines. Event files go to `folder` (TensorBoard's
`SummaryWriter`, read with `tensorboard --logdir <folder>`); without a folder nothing is written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

SCALARS = ("loss", "lr", "grad_norm", "tokens_per_s", "step_time_s", "data_wait_s", "mfu", "loss_scale",
           "overflow_skipped_steps",
           # DPO's (lm_assets/training/dpo.py)
           "reward_accuracy", "reward_margin", "chosen_reward", "rejected_reward", "chosen_logp", "rejected_logp")
NO_PEAK_FLOPS = ("n/a: no peak FLOP/s known for this device; set `peak_flops` in training_run's config (the Launchpad, "
                 "or `peak_flops=` on the command line), per device: H100 SXM and H200 989e12, A100 312e12 (dense bf16)")


class RunMonitor:
    def __init__(self, folder: str | Path | None, total_steps: int, warmup_steps: int = 0, log_every: int = 10,
                 print_line=print):
        self.folder = Path(folder) if folder else None
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.log_every = max(1, log_every)
        self.print_line = print_line
        self.history: list[dict] = []
        self._started = time.perf_counter()
        self._writer = None
        if self.folder is not None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.folder))

    def step(self, metrics: dict) -> None:
        self.history.append(metrics)
        if self._writer is not None:
            for name in SCALARS:
                if metrics.get(name) is not None:
                    self._writer.add_scalar(f"train/{name}", metrics[name], metrics["step"])
        if self._writer is not None:
            for name, value in metrics.items():
                if name.startswith("val_") and value is not None:  # val_loss, and DPO's val_reward_accuracy, val_kl, ...
                    self._writer.add_scalar(f"val/{name[4:]}", value, metrics["step"])
        step = metrics["step"]
        if step % self.log_every == 0 or step == self.total_steps or len(self.history) == 1:
            self.print_line(self.progress_line(metrics))

    def progress_line(self, metrics: dict) -> str:
        step, done = metrics["step"], len(self.history)
        elapsed = time.perf_counter() - self._started
        eta = elapsed / done * (self.total_steps - step) if done else 0.0
        val = f"  val_loss {metrics['val_loss']:.4f}" if metrics.get("val_loss") is not None else ""
        if metrics.get("reward_accuracy") is not None:
            val += f"  reward acc {metrics['reward_accuracy']:.2f} margin {metrics['reward_margin']:.3f}"
        if metrics.get("val_reward_accuracy") is not None:
            val += f"  val reward acc {metrics['val_reward_accuracy']:.2f} kl {metrics['val_kl']:.4f}"
        return (f"step {step}/{self.total_steps}  loss {metrics['loss']:.4f}{val}  "
                f"tokens/s {metrics['tokens_per_s']:,.0f}  eta {eta:.0f} s")

    def summary(self) -> dict:
        """Averages over the steps after warm-up (all steps when the run had no others)."""
        steady = [m for m in self.history if m["step"] > self.warmup_steps] or self.history
        mean = lambda name: sum(m[name] for m in steady) / len(steady) if steady else None  # noqa: E731
        mfus = [m["mfu"] for m in steady if m.get("mfu") is not None]
        waits = [m["data_wait_s"] for m in steady if m.get("data_wait_s") is not None]
        return {
            "tokens_per_s_mean": mean("tokens_per_s"),
            "step_time_s_mean": mean("step_time_s"),
            # What the steps waited for their batches (the loader's threads make them ahead).
            "data_wait_s_mean": sum(waits) / len(waits) if waits else None,
            "steps_averaged": len(steady),
            "warmup_steps_left_out": len(self.history) - len(steady),
            "mfu_mean": sum(mfus) / len(mfus) if mfus else NO_PEAK_FLOPS,
            # The first step of this process: with compile, mostly compilation.
            "first_step_s": self.history[0]["step_time_s"] if self.history else None,
            **self.loss_scale_summary(),
            **self.distill_summary(steady),
        }

    def distill_summary(self, steady: list[dict]) -> dict:
        """Distillation's KL and next-token loss at the last step, and the seconds a step spent in the teacher."""
        if not self.history or "distill_kl" not in self.history[-1]:
            return {}
        last = self.history[-1]
        return {"distill_kl": last["distill_kl"], "distill_ce": last["distill_ce"],
                "teacher_s_mean": sum(m.get("teacher_s", 0.0) for m in steady) / len(steady)}  # fmt: skip

    def loss_scale_summary(self) -> dict:
        """fp16's loss scale at the end and the steps skipped for overflowing gradients (none without fp16)."""
        scaled = [m for m in self.history if m.get("loss_scale") is not None]
        if not scaled:
            return {}
        return {"loss_scale_last": scaled[-1]["loss_scale"], "loss_scale_min": min(m["loss_scale"] for m in scaled),
                "overflow_skipped_steps": sum(bool(m.get("overflow")) for m in self.history)}

    def plot(self, path: str | Path) -> Path | None:
        """The loss and lr curves as a PNG; None when the run had no steps."""
        if not self.history:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        steps = [m["step"] for m in self.history]
        figure, (loss_axes, lr_axes) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
        loss_axes.plot(steps, [m["loss"] for m in self.history], color="tab:blue", label="train")
        validated = [m for m in self.history if m.get("val_loss") is not None]
        if validated:
            loss_axes.plot([m["step"] for m in validated], [m["val_loss"] for m in validated], "o-",
                           color="tab:red", label="validation")
            loss_axes.legend()
        loss_axes.set_ylabel("loss")
        loss_axes.grid(alpha=0.3)
        lr_axes.plot(steps, [m["lr"] for m in self.history], color="tab:orange")
        lr_axes.set_ylabel("learning rate")
        lr_axes.set_xlabel("step")
        lr_axes.grid(alpha=0.3)
        figure.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path

    def write_steps(self, path: str | Path) -> Path:
        """Every step's metrics as JSON lines (what the curves are drawn from)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(m) + "\n" for m in self.history))
        return path

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
