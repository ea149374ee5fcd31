"""DORA's load balancing (SPEC S3) as verl's rollout router: the two-phase per-replica cap.

verl routes every agent-loop request through one ``GlobalRequestLoadBalancer`` actor
(sticky session + least in-flight, no limit per replica). :class:`DoraLoadBalancer` subclasses
it, keeping its sticky sessions and least-loaded choice, and adds the report's cap (§3.2):
a replica takes at most ``cap_before_rebalance`` requests until the first rebalance of a step,
then ``cap_after_rebalance``. ``acquire_server`` *waits* (on an asyncio event, no polling)
while every replica is at its cap, and is woken by the next release, added server or phase
change.

The rebalance decision is the core's: after every load change the balancer strategy of
:mod:`~longcat_plugins.schedulers.core.balancer` (``balancer(config.balancer)``, ``greedy`` by
default: load spread at ``rebalance_threshold``) is asked for a plan over the replicas'
in-flight request ids, and the first non-empty plan of a step switches the cap, as
``DoraController.rebalance`` does (``dora/lb/planned_migrations``).

With ``stop_requests`` (servers with a per-request stop: the ``hf`` server's ``stop_request``
and ``stop_stale``) the plan is also *executed*: each move is placed on a replica that holds the
request's version (:func:`~longcat_plugins.schedulers.core.balancer.place_migrations`; under
replica-granular versioning the roller's replicas serving that version, else any replica, since
multi-version servers keep the whole window), the request is stopped on its source, and when
:class:`~longcat_plugins.schedulers.client.DoraLLMServerClient` comes back for it with its
version pinned (acquire field ``dora_version``) it is routed to that target, where it continues
from its generated prefix (``dora/lb/executed_migrations``, ``dora/lb/migrated_tokens``).
:meth:`end_step` (called by the trainer after each weight update, with the published version)
stops at once every request on a version that left the staleness window
(``dora/lb/stale_aborted``; their releases wake the waiting acquires), returns the step's
``dora/lb/*`` metrics and starts the next step's phase.

With replica-granular versioning (``single_version_replicas``; :meth:`enable_single_version`)
the balancer also keeps the :class:`~longcat_plugins.schedulers.core.replicas.ReplicaRoller`:
new requests go only to the replicas it names as accepting (the newest version inside the
staleness window), every start and finish is reported to it, and the loads it decides between
weight syncs (a replica that just drained) are queued for the trainer's checkpoint manager
(:meth:`take_loads`); :meth:`publish` and :meth:`loaded` are the manager's side.

Admission control (:mod:`~longcat_plugins.schedulers.core.admission`, ``config.admission``):
every new request (a restart too; never a pinned continuation) is admitted by the selected
policy before it is routed; a refused one waits, holding no replica, until the trainer's phase
or version changes (:meth:`begin_training` when the trainer takes its batch, :meth:`end_step`
when it publishes a version). The policy sees how many later batches the version the request
would run on has left in its window, and, for ``length_aware``, the prompt's length history
(``dora_prompt``, a digest of the prompt the client sends; :meth:`observe` records each
response) against the tokens a request decodes per step (per-request decode rate times the step
time, both observed here). Per step it reports the requests started, held back, and stopped as
stale with their lengths (``dora/censored_share``, ``dora/censored_len_mean``: length censoring).

A health probe between requests (:meth:`start_health_probe`, every ``health_probe_s`` seconds
of the settings): each replica is pinged with Ray's built-in ``__ray_ready__``; one whose actor
is dead is removed at once (``dora/lb/dead_replicas``), so no request is routed to it, instead
of only after a client's request to it fails. A slow answer is not taken for death.

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

from longcat_plugins.schedulers.core.admission import (
    NO_ADMISSION,
    AdmissionContext,
    DecodeRate,
    LengthHistory,
    admission_policy,
    batches_left,
)
from longcat_plugins.schedulers.core.balancer import BalanceContext, TwoPhaseCap, balancer, place_migrations
from longcat_plugins.schedulers.core.config import DoraConfig
from longcat_plugins.schedulers.core.metrics import LoadMeter
from longcat_plugins.schedulers.core.replicas import Actions, ReplicaRoller
from longcat_plugins.schedulers.core.types import Migration

#: concurrent calls the actor accepts: waiting acquires plus everything else
MAX_CONCURRENCY = 100_000
NO_SERVERS = "No available servers in load balancer"  # verl's message, matched by its clients
#: acquire field of a request continuing on a pinned version (a migration): its ``global_steps``
PIN_FIELD = "dora_version"
#: acquire field naming a new request's prompt (a digest of its token ids): its length history
PROMPT_FIELD = "dora_prompt"


class DoraLoadBalancer(GlobalRequestLoadBalancer):
    """Sticky + least-loaded routing under the two-phase per-replica cap, with load metrics.

    ``config`` is a :class:`DoraConfig`; its ``cap_before_rebalance``, ``cap_after_rebalance``,
    ``rebalance_threshold``, ``balancer`` and ``load_ratio_capacity`` are used. verl constructs
    router classes with ``servers`` and ``max_cache_size`` only, so :meth:`configured` bakes a
    config into a subclass for that path.
    """

    default_config: ClassVar[DoraConfig | None] = None
    default_stop_requests: ClassVar[bool] = False
    default_staleness: ClassVar[int | None] = None

    def __init__(
        self,
        servers: dict[str, Any],
        max_cache_size: int = DEFAULT_ROUTING_CACHE_SIZE,
        full_determinism: bool = False,
        config: DoraConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        stop_requests: bool | None = None,
        staleness: int | None = None,
        length_momentum: float = 0.5,
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
        #: execute migrations and stale aborts (the servers have ``stop_request``/``stop_stale``)
        self.stop_requests = type(self).default_stop_requests if stop_requests is None else stop_requests
        self.staleness = type(self).default_staleness if staleness is None else staleness
        #: request id -> the replica its migration was placed on, until it comes back pinned
        self._migrating: dict[str, str] = {}
        #: request id -> target the roller already counts it on (so the target cannot start a
        #: load between the stop and the continuation's arrival)
        self._reserved: dict[str, str] = {}
        self._tasks: set[asyncio.Task] = set()
        self._dead: list[str] = []  # replicas the health probe found dead and removed
        self._probe_task: asyncio.Task | None = None
        # admission: the newest published version, the batch the trainer fills next (verl's step),
        # whether it is updating now, and what length_aware reads
        self.admission = self.config.admission
        admission_policy(self.admission)  # an unknown name fails here, listing the choices
        self._version = 0
        self._next_batch = 1
        self._training = False
        self.lengths = LengthHistory(length_momentum)
        self.rate = DecodeRate()
        self._reset_step()

    @classmethod
    def configured(
        cls, config: DoraConfig, stop_requests: bool = False, staleness: int | None = None
    ) -> type[DoraLoadBalancer]:
        """A subclass whose instances use ``config``; for ``LLMServerManager(load_balancer_cls=...)``."""
        config.validate()
        attrs = {
            "default_config": config,
            "default_stop_requests": stop_requests,
            "default_staleness": staleness,
            "__module__": cls.__module__,
        }
        return type(cls.__name__, (cls,), attrs)

    # -- routing ----------------------------------------------------------------------------------

    async def acquire_server(self, request_id: str, **extra: Any) -> tuple[str, Any]:  # type: ignore[override]
        """The sticky replica if it is under the cap, else the least-loaded one under it; waits
        while every replica is at the cap. A request continuing on a pinned version
        (``dora_version``) goes to its migration's target, else to a replica holding that
        version (or, if none does, anywhere: the server refuses it and the client restarts it)."""
        pinned = extra.get(PIN_FIELD)
        target = self._migrating.pop(request_id, None)
        reserved = self._reserved.pop(request_id, None)
        if reserved is not None and not (pinned is not None and reserved == target):
            self._unreserve(request_id, reserved)  # not coming back pinned to its target
            reserved = None
        holders = self._holders(int(pinned)) if pinned is not None else None
        if holders is not None and not holders:
            pinned = holders = None
        if holders is not None and target in holders and target in self._inflight_requests:
            return self._admit(target, request_id, pinned, started=reserved == target)
        if reserved is not None and reserved == target:
            self._unreserve(request_id, reserved)
        waited_since: float | None = None
        held_since: float | None = None
        prompt = extra.get(PROMPT_FIELD)
        while True:
            if not self._inflight_requests:
                raise RuntimeError(NO_SERVERS)
            if holders is not None:
                holders = [h for h in self._holders(int(pinned)) if h in self._inflight_requests]
                if not holders:  # the version left every replica while waiting: restart instead
                    pinned, holders = None, None
            admitted = None if holders is not None else self._admitted(prompt)
            if admitted is not None and not admitted:  # the admission policy holds it back
                if held_since is None:
                    held_since = self._clock()
                    self._step["held_requests"] += 1
                await self._changed.wait()
                continue
            server_id = self._choose(request_id, holders if holders is not None else admitted)
            if server_id is not None:
                break
            if waited_since is None:
                waited_since = self._clock()
                self._step["waits"] += 1
            await self._changed.wait()
        if waited_since is not None:
            self._step["wait_s"] += self._clock() - waited_since
        if held_since is not None:
            self._step["held_s"] += self._clock() - held_since
        if pinned is None:
            self._step["started_requests"] += 1
        return self._admit(server_id, request_id, pinned)

    def _unreserve(self, request_id: str, replica: str) -> None:
        if self.roller is not None and replica in self.roller.replicas:
            self._queue_loads(self.roller.finish(replica, request_id))

    def _admit(self, server_id: str, request_id: str, pinned: Any, started: bool = False) -> tuple[str, Any]:
        self._request_id_to_server[request_id] = server_id
        self._inflight_requests[server_id] += 1
        self._requests[server_id].append(request_id)
        if self.roller is not None and server_id in self.roller.replicas and not started:
            self.roller.start(server_id, request_id, version=None if pinned is None else int(pinned))
        if pinned is not None:
            self._step["continued_migrations"] += 1
        self._on_load_change(server_id)
        return server_id, self._servers[server_id]

    def _holders(self, version: int) -> list[str]:
        """Replicas that can continue a request of ``version``: under replica-granular
        versioning those the roller has serving it (plus unmanaged ones); else every replica
        (multi-version servers keep every version of the window; one that does not refuses)."""
        if self.roller is None:
            return sorted(self._inflight_requests)
        unmanaged = set(self._inflight_requests) - set(self.roller.replicas)
        return sorted(unmanaged | set(self.roller.holding(version)))

    def _choose(self, request_id: str, holders: list[str] | None = None) -> str | None:
        cap = self.cap.cap
        sticky = self._request_id_to_server.get(request_id)
        if sticky is not None and sticky not in self._inflight_requests:
            del self._request_id_to_server[request_id]
            sticky = None
        allowed = self._allowed() if holders is None else set(holders)
        if sticky is not None and sticky not in allowed:
            sticky = None
        if sticky is not None and self._inflight_requests[sticky] < cap:
            return sticky
        room = {sid: n for sid, n in self._inflight_requests.items() if n < cap and sid in allowed}
        if not room:
            return None
        least = min(room.values())
        return random.choice([sid for sid, n in room.items() if n == least])

    # -- admission ---------------------------------------------------------------------------------

    def _admitted(self, prompt: str | None) -> list[str] | None:
        """Replicas a new request of ``prompt`` may start on now, by the admission policy (one
        decision per version the allowed replicas serve); ``None``: no policy, any allowed one."""
        if self.admission == NO_ADMISSION:
            return None
        allowed = sorted(self._allowed())
        if not allowed:
            return None  # nothing to decide between: the cap loop waits for a replica
        policy = admission_policy(self.admission)
        by_version: dict[int, list[str]] = {}
        for sid in allowed:
            by_version.setdefault(self._replica_version(sid), []).append(sid)
        expected, rate = self.lengths.get(prompt), self.tokens_per_step()
        out: list[str] = []
        for version, replicas in sorted(by_version.items()):
            ctx = AdmissionContext(
                version=version,
                batches_left=batches_left(version, int(self.config.staleness), self._next_batch),
                staleness=int(self.config.staleness),
                window=int(self.config.admission_window),
                training=self._training,
                expected_tokens=expected,
                tokens_per_step=rate,
            )
            if policy(ctx):
                out += replicas
        return out

    def _replica_version(self, sid: str) -> int:
        """The version a new request on ``sid`` runs on: its own under replica-granular
        versioning, else the newest published (multi-version servers start new work on it)."""
        if self.roller is not None and sid in self.roller.replicas:
            return int(self.roller.version_of(sid))
        return self._version

    def tokens_per_step(self) -> float | None:
        """Tokens one request decodes in one training step: the median per-request decode rate
        times the median step time (both observed); None until both were seen."""
        return self.rate.tokens_per_step()

    async def begin_training(self, step: int) -> None:
        """The trainer took the batch of verl step ``step`` and updates the weights: the newest
        version is about to be superseded; the batch filled next is ``step + 1``."""
        self._training = True
        self._next_batch = int(step) + 1
        self._wake()

    async def observe(
        self, prompt: str | None, tokens: int, seconds: float, complete: bool = True, decoded: int | None = None
    ) -> None:
        """A response of ``prompt`` ended with ``tokens`` tokens, of which this attempt decoded
        ``decoded`` (default all) in ``seconds`` (``complete=False``: stopped early; its length is
        a lower bound and its rate unused)."""
        if prompt is not None:
            self.lengths.observe(str(prompt), int(tokens), complete)
        if complete:
            self.rate.observe(int(tokens) if decoded is None else int(decoded), seconds)

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

    async def enable_single_version(self, staleness: int, version: int, replicas: list[str] | None = None) -> None:
        """Start replica-granular versioning: ``replicas`` (default: every current one) hold
        ``version`` and are rolled; any other replica (a lent elastic one) is left unmanaged."""
        managed = sorted(self._inflight_requests) if replicas is None else sorted(replicas)
        self.roller = ReplicaRoller(managed, staleness=staleness, version=version)
        self._wake()

    async def publish(self, version: int) -> dict[str, Any]:
        """A weight sync of ``version``: what the checkpoint manager must do now (abort these
        requests, load these replicas, including any whose load was queued since the last sync)."""
        assert self.roller is not None, "enable_single_version first"
        actions = self.roller.publish(version)  # aborted requests still count here until their release
        self._step["stale_aborted"] += sum(len(ids) for ids in actions.aborted.values())
        for ids in actions.aborted.values():
            for request_id in ids:
                self._migrating.pop(request_id, None)
                self._reserved.pop(request_id, None)  # the roller dropped it with its replica
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

    def require_acquire_fields(self) -> list[str]:
        """The pinned version of a continuing (migrated) request, and a new request's prompt digest."""
        return [PIN_FIELD, PROMPT_FIELD]

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

    # -- health probe -----------------------------------------------------------------------------

    async def probe(self, timeout_s: float = 5.0) -> list[str]:
        """Ping every replica (Ray's built-in ``__ray_ready__``); remove each whose actor is dead
        (its in-flight requests fail and their clients restart them elsewhere, as after a failure
        a client notices). A replica that does not answer within ``timeout_s`` is kept: busy is
        not dead. Returns the replicas removed."""
        servers = dict(self._servers)
        if not servers:
            return []
        results = await asyncio.gather(
            *[asyncio.wait_for(_ready(handle), timeout_s) for handle in servers.values()], return_exceptions=True
        )
        dead = sorted(
            sid
            for sid, result in zip(servers, results, strict=True)
            # dead, not merely unavailable for a moment (ActorUnavailableError: restarting, unreachable)
            if isinstance(result, ray.exceptions.RayActorError)
            and not isinstance(result, ray.exceptions.ActorUnavailableError)
        )
        dead = [sid for sid in dead if sid in self._servers]  # not removed meanwhile
        if dead:
            await self.remove_servers(dead)
            self._dead.extend(dead)
        return dead

    async def start_health_probe(self, interval_s: float, timeout_s: float = 5.0) -> None:
        """Probe every ``interval_s`` seconds for the actor's lifetime (0: off)."""
        if interval_s <= 0 or self._probe_task is not None:
            return

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_s)
                await self.probe(timeout_s)

        self._probe_task = asyncio.get_running_loop().create_task(loop())

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
        plan = balancer(self.config.balancer)(ctx)
        if plan:
            self.cap.on_rebalance()
            self._step["rebalances"] += 1
            self._step["planned_migrations"] += len(plan)
            if self.stop_requests:
                self._execute(plan)

    def _execute(self, plan: list[Migration]) -> None:
        """Place the plan's moves on replicas holding each request's version and stop the
        requests on their sources; the client continues each on its target (see module doc)."""

        def holders(move: Migration) -> list[str]:
            if self.roller is None:
                return sorted(self._inflight_requests)
            if move.source not in self.roller.replicas:
                # an unmanaged (lent, multi-version) source: the request's version is not known
                # here, so only replicas keeping the whole window can take it; a rolled replica
                # holds one version, and may be loading another (its pinned return still routes
                # to any holder of its version)
                return sorted(set(self._inflight_requests) - set(self.roller.replicas))
            return self._holders(self.roller.version_of(move.source))

        loads = dict(self._inflight_requests)
        placed = place_migrations(plan, loads, holders, self.config.cap_after_rebalance)
        self._step["unplaced_migrations"] += len(plan) - len(placed)
        for move in placed:
            self._migrating[move.request_id] = move.target
            if self.roller is not None and move.target in self.roller.replicas:
                self.roller.start(move.target, move.request_id, version=self.roller.version_of(move.source))
                self._reserved[move.request_id] = move.target
            task = asyncio.get_running_loop().create_task(self._stop(move))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _stop(self, move: Migration) -> None:
        try:
            result = await self._servers[move.source].stop_request.remote(move.request_id, "migrated")
        except Exception:  # noqa: BLE001 - the source died: the client restarts the request
            result = {"stopped": False}
        if result.get("stopped"):
            self._step["executed_migrations"] += 1
            self._step["migrated_tokens"] += int(result.get("tokens", 0))
        else:  # it finished first (or never reached the server): it keeps its own output
            self._migrating.pop(move.request_id, None)
            reserved = self._reserved.pop(move.request_id, None)
            if reserved is not None:
                self._unreserve(move.request_id, reserved)
            self._step["missed_migrations"] += 1

    async def stop_stale(self, version: int) -> int:
        """Multi-version servers: stop every request on a version that left the window of the
        just-published ``version``; returns how many (their clients restart them)."""
        if not self.stop_requests or self.staleness is None or self.roller is not None:
            return 0
        results = await asyncio.gather(
            *[h.stop_stale.remote(version, self.staleness) for h in self._servers.values()], return_exceptions=True
        )
        stopped = [rid for r in results if isinstance(r, dict) for rid in r.get("stopped", [])]
        lengths = [int(n) for r in results if isinstance(r, dict) for n in r.get("tokens", [])]
        for request_id in stopped:
            self._migrating.pop(request_id, None)
        self._step["stale_aborted"] += len(stopped)
        self._step["censored_measured"] += len(lengths)
        self._step["censored_tokens"] += sum(lengths)
        self._step["censored_len_max"] = max([self._step["censored_len_max"], *lengths])
        return len(stopped)

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
            "unplaced_migrations": 0,
            "executed_migrations": 0,
            "missed_migrations": 0,
            "continued_migrations": 0,
            "migrated_tokens": 0,
            "stale_aborted": 0,
            "peak_inflight": max(self._inflight_requests.values(), default=0),
            "started_requests": 0,
            "held_requests": 0,
            "held_s": 0.0,
            "censored_measured": 0,
            "censored_tokens": 0,
            "censored_len_max": 0,
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
            "dora/lb/dead_replicas": float(len(self._dead)),
        }
        for sid, n in sorted(self._inflight_requests.items()):
            out[f"dora/lb/inflight/{sid}"] = float(n)
        if self.roller is not None:
            out.update(self.roller.metrics())
        step = self._step
        # length censoring: requests stopped because their version left the window, over those
        # started (restarts included), and the lengths they had reached (lower bounds)
        out["dora/censored_share"] = (
            step["stale_aborted"] / step["started_requests"] if step["started_requests"] else 0.0
        )
        out["dora/censored_len_mean"] = (
            step["censored_tokens"] / step["censored_measured"] if step["censored_measured"] else 0.0
        )
        out["dora/censored_len_max"] = float(step["censored_len_max"])
        rate = self.tokens_per_step()
        out["dora/admission/tokens_per_step"] = float(rate) if rate is not None else 0.0
        out["dora/admission/known_prompts"] = float(len(self.lengths.expected))
        return out

    async def end_step(self, version: int | None = None) -> dict[str, float]:
        """The ended step's metrics; the next step starts with ``cap_before_rebalance`` again.
        ``version``: the weights version just published, whose window the in-flight requests
        are held to (:meth:`stop_stale`)."""
        if version is not None:
            await self.stop_stale(version)
            self._version = int(version)
            self._next_batch = int(version) + 1
        self._training = False
        self.rate.step(self._clock())
        out = self.get_lb_metrics()
        self.cap.on_new_step()
        self._reset_step()
        self._check_rebalance()
        self._wake()
        return out


async def _ready(handle: Any) -> Any:
    return await handle.__ray_ready__.remote()


def create_dora_load_balancer(
    servers: dict[str, Any],
    config: DoraConfig,
    stop_requests: bool = False,
    staleness: int | None = None,
    length_momentum: float = 0.5,
) -> Any:
    """The router actor (async, ``MAX_CONCURRENCY`` calls) over ``servers``."""
    actor_cls = ray.remote(max_concurrency=MAX_CONCURRENCY)(DoraLoadBalancer)
    return actor_cls.remote(
        servers=servers,
        config=config,
        stop_requests=stop_requests,
        staleness=staleness,
        length_momentum=length_momentum,
    )


__all__ = ["DoraLoadBalancer", "create_dora_load_balancer", "MAX_CONCURRENCY", "PIN_FIELD", "PROMPT_FIELD"]
