"""A loss, a reward and a fusion method, each with settings: an outside plugin in one module."""

from dataclasses import dataclass

import torch
from verl.workers.config.actor import PolicyLossConfig

from longcat_plugins import FusionMethod, PolicyLoss, RewardFunction, hookimpl, settings_for


@dataclass
class ClippedReinforceConfig(PolicyLossConfig):
    """Knobs of clipped_reinforce, under actor_rollout_ref.actor.policy_loss."""

    loss_mode: str = "clipped_reinforce"
    max_ratio: float = 2.0


def clipped_reinforce(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """REINFORCE with the importance ratio capped at policy_loss.max_ratio."""
    from verl.trainer.ppo.core_algos import agg_loss

    ratio = torch.exp(log_prob - old_log_prob).clamp(max=config.policy_loss.max_ratio)
    losses = -advantages * ratio
    if rollout_is_weights is not None:
        losses = losses * rollout_is_weights
    loss = agg_loss(losses, response_mask, loss_agg_mode, **config.global_batch_info)
    return loss, {"actor/capped_fraction": (ratio >= config.policy_loss.max_ratio)[response_mask].float().mean().item()}


@dataclass
class LastLineConfig:
    """Settings of last_line, under longcat.settings.reward.last_line."""

    ignore_case: bool = True
    credit: float = 1.0


def last_line(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Credit when the response's last non-empty line is exactly the answer."""
    settings = settings_for("reward", "last_line", overrides=kwargs)
    lines = [line.strip() for line in solution_str.splitlines() if line.strip()]
    answer, gold = (lines[-1] if lines else ""), str(ground_truth).strip()
    if settings.ignore_case:
        answer, gold = answer.lower(), gold.lower()
    return settings.credit if lines and answer == gold else 0.0


def mean_delta(base, experts, weights, ctx, *, scale: float = 1.0):
    """base + scale x the weighted mean of the experts' task vectors."""
    delta = sum(w * (e - base) for w, e in zip(weights, experts, strict=True)) / sum(weights)
    return base + scale * delta, {}


@hookimpl
def register_algorithms():
    return [PolicyLoss("clipped_reinforce", clipped_reinforce, config=ClippedReinforceConfig)]


@hookimpl
def register_rewards():
    return [RewardFunction("last_line", last_line, config=LastLineConfig)]


@hookimpl
def register_fusion_methods():
    return [FusionMethod("mean_delta", mean_delta)]
