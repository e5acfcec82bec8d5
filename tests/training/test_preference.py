"""DPO's loss and rewards (lm_assets/training/preference.py) equal TRL's DPOTrainer (trl 1.16) on a fixed batch."""

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from lm_assets.training.preference import dpo_loss, kl_to_reference, sequence_log_probs

PAIRS, T = 6, 9


def fixed_batch():
    g = torch.Generator().manual_seed(0)
    mask = torch.zeros(2 * PAIRS, T, dtype=torch.long)
    for row in range(2 * PAIRS):
        mask[row, 3 + row % 3:] = 1  # prompts of 3 to 5 tokens, the rest is the answer
    per_token = -torch.rand(2 * PAIRS, T - 1, generator=g, dtype=torch.float64) * 3 * mask[:, 1:]
    ref = -torch.rand(2 * PAIRS, generator=g, dtype=torch.float64) * 10 - 5
    return mask, per_token, ref


def trl_loss(loss_type: str, beta: float, label_smoothing: float):
    """TRL's own `DPOTrainer._compute_loss`, run on a model whose per-token log-probabilities are fixed."""
    from trl.trainer.dpo_trainer import DPOTrainer

    mask, per_token, ref = fixed_batch()
    outputs = SimpleNamespace(log_probs=per_token, entropy=torch.zeros_like(per_token),
                              mean_logits=torch.zeros_like(per_token), is_top1=torch.zeros_like(per_token, dtype=torch.bool))
    accelerator = SimpleNamespace(device=torch.device("cpu"), gather=lambda t: t, gather_for_metrics=lambda t: t)
    trainer = SimpleNamespace(
        model=SimpleNamespace(training=True), accelerator=accelerator, aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=[loss_type], loss_weights=[1.0],
        beta=beta, label_smoothing=label_smoothing, use_weighting=False, _metrics={"train": defaultdict(list)},
        _total_train_tokens=0, _tp_size=1,
    )
    inputs = {"input_ids": torch.zeros(2 * PAIRS, T, dtype=torch.long), "attention_mask": torch.ones(2 * PAIRS, T),
              "completion_mask": mask, "ref_chosen_logps": ref[:PAIRS], "ref_rejected_logps": ref[PAIRS:]}
    loss = DPOTrainer._compute_loss(trainer, lambda **_: outputs, inputs, return_outputs=False)
    return float(loss), trainer._metrics["train"]


@pytest.mark.parametrize(("loss_type", "beta", "label_smoothing"),
                         [("sigmoid", 0.1, 0.0), ("sigmoid", 0.5, 0.0), ("robust", 0.1, 0.1), ("robust", 0.3, 0.25)])
def test_loss_and_rewards_equal_trl_dpo_trainer(loss_type, beta, label_smoothing):
    pytest.importorskip("trl")
    mask, per_token, ref = fixed_batch()
    logps = per_token.sum(1)
    ours = dpo_loss(logps[:PAIRS], logps[PAIRS:], ref[:PAIRS], ref[PAIRS:], beta, label_smoothing, loss_type)
    theirs, metrics = trl_loss(loss_type, beta, label_smoothing)
    assert abs(float(ours.loss) - theirs) <= 1e-6
    got = ours.metrics()
    assert abs(got["reward_accuracy"] - metrics["rewards/accuracies"][0]) <= 1e-6
    assert abs(got["reward_margin"] - metrics["rewards/margins"][0]) <= 1e-6
    assert abs(got["chosen_reward"] - metrics["rewards/chosen"][0]) <= 1e-6
    assert abs(got["rejected_reward"] - metrics["rewards/rejected"][0]) <= 1e-6


def test_label_smoothing_is_conservative_dpo():
    chosen, rejected = torch.tensor([-3.0, -8.0]), torch.tensor([-6.0, -4.0])
    ref_c, ref_r = torch.tensor([-4.0, -7.0]), torch.tensor([-5.0, -5.0])
    z = 0.2 * ((chosen - ref_c) - (rejected - ref_r))
    expected = (-(0.9) * F.logsigmoid(z) - 0.1 * F.logsigmoid(-z)).mean()
    got = dpo_loss(chosen, rejected, ref_c, ref_r, beta=0.2, label_smoothing=0.1).loss
    assert torch.allclose(got, expected, atol=1e-7)
    # at the start the policy is the reference: every reward is 0 and the loss is log 2
    start = dpo_loss(ref_c, ref_r, ref_c, ref_r, beta=0.2)
    assert abs(float(start.loss) - 0.6931472) < 1e-6 and start.metrics()["reward_accuracy"] == 0.0


def test_sequence_log_probs_sum_the_answer_tokens_only():
    logits = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(2))
    mask = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]])
    logp = torch.log_softmax(logits, -1)
    expected = torch.stack([sum(logp[b, t, targets[b, t]] for t in range(5) if mask[b, t]) for b in range(2)])
    assert torch.allclose(sequence_log_probs(logits, targets, mask), expected, atol=1e-6)
    assert float(kl_to_reference(logits, logits, mask)) == pytest.approx(0.0, abs=1e-7)
    assert float(kl_to_reference(logits, torch.zeros_like(logits), mask)) > 0


@pytest.mark.parametrize(("kwargs", "message"), [({"beta": 0.0}, "beta"), ({"label_smoothing": 0.5}, "label_smoothing"),
                                                 ({"loss_type": "hinge"}, "loss_type")])
def test_bad_settings_are_refused(kwargs, message):
    x = torch.zeros(2)
    with pytest.raises(ValueError, match=message):
        dpo_loss(x, x, x, x, **kwargs)
