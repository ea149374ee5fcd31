"""An outside plugin with data strategies, written from docs/data.md: selected by name in
``longcat.settings.scheduler.longcat_data.strategies``, run by the step planner under the
``longcat_data`` and ``dora`` trainers alike. Each decision appends one JSON line to
``$OUTSIDE_DATA_MARKER`` (if set), so a test can see where it ran."""

from __future__ import annotations

import dataclasses
import json
import os

from longcat_plugins import DataStrategy, hookimpl
from longcat_plugins.data.strategy import PlanningStrategy


def _mark(record: dict) -> None:
    path = os.environ.get("OUTSIDE_DATA_MARKER")
    if path:
        with open(path, "a") as sink:
            sink.write(json.dumps({"pid": os.getpid(), **record}) + "\n")


class LowestRateFirst(PlanningStrategy):
    """Start the prompts with the lowest running pass rate first (stable otherwise), cap each
    group's rollouts at ``max_rollouts`` (0: no cap), and count the groups it has seen trained."""

    def __init__(self, settings):
        super().__init__(settings)
        self.max_rollouts = int(self.settings.get("max_rollouts", 0))
        self.seen = 0

    def order(self, candidates, rates, order):
        position = {i: k for k, i in enumerate(order)}
        out = sorted(order, key=lambda i: (rates[i], position[i]))
        _mark({"kind": "order", "candidates": len(order), "first_rate": rates[out[0]] if out else None})
        return out

    def shape(self, row):
        if self.max_rollouts and row.rollouts > self.max_rollouts:
            return dataclasses.replace(row, rollouts=self.max_rollouts)
        return row

    def observe(self, groups):
        self.seen += len(groups)
        _mark({"kind": "observe", "groups": len(groups), "seen": self.seen})
        return {"groups_seen": self.seen}

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state):
        self.seen = int(state["seen"])
        _mark({"kind": "resume", "seen": self.seen})


class SyncOnly(PlanningStrategy):
    """A strategy that needs whole synchronous batches."""

    trainers = frozenset({"longcat_data"})


@hookimpl
def register_schedulers() -> list:
    return [
        DataStrategy("lowest_rate_first", LowestRateFirst),
        DataStrategy("sync_only", SyncOnly),
    ]
