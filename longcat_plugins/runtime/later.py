"""Ray actors built before their arguments exist.

A Ray actor's process imports its class's modules before ``__init__`` runs: seconds per process
(torch, transformers, verl), paid where verl's setup creates the actor, one after another. A
class built through :func:`later` can be created at once without arguments, which starts the
process and its imports only; :meth:`Later.longcat_construct` later runs the class's own
``__init__`` with the arguments that exist by then. The start-up moves use it for the ``hf``
rollout's servers (:mod:`~longcat_plugins.runtime.servers_ahead`) and for verl's agent-loop
workers (:mod:`~longcat_plugins.schedulers.agent_loops_ahead`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any


class Later:
    """Mixed in before an actor class: built without arguments, the actor only starts its process;
    :meth:`longcat_construct` then runs the class's own ``__init__``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            super().__init__(*args, **kwargs)

    def longcat_construct(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)


def later(cls: type) -> Any:
    """``cls`` as a Ray actor class that can be built before its arguments exist (the same name
    in Ray's logs)."""
    import ray

    return ray.remote(type(cls.__name__, (Later, cls), {"__qualname__": cls.__qualname__}))


def ray_job() -> str:
    """This process's Ray job: what an actor started ahead is kept with, so that a later session
    in the same process does not take a handle of a cluster that is gone."""
    import ray

    return ray.get_runtime_context().get_job_id()


class StartedAhead(dict[Hashable, tuple[Any, ...]]):
    """What this process started ahead, by key: ``key -> (*what, the Ray job it was started in)``.
    An entry of an earlier Ray session in the same process (a setup that failed) is never handed
    out, and does not stop this session from starting its own under the same key."""

    def holds(self, key: Hashable) -> bool:
        """Whether this Ray job started something under ``key``."""
        entry = self.get(key)
        return entry is not None and entry[-1] == ray_job()

    def put(self, key: Hashable, *what: Any) -> None:
        self[key] = (*what, ray_job())

    def take(self, key: Hashable) -> tuple[Any, ...] | None:
        """What this Ray job started under ``key``, removed; None if nothing (or another job's)."""
        entry = self.pop(key, None)
        return entry[:-1] if entry is not None and entry[-1] == ray_job() else None
