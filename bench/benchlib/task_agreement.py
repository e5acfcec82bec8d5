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
        extra = []
        try:
            examples = task.read(find(path, task.fewshot_files, name))
            files[fewshot] = _jsonl(out / "data" / name / f"{fewshot}.jsonl", examples)
        except FileNotFoundError:  # zero-shot only: lm-eval would still load the split its yaml names
            extra = [f"{'training' if fewshot == 'train' else 'validation'}_split: null"]
        local = f"local_{name}"
        _write_yaml(task_dir / f"{local}.yaml", local, upstream / UPSTREAM[name], files, extra)
        names[name] = [local]
    return names


def _write_yaml(path: Path, task: str, include: Path, files: dict[str, str], extra: list[str] = ()) -> None:
    lines = [f"task: {task}", f"include: {include.as_posix()}", "dataset_path: json", "dataset_name: null",
             "dataset_kwargs:", "  data_files:"] + [f"    {split}: {file}" for split, file in files.items()] + list(extra)  # fmt: skip
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


# ---------------------------------------------------------------------------------------------
# Bias: crows_pairs_english, bbq, and cbbq (lm-eval's bbq with Chinese unknown answers)
# ---------------------------------------------------------------------------------------------

BIAS_TASKS = ("crows_pairs_english", "bbq", "cbbq")
BIAS_FOLDERS = {"crows_pairs_english": "crows_pairs", "bbq": "bbq", "cbbq": "cbbq"}
BIAS_METRICS = {"crows_pairs_english": ("likelihood_diff", "pct_stereotype"),
                "bbq": ("acc", "accuracy_amb", "accuracy_disamb", "amb_bias_score", "disamb_bias_score")}  # fmt: skip
BIAS_METRICS["cbbq"] = BIAS_METRICS["bbq"]


def _cbbq_utils(upstream: Path, categories: list[str]) -> str:
    """lm-eval's bbq utils with its unknown answers and categories swapped for the Chinese set's."""
    from lm_assets.evaluation.bias import UNKNOWN_ZH

    source = (upstream / "bbq" / "utils.py").read_text()
    start = source.index("UNKNOWN_RESPONSES = [")
    end = source.index("]", start) + 1
    source = source[:start] + f"UNKNOWN_RESPONSES = {list(UNKNOWN_ZH)!r}" + source[end:]
    start = source.index("    CATEGORIES = [")
    end = source.index("]", start) + 1
    return source[:start] + f"    CATEGORIES = {categories!r}" + source[end:]


def write_bias_tasks(tasks: list[str], paths: dict[str, Path], out: Path) -> dict[str, str]:
    """A local lm-eval task per bias set, reading the release's rows as JSON lines; returns the local names."""
    import lm_eval

    from lm_assets.evaluation.bias import read_bbq, read_crows_pairs

    upstream = Path(lm_eval.__file__).parent / "tasks"
    task_dir = out / "tasks"
    task_dir.mkdir(parents=True, exist_ok=True)
    names = {}
    for name in tasks:
        local = f"local_{name}"
        rows = read_crows_pairs(paths[name]) if name == "crows_pairs_english" else read_bbq(paths[name])
        files = {"test": _jsonl(out / "data" / name / "test.jsonl", rows)}
        if name == "cbbq":
            categories = list(dict.fromkeys(r["category"] for r in rows))
            (task_dir / "cbbq_utils.py").write_text(_cbbq_utils(upstream, categories))
            metrics = [*BIAS_METRICS["bbq"][1:], *(f"{kind}_bias_score_{c}" for c in categories for kind in ("amb", "disamb"))]
            lines = [f"task: {local}", f"include: {(upstream / 'bbq' / 'bbq_multiple_choice.yaml').as_posix()}",
                     "dataset_path: json", "dataset_name: null", "dataset_kwargs:", "  data_files:",
                     f"    test: {files['test']}", "process_docs: !function cbbq_utils.process_docs",
                     "process_results: !function cbbq_utils.process_results_multiple_choice",
                     "doc_to_target: !function cbbq_utils.doc_to_target", "doc_to_choice: !function cbbq_utils.doc_to_choice",
                     "metric_list:", "  - metric: acc", "    aggregation: mean", "    higher_is_better: true"]  # fmt: skip
            aggregation = {"accuracy_amb": "agg_accuracy_amb", "accuracy_disamb": "agg_accuracy_disamb",
                           "amb_bias_score": "agg_amb_bias_scores", "disamb_bias_score": "agg_disamb_bias_scores"}  # fmt: skip
            for metric in metrics:
                agg = aggregation.get(metric) or ("agg_amb_bias_scores" if metric.startswith("amb") else "agg_disamb_bias_scores")
                lines += [f"  - metric: {metric}", f"    aggregation: !function cbbq_utils.{agg}", "    higher_is_better: false"]
            (task_dir / f"{local}.yaml").write_text("\n".join(lines) + "\n")
        else:
            _write_yaml(task_dir / f"{local}.yaml", local, upstream / ("crows_pairs/crows_pairs_english.yaml" if name ==
                        "crows_pairs_english" else "bbq/bbq_multiple_choice.yaml"), files)  # fmt: skip
        names[name] = local
    return names


