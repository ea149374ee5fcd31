"""verl's sync trainer starts its agent-loop workers beside the rollout replicas, not in step 1.

verl's v1 setup is a chain of processes, each seconds of imports before its first line: the
worker group, then the hybrid rollout replica's server (``trainer.init()`` waits for it before
it returns), then, only once ``init()`` has returned, ``main_ppo`` creates the agent-loop
manager, whose workers' processes start inside step 1 (``sync``'s first step ran 5-7 s longer
than the next on this project's 2-core machine, 24-29 s on the lent H100). Nothing the manager
is built from changes after the replicas are created: its client (the replicas' load balancer),
the teacher client and the reward workers' handles all exist by then.

So, while a v1 trainer's ``init()`` runs, :func:`install` has verl's hybrid
``LLMServerManager.create`` call, once it returns, create the agent-loop manager with exactly
the arguments ``main_ppo`` will pass (:meth:`PrestartedAgentLoopManager.prestart`): its workers'
processes start while the replica's server starts and takes its first weights. ``main_ppo``'s
own ``create`` with the same config then gets that manager (verl's ``AgentLoopManagerTQ.create``
is wrapped to hand it over; :class:`PrestartedAgentLoopManager` and its subclasses do it
themselves). It applies only where the result is the same object ``main_ppo`` would build:
the trainer's ``get_llm_client``, ``get_teacher_client`` and ``get_reward_handles`` are verl's
base ones (the async trainers route through clients of their own, and the ``dora`` trainer
starts its manager itself once its balancer is in place), and the recipe's manager class is
verl's default or a :class:`PrestartedAgentLoopManager`. ``LONGCAT_AGENT_LOOPS=verl`` keeps
verl's order.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from longcat_plugins.import_hooks import when_imported

logger = logging.getLogger(__name__)

#: ``ahead`` (default: beside the replicas) or ``verl`` (verl's order: inside step 1)
ENV_AGENT_LOOPS = "LONGCAT_AGENT_LOOPS"
CHOICES = ("ahead", "verl")
#: printed when the manager is created ahead (the start-up benches look for it)
STARTED = "longcat-plugins: agent-loop workers start beside the rollout replicas"

#: the trainer whose ``init()`` runs in this thread
_building = threading.local()


def agent_loops_mode(value: str | None) -> str:
    """The ``LONGCAT_AGENT_LOOPS`` choice (empty: ``ahead``); a bad value names the choices."""
    value = (value or "").strip() or "ahead"
    if value not in CHOICES:
        raise ValueError(f"{ENV_AGENT_LOOPS}: expected one of {', '.join(CHOICES)}, got {value!r}")
    return value


def _ahead_wanted() -> bool:
    try:
        return agent_loops_mode(os.environ.get(ENV_AGENT_LOOPS)) == "ahead"
    except ValueError:  # the driver's hydra callback stops a run with this before Ray starts
        logger.error("longcat-plugins: %s; agent-loop workers start in verl's order", sys.exc_info()[1])
        return False


def start_beside_replicas(trainer: Any, server_manager: Any) -> bool:
    """Create the agent-loop manager for ``trainer`` now, from ``server_manager`` (its hybrid
    replicas, just created), when the result is what ``main_ppo`` would build; whether it did."""
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ, PPOTrainer
    from verl.utils.import_utils import load_class_from_fqn

    from longcat_plugins.schedulers.prestart import PrestartedAgentLoopManager

    if not _ahead_wanted():
        return False
    own = [
        name
        for name in ("get_llm_client", "get_teacher_client", "get_reward_handles")
        if getattr(type(trainer), name) is not getattr(PPOTrainer, name)
    ]
    if own:
        logger.info("agent loops in verl's order: %s has its own %s", type(trainer).__name__, ", ".join(own))
        return False
    config = trainer.config
    fqn = config.actor_rollout_ref.rollout.get("agent", {}).get("agent_loop_manager_class")
    manager_cls = load_class_from_fqn(fqn, "AgentLoopManager") if fqn else AgentLoopManagerTQ
    builds_as = getattr(manager_cls, "ungated", manager_cls)  # a start gate's twin builds as its class
    if builds_as is AgentLoopManagerTQ:
        starter: type[PrestartedAgentLoopManager] = PrestartedAgentLoopManager
    elif isinstance(builds_as, type) and issubclass(builds_as, PrestartedAgentLoopManager):
        starter = manager_cls
    else:
        logger.info("agent loops in verl's order: the recipe's manager %s may build its own way", fqn)
        return False
    starter.prestart(
        config=config,
        llm_client=server_manager.get_client(),
        teacher_client=trainer.get_teacher_client(),
        reward_loop_worker_handles=trainer.get_reward_handles(),
    )
    print(STARTED, flush=True)
    return True


def _hook_trainer_base(module: ModuleType) -> None:
    """Record the trainer whose ``init()`` runs, and follow its hybrid replicas' creation."""
    trainer_cls = module.PPOTrainer
    if getattr(trainer_cls.init, "__longcat_ahead__", False):
        return
    init = trainer_cls.init
    original = module.LLMServerManager

    @functools.wraps(init)
    def init_recorded(self: Any) -> Any:
        _building.trainer = self
        try:
            return init(self)
        finally:
            _building.trainer = None

    class LLMServerManager(original):  # type: ignore[misc, valid-type]
        """verl's manager class; the hybrid ``create`` of a trainer's ``init()`` also starts its
        agent loops (:func:`start_beside_replicas`)."""

        @classmethod
        def create(cls, *args: Any, **kwargs: Any) -> Any:
            manager = original.create(*args, **kwargs)
            trainer = getattr(_building, "trainer", None)
            if trainer is not None and kwargs.get("worker_group") is not None and not inspect.isawaitable(manager):
                start_beside_replicas(trainer, manager)
            return manager

    init_recorded.__longcat_ahead__ = True  # type: ignore[attr-defined]
    trainer_cls.init = init_recorded
    module.LLMServerManager = LLMServerManager


