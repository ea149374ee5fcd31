"""Per-task statistics every data strategy reads: one place, exact across resume.

The scheduler core (D5 in the simulator), budget allocation (D4), pass-rate oversampling (D5),
the curriculum (D3) and the verl trainer all ask this module for a task's pass rate, so the
strategies never disagree about how hard a task is. A task's rate starts at its historical pass
rate (a dataset column, the reports' "pass rate estimated prior to optimization") or, when it
has none, at the live mean accuracy of recent batches (the live metric m_t of report Eq. 2), and
moves towards every finished group's accuracy with weight ``momentum``.

State is plain JSON (ints, floats, strings): ``json`` writes floats with ``repr``, which reads
back bit for bit, so a resumed run sees the same rates as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def group_accuracy(rewards: Sequence[float | None], correct_threshold: float) -> float | None:
    """Fraction of samples with a computable reward that are correct; ``None`` if none is."""
    valid = [r for r in rewards if r is not None]
    if not valid:
        return None
    return sum(r >= correct_threshold for r in valid) / len(valid)


class PassRateTracker:
    """Per-prompt running pass rate: starts at the prompt's historical rate (or a default) and
    moves towards every finished group's accuracy with weight ``momentum``."""

    def __init__(self, default: float, momentum: float) -> None:
        self.default = default
        self.momentum = momentum
        self.rates: dict[str, float] = {}

    def get(self, uid: str, prior: float | None = None) -> float:
        if uid in self.rates:
            return self.rates[uid]
        return self.default if prior is None else prior

    def update(self, uid: str, accuracy: float, prior: float | None = None) -> float:
        rate = (1.0 - self.momentum) * self.get(uid, prior) + self.momentum * accuracy
        self.rates[uid] = rate
        return rate

    def state_dict(self) -> dict[str, float]:
        return dict(self.rates)

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.rates = {str(k): float(v) for k, v in state.items()}


class TaskStats:
    """Pass rates, attempt counts and the live mean accuracy, keyed by task id."""

    def __init__(self, prior: float = 0.5, momentum: float = 0.5, live_momentum: float = 0.5) -> None:
        if not 0.0 <= prior <= 1.0:
            raise ValueError(f"prior pass rate must be in [0, 1], got {prior!r}")
        for name, value in (("momentum", momentum), ("live_momentum", live_momentum)):
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {value!r}")
        self.rates = PassRateTracker(prior, momentum)
        self.live_momentum = live_momentum
        #: the live metric m_t: running mean accuracy of recent batches (None before the first)
        self.live: float | None = None
        self.attempts: dict[str, int] = {}
        self.successes: dict[str, int] = {}

    def pass_rate(self, task: str, historical: float | None = None) -> float:
        """The task's current pass rate: observed, else historical, else the live mean, else the prior."""
        if historical is None and self.live is not None:
            historical = self.live
        return self.rates.get(task, historical)

    def seen(self, task: str) -> bool:
        return task in self.rates.rates

    def observe(
        self, task: str, rewards: Sequence[float | None], correct_threshold: float, historical: float | None = None
    ) -> float | None:
        """Fold one finished group of ``task`` in; returns its accuracy (``None``: no valid reward)."""
        accuracy = group_accuracy(rewards, correct_threshold)
        if accuracy is None:
            return None
        prior = self.pass_rate(task, historical)
        self.rates.update(task, accuracy, prior)
        valid = [r for r in rewards if r is not None]
        self.attempts[task] = self.attempts.get(task, 0) + len(valid)
        self.successes[task] = self.successes.get(task, 0) + sum(r >= correct_threshold for r in valid)
        return accuracy

    def observe_batch(self, accuracy: float) -> float:
        """Move the live mean accuracy towards one batch's accuracy."""
        if self.live is None:
            self.live = float(accuracy)
        else:
            self.live = (1.0 - self.live_momentum) * self.live + self.live_momentum * float(accuracy)
        return self.live

    def state_dict(self) -> dict[str, Any]:
        return {
            "rates": self.rates.state_dict(),
            "live": self.live,
            "attempts": dict(self.attempts),
            "successes": dict(self.successes),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rates.load_state_dict(state["rates"])
        self.live = None if state["live"] is None else float(state["live"])
        self.attempts = {str(k): int(v) for k, v in state["attempts"].items()}
        self.successes = {str(k): int(v) for k, v in state["successes"].items()}
