"""Start the standalone rollout replicas while the trainer's engines are still being built.

verl's ``separate_async`` setup is serial: the trainer's worker group, its engines (CUDA, FSDP,
the model), the reward loop, then, after all of it, the standalone replicas, each a
``CheckpointEngineWorker`` process and a server process that import verl and load the model
(its own comment: ``TODO: make initialization parallel with super().init()``). On the lent H100
host that tail was ~70 s of a DORA run's ~165 s before step 1, each process 15-30 s of imports.

:class:`ReplicaPrestart` starts the same ``LLMServerManager.create(config, start_rank)`` call in
a background thread as soon as every pool of the trainer's resource pool manager holds its
placement groups (so the replicas can only take the devices the trainer leaves, as in verl's
order), and hands the finished manager to verl when its setup asks for it
(:meth:`ReplicaPrestart.handing_over`). Nothing else changes: the same call, the same replica
ranks (checked), the same class (a recipe's ``rollout_replica_class`` is read in that window).

The agent-loop workers are the next process in the chain: verl's ``main_ppo`` creates the
agent-loop manager only after ``trainer.init()`` returns, which for ``separate_async`` ends by
syncing weights to the replicas (waiting for their servers to come up). With
:class:`PrestartedAgentLoopManager` as ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``
(the ``dora_cpu`` / ``dora_gpu`` recipes set it), the trainer creates that manager with the same
arguments as soon as its client exists, before the sync, and ``main_ppo``'s ``create`` gets it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, ClassVar

from omegaconf import DictConfig
from verl.trainer.ppo.v1 import AgentLoopManagerTQ

from longcat_plugins.runtime.servers_ahead import hybrid_replica_count

logger = logging.getLogger(__name__)

#: the verl module whose ``_setup`` builds the standalone manager (its global name is swapped)
SEPARATE_ASYNC = "verl.trainer.ppo.v1.trainer_separate_async"


class ReplicaPrestart:
    """``LLMServerManager.create(config=..., start_rank=...)`` run ahead, once, in a thread."""

    def __init__(self, create: Callable[..., Any], config: DictConfig, hybrid: bool) -> None:
        self._create = create
        self._config = config
        self._hybrid = hybrid
        #: the standalone replicas' first rank (known once the trainer's pools are sized)
        self.start_rank: int | None = None
        self._future: Future[Any] = Future()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: seconds from the start to the manager being ready (None until it is)
        self.create_s: float | None = None
        #: whether the replicas started before verl asked for them (False: in verl's order)
        self.ahead = False

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Begin creating the replicas (idempotent). A daemon thread: a setup that fails first
        must not wait at exit for replicas nobody will use."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="longcat-replica-prestart", daemon=True)
            self._thread.start()
        logger.info("dora: standalone replicas (from rank %d) starting beside the trainer's engines", self.start_rank)

    def _run(self) -> None:
        began = time.perf_counter()
        try:
            manager = self._create(config=self._config, start_rank=self.start_rank)
            self.create_s = time.perf_counter() - began
            self._future.set_result(manager)
        except Exception as exc:  # noqa: BLE001 - handed to the setup thread, which re-raises it
            self._future.set_exception(exc)
        finally:  # anything else ended the thread: the setup must not wait forever
            if not self._future.done():
                self._future.set_exception(RuntimeError("dora prestart_replicas: the replicas' start was cut short"))

    def take(self, start_rank: int) -> Any:
        """The prestarted manager (waiting for it), for verl's call with ``start_rank``."""
        self.ahead = self.started
        if self.start_rank is None:  # not watched (ranks unknown ahead): verl's own call, now
            return self._create(config=self._config, start_rank=start_rank)
        if not self.started:  # a pool of the trainer's reserves later (a reward model's): verl's order
            logger.warning(
                "dora prestart_replicas: not every trainer resource pool held its devices before verl's "
                "standalone step; the replicas start now, in verl's order"
            )
            self.start()
        manager = self._future.result()
        if start_rank != self.start_rank:
            raise RuntimeError(
                f"dora prestart_replicas: the standalone replicas were started from rank {self.start_rank}, "
                f"but verl built {start_rank} hybrid replicas; set "
                "longcat.settings.scheduler.dora.prestart_replicas=false for this configuration"
            )
        return manager

    def watch_pools(self, manager: Any) -> None:
        """Start once every pool of ``manager`` (verl's ``ResourcePoolManager``) has reserved its
        placement groups: its ``create_resource_pool`` makes the pools, and each pool reserves on
        its first ``get_placement_groups`` (the worker group's spawn). Not watched where the
        first rank cannot be known ahead (:func:`hybrid_replica_count`): verl's order then."""
        start_rank = hybrid_replica_count(self._config, sum(manager.resource_pool_spec["global_pool"]), self._hybrid)
        if start_rank is None:
            logger.info("dora prestart_replicas: replica ranks unknown ahead (prefill/decode disaggregation)")
            return
        self.start_rank = start_rank
        create_pools = manager.create_resource_pool

        def create_resource_pool() -> None:
            create_pools()
            pools = list(manager.resource_pool_dict.values())
            for pool in pools:
                pool.get_placement_groups = self._reserving(pool, pools)

        manager.create_resource_pool = create_resource_pool

    def _reserving(self, pool: Any, pools: list[Any]) -> Callable[..., Any]:
        reserve = pool.get_placement_groups

        def get_placement_groups(*args: Any, **kwargs: Any) -> Any:
            groups = reserve(*args, **kwargs)
            if all(p.pgs is not None for p in pools):
                self.start()
            return groups

        return get_placement_groups

    @contextlib.contextmanager
    def handing_over(self) -> Iterator[None]:
        """While verl's ``separate_async`` setup runs, its ``LLMServerManager.create(config=...,
        start_rank=...)`` (the standalone call) returns the prestarted manager."""
        import importlib

        module = importlib.import_module(SEPARATE_ASYNC)
        original = module.LLMServerManager
        prestart = self

        class PrestartedServerManager(original):  # type: ignore[misc, valid-type]
            @classmethod
            def create(cls, *args: Any, **kwargs: Any) -> Any:
                if args or "worker_group" in kwargs or "start_rank" not in kwargs:
                    return original.create(*args, **kwargs)
                return prestart.take(int(kwargs["start_rank"]))

        module.LLMServerManager = PrestartedServerManager
        try:
            yield
        finally:
            module.LLMServerManager = original


