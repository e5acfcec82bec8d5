"""Rank 0's line to Dagster, through dagster-pipes; every other rank, and a run outside Dagster,
prints JSON lines instead.

Every few steps rank 0 logs a progress line to the Dagster run (lm_assets/training/monitor.py writes every step
to TensorBoard). At the end it reports two materializations: `training_run` (final metrics, averages
over the run, the loss and lr curves as a PNG, the TensorBoard folder, the step it resumed from) and
`checkpoint` (where the checkpoint and its HF export are). Messages go
wherever the launching side said: a file or stdout for a local subprocess, or S3 objects
(`LM_ASSETS_PIPES_MESSAGES=s3`) for a job on a cluster.
"""

from __future__ import annotations

import json
import math
import os
import sys
from contextlib import contextmanager
from typing import Iterator

class PrintReporter:
    def step(self, metrics: dict) -> None:
        print(json.dumps(metrics), flush=True)

    def progress(self, line: str) -> None:
        progress_line(line)

    def finish(self, summary: dict) -> None:
        print(json.dumps({"summary": summary}), flush=True)


def progress_line(line: str) -> None:
    """`[rank 0] <line>` on stderr in one write, so a JSON line on stdout to the same file cannot land
    inside it (print writes the text and its newline apart)."""
    sys.stderr.write(f"[rank 0] {line}\n")
    sys.stderr.flush()


def rounded(value: float | None, decimals: int) -> float | None:
    return None if value is None else round(value, decimals)


def count(value: int | None) -> dict | None:
    """A count as text with thousands separators (9,736,176): read, not plotted."""
    return None if value is None else {"raw_value": f"{value:,}", "type": "text"}


class PipesReporter:
    def __init__(self, pipes):
        self.pipes = pipes
        self.losses: list[tuple[int, float]] = []

    def step(self, metrics: dict) -> None:
        self.losses.append((metrics["step"], metrics["loss"]))
        print(json.dumps(metrics), flush=True)

    def progress(self, line: str) -> None:
        self.pipes.log.info(line)
        progress_line(line)

    def finish(self, summary: dict) -> None:
        # The loss curve is drawn from steps.jsonl on the Dagster side, and the layout is in training_plan.
        metadata = {
            "final_loss": rounded(summary["final_loss"], 4),
            "steps": summary["step"],
            "resumed_from_step": summary["resumed_from_step"],
            "tokens": count(summary["tokens"]),
            "tokens_per_s": rounded(summary.get("tokens_per_s"), 0),
            "tokens_per_s_last_step": rounded(summary["tokens_per_s_last"], 0),
            "step_time_s_mean": rounded(summary.get("step_time_s_mean"), 4),
            "data_wait_s_mean": rounded(summary.get("data_wait_s_mean"), 5),
            "steps_averaged": summary.get("steps_averaged"),
            "warmup_steps_left_out": summary.get("warmup_steps_left_out"),
            "mfu": summary.get("mfu"),
            "compiled": summary.get("compiled"),
            "compile_mode": summary.get("compile_mode") if summary.get("compiled") else None,
            "document_mask": summary.get("document_mask"),
            "kernels": {"raw_value": summary.get("kernels"), "type": "json"},
            "first_step_s": rounded(summary.get("first_step_s"), 2),
        }
        metadata |= loss_story(self.losses)
        if summary.get("validation"):
            metadata["validation"] = summary["validation"]
        if summary.get("val_losses"):
            step, loss = summary["val_losses"][-1]
            metadata["val_loss"] = rounded(loss, 4)
            metadata["val_loss_step"] = step
        if summary.get("checkpoints"):
            metadata["checkpoints"] = {"raw_value": checkpoint_table(summary["checkpoints"]), "type": "md"}
        if summary.get("spike_forensics"):
            metadata["spike_forensics"] = {"raw_value": summary["spike_forensics"], "type": "path"}
            metadata["spiked_steps"] = summary["spiked_steps"]
        for name in ("loss_scale_last", "loss_scale_min", "overflow_skipped_steps"):
            if summary.get(name) is not None:
                metadata[name] = summary[name]
        if summary.get("model_state_bytes") is not None:
            metadata["model_states_measured_mib"] = rounded(summary["model_state_bytes"] / 2**20, 2)
        if summary.get("init_from"):
            metadata["init_from"] = {"raw_value": summary["init_from"], "type": "json"}
        if summary.get("peak_memory_gib") is not None:
            metadata["peak_memory_gib"] = summary["peak_memory_gib"]
        metadata |= objective_metadata(summary)
        if summary.get("profile"):
            metadata["profiled_kernels"] = {"raw_value": summary["profile"], "type": "json"}
        if summary.get("tensorboard"):
            metadata["tensorboard_logdir"] = {"raw_value": summary["tensorboard"], "type": "path"}
            metadata["tensorboard"] = {"raw_value": f"`tensorboard --logdir {summary['tensorboard']}`", "type": "md"}
        if summary.get("steps_jsonl"):
            metadata["steps_jsonl"] = {"raw_value": summary["steps_jsonl"], "type": "path"}
        if summary.get("curves_png"):
            # Only the path: a message of tens of KB can reach Dagster's file reader half written.
            # The asset embeds the picture itself (lm_assets/defs/training/assets.py).
            metadata["curves_png"] = {"raw_value": summary["curves_png"], "type": "path"}
        metadata = {name: value for name, value in metadata.items() if value is not None}
        self.pipes.report_asset_materialization(asset_key=summary.get("run_asset", "training_run"), metadata=metadata)
        self.pipes.report_asset_materialization(
            asset_key=summary.get("checkpoint_asset", "checkpoint"), metadata=checkpoint_metadata(summary)
        )


