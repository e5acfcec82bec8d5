"""Step time of our DeepSpeed training engine against a plain-torch loop, on CPU, same tiny model and batch.

Usage::

    .venv/bin/python bench/train_cpu.py [--vocab 32000] [--micro-batch 8] [--steps 30] [--warmup 5] [--smoke]

It prints figures; it checks nothing. In one process (`DS_ACCELERATOR=cpu`, `OMP_NUM_THREADS=1`,
one torch thread), on a synthetic packed dataset written to a temporary folder (uniform random ids,
rows of 129 tokens, so 128-token inputs: the `tiny` preset's context), it times one training step of:

- plain torch: `lm_assets.training.model.Transformer` (the `tiny` preset, seed 0), `cross_entropy`,
  torch's fused AdamW (the engine's default) with the same decay / no-decay groups and hyperparameters, the same
  warmup-cosine `LambdaLR`, `clip_grad_norm_` at `optim.grad_clip` (1.0), `zero_grad`, and the loss
  read back as a float (`benchlib.training.PlainLoop`, fp32);
- our engine: `lm_assets.training.engine.Trainer.train_step()` on a job of one process (the plain DeepSpeed
  engine, fp32, `document_mask=false` like the plain loop), once with ZeRO stage 0 and once with stage 1. `init_distributed` skips the shm
  JIT build as always. `spike.k_sigma=0`, so every step applies its update (the spike check still
  runs; only its k-sigma test is off).

Every side draws the batch of step `s` with `PackedDataset.get_batch(s, 0, 1, micro_batch)` inside
its timed step, so both pay for the same data loading. After `--warmup` steps each, the sides take
turns in rounds of `--round` steps until each has `--steps` timed steps, so drift in the machine's
load hits all of them alike. Each step is timed with `time.perf_counter()`; the figures are
medians. The ratio is engine / plain step time (goal: at most 1.3). The losses of the engine's
steps are compared with plain torch's at the same step (same weights, data and optimizer: they
agree up to float rounding).

`--smoke` runs in seconds: vocabulary 300, micro batch 2, one warm-up and two timed steps per side.

The last line printed is one JSON object holding every figure.
"""

from __future__ import annotations

import os

