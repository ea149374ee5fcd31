"""The agent-loop workers start with the trainer's engines and are built beside its replicas,
not in step 1.

verl's v1 setup is a chain of processes, each seconds of imports before its first line: the
worker group, then the hybrid rollout replica's server (``trainer.init()`` waits for it before
it returns), then, only once ``init()`` has returned, ``main_ppo`` creates the agent-loop
manager, whose workers' processes start inside step 1 (``sync``'s first step ran 5-7 s longer
than the next on this project's 2-core machine, 24-29 s on the lent H100). Two moves, each only
where the result is what verl would build:

- **The workers' processes start when the trainer sizes its resource pools** (:func:`spawn_workers`),
  beside the worker group's: verl's own worker class built without arguments
  (:func:`~longcat_plugins.runtime.later.later`), which only imports its modules; verl's
  ``AgentLoopManager._init_agent_loop_workers`` later constructs those processes with the
  arguments it has (:func:`_hook_manager_workers`) instead of starting new ones. Under any v1 trainer, for a recipe whose manager is verl's v1 default or
  :class:`PrestartedAgentLoopManager` (they build verl's ``AgentLoopWorkerTQ``).
- **The manager is created beside the replicas** (:func:`start_beside_replicas`): once a trainer's
  hybrid ``LLMServerManager.create`` returns inside ``init()``, the manager is created with
  exactly the arguments ``main_ppo`` will pass (its client, the teacher client and the reward
  workers' handles all exist by then; :meth:`PrestartedAgentLoopManager.prestart`), and
  ``main_ppo``'s own ``create`` with the same config gets it (verl's ``AgentLoopManagerTQ.create``
  is wrapped to hand it over; :class:`PrestartedAgentLoopManager` does it itself). Only where the
  trainer's ``get_llm_client``, ``get_teacher_client`` and ``get_reward_handles`` are verl's base
  ones (the async trainers route through clients of their own; the ``dora`` trainer creates its
  manager itself once its balancer is in place).

``LONGCAT_AGENT_LOOPS=verl`` keeps verl's order for both.
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
from longcat_plugins.runtime import env_choice
from longcat_plugins.runtime.later import StartedAhead, later

logger = logging.getLogger(__name__)

#: ``ahead`` (default: beside the replicas) or ``verl`` (verl's order: inside step 1)
ENV_AGENT_LOOPS = "LONGCAT_AGENT_LOOPS"
CHOICES = ("ahead", "verl")
#: printed when the manager is created ahead (the start-up benches look for it)
STARTED = "longcat-plugins: agent-loop workers start beside the rollout replicas"
#: printed when the workers' processes are started with the engines
SPAWNED = "longcat-plugins: agent-loop worker processes start beside the trainer's engines"

#: the trainer whose ``init()`` runs in this thread
_building = threading.local()


def agent_loops_mode(value: str | None) -> str:
    """The ``LONGCAT_AGENT_LOOPS`` choice (empty: ``ahead``); a bad value names the choices."""
    return env_choice(ENV_AGENT_LOOPS, value, CHOICES)


def _ahead_wanted() -> bool:
    """Whether to start ahead; a bad value raises here too (the driver's Hydra callback exits 2
    with it before Ray starts; another entry point gets the same error, never verl's order)."""
    return agent_loops_mode(os.environ.get(ENV_AGENT_LOOPS)) == "ahead"


def _manager_class(config: Any) -> tuple[type, str | None]:
    """The agent-loop manager class ``main_ppo`` will build for ``config`` (and its fqn)."""
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ
    from verl.utils.import_utils import load_class_from_fqn

    fqn = config.actor_rollout_ref.rollout.get("agent", {}).get("agent_loop_manager_class")
    return (load_class_from_fqn(fqn, "AgentLoopManager") if fqn else AgentLoopManagerTQ), fqn


def _starter(config: Any) -> Any:
    """The class whose ``prestart`` builds what ``main_ppo`` would (verl's default manager is
    built as :class:`PrestartedAgentLoopManager`, which only adds the hand-over), or None where
    the recipe's manager may build its own way."""
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ

    from longcat_plugins.schedulers.prestart import PrestartedAgentLoopManager

    manager_cls, fqn = _manager_class(config)
    builds_as = getattr(manager_cls, "ungated", manager_cls)  # a start gate's twin builds as its class
    if builds_as is AgentLoopManagerTQ:
        return PrestartedAgentLoopManager
    if isinstance(builds_as, type) and issubclass(builds_as, PrestartedAgentLoopManager):
        return manager_cls
    logger.info("agent loops in verl's order: the recipe's manager %s may build its own way", fqn)
    return None


def _builds_verl_workers(config: Any) -> bool:
    """Whether the manager ``main_ppo`` (or a trainer, ahead) builds for ``config`` makes verl's
    own v1 workers (``AgentLoopWorkerTQ``): verl's default manager, ours, or a gate's twin of either."""
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ

    from longcat_plugins.schedulers.prestart import PrestartedAgentLoopManager

    manager_cls, _ = _manager_class(config)
    return getattr(manager_cls, "ungated", manager_cls) in (AgentLoopManagerTQ, PrestartedAgentLoopManager)


def _start(actor_cls: Any, names: list[str]) -> list[Any]:
    """One actor per name, round-robin over the nodes with CPUs, as verl's managers place them."""
    import ray

    nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"] and node["Resources"].get("CPU", 0) > 0]
    return [
        actor_cls.options(
            name=name,
            scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=nodes[i % len(nodes)], soft=True
            ),
        ).remote()
        for i, name in enumerate(names)
    ]


