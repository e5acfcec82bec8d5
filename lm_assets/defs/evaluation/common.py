"""What the evaluation assets share (`assets.py`, `tasks.py`, `safety.py`, and the sft and compression groups):
the checkpoint a partition names and its HF export, the device a model runs on, where evaluation data is
found, the benchmark checks and their numbers, and the trend and chart read from earlier checkpoints' metadata."""

import json
import math
import re
from pathlib import Path

import dagster as dg
import polars as pl
from pydantic import Field

from lm_assets.defs.common.config import ENUM_FIELDS_AS_VALUES, Device, choices
from lm_assets.defs.common.environment import from_environment, project_path
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.reporting import (
    checkpoint_check_spec,
    latest_metadata,
    series_value,
)
from lm_assets.evaluation.stats import CHANCE_LEVEL
from lm_assets.reporting.evaluation import accuracy_chart_markdown, band_text
from lm_assets.reporting.tables import METADATA_COLUMN_PX, markdown_table_text, readable, table_width_px
from lm_assets.storage.keys import UnsafeKeyError
from lm_assets.storage.layout import (
    TOKENIZER_KEYS,
    checkpoint_run_folder,
    parse_checkpoint_key,
    question_results_key,
)

UNTRAINED_LOSS_FRACTION = 0.9


def checkpoint_dir(store, partition_key: str) -> tuple[Path, str]:
    try:
        run, tag = parse_checkpoint_key(partition_key)
    except UnsafeKeyError as exc:
        raise dg.Failure(description=str(exc)) from exc
    return Path(store.local_path(checkpoint_run_folder(run))), tag


def hf_export(store, partition_key: str) -> Path:
    """The checkpoint's HF export, made now from the DeepSpeed checkpoint if the run did not make it."""
    from lm_assets.evaluation.checkpoint import ensure_hf_export  # torch: imported when the asset runs

    ckpt_dir, tag = checkpoint_dir(store, partition_key)
    # The tokenizer the run trained with (a fine-tuning run's has the chat markers and template).
    settings = ckpt_dir / "train_config.json"
    tokenizer = json.loads(settings.read_text()).get("tokenizer_model") if settings.exists() else None
    try:
        return ensure_hf_export(ckpt_dir, tag, tokenizer or store.local_path(TOKENIZER_KEYS["model"]))
    except FileNotFoundError as exc:
        raise dg.Failure(f"checkpoint {partition_key} not found under {ckpt_dir}") from exc


def training_loss(store, partition_key: str) -> float | None:
    ckpt_dir, tag = checkpoint_dir(store, partition_key)
    path = ckpt_dir / tag / "metrics.json"
    return json.loads(path.read_text()).get("loss") if path.exists() else None


TRUNCATION_LIMIT = 0.05  # share of prompts cut to fit the model's context before the check warns


def question_table(result: dict) -> pl.DataFrame:
    """One row per question: id, gold, prediction, the log-likelihood of each choice, truncation."""
    rows = result["questions"]
    return pl.DataFrame({
        "question_id": [f"{r['subject']}/{r['index']}" for r in rows],
        "subject": [r["subject"] for r in rows],
        "gold": [r["gold"] for r in rows],
        "prediction": [r["pred"] for r in rows],
        "prediction_norm": [r["pred_norm"] for r in rows],
        # One column per choice (A, B, ...); a question with fewer choices than the widest leaves the rest empty.
        **{f"loglikelihood_{chr(65 + i)}": [float(r["loglikelihoods"][i]) if i < len(r["loglikelihoods"]) else None
                                            for r in rows] for i in range(max(len(r["loglikelihoods"]) for r in rows))},
        "context_tokens": [r["context_tokens"] for r in rows],
        "truncated": [bool(r["truncated"]) for r in rows],
    })


def publish_questions(store, checkpoint: str, result: dict) -> dict:
    key = question_results_key(checkpoint, result["benchmark"])
    store.write_parquet(key, question_table(result))
    return {"questions_parquet": dg.MetadataValue.path(store.uri(key))}


def evaluated(instance: dg.DagsterInstance, asset: str, current: str) -> dict[str, dict | None]:
    """The checkpoints `asset` was materialized for, in partition order, with their latest metadata, and
    `current` with None (its scores are being made): read once for the trend table and the accuracy chart."""
    found: dict[str, dict | None] = {}
    for checkpoint in instance.get_dynamic_partitions(checkpoint_partitions.name):
        if checkpoint == current:
            found[checkpoint] = None
        elif metadata := latest_metadata(instance, dg.AssetKey(asset), checkpoint):
            found[checkpoint] = metadata
    return found


