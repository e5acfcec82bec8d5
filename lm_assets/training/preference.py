"""Direct preference optimization (Rafailov et al. 2023): the loss, the implicit rewards and the
sequence log-probabilities they are computed from.

A pair is a prompt with a chosen and a rejected answer. With `pi` the trained model and `ref` the
frozen reference (the checkpoint DPO starts from), each answer's implicit reward is
`beta * (log pi(answer) - log ref(answer))`, summed over the answer's tokens, and

- `sigmoid` (DPO): `-log sigmoid(beta * delta)`, `delta` the chosen minus the rejected log-ratio; with
  `label_smoothing` eps > 0 it is conservative DPO, `-(1 - eps) log sigmoid(beta delta) - eps log
  sigmoid(-beta delta)`, for labels flipped with probability eps;
- `robust` (rDPO, Chowdhury et al. 2024): the unbiased form of the same, divided by `1 - 2 eps`.

`sigmoid` without smoothing and `robust` equal TRL's `DPOTrainer` (trl 1.16) loss types of those
names (tests/training/test_preference.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lm_assets.training.config import check_loss_settings


@dataclass
class PreferenceLoss:
    loss: torch.Tensor  # the batch mean
    chosen_rewards: torch.Tensor  # per pair, detached
    rejected_rewards: torch.Tensor

    def metrics(self) -> dict[str, float]:
        margin = self.chosen_rewards - self.rejected_rewards
        return {"loss": float(self.loss.detach()), "reward_accuracy": float((margin > 0).float().mean()),
                "reward_margin": float(margin.mean()), "chosen_reward": float(self.chosen_rewards.mean()),
                "rejected_reward": float(self.rejected_rewards.mean())}  # fmt: skip


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float = 0.1, label_smoothing: float = 0.0,
             loss_type: str = "sigmoid") -> PreferenceLoss:  # fmt: skip
    """The DPO loss over a batch of pairs, from each answer's summed log-probability under the policy
    and the reference (`[pairs]` each)."""
    check_loss_settings(beta, label_smoothing, loss_type)
    chosen_ratio, rejected_ratio = policy_chosen - ref_chosen, policy_rejected - ref_rejected
    logits = beta * (chosen_ratio - rejected_ratio)
    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)
    else:
        losses = (-(1 - label_smoothing) * F.logsigmoid(logits) + label_smoothing * F.logsigmoid(-logits)) / (
            1 - 2 * label_smoothing
        )
    return PreferenceLoss(losses.mean(), beta * chosen_ratio.detach(), beta * rejected_ratio.detach())


def sequence_log_probs(logits: torch.Tensor, targets: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Each row's summed log-probability of its `targets` where `loss_mask` is set (the answer's tokens):
    `logits [B, T, V]`, `targets [B, T]` (the next token of each position), `loss_mask [B, T]`."""
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return (logp * loss_mask.to(logp.dtype)).sum(dim=-1)


def kl_to_reference(policy_logits: torch.Tensor, ref_logits: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean per-token KL(policy || reference) over the masked (answer) positions."""
    logp, logq = torch.log_softmax(policy_logits.float(), -1), torch.log_softmax(ref_logits.float(), -1)
    per_token = (logp.exp() * (logp - logq)).sum(-1)
    mask = loss_mask.to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp_min(1)
