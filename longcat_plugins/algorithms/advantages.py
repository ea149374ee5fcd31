"""``longcat_grpo``: group-normalised outcome advantages with incomplete-signal masking (A4) and
oversampled groups (A5).

    Â_i = (R_i - mean_{j ∈ g(i), valid} R_j) / (std_{j ∈ g(i), valid} R_j + ε)    (valid i)
    Â_i = 0                                                                        (invalid i)

Differences from stock ``grpo``:

* **invalid samples** (reward could not be computed, or cut at the length limit without
  looping; see :mod:`.validity`) are left out of their group's mean and std and get advantage 0,
  so they add nothing to the loss instead of being scored 0. A group of several samples with
  fewer than two valid ones has no baseline and gets 0 everywhere; a group that is a single
  sample (``rollout.n = 1``) keeps stock verl's rule (mean 0, std 1).
* **groups** are keyed by ``index`` (the uid) and, when given, a group id: a task duplicated
  into k groups (A5 oversampling) gets k independent statistics.

**The validity channel in verl 0.9.1.** ``compute_advantage``
(``verl/trainer/ppo/ray_trainer.py:187``, used by the legacy trainer and, through ``v1/utils.py:167``
``compute_advantage_for_multi_trajectories``, by the v1 trainer) calls a registered estimator at ``:279`` with the ``adv_kwargs`` built at
``:251-259``: ``token_level_rewards``, ``response_mask``, ``config`` (the ``algorithm`` node),
``index`` (``non_tensor_batch["uid"]``) and, if present, ``reward_baselines``;
``non_tensor_batch`` and ``batch`` are passed to GDPO only, by name (``:261-263``). The v1
trainer's ``_compute_advantage`` (``v1/trainer_base.py:1745``) even fetches only ``uid,
response_mask, rm_scores, rollout_log_probs, old_log_probs, ref_log_prob, values`` from the
TransferQueue, so ``reward_extra_info`` is not in the batch at all. Hence:

* **stock verl**: validity arrives in the score. A reward manager returns NaN for a sample
  without a valid signal (:func:`.validity.masked_score`); NaN flows unchanged through
  ``assemble_rm_scores`` (``experimental/reward_loop/reward_manager/base.py:80``) -> ``rm_scores``
  -> ``token_level_rewards``, and a non-finite outcome score marks the sample invalid here. Side effect: verl's score metrics (``critic/score/*``)
  average that NaN; DAPO ``filter_groups`` on ``metric: reward`` would see it too.
* **callers that pass more** (our own trainers, tests): ``non_tensor_batch`` with
  ``longcat_reward_valid`` (bool per sample) and ``longcat_group`` (group id per sample), and/or
  ``responses`` plus ``max_response_length`` so the repetition detector runs here.

Oversampling in stock verl needs nothing: both trainers give every prompt row of a batch its own
uuid before ``repeat(n)`` (``ray_trainer.py:1482``, ``v1/trainer_base.py:1476``), so a task
duplicated into k rows is k groups already. ``longcat_group`` is for a scheduler that duplicates after
the uid is assigned.

Metrics: an estimator returns only ``(advantages, returns)`` and ``compute_advantage`` keeps
nothing else, so the masked-sample count cannot reach verl's metrics from here; it is logged
(logger ``longcat_plugins.algorithms.advantages``, INFO) instead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from longcat_plugins.algorithms.validity import (
    GROUP_KEY,
    VALID_KEY,
    RepetitionDetector,
    truncated_without_repetition,
)

__all__ = ["compute_longcat_grpo_advantage", "invalid_samples"]

logger = logging.getLogger(__name__)


def invalid_samples(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    non_tensor_batch: Mapping[str, Any] | None = None,
    responses: torch.Tensor | None = None,
    max_response_length: int | None = None,
    detector: RepetitionDetector | None = None,
) -> torch.Tensor:
    """Bool ``(batch,)``: samples without a usable learning signal, from every channel present."""
    invalid = ~torch.isfinite(scores)
    if non_tensor_batch is not None and VALID_KEY in non_tensor_batch:
        valid = torch.as_tensor(np.asarray(non_tensor_batch[VALID_KEY], dtype=bool), device=scores.device)
        invalid |= ~valid
    if responses is not None and max_response_length is not None:
        invalid |= truncated_without_repetition(responses, response_mask, max_response_length, detector).to(
            scores.device
        )
    return invalid


def compute_longcat_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    non_tensor_batch: Mapping[str, Any] | None = None,
    responses: torch.Tensor | None = None,
    max_response_length: int | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantages with invalid samples masked and oversampled groups kept apart (LongCat).

    ``norm_adv_by_std_in_grpo`` defaults to ``config.norm_adv_by_std_in_grpo`` (verl does not
    pass it to registered estimators), else True. Other keyword arguments verl may pass
    (``reward_baselines``) are ignored.
    """
    if index is None:
        raise ValueError("longcat_grpo groups samples by uid: verl passes non_tensor_batch['uid'] as `index`")
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = bool(config.get("norm_adv_by_std_in_grpo", True)) if config is not None else True

    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        invalid = invalid_samples(scores, response_mask, non_tensor_batch, responses, max_response_length)
        groups = _group_ids(index, non_tensor_batch)
        n_groups = int(groups.max()) + 1 if len(groups) else 0
        gidx = torch.as_tensor(groups, device=scores.device)

        valid = (~invalid).to(torch.float64)
        values = torch.where(invalid, 0.0, scores.to(torch.float64))
        size = torch.zeros(n_groups, dtype=torch.float64, device=scores.device).index_add_(
            0, gidx, torch.ones_like(valid)
        )
        count = torch.zeros_like(size).index_add_(0, gidx, valid)
        total = torch.zeros_like(size).index_add_(0, gidx, values)
        mean = total / count.clamp(min=1)
        centered = torch.where(invalid, 0.0, values - mean[gidx])
        sq = torch.zeros_like(size).index_add_(0, gidx, centered * centered)
        std = torch.sqrt(sq / (count - 1).clamp(min=1))  # unbiased, as torch.std in stock grpo

        singleton = size == 1  # rollout.n == 1: stock verl's mean 0, std 1
        mean = torch.where(singleton, 0.0, mean)
        std = torch.where(singleton, 1.0, std)
        has_baseline = singleton | (count >= 2)

        adv = values - mean[gidx]
        if norm_adv_by_std_in_grpo:
            adv = adv / (std[gidx] + epsilon)
        keep = ~invalid & has_baseline[gidx]
        adv = torch.where(keep, adv, 0.0).to(scores.dtype)
        advantages = adv.unsqueeze(-1) * response_mask

    n_invalid = int(invalid.sum())
    if n_invalid:
        logger.info(
            "longcat_grpo: %d of %d samples masked (no valid signal); %d groups without a baseline",
            n_invalid,
            len(groups),
            int((~has_baseline).sum()),
        )
    return advantages, advantages


#: masks invalid samples itself: verl's compute_advantage hands it the whole batch (see .masking)
compute_longcat_grpo_advantage.__longcat_masks_invalid__ = True  # type: ignore[attr-defined]


def _group_ids(index: Any, non_tensor_batch: Mapping[str, Any] | None) -> np.ndarray:
    """Contiguous group ids for (uid, group id) keys, in first-seen order."""
    uids = list(index.tolist() if hasattr(index, "tolist") else index)
    if non_tensor_batch is not None and GROUP_KEY in non_tensor_batch:
        extra = list(np.asarray(non_tensor_batch[GROUP_KEY]).tolist())
        if len(extra) != len(uids):
            raise ValueError(f"non_tensor_batch[{GROUP_KEY!r}] has {len(extra)} entries for {len(uids)} samples")
        keys: list[Any] = list(zip(uids, extra, strict=True))
    else:
        keys = uids
    ids: dict[Any, int] = {}
    return np.fromiter((ids.setdefault(k, len(ids)) for k in keys), dtype=np.int64, count=len(keys))
