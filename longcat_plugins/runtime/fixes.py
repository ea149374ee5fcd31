"""Narrow, guarded fixes that let verl 0.9.x train on the CPU platform.

Each fix applies only when the CPU runtime is active in the process *and* verl's version is
one the fix was written against; otherwise it leaves verl untouched and says why at DEBUG.
They are installed as post-import hooks, so each lands right after its verl module executes
and before any other module imports names from it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

from packaging.specifiers import SpecifierSet

from longcat_plugins.runtime.platform import cpu_runtime_active
from longcat_plugins.verl_version import TESTED_VERL, verl_is_tested

logger = logging.getLogger(__name__)

#: the verl releases these fixes were checked against
FIXED_VERL = SpecifierSet(TESTED_VERL)

#: fix name -> whether it has been applied in this process (for tests and ``doctor``)
APPLIED: dict[str, bool] = {}


def guarded(
    name: str, active: Callable[[], bool] = cpu_runtime_active
) -> Callable[[Callable[[ModuleType], None]], Callable[[ModuleType], None]]:
    """Run the fix only where ``active`` says (the CPU runtime by default) and on a verl release
    it was written for."""

    def decorate(fix: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
        @functools.wraps(fix)
        def run(module: ModuleType) -> None:
            if not active():
                logger.debug("fix %s skipped: not active in this process", name)
                return
            if not verl_is_tested():
                logger.warning("longcat-plugins: fix %s skipped: verl is outside %s", name, FIXED_VERL)
                return
            fix(module)
            APPLIED[name] = True

        return run

    return decorate


@guarded("process_group_backend")
def fix_process_group_backend(module: ModuleType) -> None:
    """verl builds ``"cpu:gloo,<device>:<backend>"``; with device ``cpu`` that names ``cpu``
    twice and torch rejects it. On the CPU runtime the default becomes plain ``gloo``."""
    original = module.initialize_global_process_group_ray
    if getattr(original, "__longcat_fixed__", False):
        return

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second: Any = None, backend: str | None = None) -> None:
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_global_process_group_ray.__longcat_fixed__ = True  # type: ignore[attr-defined]
    module.initialize_global_process_group_ray = initialize_global_process_group_ray


@guarded("sft_process_group")
def fix_sft_process_group(module: ModuleType) -> None:
    """The SPMD twin of :func:`fix_process_group_backend`: ``initialize_global_process_group``
    (what ``verl.trainer.sft_trainer`` calls under torchrun) builds the same doubled
    ``"cpu:gloo,cpu:gloo"`` backend. On the CPU runtime it starts a plain ``gloo`` group from
    the torchrun environment and returns what verl's does: (local_rank, rank, world_size)."""
    original = module.initialize_global_process_group
    if getattr(original, "__longcat_fixed__", False):
        return
    import os
    from datetime import timedelta

    import torch.distributed

    @functools.wraps(original)
    def initialize_global_process_group(timeout_second: int = 36000) -> tuple[int, int, int]:
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group(
                backend="gloo",
                timeout=timedelta(seconds=timeout_second),
                init_method=os.environ.get("DIST_INIT_METHOD"),
            )
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    initialize_global_process_group.__longcat_fixed__ = True  # type: ignore[attr-defined]
    module.initialize_global_process_group = initialize_global_process_group


@guarded("engine_registry_cpu")
def fix_engine_registry(module: ModuleType) -> None:
    """verl registers its FSDP engines for devices ``cuda``/``npu`` only; make the same
    classes resolvable for ``cpu`` (FSDP2 with gloo runs there)."""
    registry = module.EngineRegistry._engines
    for backends in registry.values():
        for by_device in backends.values():
            if "cpu" not in by_device and "cuda" in by_device:
                by_device["cpu"] = by_device["cuda"]


@guarded("pin_memory")
def fix_pin_memory(module: ModuleType) -> None:
    """FSDP2 CPU offload pins host memory, which needs an accelerator; on the CPU it is a no-op."""
    import torch

    if getattr(torch.Tensor.pin_memory, "__longcat_fixed__", False):
        return
    original = torch.Tensor.pin_memory

    def pin_memory(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not torch.cuda.is_available():
            return self
        return original(self, *args, **kwargs)

    pin_memory.__longcat_fixed__ = True  # type: ignore[attr-defined]
    torch.Tensor.pin_memory = pin_memory  # type: ignore[method-assign]


#: seconds between the v1 replay buffer's polls (verl hard-codes 2.0): set, it applies on any
#: device; unset, the CPU runtime polls every :data:`CPU_POLL_INTERVAL` and a GPU keeps verl's 2 s
ENV_POLL = "LONGCAT_V1_POLL_INTERVAL"
CPU_POLL_INTERVAL = 0.05


def poll_interval_from_env(value: str | None) -> float | None:
    """The poll interval ``LONGCAT_V1_POLL_INTERVAL`` asks for (None: unset); a value that is
    not a finite number of seconds >= 0 is an error naming the variable."""
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not (seconds >= 0 and seconds != float("inf")):
        raise ValueError(f"{ENV_POLL}={value!r}: not a number of seconds >= 0 (verl's default is 2.0)")
    return seconds


def _poll_interval_asked() -> float | None:
    import os

    return poll_interval_from_env(os.environ.get(ENV_POLL))


@guarded("v1_poll_interval", active=lambda: cpu_runtime_active() or _poll_interval_asked() is not None)
def fix_v1_poll_interval(module: ModuleType) -> None:
    """The v1 trainers' replay buffer sleeps 2 s between polls for finished rollouts and its
    config cannot change that. With a tiny model a step's work is ~0.3 s, so every step's wait
    for generation comes in whole 2 s quanta (on the lent H100, sync's generation wait read
    2.01 s whatever the responses' length): the CPU runtime polls every 50 ms, and
    ``LONGCAT_V1_POLL_INTERVAL`` sets it on any device (the GPU benches set it). Only the
    default changes: a caller passing ``poll_interval`` keeps its value."""
    asked = _poll_interval_asked()
    interval = CPU_POLL_INTERVAL if asked is None else asked
    cls = module.ReplayBuffer
    original = cls.__init__
    if getattr(original, "__longcat_fixed__", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("poll_interval", interval)
        original(self, *args, **kwargs)

    __init__.__longcat_fixed__ = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


#: verl module -> fixes to run right after it is imported
FIXES: dict[str, list[Callable[[ModuleType], None]]] = {
    "verl.utils.distributed": [fix_process_group_backend, fix_sft_process_group],
    "verl.workers.engine": [fix_engine_registry],
    "verl.workers.engine.fsdp": [fix_pin_memory],
    "verl.trainer.ppo.v1.replay_buffer": [fix_v1_poll_interval],
}
