"""DORA's load balancing (SPEC S3) as verl's rollout router: the two-phase per-replica cap.

verl routes every agent-loop request through one ``GlobalRequestLoadBalancer`` actor
(sticky session + least in-flight, no limit per replica). :class:`DoraLoadBalancer` subclasses
it, keeping its sticky sessions and least-loaded choice, and adds the report's cap (§3.2):
a replica takes at most ``cap_before_rebalance`` requests until the first rebalance of a step,
then ``cap_after_rebalance``. ``acquire_server`` *waits* (on an asyncio event, no polling)
while every replica is at its cap, and is woken by the next release, added server or phase
change.

The rebalance decision is the core's: after every load change the balancer strategy of
:mod:`~longcat_plugins.schedulers.core.balancer` (``BALANCERS[config.balancer]``, ``greedy`` by
default: load spread at ``rebalance_threshold``) is asked for a plan over the replicas'
in-flight request ids, and the first non-empty plan of a step switches the cap, as
``DoraController.rebalance`` does. The plan itself cannot be executed: verl's rollout servers
(vLLM, SGLang, ``hf``) have no API to move a running request with its KV cache to another
engine, so the migrations are counted (``dora/lb/planned_migrations``) and the cap alone
does the balancing, by holding new requests back until the long tail has drained.
:meth:`end_step` (called by the trainer after each weight update) returns the step's
``dora/lb/*`` metrics and starts the next step's phase.

With replica-granular versioning (``single_version_replicas``; :meth:`enable_single_version`)
the balancer also keeps the :class:`~longcat_plugins.schedulers.core.replicas.ReplicaRoller`:
new requests go only to the replicas it names as accepting (the newest version inside the
staleness window), every start and finish is reported to it, and the loads it decides between
weight syncs (a replica that just drained) are queued for the trainer's checkpoint manager
(:meth:`take_loads`); :meth:`publish` and :meth:`loaded` are the manager's side.

Ray runs this class as an async actor: waiting acquires each hold one of the actor's
concurrent calls, so :func:`create_dora_load_balancer` raises ``max_concurrency`` above any
number of requests a rollout can have in flight (verl's own ``get_router_handle`` would keep
Ray's default of 1000).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any, ClassVar

import ray
from verl.workers.rollout.router import DEFAULT_ROUTING_CACHE_SIZE, GlobalRequestLoadBalancer

from longcat_plugins.schedulers.core.balancer import BALANCERS, BalanceContext, TwoPhaseCap
from longcat_plugins.schedulers.core.config import DoraConfig
from longcat_plugins.schedulers.core.metrics import LoadMeter
from longcat_plugins.schedulers.core.replicas import Actions, ReplicaRoller

#: concurrent calls the actor accepts: waiting acquires plus everything else
MAX_CONCURRENCY = 100_000
NO_SERVERS = "No available servers in load balancer"  # verl's message, matched by its clients


class DoraLoadBalancer(GlobalRequestLoadBalancer):
    """Sticky + least-loaded routing under the two-phase per-replica cap, with load metrics.

    ``config`` is a :class:`DoraConfig`; its ``cap_before_rebalance``, ``cap_after_rebalance``,
    ``rebalance_threshold``, ``balancer`` and ``load_ratio_capacity`` are used. verl constructs
    router classes with ``servers`` and ``max_cache_size`` only, so :meth:`configured` bakes a
    config into a subclass for that path.
    """

    default_config: ClassVar[DoraConfig | None] = None

    def __init__(
        self,
        servers: dict[str, Any],
        max_cache_size: int = DEFAULT_ROUTING_CACHE_SIZE,
        full_determinism: bool = False,
        config: DoraConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if full_determinism:
            raise ValueError("DoraLoadBalancer: rollout.full_determinism routing is not supported; use verl's balancer")
        super().__init__(servers, max_cache_size=max_cache_size)
        self.config = config or type(self).default_config or DoraConfig()
        self.config.validate()
        self.cap = TwoPhaseCap(self.config.cap_before_rebalance, self.config.cap_after_rebalance)
        self._clock = clock
        self._requests: dict[str, list[str]] = {sid: [] for sid in servers}
        self._meter = LoadMeter(self.config.load_ratio_capacity)
        self._changed = asyncio.Event()
        for sid in servers:
            self._meter.set(sid, 0)
        self._meter.advance(clock())
        self.roller: ReplicaRoller | None = None
        self._pending_loads: set[str] = set()
        self._loads_ready = asyncio.Event()
        self._reset_step()

    @classmethod
    def configured(cls, config: DoraConfig) -> type[DoraLoadBalancer]:
        """A subclass whose instances use ``config``; for ``LLMServerManager(load_balancer_cls=...)``."""
        config.validate()
        return type(cls.__name__, (cls,), {"default_config": config, "__module__": cls.__module__})

    # -- routing ----------------------------------------------------------------------------------

    async def acquire_server(self, request_id: str, **extra: Any) -> tuple[str, Any]:  # type: ignore[override]
        """The sticky replica if it is under the cap, else the least-loaded one under it; waits
        while every replica is at the cap."""
        waited_since: float | None = None
        while True:
            if not self._inflight_requests:
                raise RuntimeError(NO_SERVERS)
            server_id = self._choose(request_id)
            if server_id is not None:
                break
            if waited_since is None:
                waited_since = self._clock()
                self._step["waits"] += 1
            await self._changed.wait()
        if waited_since is not None:
            self._step["wait_s"] += self._clock() - waited_since
        self._request_id_to_server[request_id] = server_id
        self._inflight_requests[server_id] += 1
        self._requests[server_id].append(request_id)
        if self.roller is not None and server_id in self.roller.replicas:
            self.roller.start(server_id, request_id)
        self._on_load_change(server_id)
        return server_id, self._servers[server_id]

    def _choose(self, request_id: str) -> str | None:
        cap = self.cap.cap
        sticky = self._request_id_to_server.get(request_id)
        if sticky is not None and sticky not in self._inflight_requests:
            del self._request_id_to_server[request_id]
            sticky = None
        allowed = self._allowed()
        if sticky is not None and sticky not in allowed:
            sticky = None
        if sticky is not None and self._inflight_requests[sticky] < cap:
            return sticky
        room = {sid: n for sid, n in self._inflight_requests.items() if n < cap and sid in allowed}
        if not room:
            return None
        least = min(room.values())
        return random.choice([sid for sid, n in room.items() if n == least])

    def _allowed(self) -> set[str]:
        """Replicas a new request may go to: all, or under replica-granular versioning the
        roller's accepting ones (plus any replica it does not manage, e.g. a lent elastic one)."""
        if self.roller is None:
            return set(self._inflight_requests)
        unmanaged = set(self._inflight_requests) - set(self.roller.replicas)
        return unmanaged | set(self.roller.accepting())

    async def release_server(self, server_id: str, request_id: str | None = None) -> None:  # type: ignore[override]
        if server_id not in self._inflight_requests:
            return
        super().release_server(server_id, request_id)
        held = self._requests[server_id]
        if request_id in held:
            held.remove(request_id)
        elif held:
            held.pop(0)
        if self.roller is not None and request_id is not None:
            self._queue_loads(self.roller.finish(server_id, request_id))
        self._on_load_change(server_id)

    # -- replica-granular versioning --------------------------------------------------------------

    async def enable_single_version(self, staleness: int, version: int) -> None:
        """Start replica-granular versioning: every current replica holds ``version``."""
        self.roller = ReplicaRoller(sorted(self._inflight_requests), staleness=staleness, version=version)
        self._wake()

    async def publish(self, version: int) -> dict[str, Any]:
        """A weight sync of ``version``: what the checkpoint manager must do now (abort these
        requests, load these replicas, including any whose load was queued since the last sync)."""
        assert self.roller is not None, "enable_single_version first"
        actions = self.roller.publish(version)  # aborted requests still count here until their release
        load = sorted(set(actions.load) | self._pending_loads)
        self._pending_loads.clear()
        self._wake()
        return {"version": version, "load": load, "aborted": {k: list(v) for k, v in actions.aborted.items()}}

    def _queue_loads(self, actions: Actions) -> None:
        if actions.load:
            self._pending_loads.update(actions.load)
            self._loads_ready.set()
        self._wake()

    async def take_loads(self, timeout_s: float = 1.0) -> list[str]:
        """Replicas the roller decided to load since the last call (waits up to ``timeout_s``)."""
        if not self._pending_loads:
            try:
                await asyncio.wait_for(self._loads_ready.wait(), timeout_s)
            except TimeoutError:
                return []
        self._loads_ready.clear()
        out = sorted(self._pending_loads)
        self._pending_loads.clear()
        return out

    async def loaded(self, replicas: list[str], version: int) -> None:
        """``replicas`` now hold ``version``."""
        assert self.roller is not None
        for replica in replicas:
            if replica in self.roller.replicas:
                self._queue_loads(self.roller.loaded(replica, version))
        self._wake()

    def require_release_fields(self) -> list[str]:
        """The request id, to keep the per-replica request lists the core's balancer reads."""
        return ["request_id"]

    async def add_servers(self, servers: dict[str, Any]) -> None:  # type: ignore[override]
        super().add_servers(servers)
        for sid in servers:
            self._requests[sid] = []
            self._on_load_change(sid)

    async def remove_servers(self, server_ids: list[str]) -> None:  # type: ignore[override]
        super().remove_servers(server_ids)
        self._meter.advance(self._clock())
        for sid in server_ids:
            self._requests.pop(sid, None)
            self._meter.set(sid, None)
            if self.roller is not None and sid in self.roller.replicas:
                _, actions = self.roller.remove(sid)  # its requests fail and are restarted by the client
                self._queue_loads(actions)
        self._wake()

    async def clear_sticky_cache(self) -> dict:  # type: ignore[override]
        return super().clear_sticky_cache()

    # -- the core's rebalance decision ------------------------------------------------------------

    def _on_load_change(self, server_id: str) -> None:
        self._meter.advance(self._clock())
        n = self._inflight_requests[server_id]
        self._meter.set(server_id, n)
        self._step["peak_inflight"] = max(self._step["peak_inflight"], n)
        self._check_rebalance()
        self._wake()

    def _check_rebalance(self) -> None:
        """The first non-empty plan of the core's balancer in a step switches the cap."""
        if self.cap.rebalanced:
            return
        ctx = BalanceContext(
            {sid: tuple(ids) for sid, ids in self._requests.items()},
            self.config.cap_after_rebalance,
            self.config.rebalance_threshold,
        )
        plan = BALANCERS[self.config.balancer](ctx)
        if plan:
            self.cap.on_rebalance()
            self._step["rebalances"] += 1
            self._step["planned_migrations"] += len(plan)

    def _wake(self) -> None:
        """Wake every waiting acquire (each re-checks the caps in arrival order)."""
        self._changed.set()
        self._changed = asyncio.Event()

    # -- metrics ----------------------------------------------------------------------------------

    def _reset_step(self) -> None:
        self._step: dict[str, float] = {
            "waits": 0,
            "wait_s": 0.0,
            "rebalances": 0,
            "planned_migrations": 0,
            "peak_inflight": max(self._inflight_requests.values(), default=0),
        }
        self._step_start = (self._meter.loaded, self._meter.span, self._meter.idle)

    def get_lb_metrics(self) -> dict[str, float]:
        """``dora/lb/*`` for the step so far: per-replica in-flight, the request load ratio as
        :mod:`~longcat_plugins.schedulers.core.metrics` defines it (capped at
        ``load_ratio_capacity``, time-averaged over the replicas), the idle ratio, the cap phase,
        waits and the rebalance the core decided."""
        self._meter.advance(self._clock())
        loaded0, span0, idle0 = self._step_start
        span = self._meter.span - span0
        out = {
            "dora/lb/cap": float(self.cap.cap),
            "dora/lb/rebalanced": float(self.cap.rebalanced),
            "dora/lb/request_load_ratio": (self._meter.loaded - loaded0) / span if span > 0 else 0.0,
            "dora/lb/idle_ratio": (self._meter.idle - idle0) / span if span > 0 else 0.0,
            "dora/lb/inflight_total": float(sum(self._inflight_requests.values())),
            **{f"dora/lb/{k}": float(v) for k, v in self._step.items()},
        }
        for sid, n in sorted(self._inflight_requests.items()):
            out[f"dora/lb/inflight/{sid}"] = float(n)
        if self.roller is not None:
            out.update(self.roller.metrics())
        return out

    async def end_step(self) -> dict[str, float]:
        """The ended step's metrics; the next step starts with ``cap_before_rebalance`` again."""
        out = self.get_lb_metrics()
        self.cap.on_new_step()
        self._reset_step()
        self._check_rebalance()
        self._wake()
        return out


def create_dora_load_balancer(servers: dict[str, Any], config: DoraConfig) -> Any:
    """The router actor (async, ``MAX_CONCURRENCY`` calls) over ``servers``."""
    actor_cls = ray.remote(max_concurrency=MAX_CONCURRENCY)(DoraLoadBalancer)
    return actor_cls.remote(servers=servers, config=config)


__all__ = ["DoraLoadBalancer", "create_dora_load_balancer", "MAX_CONCURRENCY"]