def objective_metadata(summary: dict) -> dict:
    """DPO's settings and its figures on the held-back pairs at the start and the end (each a number the UI
    plots), and an adapter's settings, trained parameters and what it saves of a full fine-tune's gradients and
    AdamW moments (`memory_saved_mib`)."""
    out: dict = {"objective": summary.get("objective", "lm")}
    if summary.get("dpo"):
        out["dpo"] = {"raw_value": summary["dpo"], "type": "json"}
        validation = summary.get("dpo_validation") or {}
        start, end = validation.get("start") or {}, validation.get("end") or {}
        for name in ("reward_accuracy", "reward_margin", "kl"):
            if f"val_{name}" in start:
                out[f"val_{name}_start"] = rounded(start[f"val_{name}"], 4)
            if f"val_{name}" in end:
                out[f"val_{name}"] = rounded(end[f"val_{name}"], 4)
        if start and end:
            out["dpo_validation"] = {"raw_value": (
                "| held-back pairs | reward accuracy | reward margin | KL to the reference |\n|---|---|---|---|\n"
                + "\n".join(f"| {when} | {v['val_reward_accuracy']:.3f} | {v['val_reward_margin']:.4f} | {v['val_kl']:.5f} |"
                             for when, v in (("start", start), ("end", end)))), "type": "md"}  # fmt: skip
    if summary.get("distill"):
        d = summary["distill"]
        out["distill"] = {"raw_value": d, "type": "json"}
        out["teacher"] = {"raw_value": d["teacher"], "type": "path"}
        if d.get("topk_bytes") is not None:
            out["teacher_topk_mib"] = rounded(d["topk_bytes"] / 2**20, 2)
            out["teacher_scoring_s"] = rounded(d["teacher_scoring_s"], 2)
        for name in ("distill_kl", "distill_ce", "teacher_s_mean"):
            if summary.get(name) is not None:
                out[name] = rounded(summary[name], 4)
    adapter = summary.get("adapter")
    if adapter:
        out["adapter"] = {"raw_value": adapter, "type": "json"}
        out["trained_parameters"] = count(adapter["trained_parameters"])
        out["trained_share"] = rounded(adapter["trained_share"], 5)
        out["memory_saved_mib"] = rounded(adapter["memory_saved_bytes"] / 2**20, 2)
    return out


