"""Objects built once per process and key: loaded environments, code tasks, workspace pools,
sandboxes. A worker's threads share them, so the first build happens under a lock and every
later caller gets the same object."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PerProcess(Generic[K, V]):
    """A process-wide cache; ``values`` is the plain dict (tests may seed or drop entries)."""

    def __init__(self) -> None:
        self.values: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K, build: Callable[[], V]) -> V:
        """The object for ``key``, built by ``build()`` the first time it is asked for."""
        with self._lock:
            if key not in self.values:
                self.values[key] = build()
            return self.values[key]
