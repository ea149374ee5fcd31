"""Which samples carry a usable learning signal (A4, incomplete-signal masking).

The first LongCat-Flash-Thinking report masks two kinds of samples out of the loss instead of
scoring them 0: samples whose reward could not be computed (sandbox error, judge failure) and
samples cut at the generation-length limit that are *not* repetitive (a repetitive truncated
sample is a real failure and keeps its score; a non-repetitive one was merely cut short).

How validity travels in verl 0.9.1 (read in ``verl/trainer/ppo/ray_trainer.py``
``compute_advantage`` and ``verl/trainer/ppo/v1/trainer_base.py`` ``_compute_advantage``): a
registered advantage estimator receives only ``token_level_rewards``, ``response_mask``,
``config`` and ``index`` (the uid); neither ``non_tensor_batch`` (so no ``reward_extra_info``)
nor the response token ids reach it. The one per-sample value that flows from a reward manager
to the estimator in both trainers is the score itself. So the convention is:

* **a non-finite score (NaN) means "no valid signal"**. A reward manager returns
  :func:`masked_score` (NaN for a failed or cut-short sample) and ``longcat_grpo`` excludes
  such samples from its group statistics and gives them zero advantage.
* A caller that has more (our own trainer, a test) may pass the validity flag explicitly, under
  :data:`VALID_KEY` in ``non_tensor_batch``, or the token ids and ``max_response_length`` so the
  estimator runs :func:`is_repetitive` itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

__all__ = [
    "VALID_KEY",
    "GROUP_KEY",
    "RepetitionDetector",
    "is_repetitive",
    "truncated_without_repetition",
    "masked_score",
]

#: ``reward_extra_info`` / ``non_tensor_batch`` key: ``False`` marks a sample without a usable reward
VALID_KEY = "longcat_reward_valid"
#: ``non_tensor_batch`` key: group id within one uid (oversampling duplicates a prompt into k groups)
GROUP_KEY = "longcat_group"

TokenIds = Sequence[int] | np.ndarray | torch.Tensor


class RepetitionDetector:
    """Does a response end in a loop? True when its tail is one unit of ``period <= max_period``
    tokens repeated at least ``min_repeats`` times, covering at least ``min_tail_tokens`` tokens.

    Only the tail matters: a response that hits the length limit while looping ends in the loop.
    Only the last ``window`` tokens are inspected, which bounds the cost (``window * max_period``
    comparisons) on 64K-token responses; a loop longer than the window is still found.
    """

    def __init__(
        self, *, max_period: int = 256, min_repeats: int = 3, min_tail_tokens: int = 32, window: int = 8192
    ) -> None:
        if max_period < 1 or min_repeats < 2 or min_tail_tokens < 1 or window < 2:
            raise ValueError(
                "RepetitionDetector needs max_period >= 1, min_repeats >= 2, min_tail_tokens >= 1, window >= 2; "
                f"got {max_period=}, {min_repeats=}, {min_tail_tokens=}, {window=}"
            )
        self.max_period = max_period
        self.min_repeats = min_repeats
        self.min_tail_tokens = min_tail_tokens
        self.window = window

    def repeated_tail(self, token_ids: TokenIds) -> tuple[int, int]:
        """``(period, tail_length)`` of the shortest unit whose repetition makes the tail a loop by
        this detector's thresholds; ``(0, 0)`` when the response does not end in a loop."""
        ids = _as_array(token_ids)[-self.window :]
        n = len(ids)
        for period in range(1, min(self.max_period, n // 2) + 1):
            same = ids[period:] == ids[:-period]  # same[j]: ids[j + period] == ids[j]
            if not same[-1]:
                continue
            breaks = np.flatnonzero(~same)
            run = len(same) - (int(breaks[-1]) + 1) if len(breaks) else len(same)
            tail = run + period  # the run plus the unit it repeats
            if tail // period >= self.min_repeats and tail >= self.min_tail_tokens:
                return period, tail
        return 0, 0

    def __call__(self, token_ids: TokenIds) -> bool:
        return self.repeated_tail(token_ids)[0] > 0


_default_detector = RepetitionDetector()


def is_repetitive(token_ids: TokenIds, detector: RepetitionDetector | None = None) -> bool:
    """Whether ``token_ids`` (one response, no padding) ends in a loop; see :class:`RepetitionDetector`."""
    return (detector or _default_detector)(token_ids)


def truncated_without_repetition(
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    max_response_length: int,
    detector: RepetitionDetector | None = None,
) -> torch.Tensor:
    """Bool ``(batch,)``: response reached ``max_response_length`` and does not end in a loop.

    The length of a response is the position of its last ``response_mask`` token plus one, so
    tool-output tokens inside a multi-turn response (mask 0) still count towards the limit.
    """
    mask = response_mask.bool().cpu()
    out = torch.zeros(mask.shape[0], dtype=torch.bool)
    if mask.shape[-1] == 0:
        return out.to(response_mask.device)
    positions = torch.arange(1, mask.shape[-1] + 1)
    lengths = (mask * positions).amax(dim=-1)
    for i in torch.nonzero(lengths >= max_response_length).flatten().tolist():
        length = int(lengths[i])
        out[i] = not is_repetitive(responses[i, :length], detector)
    return out.to(response_mask.device)


def masked_score(
    score: float,
    *,
    reward_ok: bool = True,
    response_ids: TokenIds | None = None,
    max_response_length: int | None = None,
    detector: RepetitionDetector | None = None,
) -> float:
    """What a reward manager should return as the score: ``score``, or NaN when the sample must be
    masked (reward failed, or the response was cut at ``max_response_length`` without looping).
    ``response_ids`` are the response's tokens without padding."""
    if not reward_ok or not math.isfinite(float(score)):
        return math.nan
    if response_ids is not None and max_response_length is not None:
        ids = _as_array(response_ids)
        if len(ids) >= max_response_length and not is_repetitive(ids, detector):
            return math.nan
    return float(score)


def _as_array(token_ids: TokenIds) -> np.ndarray:
    if isinstance(token_ids, torch.Tensor):
        return token_ids.detach().reshape(-1).cpu().numpy()
    return np.asarray(token_ids).reshape(-1)