class PrestartedAgentLoopManager(AgentLoopManagerTQ):
    """verl's v1 (TransferQueue) agent-loop manager, which a trainer may create ahead (the dora
    trainer once its balancer is in place; verl's sync trainer beside its replicas,
    :mod:`~longcat_plugins.schedulers.agent_loops_ahead`).

    :meth:`prestart` runs verl's own ``create`` (the workers' processes start, nothing waits for
    them); ``main_ppo``'s later ``create`` with the same ``config`` object gets that manager, and
    any other call builds one as verl does.
    """

    #: ``id(config)`` -> the manager created ahead for the run with that config
    _ahead: ClassVar[dict[int, AgentLoopManagerTQ]] = {}

    @classmethod
    def prestart(cls, **kwargs: Any) -> None:
        """verl's ``create(**kwargs)`` now; kept for the ``create`` with the same ``config``."""
        cls._ahead[id(kwargs["config"])] = super().create(**kwargs)

    @classmethod
    def take(cls, config: Any) -> AgentLoopManagerTQ | None:
        """The manager created ahead for the run with ``config`` (once), or None."""
        return cls._ahead.pop(id(config), None)

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> Any:
        ahead = None if args else cls.take(kwargs.get("config"))
        if ahead is not None:
            return ahead
        return super().create(*args, **kwargs)