def trend_table(history: dict[str, dict | None], result: dict, groups: dict[str, float]) -> dg.MetadataValue:
    """acc (the first row) and accuracy per recorded category and subject (`groups`, the rest) on the evaluated
    checkpoints (columns) of `history` (`evaluated`), this one's from `result` and `groups`, read from the same
    metadata keys each was recorded under, so that a score of 0 reads 0 and a score not recorded reads –. The
    latest checkpoints that fit the UI's metadata column are shown, this one always; a line says how many more."""
    columns: dict[str, dict[str, float]] = {}
    for checkpoint, metadata in history.items():
        run = parse_checkpoint_key(checkpoint)[0]
        prefix = f"{run}/{result['benchmark']}/"
        if metadata is None:
            columns[checkpoint] = {"acc": result["overall"]["acc"], **groups}
            continue
        column = {k[len(prefix):]: v.value for k, v in metadata.items() if k.startswith(prefix)}
        if (acc := series_value(metadata, checkpoint, "acc")) is not None:
            column["acc"] = acc
        columns[checkpoint] = column
    names = sorted({name for column in columns.values() for name in column} - {"acc"})
    names = ["acc", *names] if any("acc" in column for column in columns.values()) else names

    def table_of(shown: list[str]) -> pl.DataFrame:
        return pl.DataFrame({"group": [readable(n) for n in names],
                             **{checkpoint_label(c): [None if (v := columns[c].get(n)) is None else round(v, 4) for n in names]
                                for c in shown}}, schema_overrides={checkpoint_label(c): pl.Float64 for c in shown})  # fmt: skip

    shown = list(columns)
    while len(shown) > 1 and table_width_px(table_of(shown)) > METADATA_COLUMN_PX:
        shown.remove(next(c for c in shown if history[c] is not None))  # the earliest other checkpoint
    text = markdown_table_text(table_of(shown), max_rows=120)
    if len(shown) < len(columns):
        text += f"\n\n_the latest {len(shown)} of {len(columns)} evaluated checkpoints; each partition shows its own_"
    return dg.MetadataValue.md(text)


def checkpoint_label(checkpoint: str) -> str:
    """A checkpoint as a column header that wraps: `main 20` for main-step_00000020."""
    run, tag = parse_checkpoint_key(checkpoint)
    step = re.fullmatch(r"step_(\d+)", tag)
    return f"{run} {int(step.group(1))}" if step else f"{run} {tag}"


def accuracy_points(history: dict[str, dict | None], current: str, result: dict) -> tuple[list, list]:
    """(step, acc) and (step, (low, high)) of the chance band for each step checkpoint of this one's run in
    `history` (`evaluated`), this one's from `result`: one run's points only, never another run's."""
    run, _ = parse_checkpoint_key(current)
    acc, band = [], []
    for checkpoint, metadata in history.items():
        checkpoint_run, tag = parse_checkpoint_key(checkpoint)
        if checkpoint_run != run or not re.fullmatch(r"step_\d+", tag):
            continue
        if metadata is None:
            overall = result["overall"]
            value, low, high = overall["acc"], overall["chance_low"], overall["chance_high"]
        else:
            value, shown = series_value(metadata, checkpoint, "acc"), metadata.get("chance_band")
            if value is None or shown is None:
                continue
            low, high = map(float, shown.value.split("–"))
        step = int(tag.removeprefix("step_"))
        acc.append((step, value))
        band.append((step, (low, high)))
    return acc, band


def accuracy_chart(history: dict[str, dict | None], current: str, result: dict) -> dg.MetadataValue:
    """acc across the checkpoints of this one's run (`accuracy_points`), the chance band shaded under it; with
    fewer than two checkpoints, a line saying so (and the one score), not an empty chart."""
    run, _ = parse_checkpoint_key(current)
    return dg.MetadataValue.md(accuracy_chart_markdown(run, *accuracy_points(history, current, result)))


UNPLOTTED = ("acc_stderr",)  # shown beside acc, not charted: a standard error is no score to follow


def score_checks(result: dict, expected: int, loss: float | None, vocab_size: int,
                 checkpoint: str | None = None) -> list[dg.AssetCheckResult]:  # fmt: skip
    """The benchmark's checks. Their numbers that move from checkpoint to checkpoint are keyed by the
    checkpoint's run (`check_numbers`), as the scores are, so that a check's plot never joins one run's
    checkpoints to another's; settings and counts are text."""
    overall = result["overall"]
    in_range = all(0.0 <= e[m] <= 1.0 for e in [overall, *result["subjects"].values()] for m in ("acc", "acc_norm"))
    truncated_share = result["truncated"] / overall["n"]
    return [
        dg.AssetCheckResult(check_name="scores_in_unit_interval", passed=in_range),
        dg.AssetCheckResult(
            check_name="prompts_fit_the_context", passed=truncated_share <= TRUNCATION_LIMIT,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={**check_numbers(checkpoint, {"share": truncated_share}),
                      **as_text({"truncated": result["truncated"], "questions": overall["n"], "limit": TRUNCATION_LIMIT,
                                 "max_length": result["max_length"]})},  # fmt: skip
            description="Few-shot prompts cut from the left lose their examples: a score on them is not n-shot.",
        ),
        dg.AssetCheckResult(
            check_name="all_questions_scored", passed=overall["n"] == expected,
            metadata=as_text({"scored": overall["n"], "expected": expected}),
        ),
        chance_check(overall, loss, vocab_size, checkpoint),
    ]


