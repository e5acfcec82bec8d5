"""The zero- and few-shot task suite as assets, one partition per checkpoint: HellaSwag, ARC-Easy,
ARC-Challenge, PIQA, WinoGrande and BoolQ in English, CMMLU, XStoryCloze-zh and XCOPA-zh in Chinese, each
scored as lm-evaluation-harness 0.4.13 scores its task of that name (`lm_assets/evaluation/tasks.py`), and
`benchmark_suite`, every score of a checkpoint beside its chance band."""

import dagster as dg
import polars as pl
from pydantic import Field

from lm_assets.defs.common.environment import default_of
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.reporting import latest_metadata, markdown_table, run_series, series_value
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.evaluation.common import (
    EVAL_DEPS,
    UNPLOTTED,
    EvaluationDeviceConfig,
    accuracy_chart,
    benchmark_check_specs,
    evaluated,
    evaluation_data,
    load_checkpoint_model,
    publish_questions,
    score_checks,
    trend_table,
    training_loss,
)
from lm_assets.evaluation.tasks import TASKS, Task
from lm_assets.reporting.evaluation import against_band, band_text
from lm_assets.reporting.tables import readable

SAMPLES = default_of("LM_ASSETS_EVAL_TASKS_DIR")
SAMPLE_FOLDERS = {"hellaswag": "hellaswag", "arc_easy": "arc/ARC-Easy", "arc_challenge": "arc/ARC-Challenge",
                  "piqa": "piqa", "winogrande": "winogrande", "boolq": "boolq", "cmmlu": "cmmlu",
                  "xstorycloze_zh": "xstorycloze", "xcopa_zh": "xcopa"}  # fmt: skip
SCORE_ASSETS = tuple(f"{name}_score" for name in TASKS)


class TaskScoreConfig(EvaluationDeviceConfig):
    path: str | None = Field(default=None, description="the task's data, as its release ships it (a folder, or the "
                             "scored split's file); unset: its folder under $LM_ASSETS_EVAL_TASKS_DIR, else the "
                             f"shipped sample ({SAMPLES}/, original items)")  # fmt: skip
    num_fewshot: int = Field(default=0, ge=0, description="worked examples before each question, drawn as lm-eval "
                             "draws them (CMMLU: the subject's first dev questions; the rest: seeded draws from the "
                             "train split); 0: zero-shot, lm-eval's default for every task here")  # fmt: skip
    limit: int | None = Field(default=None, ge=1, description="only the first this many questions (CMMLU: of each "
                              "subject); unset: all")  # fmt: skip


def recorded_groups(result: dict) -> dict[str, float]:
    """acc per subject, recorded (and shown in the trend) where the task has more than one subject; a task of
    one subject would repeat its acc."""
    subjects = result["subjects"]
    return {name: e["acc"] for name, e in subjects.items()} if len(subjects) > 1 else {}


def task_metadata(task: Task, result: dict, checkpoint: str, data: str) -> dict:
    """The task's scores, named as lm-eval names them (acc, and acc_norm where lm-eval reports it), as
    numbers under the checkpoint's run, and the chance level beside them."""
    overall = result["overall"]
    scores = {metric: overall[metric] for metric in task.metrics} | {"acc_stderr": overall["acc_stderr"]}
    scores |= {f"{task.name}/{name}": acc for name, acc in recorded_groups(result).items()}
    metadata = {
        **run_series(checkpoint, {name: round(value, 4) for name, value in scores.items()}, unplotted=UNPLOTTED),
        "chance": dg.MetadataValue.text(f"{result['chance']:.4f}"),
        "chance_band": dg.MetadataValue.text(band_text(overall)),
        "metrics": dg.MetadataValue.text(", ".join(task.metrics)),
        "questions": dg.MetadataValue.text(str(overall["n"])),
        "num_fewshot": dg.MetadataValue.text(str(result["num_fewshot"])),
        "truncated_prompts": dg.MetadataValue.text(str(result["truncated"])),
        "max_length": dg.MetadataValue.text(str(result["max_length"])),
        "data": dg.MetadataValue.text(data),
        "release": dg.MetadataValue.text(task.release),
        "seconds": dg.MetadataValue.text(f"{result['seconds']:.2f}"),
    }
    if len(result["subjects"]) > 1:
        table = pl.DataFrame([{"subject": readable(s), "n": e["n"], **{m: round(e[m], 4) for m in task.metrics}}
                              for s, e in result["subjects"].items()])  # fmt: skip
        metadata["by_subject"] = markdown_table(table, max_rows=100)
    return metadata


