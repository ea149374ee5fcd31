"""Invalid samples reach every advantage estimator masked, stock ones included (issue 32).

A sample without a valid reward carries a NaN score (:mod:`.validity`). ``longcat_grpo`` masks
it itself; verl's stock estimators do not: one NaN in a GRPO group makes the group's mean NaN,
every advantage of the group NaN and the step's loss NaN (``longcat_router`` with stock ``grpo``
learned nothing, and exited 0). So verl's ``compute_advantage`` (the one function both trainers
call for every estimator, ``gae`` and ``grpo`` included) is wrapped:

* a batch whose scores are all finite goes to verl's function unchanged (bit-identical);
* otherwise the invalid rows (a non-finite ``token_level_rewards`` entry, or
  ``longcat_reward_valid = 0`` in ``non_tensor_batch``) and the rows of any group (``uid``) of
  several samples left with fewer than two valid ones (no baseline: the same rule as
  ``longcat_grpo``) are taken out, verl's function runs on the rest, and the taken-out rows get
  advantage 0 and return 0 (or their value, under ``gae``, so the critic is not pulled either
  way): they add nothing to the policy gradient;
* an estimator that masks invalid samples itself (``__longcat_masks_invalid__`` on the function,
  as ``longcat_grpo`` has) gets the whole batch, unchanged.

The legacy trainer keeps the reward extra info in its batch, so its steps' failed rewards are
counted here too (:mod:`longcat_plugins.rewards.failures`; the step stops the same way).

Seams: ``verl.trainer.ppo.ray_trainer.compute_advantage`` and the name ``compute_advantage`` in
``verl.trainer.ppo.v1.utils`` (the v1 trainer's GRPO path), for the verl releases in
:data:`TESTED_VERL` and while the function keeps its parameters; otherwise verl is left alone,
a warning says why, and ``longcat-plugins validate`` refuses an estimator that does not mask
invalid samples itself (:func:`config_problems`).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

from longcat_plugins.verl_version import TESTED_VERL, verl_is_tested

logger = logging.getLogger(__name__)

#: is the installed verl one this wrapping was written for? (a name tests can replace)
verl_supported = verl_is_tested
SEAMS = ("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.utils")
_PARAMS = ("data", "adv_estimator")
#: seam -> applied (for tests and ``doctor``)
APPLIED: dict[str, bool] = {}
#: estimators that mask invalid samples themselves (besides any function carrying the attribute)
MASKS_INVALID_ATTR = "__longcat_masks_invalid__"


def estimator_name(adv_estimator: Any) -> str:
    return str(getattr(adv_estimator, "value", adv_estimator))


def masks_invalid(adv_estimator: Any) -> bool:
    """Does this estimator mask invalid (NaN-scored) samples itself?"""
    name = estimator_name(adv_estimator)
    if name in ("gae", "grpo"):  # hard-wired in verl's compute_advantage
        return False
    from verl.trainer.ppo import core_algos

    try:
        fn = core_algos.get_adv_estimator_fn(name)
    except (KeyError, ValueError):
        return False
    return bool(getattr(fn, MASKS_INVALID_ATTR, False))


def invalid_rows(data: Any) -> np.ndarray:
    """Bool ``(batch,)``: rows without a valid score."""
    import torch

    rewards = data.batch["token_level_rewards"]
    invalid = (~torch.isfinite(rewards).all(dim=-1)).cpu().numpy()
    from longcat_plugins.algorithms.validity import VALID_KEY

    flags = data.non_tensor_batch.get(VALID_KEY) if data.non_tensor_batch else None
    if flags is not None:
        invalid |= ~np.asarray([_truthy(v) for v in flags], dtype=bool)
    return invalid


def _truthy(value: Any) -> bool:
    try:
        return bool(float(value))
    except (TypeError, ValueError):
        return bool(value)


def without_baseline(invalid: np.ndarray, uids: Any) -> np.ndarray:
    """Rows of groups of several samples that keep fewer than two valid ones."""
    if uids is None:
        return np.zeros_like(invalid)
    uids = np.asarray(uids, dtype=object)
    out = np.zeros_like(invalid)
    for uid in set(uids[invalid].tolist()):
        rows = uids == uid
        if rows.sum() > 1 and (rows & ~invalid).sum() < 2:
            out |= rows
    return out


def masked(original: Any) -> Any:
    """verl's ``compute_advantage`` with invalid rows taken out (see the module docstring)."""

    @functools.wraps(original)
    def compute_advantage(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        _count_legacy_failures(data)
        invalid = invalid_rows(data)
        if not invalid.any() or masks_invalid(adv_estimator):
            return original(data, adv_estimator, *args, **kwargs)
        import torch

        drop = invalid | without_baseline(invalid, data.non_tensor_batch.get("uid"))
        keep = np.flatnonzero(~drop)
        rewards = data.batch["token_level_rewards"]
        advantages = torch.zeros(rewards.shape, dtype=torch.float32, device=rewards.device)
        returns = torch.zeros_like(advantages)
        if len(keep):
            sub = original(data.select_idxs(keep), adv_estimator, *args, **kwargs)
            if len(sub) != len(keep):
                raise RuntimeError(
                    f"longcat-plugins: estimator {estimator_name(adv_estimator)!r} changed the number of rows "
                    f"({len(keep)} -> {len(sub)}; algorithm.use_pf_ppo resamples): masking the batch's "
                    f"{int(drop.sum())} invalid samples is not possible with it; use algorithm.adv_estimator: "
                    "longcat_grpo or turn use_pf_ppo off"
                )
            index = torch.as_tensor(keep, device=rewards.device)
            advantages = advantages.to(sub.batch["advantages"].dtype)
            returns = returns.to(sub.batch["returns"].dtype)
            advantages[index] = sub.batch["advantages"]
            returns[index] = sub.batch["returns"]
        if "values" in data.batch.keys():
            gone = torch.as_tensor(np.flatnonzero(drop), device=rewards.device)
            returns[gone] = data.batch["values"][gone].to(returns.dtype)
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        logger.info(
            "longcat-plugins: %d of %d samples without a valid reward masked out of %s advantages",
            int(drop.sum()),
            len(drop),
            estimator_name(adv_estimator),
        )
        return data

    compute_advantage.__longcat_masking__ = True  # type: ignore[attr-defined]
    return compute_advantage


def _count_legacy_failures(data: Any) -> None:
    """The legacy trainer's batch carries the reward extra info: count its failed rewards."""
    from longcat_plugins.rewards import failures
    from longcat_plugins.rewards.result import NAME_KEY

    nt = data.non_tensor_batch or {}
    if NAME_KEY not in nt:
        return  # the v1 trainer counts from its TransferQueue fields instead
    keys = [k for k in nt if k.startswith("longcat_reward_")]
    infos = [{k: nt[k][i] for k in keys} for i in range(len(nt[NAME_KEY]))]
    failures.enforce(failures.count(infos), "training step (legacy trainer)")


def wrap(module: ModuleType) -> None:
    """Post-import hook: wrap the module's ``compute_advantage`` (idempotent)."""
    original = getattr(module, "compute_advantage", None)
    if original is None or getattr(original, "__longcat_masking__", False):
        APPLIED[module.__name__] = original is not None
        return
    if not verl_supported():
        logger.warning(
            "longcat-plugins: invalid samples are not masked for stock estimators: verl is outside %s", TESTED_VERL
        )
        return
    params = tuple(inspect.signature(original).parameters)
    if params[: len(_PARAMS)] != _PARAMS:
        logger.warning(
            "longcat-plugins: invalid samples are not masked for stock estimators: %s.compute_advantage%s is not "
            "the signature this was written for",
            module.__name__,
            params,
        )
        return
    module.compute_advantage = masked(original)  # type: ignore[attr-defined]
    APPLIED[module.__name__] = True


def install() -> None:
    from longcat_plugins.import_hooks import when_imported

    for name in SEAMS:
        when_imported(name, wrap)


def config_problems(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, message)`` when invalid samples would reach an estimator unmasked: this verl is
    not one the wrapping supports and the selected estimator does not mask them itself."""
    if verl_supported():
        return []
    from longcat_plugins.schema import select

    name = select(cfg, "algorithm.adv_estimator")
    if not isinstance(name, str) or masks_invalid(name):
        return []
    return [
        (
            "algorithm.adv_estimator",
            f"{name!r} does not mask samples without a valid reward (NaN scores), and this verl is outside "
            f"{TESTED_VERL}, where longcat-plugins masks them for stock estimators: one failed reward would make "
            "the step's loss NaN. Use algorithm.adv_estimator: longcat_grpo",
        )
    ]
