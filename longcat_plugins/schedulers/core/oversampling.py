"""Pass-rate oversampling coefficient (D5) and the running pass rate it reads (report §3.3.3).

"Tasks with lower success rates are assigned higher oversampling coefficients ... each task is
duplicated into multiple groups according to its oversampling coefficient, and each group
independently computes advantages during training." The coefficient is linear in the failure
rate and rounded: k = k_min + round((k_max - k_min) * (1 - pass_rate)). The controller gives
every duplicate its own group id, so a group-normalised advantage (``longcat_grpo``, A5) treats
the k groups independently. The running pass rate lives in :mod:`longcat_plugins.data.stats`,
shared with the data strategies in verl's trainer.
"""

from __future__ import annotations

from longcat_plugins.data.stats import PassRateTracker, group_accuracy

__all__ = ["PassRateTracker", "group_accuracy", "oversampling_coefficient"]


def oversampling_coefficient(pass_rate: float, k_min: int = 1, k_max: int = 1) -> int:
    """Groups to start for a task with this pass rate: non-increasing in ``pass_rate``."""
    if not 0.0 <= pass_rate <= 1.0:
        raise ValueError(f"pass_rate must be in [0, 1], got {pass_rate!r}")
    if not 1 <= k_min <= k_max:
        raise ValueError(f"need 1 <= k_min <= k_max, got k_min={k_min}, k_max={k_max}")
    return k_min + int(round((k_max - k_min) * (1.0 - pass_rate)))