#: ``id(config)`` -> (the agent-loop worker processes started for that run, not yet constructed,
#: the Ray job)
_spawned = StartedAhead()


def spawn_workers(trainer: Any) -> int:
    """Start the processes of the agent-loop workers ``trainer``'s run will use, now that its
    resource pools are sized, named and placed as verl's manager names and places them; the
    manager constructs them when it is created (:func:`_hook_manager_workers`). How many were
    started."""
    import uuid

    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    config = trainer.config
    if not _ahead_wanted() or not _builds_verl_workers(config) or _spawned.holds(id(config)):
        return 0
    count = int(config.actor_rollout_ref.rollout.agent.num_workers)
    names = [f"agent_loop_worker_{i}_{uuid.uuid4().hex[:8]}" for i in range(count)]
    _spawned.put(id(config), _start(later(AgentLoopWorkerTQ.__ray_actor_class__), names))
    print(SPAWNED, flush=True)
    return count


def start_beside_replicas(trainer: Any, server_manager: Any) -> bool:
    """Create the agent-loop manager for ``trainer`` now, from ``server_manager`` (its hybrid
    replicas, just created), when the result is what ``main_ppo`` would build; whether it did."""
    from verl.trainer.ppo.v1 import PPOTrainer

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
    starter = _starter(config)
    if starter is None:
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
    """Record the trainer whose ``init()`` runs, start its agent-loop workers' processes once its
    pools are sized, and follow its hybrid replicas' creation."""
    trainer_cls = module.PPOTrainer
    if getattr(trainer_cls.init, "__longcat_agent_loops_ahead__", False):
        return
    init = trainer_cls.init
    size_pools = trainer_cls._init_resource_pool_mgr
    original = module.LLMServerManager

    @functools.wraps(size_pools)
    def _init_resource_pool_mgr(self: Any) -> None:
        size_pools(self)
        spawn_workers(self)

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

    init_recorded.__longcat_agent_loops_ahead__ = True  # type: ignore[attr-defined]
    trainer_cls.init = init_recorded
    trainer_cls._init_resource_pool_mgr = _init_resource_pool_mgr
    module.LLMServerManager = LLMServerManager


def _hook_manager_workers(module: ModuleType) -> None:
    """verl's ``AgentLoopManager._init_agent_loop_workers``: a manager of verl's v1 workers for a
    run whose workers were started ahead constructs those (waiting for each, so a failure is its
    own) instead of starting new ones; any other manager, as verl does."""
    cls = module.AgentLoopManager
    original = cls._init_agent_loop_workers
    if getattr(original, "__longcat_agent_loops_ahead__", False):
        return

    @functools.wraps(original)
    async def _init_agent_loop_workers(self: Any) -> None:
        import asyncio

        from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

        entry = _spawned.take(id(self.config)) if self.agent_loop_workers_class is AgentLoopWorkerTQ else None
        if entry is None:  # none, or an earlier Ray session's (its setup failed)
            return await original(self)
        (spawned,) = entry
        args = (self.config, self.llm_client, self.teacher_client, self.reward_loop_worker_handles)
        await asyncio.gather(*[worker.longcat_construct.remote(*args) for worker in spawned])
        self.agent_loop_workers = spawned

    _init_agent_loop_workers.__longcat_agent_loops_ahead__ = True  # type: ignore[attr-defined]
    cls._init_agent_loop_workers = _init_agent_loop_workers


def _hook_default_manager(module: ModuleType) -> None:
    """``AgentLoopManagerTQ.create`` on verl's class itself (or a start gate's twin of it) hands
    over a manager created ahead for the same config; every other call is verl's, unchanged (a
    coroutine to an awaiting caller)."""
    cls = module.AgentLoopManagerTQ
    verl_create = cls.__dict__["create"].__func__
    if getattr(verl_create, "__longcat_agent_loops_ahead__", False):
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

    create.__longcat_agent_loops_ahead__ = True  # type: ignore[attr-defined]
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
    when_imported("verl.experimental.agent_loop.agent_loop", _tested(_hook_manager_workers))
