"""Entry point: `python -m lm_assets.training.train --config run.json [key=value ...]`.

Runs one rank of a training job; start it under a launcher, one process per device:

    DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 torchrun --nproc_per_node 8 -m lm_assets.training.train \\
        --config run.json data=/path/to/packed parallel.pp=2 parallel.tp=2 parallel.dp=2 zero_stage=1
    DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 deepspeed --num_gpus 8 --module lm_assets.training.train \\
        --config run.json ...   (on CPU: --num_nodes 1 --num_gpus N sets the process count)

A lone `python -m lm_assets.training.train ...` is a job of one process. Overrides use dotted paths into
`TrainConfig` (`optim.lr=1e-3`, `checkpoint.dir=/ckpt`, `model_overrides=dim=128,n_layers=4`).
`--print-config` prints the resolved config and the DeepSpeed JSON and exits without training.

Rank 0 prints one JSON object per step on stdout (loss, lr, grad_norm, tokens_per_s, mfu, ...);
`main(report=...)` takes another callable (dagster-pipes on rank 0). A rank that fails prints its
error on stderr and exits 1, which makes the launcher stop the job with a non-zero status; a
successful rank ends with a barrier and `os._exit(0)` (DeepSpeed's process-group teardown can
otherwise abort at exit). Under a launcher, a rank is killed when the launcher exits
(`lm_assets.training.orphans`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lm_assets.training.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="a TrainConfig as JSON or TOML")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # deepspeed launcher
    p.add_argument("overrides", nargs="*", metavar="key=value", help="TrainConfig overrides, e.g. parallel.pp=2")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, report: Callable[[dict], None] | None = None) -> None:
    if "LOCAL_RANK" in os.environ:  # started by torchrun or the deepspeed launcher
        from lm_assets.training.orphans import die_with_launcher

        die_with_launcher()
    args = parse_args(argv)
    if args.local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(args.local_rank))
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(level=logging.INFO, format=f"[rank {rank}] %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)  # fmt: skip
    try:
        from lm_assets.training.config import load_config, to_dict
        from lm_assets.training.engine import deepspeed_config

        cfg = load_config(args.config, args.overrides)
        if args.print_config:
            cfg.validate()
            world = int(os.environ.get("WORLD_SIZE", "1"))
            dims = cfg.dims(world)
            print(json.dumps({"train": to_dict(cfg), "deepspeed": deepspeed_config(cfg, dims.dp)}, indent=2))
            return
        _quiet_deepspeed()
        warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
        from lm_assets.training.engine import Trainer
        from lm_assets.training.pipes import reporting

        with reporting(int(rank)) as reporter:
            monitor = run_monitor(cfg, reporter.progress) if int(rank) == 0 else None
            trainer = Trainer(cfg, report=report or both(monitor, reporter))
            resumed_from = trainer.train_from_checkpoint()
            if trainer.rank == 0:
                reporter.finish(finish(trainer, resumed_from, monitor))
    except BaseException as err:  # noqa: BLE001 - every failure must end this rank non-zero
        sys.stdout.flush()
        sys.stderr.write(f"[rank {rank}] training failed: {type(err).__name__}: {err}\n")
        traceback.print_exc(file=sys.stderr)
        _record_error(rank, err)
        sys.stderr.flush()
        os._exit(1)
    _exit_cleanly()


def run_monitor(cfg, progress):
    """Rank 0's monitor: TensorBoard events beside the run's checkpoints (none without a checkpoint folder)."""
    from lm_assets.training.monitor import RunMonitor

    folder = os.path.join(cfg.checkpoint.dir, "tensorboard") if cfg.checkpoint.dir else None
    return RunMonitor(folder, cfg.steps, cfg.optim.warmup_steps, cfg.log_every, print_line=progress)


def both(monitor, reporter):
    def report(metrics: dict) -> None:
        if monitor is not None:
            monitor.step(metrics)
        reporter.step(metrics)
    return report


def finish(trainer, resumed_from: int, monitor=None) -> dict:
    """Rank 0, after the last checkpoint: export it for HF and summarize the run."""
    from lm_assets.training import checkpoint
    from lm_assets.training.export import export_hf

    summary = {
        "step": trainer.step,
        "resumed_from_step": resumed_from,
        "tokens": trainer.tokens_seen,
        "final_loss": trainer.last_metrics.get("loss"),
        "tokens_per_s_last": trainer.last_metrics.get("tokens_per_s"),
        "layout": {"pp": trainer.dims.pp, "tp": trainer.dims.tp, "dp": trainer.dims.dp, "world_size": trainer.world},
        "run_asset": trainer.cfg.run_asset, "checkpoint_asset": trainer.cfg.checkpoint_asset,
        **trainer.run_info(),
        "checkpoint_dir": None, "tag": None, "tags": [], "hf_export": None, "tensorboard": None, "curves_png": None,
    }
    if monitor is not None:
        monitor.close()
        summary |= monitor.summary()
        summary["tokens_per_s"] = summary["tokens_per_s_mean"]
        summary["mfu"] = summary["mfu_mean"]
        if monitor.folder is not None:
            summary["tensorboard"] = str(monitor.folder)
            png = monitor.plot(monitor.folder.parent / "curves.png")
            summary["curves_png"] = str(png) if png else None
            summary["steps_jsonl"] = str(monitor.write_steps(monitor.folder.parent / "steps.jsonl"))
    summary["val_losses"] = [[step, loss] for step, loss in trainer.val_losses]
    summary["validation"] = trainer.validation_status()
    if trainer.dpo is not None:
        end = {k: v for k, v in trainer.last_metrics.items() if k.startswith("val_")}
        summary["dpo_validation"] = {"start": trainer.dpo_val_start, "end": end or None}
    ckpt_dir = trainer.cfg.checkpoint.dir
    if not ckpt_dir:
        return summary
    from lm_assets.training.forensics import SPIKES_FILE, read_spikes

    spikes = read_spikes(ckpt_dir)
    if spikes:
        summary["spike_forensics"] = os.path.join(ckpt_dir, SPIKES_FILE)
        summary["spiked_steps"] = len({row["step"] for row in spikes})
    tag = checkpoint.latest_tag(ckpt_dir)
    out = os.path.join(ckpt_dir, tag, "hf")
    state = checkpoint.model_state_dict(ckpt_dir, tag)
    if trainer.cfg.adapter.enabled:
        summary["peft_adapter"] = export_adapter(trainer, os.path.join(ckpt_dir, tag))
    export_hf(state, checkpoint.model_config(ckpt_dir, tag), out, tokenizer_model_path=trainer.cfg.tokenizer_model or None)
    tags = sorted(p.name for p in Path(ckpt_dir).iterdir() if (p / "layout.json").exists())
    return summary | {"checkpoint_dir": ckpt_dir, "tag": tag, "tags": tags, "hf_export": out,
                      "checkpoints": checkpoint.describe_checkpoints(ckpt_dir, tags),
                      "parameters": sum(t.numel() for t in state.values())}


def export_adapter(trainer, tag_dir: str) -> str:
    """An adapter checkpoint's adapter as a PEFT folder, `<tag>/adapter/`, over its frozen base: `init_from`,
    or when the run added vocabulary rows that base with them, exported once beside the run (`base_hf/`), so
    that `PeftModel.from_pretrained` has a base of the right shape."""
    from lm_assets.training import checkpoint, hf_init
    from lm_assets.training.export import export_hf, export_peft_adapter
    from lm_assets.training.lora import is_adapter_param

    cfg = trainer.cfg
    a = cfg.adapter
    base_folder = cfg.init_from
    if trainer.vocab_added:
        base_folder = os.path.join(cfg.checkpoint.dir, "base_hf")
        if not os.path.exists(os.path.join(base_folder, "config.json")):
            base = hf_init.extend_vocabulary(hf_init.weights(cfg.init_from), trainer.model_cfg.vocab_size)
            export_hf(base, trainer.model_cfg, base_folder, tokenizer_model_path=cfg.tokenizer_model or None)
    tag = os.path.basename(tag_dir)
    adapter = {k: v for k, v in checkpoint.consolidated_state_dict(cfg.checkpoint.dir, tag).items() if is_adapter_param(k)}
    folder = export_peft_adapter(adapter, a.rank, a.alpha, a.dropout, a.target_modules, os.path.join(tag_dir, "adapter"),
                                 base_model=os.path.abspath(base_folder))  # fmt: skip
    return str(folder)


def _record_error(rank: str, err: BaseException) -> None:
    """Leave the error where the launcher looks (`$LM_ASSETS_ERROR_DIR/rank_N.txt`): a rank killed by
    the launcher after another rank failed cannot report through pipes."""
    folder = os.environ.get("LM_ASSETS_ERROR_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"rank_{int(rank):05d}.txt"), "w") as f:
            f.write(f"{type(err).__name__}: {err}\n\n{traceback.format_exc()}")


def _quiet_deepspeed() -> None:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.utils import logger

    logger.setLevel(logging.WARNING)


def _exit_cleanly() -> None:
    import torch.distributed as dist

    sys.stdout.flush()
    sys.stderr.flush()
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
