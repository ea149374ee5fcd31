"""Online filtering with replacement (D1, first LongCat-Flash-Thinking report).

- While streaming, a finished group whose computable rewards are *all* correct or *all* wrong
  carries no group-relative signal and is dropped (each side switchable). Rewards that could
  not be computed (``None``) are ignored here; A4 masks them in the loss.
- Prompts are drawn with replacement, epoch by epoch: every prompt of a domain is drawn once per
  epoch in a shuffled order before any is drawn again, so every prompt is consumed at least
  once; a prompt is put back (drawn again ahead of the epoch) when its group must be
  regenerated: its version was evicted, or its finished group grew older than the staleness
  bound before it was trained ("in async mode reuse a prompt if its staleness is under the
  bound, else regenerate").
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any


def filter_verdict(
    rewards: Sequence[float | None],
    *,
    correct_threshold: float = 1.0,
    wrong_threshold: float = 0.0,
    drop_all_correct: bool = True,
    drop_all_wrong: bool = True,
    by_signal: bool = False,
) -> str | None:
    """``"all_correct"`` or ``"all_wrong"`` when the group should be dropped, else ``None``.

    ``by_signal``: the group's rewards are not on the task's pass/fail scale (a verification
    group's +1 / -0.5 / -1), so it is dropped only when it has no signal at all (every reward the
    same; named by the side of the thresholds it is on): a verification group mixing wrong
    verdicts with no verdict teaches the verdict format and is kept."""
    valid = [r for r in rewards if r is not None]
    if not valid:
        return None
    if by_signal:
        if max(valid) != min(valid):
            return None
        if valid[0] >= correct_threshold:
            return "all_correct" if drop_all_correct else None
        return "all_wrong" if drop_all_wrong else None
    if drop_all_correct and all(r >= correct_threshold for r in valid):
        return "all_correct"
    if drop_all_wrong and all(r <= wrong_threshold for r in valid):
        return "all_wrong"
    return None


class PromptSampler:
    """Epoch-wise shuffled draws per domain, plus a retry queue of prompts to regenerate."""

    def __init__(self, domains: Mapping[str, Sequence[int]], rng: random.Random, shuffle: bool = True) -> None:
        self.rng = rng
        self.shuffle = shuffle
        self.pools: dict[str, list[int]] = {d: list(ix) for d, ix in domains.items()}
        self.orders: dict[str, list[int]] = {d: [] for d in self.pools}
        self.cursor: dict[str, int] = {d: 0 for d in self.pools}
        self.epochs: dict[str, int] = {d: 0 for d in self.pools}
        self.retry: dict[str, deque[int]] = {d: deque() for d in self.pools}

    def domains_with_prompts(self) -> list[str]:
        return [d for d, pool in self.pools.items() if pool]

    def draw(self, domain: str) -> int:
        """Index of the next prompt of ``domain``: a retry first, else the epoch order."""
        if self.retry[domain]:
            return self.retry[domain].popleft()
        if self.cursor[domain] >= len(self.orders[domain]):
            order = list(self.pools[domain])
            if self.shuffle:
                self.rng.shuffle(order)
            self.orders[domain] = order
            self.cursor[domain] = 0
            self.epochs[domain] += 1
        index = self.orders[domain][self.cursor[domain]]
        self.cursor[domain] += 1
        return index

    def requeue(self, domain: str, index: int) -> None:
        """Put ``index`` back to be drawn before anything new (regeneration); no duplicates."""
        if index not in self.retry[domain]:
            self.retry[domain].append(index)

    def state_dict(self) -> dict[str, Any]:
        return {
            "orders": {d: list(v) for d, v in self.orders.items()},
            "cursor": dict(self.cursor),
            "epochs": dict(self.epochs),
            "retry": {d: list(v) for d, v in self.retry.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.orders = {d: list(v) for d, v in state["orders"].items()}
        self.cursor = dict(state["cursor"])
        self.epochs = dict(state["epochs"])
        self.retry = {d: deque(v) for d, v in state["retry"].items()}
