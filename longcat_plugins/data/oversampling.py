"""Pass-rate oversampling into k groups (D5 + A5, 2601 report §3.3.3) inside verl's trainer.

"Tasks with lower success rates are assigned higher oversampling coefficients ... each task is
duplicated into multiple groups according to its oversampling coefficient, and each group
independently computes advantages during training." The coefficient is the scheduler core's
:func:`~longcat_plugins.schedulers.core.oversampling.oversampling_coefficient` (linear in the
failure rate, rounded), read from the shared pass rate (:mod:`.stats`). In verl each group is
one prompt row with its own uid (verl's GRPO and ``longcat_grpo`` normalise per uid) and a
``longcat_group`` id ``<task>#<j>`` naming the task and copy.
"""

from __future__ import annotations

from collections.abc import Sequence

from longcat_plugins.schedulers.core.oversampling import oversampling_coefficient

__all__ = ["group_sizes", "oversampling_coefficient", "plan_groups"]


def group_sizes(rollouts: int, k: int, min_group: int = 2) -> list[int]:
    """Split ``rollouts`` of one task into at most ``k`` near-equal groups of >= ``min_group``
    (larger groups first); ``[]`` for 0 rollouts, one group when too few to split."""
    if rollouts <= 0:
        return []
    k = max(1, min(k, rollouts // max(1, min_group)))
    base, extra = divmod(rollouts, k)
    return [base + (1 if j < extra else 0) for j in range(k)]


def plan_groups(pass_rates: Sequence[float], k_min: int, k_max: int, group_size: int, budget: int) -> list[int]:
    """Groups of ``group_size`` rollouts per task, in task order, while the budget lasts: task i
    gets k_i = coefficient(p_i) groups if they fit in what is left, else as many as fit (0 once
    the budget is spent). Returns k_i per task."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    left, out = budget, []
    for p in pass_rates:
        k = min(oversampling_coefficient(p, k_min, k_max), left // group_size)
        out.append(k)
        left -= k * group_size
    return out