def bias_agreement(hf_dir: Path, tasks: list[str], paths: dict[str, Path], out: Path, limit: int | None = None,
                   batch_size: int = 16) -> list[dict]:  # fmt: skip
    """Both sides on each bias set: per question, identical requests, the same choice and log-likelihoods; and
    lm-eval's aggregated metrics against ours."""
    import torch

    from lm_assets.evaluation.bias import (UNKNOWN_EN, UNKNOWN_ZH, bbq_summary, crows_pairs_questions,
                                           crows_pairs_summary, load_bbq, read_crows_pairs)  # fmt: skip
    from lm_assets.evaluation.checkpoint import load_model
    from lm_assets.evaluation.scoring import score_questions

    names = write_bias_tasks(tasks, paths, out)
    theirs = run_lm_eval(hf_dir, out / "tasks", list(names.values()), 0, limit, batch_size)
    em = load_model(hf_dir, device="cpu", dtype=torch.float32)
    rows = []
    for name in tasks:
        if name == "crows_pairs_english":
            docs = read_crows_pairs(paths[name])[:limit]
            questions = crows_pairs_questions(docs)
            scored = score_questions(em, questions)
            summary = crows_pairs_summary(docs, scored)["overall"]
        else:
            unknowns = UNKNOWN_EN if name == "bbq" else UNKNOWN_ZH
            docs, questions = load_bbq(paths[name], name, unknowns)
            docs, questions = docs[:limit], questions[:limit]
            scored = score_questions(em, questions)
            summary = bbq_summary(docs, scored, unknowns)["overall"]
        samples = theirs["samples"][names[name]]
        same_prompt = same_pred = 0
        max_diff = 0.0
        for i, (q, s) in enumerate(zip(questions, scored)):
            sample = samples[i]
            same_prompt += [tuple(a) for a in sample["arguments"]] == [(q.context, c) for c in q.continuations]
            lls = [float(r[0]) for r in sample["filtered_resps"]]
            same_pred += int(np.argmax(lls)) == s["pred"]
            max_diff = max(max_diff, max(abs(a - b) for a, b in zip(lls, s["loglikelihoods"])))
        result = theirs["results"][names[name]]
        metrics = {m: (result.get(f"{m},none"), summary[m]) for m in BIAS_METRICS[name]}
        metric_diff = max((abs(a - b) for a, b in metrics.values() if a is not None and a == a and b == b), default=0.0)
        rows.append({"task": name, "questions": len(questions), "prompts_identical": same_prompt,
                     "predictions_agree": same_pred, "max_abs_loglikelihood_diff": max_diff,
                     "agreement": same_pred / len(questions), "metrics": metrics, "max_abs_metric_diff": metric_diff})  # fmt: skip
    return rows