def _hook_default_manager(module: ModuleType) -> None:
    """``AgentLoopManagerTQ.create`` on verl's class itself (or a start gate's twin of it) hands
    over a manager created ahead for the same config; every other call is verl's, unchanged (a
    coroutine to an awaiting caller)."""
    cls = module.AgentLoopManagerTQ
    verl_create = cls.__dict__["create"].__func__
    if getattr(verl_create, "__longcat_ahead__", False):
        return

    @functools.wraps(verl_create)
    def create(klass: type, *args: Any, **kwargs: Any) -> Any:
        ahead = None
        if getattr(klass, "ungated", klass) is cls and not args:
            from longcat_plugins.schedulers.prestart import PrestartedAgentLoopManager

            ahead = PrestartedAgentLoopManager.take(kwargs.get("config"))
        awaited = bool(sys._getframe(1).f_code.co_flags & inspect.CO_COROUTINE)
        if ahead is not None:
            return _ready(ahead) if awaited else ahead
        if awaited:  # verl's auto_await hands an awaiting caller the coroutine
            return verl_create.__wrapped__(klass, *args, **kwargs)
        return verl_create(klass, *args, **kwargs)

    create.__longcat_ahead__ = True  # type: ignore[attr-defined]
    cls.create = classmethod(create)


async def _ready(value: Any) -> Any:
    return value


def _tested(hook: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    """``hook`` only on a verl release these hooks were written against."""

    @functools.wraps(hook)
    def run(module: ModuleType) -> None:
        from longcat_plugins.verl_version import verl_is_tested

        if not verl_is_tested():
            logger.warning("longcat-plugins: agent loops in verl's order: verl is outside the tested range")
            return
        hook(module)

    return run


def install() -> None:
    """Hook verl's v1 trainer base and agent-loop manager when they are imported (every
    process: it acts only in the one that runs a trainer's ``init()``)."""
    when_imported("verl.trainer.ppo.v1.trainer_base", _tested(_hook_trainer_base))
    when_imported("verl.trainer.ppo.v1.agent_loop_tq", _tested(_hook_default_manager))
