"""An example third-party plugin: one policy loss, registered into verl by longcat-plugins.

``truncated_reinforce`` is REINFORCE with a truncated per-token importance ratio::

    loss_t = -A_t * min(r_t, max_ratio),   r_t = pi_theta(y_t) / pi_old(y_t)

Tokens whose ratio is above ``max_ratio`` stop contributing gradient, which bounds the update
from stale samples without PPO's symmetric clip. Select it with::

    actor_rollout_ref.actor.policy_loss.loss_mode: truncated_reinforce
    actor_rollout_ref.actor.policy_loss._target_: longcat_example_plugin.TruncatedReinforceConfig
    actor_rollout_ref.actor.policy_loss.max_ratio: 2.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from verl.workers.config.actor import PolicyLossConfig

from longcat_plugins import PolicyLoss, hookimpl


@dataclass
class TruncatedReinforceConfig(PolicyLossConfig):
    """verl's policy-loss config plus this loss's knob (verl rejects unknown plain keys)."""

    loss_mode: str = "truncated_reinforce"
    max_ratio: float = 2.0

    def __post_init__(self) -> None:
        if not self.max_ratio > 0:
            raise ValueError(f"policy_loss.max_ratio must be > 0, got {self.max_ratio}")


def compute_truncated_reinforce(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """REINFORCE with the importance ratio truncated at ``max_ratio``."""
    from verl.trainer.ppo.core_algos import agg_loss

    max_ratio = float(getattr(config.policy_loss, "max_ratio", 2.0)) if config is not None else 2.0
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, -20.0, 20.0))
    losses = -advantages * torch.clamp(ratio, max=max_ratio)
    if rollout_is_weights is not None:
        losses = losses * rollout_is_weights
    batch_info = getattr(config, "global_batch_info", {}) if config is not None else {}
    loss = agg_loss(loss_mat=losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **batch_info)
    mask = response_mask.bool()
    truncated = (ratio > max_ratio)[mask].float().mean() if mask.any() else torch.zeros(())
    return loss, {"example/truncated_fraction": truncated.item()}


@hookimpl
def register_algorithms() -> list[PolicyLoss]:
    return [PolicyLoss("truncated_reinforce", compute_truncated_reinforce, config=TruncatedReinforceConfig)]
