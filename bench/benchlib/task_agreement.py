"""The task suite (`lm_assets.evaluation.tasks`) against lm-evaluation-harness, question by question.

For each task, the documents our reader makes of the release's files are written as JSON lines in the
Hugging Face layout, and a local lm-eval task is written that `include`s lm-eval's own task file (its
`doc_to_text`, `doc_to_choice`, `doc_to_target`, `process_docs`, splits and metrics) and only points its
dataset at those lines. lm-eval scores them with `simple_evaluate(model="hf", log_samples=True)`; we score
our questions from the same release files with `lm_assets.evaluation.scoring.score_questions`. Per question
the two sides' requests (context and continuation strings) must be identical, and the predictions and
log-likelihoods agree.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

SPLIT_FILES = {  # lm-eval's split names for each task's scored and few-shot documents
    "hellaswag": ("validation", "train"), "arc_easy": ("test", "train"), "arc_challenge": ("test", "train"),
    "piqa": ("validation", "train"), "winogrande": ("validation", "train"), "boolq": ("validation", "train"),
    "xstorycloze_zh": ("eval", "train"), "xcopa_zh": ("test", "validation"), "cmmlu": ("test", "dev"),
}  # fmt: skip
UPSTREAM = {"hellaswag": "hellaswag/hellaswag.yaml", "arc_easy": "arc/arc_easy.yaml",
            "arc_challenge": "arc/arc_challenge.yaml", "piqa": "piqa/piqa.yaml", "winogrande": "winogrande/default.yaml",
            "boolq": "super_glue/boolq/default.yaml", "xstorycloze_zh": "xstorycloze/default_zh.yaml",
            "xcopa_zh": "xcopa/default_zh.yaml"}  # fmt: skip


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path.as_posix()


def write_local_tasks(tasks: list[str], paths: dict[str, Path], out: Path) -> dict[str, list[str]]:
    """lm-eval task files for `tasks` under `out/tasks/`, reading our readers' documents; returns, per task, the
    local lm-eval task names (CMMLU: one per subject)."""
    import lm_eval

    from lm_assets.evaluation.tasks import TASKS, find, read_rows

    upstream = Path(lm_eval.__file__).parent / "tasks"
    task_dir = out / "tasks"
    task_dir.mkdir(parents=True, exist_ok=True)
    names: dict[str, list[str]] = {}
    for name in tasks:
        task, path = TASKS[name], paths[name]
        scored, fewshot = SPLIT_FILES[name]
        if name == "cmmlu":
            names[name] = []
            for test in sorted((path / "test").glob("*.csv")):
                subject = test.stem
                files = {scored: _jsonl(out / "data" / name / subject / f"{scored}.jsonl", read_rows(test)),
                         fewshot: _jsonl(out / "data" / name / subject / f"{fewshot}.jsonl", read_rows(path / "dev" / test.name))}
                local = f"local_cmmlu_{subject}"
                _write_yaml(task_dir / f"{local}.yaml", local, upstream / "cmmlu" / f"cmmlu_{subject}.yaml", files)
                names[name].append(local)
            continue
        docs = task.read(find(path, task.eval_files, name))
        files = {scored: _jsonl(out / "data" / name / f"{scored}.jsonl", docs)}
        try:
            examples = task.read(find(path, task.fewshot_files, name))
            files[fewshot] = _jsonl(out / "data" / name / f"{fewshot}.jsonl", examples)
        except FileNotFoundError:
            pass
        local = f"local_{name}"
        _write_yaml(task_dir / f"{local}.yaml", local, upstream / UPSTREAM[name], files)
        names[name] = [local]
    return names


def _write_yaml(path: Path, task: str, include: Path, files: dict[str, str]) -> None:
    lines = [f"task: {task}", f"include: {include.as_posix()}", "dataset_path: json", "dataset_name: null",
             "dataset_kwargs:", "  data_files:"] + [f"    {split}: {file}" for split, file in files.items()]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def run_lm_eval(hf_dir: Path, task_dir: Path, local: list[str], shots: int, limit: int | None, batch_size: int) -> dict:
    """lm-eval's per-sample requests and log-likelihoods of each local task: `{task: {doc_id: sample}}`."""
    import logging

    import lm_eval
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm_eval.models.huggingface").setLevel(logging.ERROR)
    tm = TaskManager(include_path=str(task_dir), include_defaults=False)
    res = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={hf_dir},dtype=float32", tasks=local,
                                  num_fewshot=shots, batch_size=batch_size, device="cpu", limit=limit,
                                  log_samples=True, bootstrap_iters=0, task_manager=tm)  # fmt: skip
    samples = {t: {int(s["doc_id"]): s for s in res["samples"][t]} for t in local}
    return {"samples": samples, "results": {t: res["results"][t] for t in local}, "version": lm_eval.__version__}


