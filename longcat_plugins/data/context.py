"""Context-length curriculum (D6, first LongCat-Flash-Thinking report, code RL).

The response budget starts small and grows in steps (the report's 48K → 56K → 64K) once the
model's generations press against it: when the ``percentile``-th percentile (90) of the
generated lengths of a step reaches ``near`` (0.9) of the current budget, the next budget
applies from the next step on. The budget is sent with every request (``max_tokens``), so the
rollout server stops each sample at it; verl's ``data.max_response_length`` stays the ceiling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def length_percentile(lengths: Sequence[int], percentile: float) -> float:
    """``np.percentile`` with linear interpolation (numpy's default)."""
    return float(np.percentile(np.asarray(lengths, dtype=np.float64), percentile))


class ContextCurriculum:
    """The current response budget and the rule that raises it."""

    def __init__(self, budgets: Sequence[int], near: float = 0.9, percentile: float = 90.0) -> None:
        if not budgets or any(int(b) < 1 for b in budgets) or list(budgets) != sorted(set(budgets)):
            raise ValueError(f"budgets must be strictly increasing positive token counts, got {list(budgets)}")
        if not 0.0 < near <= 1.0:
            raise ValueError(f"near must be in (0, 1], got {near!r}")
        if not 0.0 < percentile <= 100.0:
            raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
        self.budgets = [int(b) for b in budgets]
        self.near = near
        self.percentile = percentile
        self.stage = 0
        self.last_percentile: float | None = None

    @property
    def max_tokens(self) -> int:
        return self.budgets[self.stage]

    def observe(self, lengths: Sequence[int]) -> bool:
        """Fold in one step's generated lengths; ``True`` if the budget was raised."""
        if not lengths:
            return False
        self.last_percentile = length_percentile(lengths, self.percentile)
        if self.stage + 1 < len(self.budgets) and self.last_percentile >= self.near * self.max_tokens:
            self.stage += 1
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "last_percentile": self.last_percentile}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.stage = int(state["stage"])
        self.last_percentile = state["last_percentile"]
