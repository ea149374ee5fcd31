"""A local Ray cluster whose prestarted workers verl's actors can use.

Ray starts one idle Python worker per logical CPU when its raylet starts, so that the first
tasks and actors need not spawn a process. verl's ``run_ppo`` always hands ``ray.init`` a job
``runtime_env`` with ``env_vars`` (its own defaults merged with ``ray_kwargs.ray_init``), and a
job runtime_env gives the job's workers their own environment hash: none of the prestarted
workers matches, so every actor (the TaskRunner, the agent-loop and reward workers, the rollout
servers) waits for a fresh process that then imports verl. That import is 14 s on the lent H100
host (``bench/results/gpu_startup.json``), paid once per serially started actor.

When the driver starts the cluster itself (no ``address``), the workers inherit the driver's
environment, so the same variables can travel that way: :func:`install` wraps ``ray.init`` to
move a runtime_env that holds only ``env_vars`` into ``os.environ`` (a runtime_env value still
wins over the driver's, as it would in the worker) and start Ray without it. Workers then match
the prestarted ones. Actors that set their own runtime_env (verl's FSDP worker groups: ``RANK``,
``WORLD_SIZE``) still get fresh processes.

``LONGCAT_RAY_PRELOAD`` (comma-separated module names, or ``1`` for :data:`DEFAULT_PRELOAD`)
additionally asks the raylet to import those modules in every Python worker it starts
(Ray's ``RAY_preload_python_modules``), so the prestarted workers import verl while the driver
is still reading its config. It is opt-in: each prestarted worker (one per logical CPU) pays the
import, which a many-core host absorbs and a 2-core laptop does not.

A cluster the run joins (``ray_kwargs.ray_init.address``) is left alone: its workers do not
inherit this driver's environment (see :mod:`longcat_plugins.hydra_callback`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

#: modules the raylet imports in each worker it starts (opt-in, see the module doc)
ENV_PRELOAD = "LONGCAT_RAY_PRELOAD"
#: Ray's own setting that ``ENV_PRELOAD`` becomes
RAY_PRELOAD = "RAY_preload_python_modules"
#: what every verl actor imports first (``1`` selects it)
DEFAULT_PRELOAD = ("verl.trainer.main_ppo",)


def preload_modules(value: str | None) -> list[str]:
    """The module names ``LONGCAT_RAY_PRELOAD`` asks for (``1``: :data:`DEFAULT_PRELOAD`)."""
    value = (value or "").strip()
    if not value or value == "0":
        return []
    if value == "1":
        return list(DEFAULT_PRELOAD)
    names = [name.strip() for name in value.split(",") if name.strip()]
    bad = [name for name in names if not all(part.isidentifier() for part in name.split("."))]
    if bad:
        raise ValueError(f"{ENV_PRELOAD}: not module names: {', '.join(bad)} (comma-separated, or 1)")
    return names


def environment_only(runtime_env: Any) -> dict[str, str] | None:
    """The ``env_vars`` of a runtime_env that holds nothing else, as strings; ``None`` when it
    holds anything else (a ``pip``, ``working_dir``, ``nsight``, ...) and must stay a runtime_env.
    A field set to ``None`` is unset: verl's ``get_ppo_ray_runtime_env`` always adds
    ``working_dir: None`` (and ``ray_kwargs`` merging adds ``py_executable: None``)."""
    if runtime_env is None:
        return {}
    if not isinstance(runtime_env, dict) or {k for k, v in runtime_env.items() if v is not None} - {"env_vars"}:
        return None
    return {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}


#: whether the wrapped ``ray.init`` started this driver's cluster with the job's env_vars moved
#: into this process's environment (what :mod:`in_driver` needs to run the TaskRunner here)
_moved = False


def environment_moved() -> bool:
    """Whether this process started its cluster with the job's ``env_vars`` in its own environment."""
    return _moved


def local_start_through_environment(init: Callable[..., Any]) -> Callable[..., Any]:
    """``ray.init`` that, for a cluster it starts, passes an env-only runtime_env through the
    environment the raylet and its workers inherit (and sets the raylet's preload list)."""
    if getattr(init, "__longcat_fast_start__", False):
        return init

    @functools.wraps(init)
    def ray_init(*args: Any, **kwargs: Any) -> Any:
        global _moved
        _moved = False
        address = kwargs.get("address", args[0] if args else None) or os.environ.get("RAY_ADDRESS")
        env = environment_only(kwargs.get("runtime_env"))
        if (address and address != "local") or env is None:
            return init(*args, **kwargs)
        modules = preload_modules(os.environ.get(ENV_PRELOAD))
        os.environ.update(env)
        if modules:
            os.environ[RAY_PRELOAD] = ",".join(modules)
        started = init(*args, **{k: v for k, v in kwargs.items() if k != "runtime_env"})
        _moved = True
        return started

    ray_init.__longcat_fast_start__ = True  # type: ignore[attr-defined]
    return ray_init


def install() -> None:
    """Wrap ``ray.init`` in this (driver) process; idempotent. Checks ``LONGCAT_RAY_PRELOAD`` now,
    so a bad value stops the run before Ray starts."""
    import ray

    preload_modules(os.environ.get(ENV_PRELOAD))
    ray.init = local_start_through_environment(ray.init)