def checkpoint_metadata(summary: dict) -> dict:
    """The checkpoint asset's metadata: the latest checkpoint's step, losses, size and layout, where it
    and its HF export are, and every checkpoint of the run in a table."""
    latest = next((c for c in summary.get("checkpoints", []) if c["tag"] == summary["tag"]), {})
    metadata = {
        "step": summary["step"],
        "train_loss": rounded(latest.get("train_loss"), 4),
        "val_loss": rounded(latest.get("val_loss"), 4),
        "parameters": count(summary.get("parameters")),
        "checkpoint_bytes": count(latest.get("bytes")),
        "checkpoint_size": human_bytes(latest["bytes"]) if latest.get("bytes") is not None else None,
        "layout": latest.get("layout"),
        "tag": summary["tag"],
        "hf_export": {"raw_value": summary["hf_export"], "type": "path"},
        "checkpoint_dir": {"raw_value": summary["checkpoint_dir"], "type": "path"},
        "tags": {"raw_value": summary["tags"], "type": "json"},
    }
    if summary.get("peft_adapter"):
        metadata["peft_adapter"] = {"raw_value": summary["peft_adapter"], "type": "path"}
    if summary.get("checkpoints"):
        metadata["checkpoints"] = {"raw_value": checkpoint_table(summary["checkpoints"]), "type": "md"}
    return {name: value for name, value in metadata.items() if value is not None}


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def checkpoint_table(checkpoints: list[dict]) -> str:
    """| tag | step | train loss | val loss | size | as markdown."""
    cell = lambda v: "–" if v is None else f"{v:.4f}"  # noqa: E731
    rows = [f"| {c['tag']} | {c['step']} | {cell(c['train_loss'])} | {cell(c['val_loss'])} | {human_bytes(c['bytes'])} |"
            for c in checkpoints]  # fmt: skip
    return "| checkpoint | step | train loss | val loss | size |\n|---|---|---|---|---|\n" + "\n".join(rows)


def loss_story(losses: list[tuple[int, float]]) -> dict:
    """The lowest loss and its step, and whether the last fifth of the steps averaged more than the fifth
    before it (said in words, with both means)."""
    finite = [(step, loss) for step, loss in losses if loss is not None and math.isfinite(loss)]
    if not finite:
        return {}
    step, low = min(finite, key=lambda item: (item[1], item[0]))
    out = {"min_loss": rounded(low, 4), "min_loss_step": step}
    fifth = len(finite) // 5
    if fifth >= 1:
        last = sum(loss for _, loss in finite[-fifth:]) / fifth
        before = sum(loss for _, loss in finite[-2 * fifth : -fifth]) / fifth
        out["loss_rose_at_end"] = (f"yes: the last {fifth} steps averaged {last:.4f}, the {fifth} before them "
                                   f"{before:.4f}" if last > before else "no")  # fmt: skip
    return out


def _s3_channels() -> dict:
    """On a cluster the context comes from, and the messages go to, S3 objects named by the launcher."""
    if os.environ.get("LM_ASSETS_PIPES_MESSAGES") != "s3":
        return {}
    import boto3
    from dagster_pipes import PipesS3ContextLoader, PipesS3MessageWriter

    client = boto3.client("s3", endpoint_url=os.environ.get("LM_ASSETS_S3_ENDPOINT_URL") or None)
    return {"context_loader": PipesS3ContextLoader(client=client), "message_writer": PipesS3MessageWriter(client=client)}


@contextmanager
def reporting(rank: int) -> Iterator[PrintReporter | PipesReporter]:
    """Rank 0 under Dagster gets a Pipes reporter; everyone else prints."""
    from dagster_pipes import PipesEnvVarParamsLoader

    if rank != 0 or not PipesEnvVarParamsLoader().is_dagster_pipes_process():
        yield PrintReporter()
        return
    from dagster_pipes import open_dagster_pipes

    channels = _s3_channels()
    with open_dagster_pipes(**channels) as pipes:
        print(f"[rank 0] reporting to Dagster through pipes ({'s3' if channels else 'local'})", file=sys.stderr)
        yield PipesReporter(pipes)
