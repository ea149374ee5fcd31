"""The engine-mismatch truncated importance weight min(r_it(mu), C) (A3), on top of verl's own.

r_it(mu) = pi_train(y_it) / pi_inference(y_it): the training engine's probability of the sampled
token (verl's ``old_log_prob``, recomputed by the actor) over the inference engine's
(``rollout_log_probs``, returned by vLLM/SGLang), under the same behaviour policy mu.

We reuse verl for all of it except the final cap: ``algorithm.rollout_correction`` with
``rollout_is: token`` and ``rollout_is_threshold: C`` (decoupled mode, ``bypass_mode: false``)
makes the trainer compute exactly ``min(exp(old_log_prob - rollout_log_probs), C) * response_mask``
(``verl/trainer/ppo/rollout_corr_helper.py`` ``compute_rollout_correction_weights``) and hand it
to every policy loss as ``rollout_is_weights``. A policy loss never sees ``rollout_log_probs``
itself, so it cannot compute the ratio; what it can do is enforce its own cap C, so the
objective stays min(r, C) even if the verl threshold is set higher, and report how often the
cap bites.
"""

from __future__ import annotations

import torch

__all__ = ["validate_is_cap", "cap_is_weights"]


def validate_is_cap(value: float, key: str) -> None:
    """``C`` must be a positive number (``inf`` allowed: no cap beyond verl's)."""
    if not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
        raise ValueError(f"{key} (the truncated-IS cap C) must be > 0, got {value!r}")


def cap_is_weights(weights: torch.Tensor | None, cap: float) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(min(weights, C), number of tokens at the cap)``; ``(None, None)`` without weights (no
    rollout log-probs, or rollout correction off). When verl's threshold already is C the weights
    are returned as they are (no copy). verl zeroes the weights of padding tokens and C > 0, so
    only valid tokens can be at the cap."""
    if weights is None:
        return None, None
    weights = weights.detach()
    if weights.numel() and weights.amax() > cap:
        weights = weights.clamp(max=cap)
    return weights, torch.count_nonzero(weights >= cap)
