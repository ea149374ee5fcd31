"""``triplet_clip``: the token-level objective of the first LongCat-Flash-Thinking report (A2).

    J(θ) = E[ 1/(G·T_max) Σ_i Σ_t min(r_it(μ), C) · f(r_it(θ), Â_it) ]

    Â ≥ 0:  f = min( r·Â, clip(r, 1-ε_neg_low, 1+ε_pos_high)·Â )               = Â·min(r, 1+ε_pos_high)
    Â < 0:  f = max( min( r·Â, clip(r, 1-ε_neg_low, 1+ε_pos_high)·Â ), ε_neg_high·Â )
                                                                               = Â·clip(r, 1-ε_neg_low, ε_neg_high)

r_it(θ) = π_θ/π_old per token; r_it(μ) = π_train/π_inference (A3, see :mod:`.importance`; with
``icepop`` on, min(r_it(μ), C) becomes min(r_it(μ), C)·1[α ≤ r_it(μ) ≤ β]);
G = sequences in the global mini-batch; T_max = maximum generation length; no KL term.

Reading of the paper: its formula prints the dual-clip ``max(·, ε_neg_high·Â)`` around every
token, but applied to Â > 0 with ε_neg_high > 1 it would replace almost every positive token's
objective by the constant ε_neg_high·Â (no gradient). The report cites dual-clip PPO (Ye et
al., 2020), where that bound applies to negative advantages only, and its text says
"ε_neg_low and ε_neg_high bound the ratio for negative advantages, ε_pos_high for positive
ones"; we implement that. ε_neg_high is a ratio bound (like verl's ``clip_ratio_c``), not 1+ε.

Relation to stock verl: per token this equals ``vanilla`` with ``clip_ratio_low = ε_neg_low``,
``clip_ratio_high = ε_pos_high``, ``clip_ratio_c = ε_neg_high`` (tests prove it). It is its
own function because the paper's parts are pinned here rather than spread over actor keys:
the constant G·T_max denominator whatever ``loss_agg_mode`` says, the cap C on the IS weight,
knobs named and validated as in the paper, and one metric per bound.

The denominator, exactly: ``agg_loss(..., "seq-mean-token-sum-norm")`` with G =
``global_batch_info["global_batch_size"]`` (verl sets it to ppo_mini_batch_size × rollout.n,
the sequences in the global mini-batch, on every micro-batch) and T_max =
``actor.loss_scale_factor`` (required). Both are constants, so a mini-batch's gradient is the
same whole or split into micro-batches of any padded width, and across data-parallel ranks
(``agg_loss`` multiplies by ``dp_size`` because FSDP averages rank gradients).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig

from longcat_plugins.algorithms.importance import (
    KEY_PREFIX,
    ISConfig,
    check_rollout_correction,
    correct_is_weights,
    is_knobs_from_mapping,
)

__all__ = ["TripletClipConfig", "compute_triplet_clip_loss", "KEY_PREFIX"]


@dataclass
class TripletClipConfig(ISConfig):
    """Knobs of ``triplet_clip``; select with ``policy_loss._target_`` (verl rejects unknown plain keys).

    Defaults are not from the paper (it gives none): ε_neg_low and ε_pos_high follow DAPO's
    clip-higher (0.2 / 0.28), ε_neg_high verl's dual-clip default 3.0, C verl's TIS default 2.0.
    ``is_cap`` and the IcePop knobs are :class:`~longcat_plugins.algorithms.importance.ISConfig`'s.
    """

    loss_mode: str = "triplet_clip"
    #: ratio lower bound 1-ε_neg_low for negative advantages
    eps_neg_low: float = 0.2
    #: dual-clip bound for negative advantages: the ratio counts at most ε_neg_high (> 1)
    eps_neg_high: float = 3.0
    #: ratio upper bound 1+ε_pos_high for positive advantages
    eps_pos_high: float = 0.28

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("eps_neg_low", "eps_pos_high"):
            value = getattr(self, name)
            if not (_is_number(value) and value >= 0):
                raise ValueError(f"{KEY_PREFIX}.{name} must be >= 0, got {value!r}")
        if not self.eps_neg_low <= 1:
            raise ValueError(
                f"{KEY_PREFIX}.eps_neg_low must be <= 1 (the lower ratio bound 1-eps_neg_low is then >= 0), "
                f"got {self.eps_neg_low!r}"
            )
        if not (_is_number(self.eps_neg_high) and self.eps_neg_high > 1):
            raise ValueError(
                f"{KEY_PREFIX}.eps_neg_high must be > 1 (the dual-clip ratio bound for negative advantages), "
                f"got {self.eps_neg_high!r}"
            )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def compute_triplet_clip_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-sum-norm",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Triplet-clip PPO loss with truncated IS and the constant G·T_max denominator (LongCat-Flash-Thinking).

    ``loss_agg_mode`` is accepted for verl's signature and ignored: the denominator is part of
    the objective. Metrics: ``longcat/triplet/{pos_high,neg_low,neg_dual}_clipfrac`` (fraction of
    valid tokens whose ratio is outside that bound, so the token gives no gradient),
    ``longcat/is_truncated_frac``, with ``icepop`` on ``longcat/icepop_masked_frac``, and verl's usual
    ``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower`` with vanilla's meaning.
    """
    from verl.trainer.ppo.core_algos import agg_loss  # lazily: its import runs the bridge, which loads us

    knobs = _knobs(config)
    info = dict(getattr(config, "global_batch_info", None) or {})
    t_max = info.get("loss_scale_factor") or config.get("loss_scale_factor")
    if not t_max:
        raise ValueError(
            "triplet_clip divides the token sum by G*T_max: set actor_rollout_ref.actor.loss_scale_factor to the "
            "maximum response length (e.g. ${data.max_response_length})"
        )
    dp_size = info.get("dp_size") or 1
    global_batch_size = info.get("global_batch_size")
    if global_batch_size is None:
        if dp_size > 1:
            raise ValueError("triplet_clip needs global_batch_info['global_batch_size'] when dp_size > 1")
        global_batch_size = response_mask.shape[0]  # exact only when this call holds the whole mini-batch

    lower = 1.0 - knobs.eps_neg_low
    upper_pos = 1.0 + knobs.eps_pos_high
    upper_neg = knobs.eps_neg_high

    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)  # as verl, for stability
    ratio = torch.exp(log_ratio)
    negative = advantages < 0
    # the ratio each token's objective uses; outside its bounds the clipped branch is constant in θ
    effective_ratio = torch.where(negative, ratio.clamp(lower, upper_neg), ratio.clamp(max=upper_pos))
    pg_losses = -advantages * effective_ratio
    mask = response_mask if response_mask.dtype == torch.bool else response_mask.bool()
    weights, n_truncated, n_masked = correct_is_weights(rollout_is_weights, mask, knobs)
    if weights is not None:
        pg_losses = pg_losses * weights
    loss = agg_loss(
        loss_mat=pg_losses,
        loss_mask=response_mask,
        loss_agg_mode="seq-mean-token-sum-norm",
        dp_size=dp_size,
        global_batch_size=global_batch_size,
        loss_scale_factor=t_max,
    )

    with torch.no_grad():
        positive = advantages > 0
        counts = torch.stack(
            [
                (positive & (ratio > upper_pos) & mask).sum(),
                (negative & (ratio < lower) & mask).sum(),
                (negative & (ratio > upper_neg) & mask).sum(),
                mask.sum(),
                torch.where(mask, log_ratio, 0.0).sum(dtype=torch.float64),
                *(c for c in (n_truncated, n_masked) if c is not None),
            ]
        ).tolist()  # the one host sync
    pos_high, neg_low, neg_dual, n_tokens, log_ratio_sum, *rest = counts
    n_tokens = max(n_tokens, 1)
    pos_high, neg_low, neg_dual = (c / n_tokens for c in (pos_high, neg_low, neg_dual))
    truncated = rest.pop(0) / n_tokens if n_truncated is not None else 0.0
    ppo_kl = -log_ratio_sum / n_tokens
    metrics = {
        "longcat/triplet/pos_high_clipfrac": pos_high,
        "longcat/triplet/neg_low_clipfrac": neg_low,
        "longcat/triplet/neg_dual_clipfrac": neg_dual,
        "longcat/is_truncated_frac": truncated,
        "actor/pg_clipfrac": pos_high + neg_low,
        "actor/ppo_kl": ppo_kl,
        "actor/pg_clipfrac_lower": neg_dual,
    }
    if n_masked is not None:
        metrics["longcat/icepop_masked_frac"] = rest.pop(0) / n_tokens
    return loss, metrics


