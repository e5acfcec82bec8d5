"""Distillation in the training program (`objective=distill`), on CPU with gloo.

- The loss against a hand computation in NumPy: every logit, the teacher's top k, PAD positions left out,
  and alpha's two ends.
- Two data-parallel ranks learn a smaller student from a tiny Hugging Face Llama: the KL to the teacher
  falls; the top-k table (k = the vocabulary) gives the losses the on-the-fly teacher gives; a run killed
  after its step-4 checkpoint resumes from the saved table; a table computed for other settings is refused.
- Settings distillation cannot serve are refused before anything starts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.support.tiny_llama import tiny_hf_llama
from tests.training.test_training_parallel import VOCAB, launch, losses, run_ok, write_packed
from lm_assets.training.config import TrainConfig, override
from lm_assets.training.distill import distill_loss, parts_dict
from lm_assets.training.model import IGNORE_INDEX

slow = pytest.mark.slow


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def hand_loss(student, teacher, targets, T, alpha, ids=None) -> tuple[float, float, float]:
    """(loss, mean KL, mean CE) by the textbook formula, position by position."""
    kls, ces = [], []
    for b in range(targets.shape[0]):
        for t in range(targets.shape[1]):
            if targets[b, t] == IGNORE_INDEX:
                continue
            log_q = log_softmax(student[b, t] / T)
            if ids is not None:
                log_q = log_q[ids[b, t]]
            log_p = log_softmax(teacher[b, t] / T)
            kls.append(float(np.sum(np.exp(log_p) * (log_p - log_q))))
            ces.append(float(-log_softmax(student[b, t])[targets[b, t]]))
    kl, ce = np.mean(kls), np.mean(ces)
    return alpha * T * T * kl + (1 - alpha) * ce, kl, ce


@pytest.mark.parametrize("T,alpha", [(2.0, 0.5), (1.0, 1.0), (3.0, 0.0), (0.7, 0.25)])
def test_loss_matches_a_hand_computation(T, alpha):
    rng = np.random.default_rng(0)
    student, teacher = rng.normal(0, 2, (2, 5, 11)), rng.normal(0, 2, (2, 5, 11))
    targets = rng.integers(0, 11, (2, 5))
    targets[0, 1] = targets[1, 4] = IGNORE_INDEX  # PAD targets count in neither term
    want, kl, ce = hand_loss(student, teacher, targets, T, alpha)
    loss, parts = distill_loss(torch.tensor(student), torch.tensor(targets), torch.tensor(teacher), T, alpha)
    assert float(loss) == pytest.approx(want, rel=1e-6)
    assert float(parts[2]) == 8
    assert parts_dict(parts) == pytest.approx({"distill_kl": kl, "distill_ce": ce}, rel=1e-6)


def test_top_k_loss_matches_a_hand_computation_and_equals_the_full_loss_at_k_equal_vocabulary():
    rng = np.random.default_rng(1)
    student, teacher = rng.normal(0, 2, (2, 4, 9)), rng.normal(0, 2, (2, 4, 9))
    targets = rng.integers(0, 9, (2, 4))
    targets[1, 0] = IGNORE_INDEX
    top = torch.tensor(teacher).topk(3, dim=-1)
    want, _, _ = hand_loss(student, top.values.numpy(), targets, 2.0, 0.5, ids=top.indices.numpy())
    loss, _ = distill_loss(torch.tensor(student), torch.tensor(targets), top.values, 2.0, 0.5, top.indices.int())
    assert float(loss) == pytest.approx(want, rel=1e-6)
    full, _ = distill_loss(torch.tensor(student), torch.tensor(targets), torch.tensor(teacher), 2.0, 0.5)
    every = torch.tensor(teacher).topk(9, dim=-1)
    assert float(distill_loss(torch.tensor(student), torch.tensor(targets), every.values, 2.0, 0.5, every.indices)[0]) == (
        pytest.approx(float(full), rel=1e-6))
    assert float(loss) != pytest.approx(float(full), rel=1e-3)  # the truncated teacher is another distribution


def test_loss_gradient_reaches_the_student_only():
    student = torch.randn(1, 3, 7, requires_grad=True)
    teacher = torch.randn(1, 3, 7, requires_grad=True)
    loss, _ = distill_loss(student, torch.tensor([[1, 2, 3]]), teacher.detach(), 2.0, 0.5)
    loss.backward()
    assert student.grad is not None and float(student.grad.abs().sum()) > 0 and teacher.grad is None
    # the same student as the teacher, alpha 1: no loss, no gradient
    same, _ = distill_loss(teacher.detach(), torch.tensor([[1, 2, 3]]), teacher.detach(), 2.0, 1.0)
    assert float(same) == pytest.approx(0.0, abs=1e-6)


def test_config_refuses_what_distillation_cannot_serve(tmp_path):
    teacher = tmp_path / "teacher"
    teacher.mkdir()
    (teacher / "config.json").write_text("{}")

    def cfg(*overrides):
        c = TrainConfig(data="x")
        for o in ("objective=distill", *overrides):
            c = override(c, o)
        return c

    for overrides, message in [
        ((), "needs distill.teacher"),
        ((f"distill.teacher={tmp_path}",), "holds no config.json"),
        ((f"distill.teacher={teacher}", "distill.temperature=0"), "temperature must be positive"),
        ((f"distill.teacher={teacher}", "distill.alpha=1.5"), "alpha must lie in"),
        ((f"distill.teacher={teacher}", "distill.teacher_logits=cached"), "teacher_logits must be one of"),
        ((f"distill.teacher={teacher}", "distill.teacher_logits=top-k", "distill.top_k=0"), "top_k must be at least 1"),
        ((f"distill.teacher={teacher}", "distill.teacher_logits=top-k"), "set checkpoint.dir"),
        ((f"distill.teacher={teacher}", "parallel.pp=2"), "pipeline parallelism"),
    ]:
        with pytest.raises(ValueError, match=message):
            cfg(*overrides).validate()
    cfg(f"distill.teacher={teacher}").validate()


@pytest.fixture(scope="module")
def distill_inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    return write_packed(root / "data", n_seq=64), tiny_hf_llama(root / "teacher", VOCAB)


def distill_args(data, teacher, *extra: str) -> list[str]:
    # The student: the tiny preset at half the teacher's width and one layer.
    args = [f"data={data}", "objective=distill", f"distill.teacher={teacher}", "distill.alpha=1.0",
            "distill.temperature=1.0", "model_overrides=dim=32,n_layers=1,n_heads=2,n_kv_heads=1", "steps=8",
            "micro_batch_size=4", "optim.lr=3e-3", "optim.warmup_steps=1", "loader.num_workers=0", "seed=5"]  # fmt: skip
    return args + list(extra)


@slow
def test_a_student_learns_the_teacher_on_two_ranks_either_way_and_resumes_from_the_table(distill_inputs, tmp_path):
    data, teacher = distill_inputs
    summaries: list = []
    live = run_ok(2, distill_args(data, teacher), summaries=summaries)
    assert [m["step"] for m in live] == list(range(1, 9))
    kl = [m["distill_kl"] for m in live]
    assert kl[-1] < 0.7 * kl[0]  # the student moves towards the teacher
    assert losses(live) == pytest.approx(kl, rel=1e-5)  # alpha 1, T 1: the loss is the KL
    assert all(m["teacher_s"] > 0 for m in live)
    summary = summaries[0]
    assert summary["objective"] == "distill" and summary["distill"]["teacher_parameters"] > 0
    export = json.loads((teacher / "config.json").read_text())
    assert summary["distill"]["teacher"] == str(teacher) and export["vocab_size"] == VOCAB

    # The table at k = the vocabulary is every logit, in float16: the same losses. Killed after step 4's
    # checkpoint, the run resumes reading the table, not scoring again.
    ckpt = tmp_path / "topk"
    table = ["distill.teacher_logits=top-k", f"distill.top_k={VOCAB}", f"checkpoint.dir={ckpt}", "checkpoint.save_every=4"]
    rc, before, stderr = launch(2, distill_args(data, teacher, *table, "debug.fail_at_step=5"))  # after 5 steps
    assert rc != 0 and "injected failure before step 5" in stderr, stderr[-3000:]
    assert (ckpt / "teacher" / "values.bin").stat().st_size == 64 * 32 * VOCAB * 2
    identity = json.loads((ckpt / "teacher" / "identity.json").read_text())
    assert identity["shape"] == [64, 32, VOCAB] and set(identity["sha256"]) == {"values.bin", "ids.bin"}
    after = run_ok(2, distill_args(data, teacher, *table))
    assert [m["step"] for m in after] == [5, 6, 7, 8]
    assert losses(before[:4] + after) == pytest.approx(losses(live), rel=2e-3)
    assert all("teacher_s" in m and m["teacher_s"] == 0 for m in after)  # no teacher forward during steps

    rc, _, stderr = launch(2, distill_args(data, teacher, "distill.teacher_logits=top-k", "distill.top_k=8",
                                           f"checkpoint.dir={ckpt}", "steps=10"))  # fmt: skip
    assert rc != 0 and "were computed for" in stderr


@slow
def test_a_teacher_of_another_vocabulary_is_refused(distill_inputs, tmp_path):
    data, _ = distill_inputs
    small = tiny_hf_llama(tmp_path / "small", VOCAB - 10)
    rc, _, stderr = launch(1, distill_args(data, small, "steps=1"), launcher="python")
    assert rc != 0 and f"has a vocabulary of {VOCAB - 10} pieces" in stderr
