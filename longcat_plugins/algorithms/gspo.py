"""``longcat_gspo``: GSPO as the LongCat-Flash-Thinking-2601 report trains with it (2601 report §3.3.1).

Eq. 1 of the report (§3.3.1), plus the engine-mismatch weight (truncated importance sampling)
and incomplete-signal masking of the first LongCat-Flash-Thinking report ("Training Objective",
"Efficient Training Strategies"):

    J(θ) = E[ 1/G Σ_i min( s_i(θ)·Â_i, clip(s_i(θ), 1-ε_low, 1+ε_high)·Â_i ) ]
    s_i(θ) = exp( 1/|y_i| Σ_t log π_θ(y_it)/π_old(y_it) )

This is stock verl ``gspo`` plus settings, so it is a thin named preset that calls
:func:`verl.trainer.ppo.core_algos.compute_policy_loss_gspo` (GSPO-token form: s_it =
sg[s_i]·π_θ(y_it)/sg[π_θ(y_it)]). While a sequence's mean log-ratio stays at or below 10 this
has Eq. 1's value and, for a sequence-constant advantage, its gradient; above that verl clamps
the per-token log-ratio at 10 "for numerical stability", so s_it = e^10 there and such a
token gives no gradient, where Eq. 1 would give exp(mean log-ratio) and a gradient (such a
sequence is far outside any clip range; with Â > 0 Eq. 1's clip also stops it, with Â < 0 it
does not). What the preset pins, and stock ``gspo`` leaves to other keys:

* **sequence-level aggregation**: always ``seq-mean-token-mean`` (1/G Σ_i of per-sequence
  means, Eq. 1). Stock ``gspo`` uses ``actor.loss_agg_mode``, whose default ``token-mean``
  weights long sequences more and is not Eq. 1. G is ``global_batch_info["global_batch_size"]``
  (the global mini-batch), a constant, so micro-batching is exact.
* **engine-mismatch correction**: verl's ``rollout_is_weights`` (``algorithm.rollout_correction``),
  capped at ``policy_loss.is_cap`` = C, multiplied per token (see :mod:`.importance`).
* **masking**: samples without a valid signal reach the loss with zero advantage from
  ``longcat_grpo`` and so contribute nothing; verl's rejection sampling
  (``rollout_rs``) masks through ``response_mask``.
* metrics: ``longcat/gspo/{low,high}_clipfrac`` (fraction of sequences whose s_i is clipped at
  that bound, so they give no gradient) and ``longcat/is_truncated_frac``, next to stock's.

The clip range stays in verl's own keys ``actor.clip_ratio_low`` / ``clip_ratio_high``, which
stock ``gspo`` reads (GSPO's paper uses 3e-4 / 4e-4; the recipe sets them). With
``is_cap: .inf`` (or no rollout correction) the preset equals stock ``gspo`` called with
``loss_agg_mode="seq-mean-token-mean"`` (bit for bit in float32; the float mask it hands
``gspo`` shifts float64 results by ~1e-8/|y_i| through ``agg_loss``'s ``+ 1e-8``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig
from verl.workers.config.actor import PolicyLossConfig

from longcat_plugins.algorithms.importance import cap_is_weights, validate_is_cap

__all__ = ["LongcatGSPOConfig", "compute_longcat_gspo_loss", "GSPO_AGG_MODE"]

KEY_PREFIX = "actor_rollout_ref.actor.policy_loss"
#: Eq. 1's 1/G Σ_i over per-sequence objectives
GSPO_AGG_MODE = "seq-mean-token-mean"


@dataclass
class LongcatGSPOConfig(PolicyLossConfig):
    """Knobs of ``longcat_gspo``; select with ``policy_loss._target_``. The clip range is verl's
    ``actor.clip_ratio_low`` / ``clip_ratio_high``."""

    loss_mode: str = "longcat_gspo"
    #: C, the cap of the truncated engine-mismatch IS weight min(π_train/π_inference, C)
    is_cap: float = 2.0

    def __post_init__(self) -> None:
        validate_is_cap(self.is_cap, f"{KEY_PREFIX}.is_cap")


#: devices where gspo gets the response mask as float (measured faster on the CPU, not on CUDA)
FLOAT_MASK_DEVICES = frozenset({"cpu"})


def compute_longcat_gspo_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = GSPO_AGG_MODE,
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """GSPO with sequence-level aggregation and a capped engine-mismatch IS weight (LongCat-Flash-Thinking-2601).

    ``loss_agg_mode`` is accepted for verl's signature and ignored (always ``seq-mean-token-mean``).
    """
    from verl.trainer.ppo.core_algos import compute_policy_loss_gspo  # lazily: its import runs the bridge

    if config is None:
        raise ValueError("longcat_gspo needs the actor config (verl passes it as `config`)")
    is_cap = _is_cap(config)
    weights, n_truncated = cap_is_weights(rollout_is_weights, is_cap)
    # verl hands a bool mask; on the CPU one conversion here, shared with the metrics below,
    # spares every masked op inside gspo a bool->float promotion (same values, and faster); on
    # CUDA the promotion is fused into each kernel and the extra float tensor only costs, so
    # there gspo gets verl's own mask (tests check both formulations agree)
    mask = response_mask.to(log_prob.dtype)
    loss, metrics = compute_policy_loss_gspo(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=mask if log_prob.device.type in FLOAT_MASK_DEVICES else response_mask,
        loss_agg_mode=GSPO_AGG_MODE,
        config=config,
        rollout_is_weights=weights,
    )

    with torch.no_grad():
        clip_low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
        clip_high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
        lengths = mask.sum(dim=-1)
        present = lengths > 0
        seq_log_ratio = torch.linalg.vecdot(log_prob.detach(), mask) - torch.linalg.vecdot(old_log_prob, mask)
        seq_ratio = torch.exp(torch.clamp(seq_log_ratio / lengths.clamp(min=1), max=10.0))  # as verl
        seq_adv = torch.linalg.vecdot(advantages, mask)  # its sign is Â_i's
        counts = torch.stack(
            [
                (present & (seq_adv < 0) & (seq_ratio < 1 - clip_low)).sum(),
                (present & (seq_adv > 0) & (seq_ratio > 1 + clip_high)).sum(),
                n_truncated if n_truncated is not None else present.new_zeros((), dtype=torch.long),
            ]
        ).tolist()
        n_seqs = max(int(present.sum()), 1)
        n_tokens = max(int(lengths.sum()), 1)
    metrics.update(
        {
            "longcat/gspo/low_clipfrac": counts[0] / n_seqs,
            "longcat/gspo/high_clipfrac": counts[1] / n_seqs,
            "longcat/is_truncated_frac": counts[2] / n_tokens,
        }
    )
    return loss, metrics


def _is_cap(config: Any) -> float:
    policy_loss = config.get("policy_loss") if hasattr(config, "get") else getattr(config, "policy_loss", None)
    if isinstance(policy_loss, LongcatGSPOConfig):
        return policy_loss.is_cap
    if isinstance(policy_loss, dict | DictConfig) and "is_cap" in policy_loss:  # not yet a dataclass
        return LongcatGSPOConfig(is_cap=policy_loss["is_cap"]).is_cap
    raise ValueError(
        f"loss_mode longcat_gspo needs {KEY_PREFIX}._target_: "
        f"{LongcatGSPOConfig.__module__}.{LongcatGSPOConfig.__qualname__} (got {type(policy_loss).__name__}); "
        "its knob is_cap lives there"
    )
