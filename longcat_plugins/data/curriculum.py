"""Two-axis curriculum (D3, 2601 report §3.3.1): difficulty × capability stage.

"Task difficulty is quantified using the model's pass rate ... In parallel, we characterize
tasks by the agentic capabilities they primarily exercise, such as basic tool invocation,
multi-step planning, or autonomous decision making. During early training stages, we prioritize
tasks that are either easier to learn or expose capabilities that are expected to be
autonomously reused ... As training progresses, we gradually shift toward tasks that are both
more difficult and require more advanced combinations."

The position is (stage s, level l). A task is *open* when its capability stage (a per-task
label, ordered by ``stages``) is at most s and its pass rate (:mod:`.stats`) is at least
``floors[l]`` (floors fall: easy first). Each step, open tasks come first, easiest and earliest
stage first; tasks not open fill the step only when too few are open. The position advances on
a live metric: when the mean accuracy of the last ``window`` steps reaches ``advance_at``, l
moves to the next (harder) floor; past the last floor, s moves to the next stage and l restarts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class TwoAxisCurriculum:
    """Curriculum position, the order it imposes on candidate tasks, and its advance rule."""

    def __init__(self, stages: Sequence[str], floors: Sequence[float], advance_at: float, window: int = 2) -> None:
        if len(set(stages)) != len(stages):
            raise ValueError(f"stages must be distinct, got {list(stages)}")
        if not floors or list(floors) != sorted(floors, reverse=True) or any(not 0.0 <= f <= 1.0 for f in floors):
            raise ValueError(f"floors must be pass rates in [0, 1], non-increasing, got {list(floors)}")
        if not 0.0 <= advance_at <= 1.0:
            raise ValueError(f"advance_at must be in [0, 1], got {advance_at!r}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.stages = list(stages) or [""]
        self.floors = [float(f) for f in floors]
        self.advance_at = advance_at
        self.window = window
        self.stage = 0
        self.level = 0
        self.recent: list[float] = []

    def stage_rank(self, label: str | None) -> int:
        """Position of a task's capability label in ``stages`` (a single unnamed stage: 0)."""
        if self.stages == [""]:
            return 0
        if label not in self.stages:
            raise ValueError(f"capability stage {label!r} is not one of the curriculum's stages {self.stages}")
        return self.stages.index(label)

    def is_open(self, label: str | None, pass_rate: float) -> bool:
        return self.stage_rank(label) <= self.stage and pass_rate >= self.floors[self.level]

    def order(self, labels: Sequence[str | None], pass_rates: Sequence[float]) -> tuple[list[int], int]:
        """Candidate indices in curriculum order and how many of them are open."""
        keyed = [
            (not self.is_open(lab, p), self.stage_rank(lab), -p, i)
            for i, (lab, p) in enumerate(zip(labels, pass_rates, strict=True))
        ]
        keyed.sort()
        return [k[-1] for k in keyed], sum(1 for k in keyed if not k[0])

    def observe(self, accuracy: float) -> bool:
        """Fold in one step's accuracy on its tasks; ``True`` when the position advanced."""
        self.recent = (self.recent + [float(accuracy)])[-self.window :]
        if len(self.recent) < self.window or sum(self.recent) / len(self.recent) < self.advance_at:
            return False
        if self.level + 1 < len(self.floors):
            self.level += 1
        elif self.stage + 1 < len(self.stages):
            self.stage, self.level = self.stage + 1, 0
        else:
            return False
        self.recent = []
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "level": self.level, "recent": list(self.recent)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.stage, self.level = int(state["stage"]), int(state["level"])
        self.recent = [float(x) for x in state["recent"]]
