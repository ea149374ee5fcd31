"""Hold a run before its first step until a file exists (``LONGCAT_START_GATE``).

A lent GPU is lent for minutes, and each verl run on it spends about two of them starting
(processes, imports, CUDA, the replicas) before steps of a few seconds: run one after another,
three runs fit a session. A bench that starts several runs at once and lets each train only when
its turn comes spends the start-ups side by side and still times every run's steps with no
other run training or starting.

The gate is the agent-loop manager: verl's ``main_ppo`` creates it after ``trainer.init()``
returns and hands it to ``fit`` straight after. These subclasses wait for the file before
verl's ``create``, mark that the run is up (``<gate>.waiting``, so a bench can wait until every
run it started is up) and print when they started and stopped waiting, which the bench subtracts
from the run's start-up. Without the variable they are verl's manager and ours, unchanged. A
manager a trainer creates ahead (the ``dora`` trainer's, and the ``sync`` trainer's beside its
replicas: :mod:`~longcat_plugins.schedulers.agent_loops_ahead`) is not gated: a gated run
starts up as an ungated one does, and only the call that precedes ``fit`` waits.
"""

from __future__ import annotations

import os
import time
from typing import Any

from verl.trainer.ppo.v1 import AgentLoopManagerTQ

from longcat_plugins.schedulers.prestart import PrestartedAgentLoopManager

#: the file whose existence lets the run train (unset: no gate)
ENV_GATE = "LONGCAT_START_GATE"
#: seconds between checks for the file
POLL_S = 0.05


def wait_for_gate(path: str | None = None) -> float | None:
    """Block until ``path`` (default: ``$LONGCAT_START_GATE``) exists; the seconds waited, or
    None when there is no gate. ``<path>.waiting`` is created first: the run is up and held."""
    path = path if path is not None else os.environ.get(ENV_GATE) or None
    if path is None:
        return None
    with open(f"{path}.waiting", "w"):
        pass
    print(f"longcat start gate: waiting for {path}", flush=True)
    started = time.perf_counter()
    while not os.path.exists(path):
        time.sleep(POLL_S)
    waited = time.perf_counter() - started
    print(f"longcat start gate: open after {waited:.3f} s", flush=True)
    return waited


class _Gated:
    """Mixed in before a manager class: its ``create`` waits for the start gate first."""

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> Any:
        wait_for_gate()
        return super().create(*args, **kwargs)  # type: ignore[misc]


class GatedAgentLoopManager(_Gated, AgentLoopManagerTQ):
    """verl's v1 agent-loop manager, created once the start gate is open."""

    #: what it builds as: a trainer starts it as it starts verl's (``agent_loops_ahead``)
    ungated = AgentLoopManagerTQ


class GatedPrestartedAgentLoopManager(_Gated, PrestartedAgentLoopManager):
    """:class:`PrestartedAgentLoopManager` (the ``dora`` recipes' manager) behind the start gate."""

    ungated = PrestartedAgentLoopManager


def _fqn(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


#: the gated twin of each manager a recipe may name (None: verl's default manager)
GATED = {
    None: _fqn(GatedAgentLoopManager),
    _fqn(AgentLoopManagerTQ): _fqn(GatedAgentLoopManager),
    "verl.trainer.ppo.v1.AgentLoopManagerTQ": _fqn(GatedAgentLoopManager),  # verl's re-export
    _fqn(PrestartedAgentLoopManager): _fqn(GatedPrestartedAgentLoopManager),
}
