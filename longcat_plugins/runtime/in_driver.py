"""verl's TaskRunner in the driver process, for a cluster the driver starts.

``verl.trainer.main_ppo`` starts Ray and then one more process, the ``TaskRunner`` actor, whose
``run`` builds the trainer and drives every step; the driver only waits for it. That actor's
process imports verl again before it can print a line: 5-7 s on this project's 2-core machine,
17-24 s on the lent H100 host (the ``-> TaskRunner up`` phase in ``docs/schedulers.md``), on the
start-up chain of every run. The driver has already imported all of it.

:func:`install` wraps ``run_ppo`` in the module that runs ``main`` so that, when the run starts
its own cluster, the same ``TaskRunner`` class (verl's, or a recipe's) is instantiated here and its
``run`` called here, exactly as the actor would; every worker, server and manager it creates is
still a Ray actor. What the actor had that the driver must match: Ray runs a CPU actor with
``OMP_NUM_THREADS=1`` unless the environment sets it, so the run gets one torch thread too, and the
job's ``env_vars`` are already in this process's environment (:mod:`fast_start` moves them there
for a cluster the driver starts). A cluster the run joins, an Nsight-profiled TaskRunner, and
``LONGCAT_TASK_RUNNER=actor`` keep verl's actor.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from longcat_plugins.runtime import env_choice

#: ``driver`` (default: the TaskRunner runs in the driver when it starts the cluster) or ``actor``
ENV_TASK_RUNNER = "LONGCAT_TASK_RUNNER"
CHOICES = ("driver", "actor")
#: printed when the TaskRunner starts here (the start-up benches' ``task_runner_up`` milestone)
STARTED = "longcat-plugins: {name} runs in the driver process"


def task_runner_mode(value: str | None) -> str:
    """The ``LONGCAT_TASK_RUNNER`` choice (empty: ``driver``); a bad value names the choices."""
    return env_choice(ENV_TASK_RUNNER, value, CHOICES)


class _Method:
    """``runner.method.remote(...)`` answered by calling the method here (an ObjectRef back)."""

    def __init__(self, bound: Callable[..., Any]) -> None:
        self._bound = bound

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        import ray

        return ray.put(self._bound(*args, **kwargs))


class _LocalRunner:
    def __init__(self, instance: Any) -> None:
        self._instance = instance

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self._instance, name))


class LocalTaskRunner:
    """Stands in for the ``@ray.remote`` TaskRunner class ``run_ppo`` is given: ``.remote()``
    builds the class's instance in this process; ``.options(...)`` (a profiler's runtime_env)
    returns verl's actor class with those options, unchanged; so does a cluster started with a
    runtime_env that had to stay one (a ``pip``, a ``working_dir``: not in this process)."""

    def __init__(self, actor_class: Any) -> None:
        self.actor_class = actor_class
        self.cls = actor_class.__ray_actor_class__

    def options(self, *args: Any, **kwargs: Any) -> Any:
        return self.actor_class.options(*args, **kwargs)

    def remote(self) -> Any:
        from longcat_plugins.runtime import fast_start

        if not fast_start.environment_moved():  # the job's env_vars exist only in the actor's runtime_env
            return self.actor_class.remote()
        print(STARTED.format(name=self.cls.__name__), flush=True)
        return _LocalRunner(self.cls())


def in_driver(run_ppo: Callable[..., Any]) -> Callable[..., Any]:
    """``run_ppo`` that runs its TaskRunner here when the cluster is this driver's own."""
    if getattr(run_ppo, "__longcat_in_driver__", False):
        return run_ppo

    @functools.wraps(run_ppo)
    def run_ppo_in_driver(config: Any, task_runner_class: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        threads = torch.get_num_threads()
        if "OMP_NUM_THREADS" not in os.environ:  # what Ray gives the actor's process
            torch.set_num_threads(1)
        try:
            return run_ppo(config, LocalTaskRunner(task_runner_class), *args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    run_ppo_in_driver.__longcat_in_driver__ = True  # type: ignore[attr-defined]
    return run_ppo_in_driver


def entry_modules() -> list[ModuleType]:
    """The modules whose ``run_ppo`` ``main`` calls: ``__main__`` when it is verl's
    ``main_ppo`` (``python -m verl.trainer.main_ppo``), and the imported module of that name."""
    found = []
    main = sys.modules.get("__main__")
    if main is not None and getattr(getattr(main, "__spec__", None), "name", None) == "verl.trainer.main_ppo":
        found.append(main)
    if "verl.trainer.main_ppo" in sys.modules:
        found.append(sys.modules["verl.trainer.main_ppo"])
    return found


def install() -> None:
    """Run the TaskRunner in this (driver) process unless ``LONGCAT_TASK_RUNNER=actor``; call it
    only for a cluster the driver starts (the hydra callback decides)."""
    if task_runner_mode(os.environ.get(ENV_TASK_RUNNER)) != "driver":
        return
    for module in entry_modules():
        if callable(getattr(module, "run_ppo", None)):
            module.run_ppo = in_driver(module.run_ppo)  # type: ignore[attr-defined]