_KNOBS = ("eps_neg_low", "eps_neg_high", "eps_pos_high")


def _knobs(config: Any) -> TripletClipConfig:
    if config is None:
        raise ValueError("triplet_clip needs the actor config (verl passes it as `config`)")
    policy_loss = config.get("policy_loss") if hasattr(config, "get") else getattr(config, "policy_loss", None)
    if isinstance(policy_loss, TripletClipConfig):
        return policy_loss
    if isinstance(policy_loss, dict | DictConfig) and "eps_neg_high" in policy_loss:  # not yet a dataclass
        return TripletClipConfig(
            **{f: policy_loss[f] for f in _KNOBS if f in policy_loss}, **is_knobs_from_mapping(policy_loss)
        )
    raise ValueError(
        f"loss_mode triplet_clip needs {KEY_PREFIX}._target_: "
        f"{TripletClipConfig.__module__}.{TripletClipConfig.__qualname__} (got {type(policy_loss).__name__}); "
        "its knobs eps_neg_low, eps_neg_high, eps_pos_high, is_cap, icepop, icepop_low, icepop_high live there"
    )


#: checked before Ray by ``longcat-plugins`` (``config.validate_verl_selections``): IcePop needs verl's ratios
compute_triplet_clip_loss.check_config = check_rollout_correction  # type: ignore[attr-defined]