def check_numbers(checkpoint: str | None, numbers: dict[str, float | None]) -> dict[str, dg.MetadataValue]:
    """A check's numbers at four decimals, under `<run>/` when the checkpoint is known (the check's plot then
    draws each run apart); a missing number as the text `unknown`."""
    prefix = f"{parse_checkpoint_key(checkpoint)[0]}/" if checkpoint else ""
    return {f"{prefix}{name}": dg.MetadataValue.text("unknown") if value is None else dg.MetadataValue.float(round4(value))
            for name, value in numbers.items()}  # fmt: skip


def as_text(values: dict) -> dict[str, dg.MetadataValue]:
    """Settings and counts as text: read on the check, not charted."""
    return {name: dg.MetadataValue.text(str(value)) for name, value in values.items()}


def chance_check(overall: dict, loss: float | None, vocab_size: int, checkpoint: str | None = None) -> dg.AssetCheckResult:
    """Warns when a model whose training loss is still near log(vocab) scores above the top of its chance band
    (exact binomial, inside [0, 1]: `stats.binomial_band`). On so few questions that the band reaches 1.0 no
    score is above it, and the metadata says so rather than pass in silence."""
    untrained = loss is not None and loss >= UNTRAINED_LOSS_FRACTION * math.log(vocab_size)
    high = overall["chance_high"]
    decidable = high < 1.0
    verdict = ("not untrained: loss below 90% of log(vocab)" if not untrained
               else "above chance" if overall["acc"] > high
               else "inside the chance band" if decidable
               else f"cannot tell: on {overall['n']} questions even a perfect score is inside the chance band")
    return dg.AssetCheckResult(
        check_name="chance_while_untrained", passed=not (untrained and overall["acc"] > high),
        severity=dg.AssetCheckSeverity.WARN,
        metadata={**check_numbers(checkpoint, {"training_loss": loss, "acc": overall["acc"]}),
                  **as_text({"log_vocab": f"{math.log(vocab_size):.4f}", "chance_band": band_text(overall),
                             "questions": overall["n"], "verdict": verdict})},
        description="A model whose training loss is still near log(vocab) should score inside the chance band "
        f"(the central {CHANCE_LEVEL:.1%} of a guesser's binomial accuracy).",
    )


def round4(value: float) -> float:
    """A check's number at four decimals, as the scores are shown."""
    return round(float(value), 4)


def benchmark_check_specs(asset: str) -> list[dg.AssetCheckSpec]:
    return [
        checkpoint_check_spec("scores_in_unit_interval", asset, "Every accuracy lies in [0, 1]."),
        checkpoint_check_spec("prompts_fit_the_context", asset,
                              f"Warns when more than {TRUNCATION_LIMIT:.0%} of the prompts were cut to fit the model's context."),
        checkpoint_check_spec("all_questions_scored", asset, "As many questions scored as the data holds."),
        checkpoint_check_spec("chance_while_untrained", asset,
                              "Warns when a model still near log(vocab) loss scores above its exact binomial chance band."),
    ]


EvaluationDtype = choices("EvaluationDtype", ("auto", "float32", "bfloat16", "float16"))


class EvaluationDeviceConfig(dg.Config):
    model_config = ENUM_FIELDS_AS_VALUES

    device: Device = Field(
        default="auto",
        description="auto (CUDA when available, else CPU), cpu or cuda (the first GPU CUDA_VISIBLE_DEVICES leaves)",
    )
    dtype: EvaluationDtype = Field(default="auto", description="auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16, float16")


def resolve_device(device: str, dtype: str) -> tuple[str, str]:
    """The device and dtype `auto` stands for on this machine; explicit values as given."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise dg.Failure(f"unknown dtype {dtype!r}: use float32, bfloat16 or float16")
    return device, dtype


def load_checkpoint_model(store, partition_key: str, config: EvaluationDeviceConfig):
    """The checkpoint's model on the configured device and dtype, and metadata saying what ran."""
    import torch

    from lm_assets.evaluation.checkpoint import load_model  # torch: imported when the asset runs

    device, dtype = resolve_device(config.device, config.dtype)
    em = load_model(hf_export(store, partition_key), device=device, dtype=getattr(torch, dtype))
    return em, {"device": device, "dtype": dtype}


def evaluation_data(configured: str | None, variable: str, sample: str, folder: str = "") -> tuple[str, bool]:
    """The configured path, else `folder` under $`variable`, else under the shipped `sample`; and whether it is
    the shipped sample (original items, not the release)."""
    if configured:
        return configured, False
    root = from_environment(None, variable, "")  # unset: "", not the registry's default, so the sample is told apart
    return project_path(f"{root or sample}/{folder}".rstrip("/")), not root


EVAL_DEPS = ["checkpoint", "sft_checkpoint"]  # pretraining and fine-tuning checkpoints are partitions alike


def evaluation_asset(**kwargs):
    """An asset of the evaluation group, one partition per checkpoint."""
    return dg.asset(partitions_def=checkpoint_partitions, group_name="evaluation", kinds={"pytorch"}, deps=EVAL_DEPS, **kwargs)
