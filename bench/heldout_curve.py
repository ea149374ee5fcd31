"""How soon does a run reach a held-out accuracy? One definition for every learning bench, so
that their ``time_to_target_s`` figures compare (``bench_learning.py``, ``bench_system.py``).

The clock is training wall-clock only: the running sum of verl's ``timing_s/step`` (no start-up,
no validation), read at each validation. A run therefore reaches the target at the first
validation whose accuracy is at least the target, and the figure is only as fine as the
validation interval (``trainer.test_freq``): the step that first crossed it may lie earlier.
"""

from __future__ import annotations

from typing import Any


def validation_curve(steps: list[dict[str, Any]]) -> list[dict[str, float]]:
    """``{"step", "wall_s", "acc"}`` at each validation of a run's metrics records (verl's
    ``val-core`` held-out accuracy; step 0 is the validation before training, at 0 s)."""
    from longcat_plugins.runtime.launch import val_accuracy

    curve, wall = [], 0.0
    for record in sorted(steps, key=lambda s: s["step"]):
        wall += float(record.get("timing_s/step", 0.0))
        acc = val_accuracy(record)
        if acc is not None:
            curve.append({"step": record["step"], "wall_s": round(wall, 2), "acc": acc})
    return curve


def time_to_target(curve: list[dict], target: float | None) -> float | None:
    """Training wall-clock (s) at the first validation whose accuracy reaches ``target``
    (``None`` when no validation does, or when no target is asked for)."""
    if target is None:
        return None
    return next((p["wall_s"] for p in curve if p["acc"] >= target), None)