def task_score_asset(task: Task) -> dg.AssetsDefinition:
    name = f"{task.name}_score"

    @dg.asset(
        name=name, partitions_def=checkpoint_partitions, group_name="evaluation", kinds={"pytorch"}, deps=EVAL_DEPS,
        check_specs=benchmark_check_specs(name),
        description=f"{task.name} ({task.language}) as lm-evaluation-harness 0.4.13's `{task.name}` task scores it: "
        f"the same prompts and target delimiter, {' and '.join(task.metrics)}; zero-shot by default, per-question "
        f"results kept. Data: the user's copy of the release ({task.release}), else a shipped original sample.",
    )
    def _score(context: dg.AssetExecutionContext, config: TaskScoreConfig, storage: StorageResource) -> dg.MaterializeResult:
        from lm_assets.evaluation.benchmarks import evaluate_questions  # torch: imported when the asset runs
        from lm_assets.evaluation.tasks import chance, load_task

        store = storage.storage()
        path, shipped = evaluation_data(config.path, "LM_ASSETS_EVAL_TASKS_DIR", SAMPLES, SAMPLE_FOLDERS[task.name])
        try:
            questions = load_task(task, path, config.num_fewshot, config.limit)
        except (FileNotFoundError, ValueError, KeyError) as exc:
            raise dg.Failure(f"{task.name}: {exc}") from exc
        em, ran_on = load_checkpoint_model(store, context.partition_key, config)
        result = evaluate_questions(em, questions, overall_over="subjects", details=True)
        result["chance"] = chance(task, questions)
        data = f"{path}" + (" (the shipped sample: original items, not the release)" if shipped else "")
        history = evaluated(context.instance, name, context.partition_key)
        return dg.MaterializeResult(
            metadata=task_metadata(task, result, context.partition_key, data) | ran_on
            | publish_questions(store, context.partition_key, result)
            | {"trend": trend_table(history, result, recorded_groups(result)), "acc_by_checkpoint": accuracy_chart(history, context.partition_key, result)},
            check_results=score_checks(result, len(questions), training_loss(store, context.partition_key), em.cfg.vocab_size,
                                       context.partition_key),
        )

    return _score


TASK_SCORES = [task_score_asset(task) for task in TASKS.values()]
SUITE_INPUTS = ("mmlu_score", "ceval_score", *SCORE_ASSETS)


@dg.asset(
    partitions_def=checkpoint_partitions, group_name="evaluation", kinds={"polars"},
    deps=[dg.AssetKey(name) for name in SUITE_INPUTS],
    description="Every benchmark score of the checkpoint in one table, each beside its chance band (the accuracy a "
    "guesser reaches, exact binomial, inside [0, 1]; vs band: acc above, inside or below it), its number of questions "
    "(n) and of shots: what a model card lists, and what a team compares before it picks a checkpoint.",
)
def benchmark_suite(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    checkpoint = context.partition_key
    rows, missing = [], []
    for asset in SUITE_INPUTS:
        metadata = latest_metadata(context.instance, dg.AssetKey(asset), checkpoint)
        if metadata is None:
            missing.append(asset)
            continue
        acc = series_value(metadata, checkpoint, "acc")
        acc_norm = series_value(metadata, checkpoint, "acc_norm")
        band = metadata["chance_band"].value if "chance_band" in metadata else None
        # Headers of two words wrap, so that the table fits the UI's metadata column at 1600 px.
        rows.append({"benchmark": asset.removesuffix("_score"), "acc": acc, "acc norm": acc_norm,
                     "chance band": band, "vs band": against_band(acc, band),
                     "n": int(metadata["questions"].value), "shots": int(metadata["num_fewshot"].value)})  # fmt: skip
    if not rows:
        raise dg.Failure(f"no benchmark has been scored for {checkpoint} yet: materialize the evaluation assets first")
    table = pl.DataFrame(rows)
    return dg.MaterializeResult(metadata={
        "suite": markdown_table(table, max_rows=50),
        "benchmarks": dg.MetadataValue.text(str(len(rows))),
        "not_scored_yet": dg.MetadataValue.text(", ".join(missing) or "none"),
        **run_series(checkpoint, {f"{r['benchmark']}/acc": r["acc"] for r in rows}),
    })