def compare_task(name: str, questions, ours: list[dict], theirs: dict[str, dict[int, dict]], local: list[str]) -> dict:
    """Per question: identical requests, the same prediction, the largest log-likelihood difference."""
    from lm_assets.evaluation.tasks import TASKS

    by_subject: dict[str, list[tuple]] = {}
    for q, scored in zip(questions, ours):
        by_subject.setdefault(q.subject, []).append((q, scored))
    same_prompt = same_pred = same_pred_norm = n = 0
    max_diff = 0.0
    missing = 0
    for task_name in local:
        subject = task_name.removeprefix("local_cmmlu_") if name == "cmmlu" else name
        for i, (q, scored) in enumerate(by_subject.get(subject, [])):
            sample = theirs[task_name].get(i)
            if sample is None:
                missing += 1
                continue
            n += 1
            requests = [tuple(a) for a in sample["arguments"]]
            ours_requests = [(ctx, cont) for ctx, conts in q.items for cont in conts]
            same_prompt += requests == ours_requests
            lls = [float(r[0]) for r in sample["filtered_resps"]]
            same_pred += int(np.argmax(lls)) == scored["pred"]
            if "acc_norm" in TASKS[name].metrics:
                lengths = np.array([float(len(c)) for c in q.choices])
                same_pred_norm += int(np.argmax(np.array(lls) / lengths)) == scored["pred_norm"]
            else:
                same_pred_norm += 1
            max_diff = max(max_diff, max(abs(a - b) for a, b in zip(lls, scored["loglikelihoods"])))
    return {"task": name, "questions": n, "prompts_identical": same_prompt, "predictions_agree": same_pred,
            "acc_norm_predictions_agree": same_pred_norm, "max_abs_loglikelihood_diff": max_diff,
            "agreement": same_pred / n if n else None, "missing_on_their_side": missing}  # fmt: skip


def agreement(hf_dir: Path, tasks: list[str], paths: dict[str, Path], out: Path, shots: int = 0,
              limit: int | None = None, batch_size: int = 16) -> list[dict]:  # fmt: skip
    """Both sides on every task; one comparison per task."""
    import torch

    from lm_assets.evaluation.checkpoint import load_model
    from lm_assets.evaluation.scoring import score_questions
    from lm_assets.evaluation.tasks import TASKS, load_task

    names = write_local_tasks(tasks, paths, out)
    started = time.perf_counter()
    theirs = run_lm_eval(hf_dir, out / "tasks", [t for name in tasks for t in names[name]], shots, limit, batch_size)
    their_seconds = time.perf_counter() - started
    em = load_model(hf_dir, device="cpu", dtype=torch.float32)
    rows = []
    for name in tasks:
        shots_here = shots
        questions = load_task(TASKS[name], paths[name], shots_here, limit)
        ours = score_questions(em, questions)
        rows.append(compare_task(name, questions, ours, theirs["samples"], names[name]))
    for row in rows:
        row["lm_eval_seconds_all_tasks"] = round(their_seconds, 1)
    return rows