os.environ["DS_ACCELERATOR"] = "cpu"
os.environ["OMP_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from benchlib.training import PlainLoop, write_synthetic_packed  # noqa: E402

from lm_assets.training.data import PackedDataset  # noqa: E402
from lm_assets.training.config import SpikeConfig, TrainConfig  # noqa: E402

GOAL = 1.3
SEQ_LEN = 129  # rows of 129 tokens: 128-token inputs, the tiny preset's max_seq_len


class PlainSide:
    name = "plain torch"

    def __init__(self, cfg: TrainConfig, vocab: int):
        self.loop = PlainLoop(cfg, vocab, "cpu", "fp32", fused=cfg.kernels.fused_adamw)
        self.ds = PackedDataset(cfg.data, cfg.split, seed=cfg.data_seed)
        self.mbs = cfg.micro_batch_size
        self.step = 0

    def run_step(self) -> float:
        x, y = self.ds.get_batch(self.step, 0, 1, self.mbs)
        loss = float(self.loop.step(x, y))
        self.step += 1
        return loss


class EngineSide:
    def __init__(self, cfg: TrainConfig):
        from lm_assets.training.engine import Trainer

        self.trainer = Trainer(cfg, report=lambda metrics: None)
        self.name = f"deepspeed ZeRO-{cfg.zero_stage}"
        self.engine_step_s: list[float] = []

    def run_step(self) -> float:
        metrics = self.trainer.train_step()
        self.engine_step_s.append(metrics["step_time_s"])
        return metrics["loss"]


def quiet() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    from deepspeed.utils import logger

    logger.setLevel(logging.WARNING)
    logging.getLogger("lm_assets.training").setLevel(logging.WARNING)


def measure(sides: dict, warmup: int, steps: int, per_round: int) -> tuple[dict, dict]:
    times = {k: [] for k in sides}
    losses = {k: [] for k in sides}

    def one(key):
        t0 = time.perf_counter()
        loss = sides[key].run_step()
        dt = time.perf_counter() - t0
        losses[key].append(loss)
        return dt

    for key in sides:
        for _ in range(warmup):
            one(key)
    while min(len(t) for t in times.values()) < steps:
        for key in sides:
            for _ in range(min(per_round, steps - len(times[key]))):
                times[key].append(one(key))
    return times, losses


def print_table(rows: dict, base: str) -> None:
    header = f"{'path':<22} {'steps':>5} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'tokens/s':>10} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for key, r in rows.items():
        ratio = "" if key == base else f"{r['ratio_over_plain']:.3f}"
        print(
            f"{r['name']:<22} {r['steps']:>5} {r['median_ms']:>10.2f} {r['min_ms']:>8.2f} {r['max_ms']:>8.2f} "
            f"{r['tokens_per_s']:>10,.0f} {ratio:>7}"
        )
    print(f"ratio: median step time over plain torch's (goal <= {GOAL})")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary size (32000: 4.19M parameters)")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per step (8)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per side (30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per side first (5)")
    p.add_argument("--round", type=int, default=5, help="steps a side runs before the next takes its turn (5)")
    p.add_argument("--zero", default="0,1", help="ZeRO stages of the engine to time (0,1)")
    p.add_argument("--smoke", action="store_true", help="seconds: a tiny vocabulary and batch, 2 steps per side")
    args = p.parse_args(argv)
    if args.smoke:
        args.vocab, args.micro_batch, args.steps, args.warmup, args.round = 300, 2, 2, 1, 1
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    quiet()
    from lm_assets.training.model import num_params

    with tempfile.TemporaryDirectory(prefix="train_cpu_") as tmp:
        n_seq = max(256, (args.warmup + args.steps) * args.micro_batch)
        data = write_synthetic_packed(Path(tmp) / "packed", n_seq, SEQ_LEN, args.vocab)

        def config(zero: int) -> TrainConfig:
            return TrainConfig(
                data=str(data),
                model="tiny",
                precision="fp32",
                zero_stage=zero,
                micro_batch_size=args.micro_batch,
                steps=10**6,
                document_mask=False,  # the plain loop attends over whole rows
                spike=SpikeConfig(k_sigma=0.0),
            )

        base = config(0)
        sides: dict = {"plain": PlainSide(base, args.vocab)}
        for zero in (int(z) for z in args.zero.split(",") if z.strip()):
            sides[f"zero{zero}"] = EngineSide(config(zero))
        model_cfg = base.model_config(args.vocab)
        tokens = args.micro_batch * (SEQ_LEN - 1)
        print(
            f"tiny preset, vocab {args.vocab}: {num_params(model_cfg):,} parameters; batch {args.micro_batch} x "
            f"{SEQ_LEN - 1} tokens; fp32, 1 thread; {args.warmup} warm-up + {args.steps} timed steps per side, "
            f"in turns of {args.round}",
            flush=True,
        )
        t0 = time.perf_counter()
        times, losses = measure(sides, args.warmup, args.steps, args.round)
        wall = time.perf_counter() - t0

    rows = {}
    plain_med = statistics.median(times["plain"])
    for key, ts in times.items():
        med = statistics.median(ts)
        rows[key] = {
            "name": sides[key].name,
            "steps": len(ts),
            "median_ms": round(med * 1e3, 3),
            "min_ms": round(min(ts) * 1e3, 3),
            "max_ms": round(max(ts) * 1e3, 3),
            "tokens_per_s": round(tokens / med, 1),
            "ratio_over_plain": round(med / plain_med, 4),
        }
        if isinstance(sides[key], EngineSide):
            rows[key]["engine_step_time_median_ms"] = round(statistics.median(sides[key].engine_step_s) * 1e3, 3)
            diffs = [abs(a - b) for a, b in zip(losses[key], losses["plain"])]
            rows[key]["max_loss_diff_vs_plain"] = max(diffs)
    print()
    print_table(rows, "plain")
    for key, r in rows.items():
        if "max_loss_diff_vs_plain" in r:
            print(
                f"{r['name']}: Trainer's own step_time_s (data loading excluded) median "
                f"{r['engine_step_time_median_ms']:.2f} ms; largest |loss - plain loss| over "
                f"{len(losses[key])} steps: {r['max_loss_diff_vs_plain']:.2e}"
            )
    worst = max(r["ratio_over_plain"] for k, r in rows.items() if k != "plain")
    report = {
        "model": "tiny",
        "vocab": args.vocab,
        "params": num_params(model_cfg),
        "micro_batch": args.micro_batch,
        "seq_len": SEQ_LEN - 1,
        "warmup": args.warmup,
        "steps": args.steps,
        "torch": torch.__version__,
        "deepspeed": __import__("deepspeed").__version__,
        "paths": rows,
        "worst_ratio": worst,
        "goal": GOAL,
        "meets_goal": worst <= GOAL,
        "wall_s": round(wall, 1),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
