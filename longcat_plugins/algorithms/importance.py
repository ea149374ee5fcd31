"""The engine-mismatch weight of our policy losses: truncated IS min(r_it, C) (A3) and, as an
option, IcePop masking of the tokens whose ratio r_it lies outside [α, β].

r_it = pi_train(y_it) / pi_inference(y_it): the training engine's probability of the sampled
token (verl's ``old_log_prob``, recomputed by the actor) over the inference engine's
(``rollout_log_probs``, returned by vLLM/SGLang), under the same behaviour policy mu.

We reuse verl for the ratio itself: ``algorithm.rollout_correction`` with ``rollout_is: token``
(decoupled mode, ``bypass_mode: false``) makes the trainer compute ``exp(old_log_prob -
rollout_log_probs) * response_mask``, clamped at ``rollout_is_threshold`` T (TIS) or, for a
``"lower_upper"`` threshold, zeroed outside [lower, upper] (verl's own IcePop), in
``verl/trainer/ppo/rollout_corr_helper.py`` ``compute_rollout_correction_weights``, and hands it to
every policy loss as ``rollout_is_weights``. A policy loss never sees ``rollout_log_probs``
itself, so what it does with those weights is:

* **IcePop** (``icepop: true``; Ring-1T's IcePop, the MIS/"masked IS" family): a valid token
  whose weight lies outside [``icepop_low``, ``icepop_high``] gets weight 0, so it adds
  nothing to the loss and no gradient, and it still counts in the loss's denominator (the
  "zero" variant; verl's ``rollout_rs: token_k1`` is the "drop" variant, which removes the token
  from ``response_mask``). This needs weights that still carry r_it up to ``icepop_high``:
  :func:`check_rollout_correction` refuses a verl threshold that would hide it.
* **truncation**: the cap C = ``is_cap``, so the weight is min(r_it, C) even when verl's
  threshold is higher. With IcePop on, a kept token gets min(r_it, C)·1[α ≤ r_it ≤ β].

Nothing here synchronises with the device: the counts for the metrics stay tensors until the
loss reads all its metrics at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from verl.workers.config.actor import PolicyLossConfig

from longcat_plugins.schema import select

__all__ = [
    "ISConfig",
    "validate_is_cap",
    "correct_is_weights",
    "check_rollout_correction",
    "is_knobs_from_mapping",
    "IS_KNOBS",
]

#: where the knobs live in a verl config, for error messages
KEY_PREFIX = "actor_rollout_ref.actor.policy_loss"
#: the knobs every one of our policy losses reads from its ``policy_loss`` node
IS_KNOBS = ("is_cap", "icepop", "icepop_low", "icepop_high")


def validate_is_cap(value: float, key: str) -> None:
    """``C`` must be a positive number (``inf`` allowed: no cap beyond verl's)."""
    if not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
        raise ValueError(f"{key} (the truncated-IS cap C) must be > 0, got {value!r}")


@dataclass
class ISConfig(PolicyLossConfig):
    """The engine-mismatch knobs shared by ``triplet_clip`` and ``longcat_gspo``.

    IcePop's bounds default to α = 0.5, β = 5.0, the defaults of verl's own IcePop preset
    (``RolloutCorrectionConfig.decoupled_token_icepop`` in ``verl/trainer/config/algorithm.py``).
    """

    #: C, the cap of the truncated engine-mismatch IS weight min(π_train/π_inference, C)
    is_cap: float = 2.0
    #: IcePop: zero the weight (so the loss and gradient) of tokens whose ratio is outside [icepop_low, icepop_high]
    icepop: bool = False
    #: α, the lowest ratio π_train/π_inference a token may have and still train
    icepop_low: float = 0.5
    #: β, the highest ratio π_train/π_inference a token may have and still train
    icepop_high: float = 5.0

    def __post_init__(self) -> None:
        validate_is_cap(self.is_cap, f"{KEY_PREFIX}.is_cap")
        if not isinstance(self.icepop, bool):
            raise ValueError(f"{KEY_PREFIX}.icepop must be true or false, got {self.icepop!r}")
        for name in ("icepop_low", "icepop_high"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf):
                raise ValueError(
                    f"{KEY_PREFIX}.{name} (an IcePop ratio bound) must be a finite number > 0, got {value!r}"
                )
        if not self.icepop_low < 1 < self.icepop_high:
            raise ValueError(
                f"{KEY_PREFIX}.icepop_low < 1 < {KEY_PREFIX}.icepop_high is required (a token whose engines agree, "
                f"ratio 1, must train), got [{self.icepop_low!r}, {self.icepop_high!r}]"
            )


def is_knobs_from_mapping(node: Mapping[str, Any]) -> dict[str, Any]:
    """The IS knobs present in a plain ``policy_loss`` node (before verl turned it into a dataclass)."""
    return {k: node[k] for k in IS_KNOBS if k in node}


def correct_is_weights(
    weights: torch.Tensor | None, mask: torch.Tensor, knobs: ISConfig
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """``(weights, tokens at the cap, tokens IcePop masked)``: the weights a loss multiplies its
    per-token objective by (``None``: no correction), and two 0-dim counts (``None`` when that
    part is off) over the valid tokens of the bool ``mask``.

    verl zeroes the weights of padding tokens and C > 0, so only valid tokens can be at the cap."""
    if weights is None:
        if knobs.icepop:
            raise ValueError(
                f"{KEY_PREFIX}.icepop is on but verl handed the loss no rollout_is_weights: set "
                "algorithm.rollout_correction.rollout_is: token (with bypass_mode: false) and "
                "actor_rollout_ref.rollout.calculate_log_probs: true, so the train/rollout ratio reaches the loss"
            )
        return None, None, None
    weights = weights.detach()
    n_masked = None
    if knobs.icepop:
        outside = (weights < knobs.icepop_low) | (weights > knobs.icepop_high)
        weights = weights.masked_fill(outside, 0.0)
        n_masked = (outside & mask).sum()
    n_truncated = None
    if math.isfinite(knobs.is_cap):
        weights = weights.clamp(max=knobs.is_cap)
        n_truncated = (weights >= knobs.is_cap).sum()
    return weights, n_truncated, n_masked


def check_rollout_correction(cfg: Mapping[str, Any]) -> list[str]:
    """Before Ray: with IcePop on, verl's rollout correction must hand the loss token-level
    ratios that still show every r_it up to ``icepop_high`` (``"key.path: what is wrong"``)."""
    policy_loss = select(cfg, f"{KEY_PREFIX}") or {}
    if not isinstance(policy_loss, Mapping) or policy_loss.get("icepop", False) is not True:
        return []  # off, or not a bool: the loss's own settings check names the latter
    low, high = policy_loss.get("icepop_low", ISConfig.icepop_low), policy_loss.get("icepop_high", ISConfig.icepop_high)
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (low, high))
    if not (numbers and low < 1 < high):
        return []  # bounds the loss refuses itself: no rollout_is_threshold to suggest from them
    rc = select(cfg, "algorithm.rollout_correction")
    key = "algorithm.rollout_correction"
    if not isinstance(rc, Mapping) or rc.get("rollout_is") != "token":
        got = rc.get("rollout_is") if isinstance(rc, Mapping) else rc
        return [
            f"{key}.rollout_is: {KEY_PREFIX}.icepop masks tokens by their train/rollout ratio, which verl hands "
            f"the loss only with rollout_is: token (got {got!r})"
        ]
    problems = []
    if rc.get("bypass_mode", False):
        problems.append(f"{key}.bypass_mode: must be false, or verl replaces the policy loss (and IcePop) by its own")
    threshold = rc.get("rollout_is_threshold")
    spec = str(threshold).strip() if isinstance(threshold, str | int | float) else ""
    try:
        if "_" in spec:
            lower, upper = (float(x) for x in spec.split("_", 1))
            if not (lower <= low and upper >= high):
                problems.append(
                    f"{key}.rollout_is_threshold: verl's IcePop bounds {spec!r} are narrower than "
                    f"[{KEY_PREFIX}.icepop_low, icepop_high] = [{low}, {high}]; use '{low}_{high}'"
                )
        elif not float(spec) > high:
            problems.append(
                f"{key}.rollout_is_threshold: {spec} clamps the ratio at or below {KEY_PREFIX}.icepop_high = {high}, "
                f"so the loss cannot tell which tokens lie above it; use '{low}_{high}' (verl's IcePop)"
            )
    except ValueError:
        problems.append(f"{key}.rollout_is_threshold: not a number or 'lower_upper' pair: {threshold!r}")
    return problems
