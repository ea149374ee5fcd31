"""``longcat_gspo``: GSPO as the LongCat-Flash-Thinking-2601 report trains with it (2601 report §3.3.1).

Eq. 1 of the report (§3.3.1), plus the engine-mismatch weight (truncated importance sampling,
optionally IcePop) and incomplete-signal masking of the first LongCat-Flash-Thinking report
("Training Objective", "Efficient Training Strategies"):

    J(θ) = E[ 1/G Σ_i min( s_i(θ)·Â_i, clip(s_i(θ), 1-ε_low, 1+ε_high)·Â_i ) ]
    s_i(θ) = exp( 1/|y_i| Σ_t log π_θ(y_it)/π_old(y_it) )

in the GSPO-token form verl's ``gspo`` also uses (Zheng et al. 2025: s_it = sg[s_i]·π_θ(y_it)/
sg[π_θ(y_it)], per-token advantages and IS weights), aggregated ``seq-mean-token-mean``. The
value is Eq. 1's and, for a sequence-constant advantage, so is the gradient. Like verl, the
per-token log-ratio is clamped at 10 "for numerical stability": a sequence whose mean log-ratio
exceeds 10 has s = e^10 and gives no gradient, where Eq. 1 would give exp(mean log-ratio) and a
gradient (such a sequence is far outside any clip range; with Â > 0 Eq. 1's clip also stops it,
with Â < 0 it does not). What differs from stock ``gspo``:

* **sequence-level aggregation**: always ``seq-mean-token-mean`` (1/G Σ_i of per-sequence
  means, Eq. 1). Stock ``gspo`` uses ``actor.loss_agg_mode``, whose default ``token-mean``
  weights long sequences more and is not Eq. 1. G is ``global_batch_info["global_batch_size"]``
  (the global mini-batch), a constant, so micro-batching is exact.
* **engine-mismatch correction**: verl's ``rollout_is_weights`` (``algorithm.rollout_correction``),
  capped at ``policy_loss.is_cap`` = C and, with ``policy_loss.icepop``, zeroed outside
  [``icepop_low``, ``icepop_high``] (see :mod:`.importance`), multiplied per token.
* **masking**: samples without a valid signal reach the loss with zero advantage from
  ``longcat_grpo`` and so contribute nothing; verl's rejection sampling
  (``rollout_rs``) masks through ``response_mask``.
* **speed**: the gradient is written out (:class:`_GSPOTokenLoss`) instead of autograd through
  the textbook expression, and every metric is read in one host sync (verl's ``gspo``: three).
  It dispatches 0.62-0.66x the operators of stock ``gspo`` (``bench/bench_losses.py``
  records the counts), which is what a GPU pays for at training sizes: kernel launches.
* metrics: ``longcat/gspo/{low,high}_clipfrac`` (fraction of sequences whose s_i is clipped at
  that bound, so they give no gradient), ``longcat/is_truncated_frac``, with IcePop
  ``longcat/icepop_masked_frac``, next to stock's ``actor/pg_clipfrac``, ``actor/ppo_kl``,
  ``actor/pg_clipfrac_lower`` (same meaning).

The clip range stays in verl's own keys ``actor.clip_ratio_low`` / ``clip_ratio_high``, which
stock ``gspo`` reads (GSPO's paper uses 3e-4 / 4e-4; the recipe sets them). With
``is_cap: .inf`` (or no rollout correction) the loss equals stock ``gspo`` called with
``loss_agg_mode="seq-mean-token-mean"``, value, gradient and metrics, to float rounding (tested
in float32 and float64, including a sequence past the clamp).
"""

from __future__ import annotations

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

__all__ = ["LongcatGSPOConfig", "compute_longcat_gspo_loss", "GSPO_AGG_MODE"]

#: Eq. 1's 1/G Σ_i over per-sequence objectives
GSPO_AGG_MODE = "seq-mean-token-mean"
#: verl's gspo clamps the per-token log-ratio here "for numerical stability"; so do we
LOG_RATIO_CLAMP = 10.0


@dataclass
class LongcatGSPOConfig(ISConfig):
    """Knobs of ``longcat_gspo``; select with ``policy_loss._target_``. The clip range is verl's
    ``actor.clip_ratio_low`` / ``clip_ratio_high``; ``is_cap`` and the IcePop knobs are
    :class:`~longcat_plugins.algorithms.importance.ISConfig`'s."""

    loss_mode: str = "longcat_gspo"


class _GSPOTokenLoss(torch.autograd.Function):
    """-J of GSPO-token with seq-mean-token-mean aggregation, its gradient written out.

    Stock ``gspo``, autograd through the textbook expression, dispatches 74-76 operators forward
    and backward (``bench/results/losses.json``), and at 64 × 8192 tokens on a GPU each one costs
    a kernel launch, not bandwidth. Here the forward pass is 13 operators over tokens (14 with IS
    weights) plus a few over per-sequence vectors, and the backward pass 2 over tokens: for a
    token of sequence i,

        ∂(-J)/∂log π_θ(y_it) = -(dp/G) · w_it·Â_it · 1[s_it unclipped] · 1[log s_i ≤ 10] · s_i / |y_i|

    (s_it = sg[s_i]·π_θ/sg[π_θ] has value s_i and ∂s_it/∂log π_θ(y_it) = s_i; w_it the IS weight).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        log_prob: torch.Tensor,
        old_log_prob: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        weights: torch.Tensor | None,
        bounds: tuple[float, float],
        global_batch_size: int | None,
        dp_size: int,
        extra_counts: tuple[torch.Tensor, ...],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = bounds
        seq_log_ratio = torch.where(mask, log_prob - old_log_prob, 0.0).sum(-1)
        lengths = mask.sum(-1)
        lengths_1 = lengths.clamp(min=1)
        log_s = seq_log_ratio / lengths_1  # log s_i, the mean token log-ratio
        s = log_s.clamp(max=LOG_RATIO_CLAMP).exp()
        adv = torch.where(mask, advantages, 0.0)
        q = adv if weights is None else adv * weights
        negative = adv < 0
        clipped_low, clipped_high = s < lo, s > hi  # the clipped branch wins (Â < 0, resp. Â > 0)
        # the objective uses max(s, lo) where Â < 0, min(s, hi) where Â > 0, each over |y_i|
        ratio = torch.where(
            negative, (s.clamp(min=lo) / lengths_1).unsqueeze(-1), (s.clamp(max=hi) / lengths_1).unsqueeze(-1)
        )
        present = lengths > 0
        n_present = present.sum()
        scale = -dp_size / (global_batch_size if global_batch_size is not None else n_present.clamp(min=1))
        value = torch.dot(q.reshape(-1), ratio.reshape(-1).to(q.dtype)) * scale

        seq_adv = adv.sum(-1)  # its sign is Â_i's
        clipped_tokens = torch.where(negative, clipped_low.unsqueeze(-1), (adv > 0) & clipped_high.unsqueeze(-1))
        stats = torch.stack(
            [
                ((seq_adv < 0) & clipped_low).sum(),
                ((seq_adv > 0) & clipped_high).sum(),
                n_present,
                lengths.sum(),
                clipped_tokens.sum(),
                seq_log_ratio.sum(dtype=torch.float64),
                *extra_counts,
            ]
        )
        ctx.mark_non_differentiable(stats)
        ctx.save_for_backward(q, negative, s, log_s, lengths_1, clipped_low, clipped_high)
        ctx.scale = scale
        return value, stats

    @staticmethod
    def backward(ctx: Any, grad_value: torch.Tensor, _grad_stats: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        q, negative, s, log_s, lengths_1, clipped_low, clipped_high = ctx.saved_tensors
        per_seq = torch.where(log_s > LOG_RATIO_CLAMP, 0.0, s / lengths_1) * (grad_value * ctx.scale)
        grad_low = torch.where(clipped_low, 0.0, per_seq).unsqueeze(-1)
        grad_high = torch.where(clipped_high, 0.0, per_seq).unsqueeze(-1)
        grad = torch.where(negative, grad_low, grad_high).to(q.dtype) * q
        return grad, None, None, None, None, None, None, None, None


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
    Gradients flow to ``log_prob`` only (verl's ``gspo`` also detaches the old policy's side).
    """
    if config is None:
        raise ValueError("longcat_gspo needs the actor config (verl passes it as `config`)")
    knobs = _knobs(config)
    clip_low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    clip_high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    info = dict(getattr(config, "global_batch_info", None) or {})
    dp_size = info.get("dp_size") or 1
    global_batch_size = info.get("global_batch_size")
    if global_batch_size is None and dp_size > 1:
        raise ValueError("longcat_gspo needs global_batch_info['global_batch_size'] when dp_size > 1")
    mask = response_mask if response_mask.dtype == torch.bool else response_mask.bool()
    weights, n_truncated, n_masked = correct_is_weights(rollout_is_weights, mask, knobs)
    extra = tuple(c for c in (n_truncated, n_masked) if c is not None)
    loss, stats = _GSPOTokenLoss.apply(
        log_prob,
        old_log_prob.detach(),
        advantages.detach(),
        mask,
        weights,
        (1.0 - clip_low, 1.0 + clip_high),
        global_batch_size,
        dp_size,
        extra,
    )
    low, high, n_seqs, n_tokens, clipped, log_ratio_sum, *rest = stats.tolist()  # the one host sync
    n_seqs, n_tokens = max(n_seqs, 1), max(n_tokens, 1)
    truncated = rest.pop(0) if n_truncated is not None else 0
    metrics = {
        "actor/pg_clipfrac": clipped / n_tokens,
        "actor/ppo_kl": -log_ratio_sum / n_tokens,
        "actor/pg_clipfrac_lower": 0.0,  # as verl's gspo: GSPO has no dual clip
        "longcat/gspo/low_clipfrac": low / n_seqs,
        "longcat/gspo/high_clipfrac": high / n_seqs,
        "longcat/is_truncated_frac": truncated / n_tokens,
    }
    if n_masked is not None:
        metrics["longcat/icepop_masked_frac"] = rest.pop(0) / n_tokens
    return loss, metrics


def _knobs(config: Any) -> LongcatGSPOConfig:
    policy_loss = config.get("policy_loss") if hasattr(config, "get") else getattr(config, "policy_loss", None)
    if isinstance(policy_loss, LongcatGSPOConfig):
        return policy_loss
    if isinstance(policy_loss, dict | DictConfig) and "is_cap" in policy_loss:  # not yet a dataclass
        return LongcatGSPOConfig(**is_knobs_from_mapping(policy_loss))
    raise ValueError(
        f"loss_mode longcat_gspo needs {KEY_PREFIX}._target_: "
        f"{LongcatGSPOConfig.__module__}.{LongcatGSPOConfig.__qualname__} (got {type(policy_loss).__name__}); "
        "its knobs is_cap, icepop, icepop_low, icepop_high live there"
    )


#: checked before Ray by ``longcat-plugins`` (``config.validate_verl_selections``): IcePop needs verl's ratios
compute_longcat_gspo_loss.check_config = check_rollout_correction  # type: ignore[attr-defined]
