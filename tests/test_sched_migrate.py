"""DORA's migration executed and stale requests stopped: the placement rule (randomised
invariants) and the whole path in-process (no Ray): the real ``DoraLoadBalancer`` plans and
stops, the real ``DoraLLMServerClient`` continues, two real ``hf`` servers decode the tiny model.
Greedy decoding is deterministic, so a migrated sample must equal the decode that never moved."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable
from typing import Any

import pytest
import ray
import torch
from conftest import chat_prompt_ids
from omegaconf import OmegaConf

from longcat_plugins.learning.assets import Assets
from longcat_plugins.runtime.hf_rollout import HFServer
from longcat_plugins.schedulers.client import DoraLLMServerClient
from longcat_plugins.schedulers.core.balancer import BalanceContext, greedy, place_migrations
from longcat_plugins.schedulers.core.config import DoraConfig
from longcat_plugins.schedulers.core.queue import is_fresh
from longcat_plugins.schedulers.core.replicas import ReplicaRoller
from longcat_plugins.schedulers.core.types import Migration
from longcat_plugins.schedulers.load_balancer import DoraLoadBalancer


@pytest.mark.parametrize("seed", range(300))
def test_placed_migrations_keep_the_version_respect_the_cap_and_move_each_request_once(seed: int) -> None:
    rng = random.Random(seed)
    staleness = rng.randint(1, 2)
    names = [f"r{i}" for i in range(rng.randint(2, 5))]
    roller = ReplicaRoller(names, staleness=staleness, version=0)
    latest = rng.randint(0, 3)
    for name in names:  # replicas on random versions, some loading (they hold nothing usable)
        state = roller.replicas[name]
        state.version = rng.randint(max(0, latest - 3), latest)
        state.loading = latest if rng.random() < 0.2 else None
    roller.latest = latest
    ids = iter(range(1000))
    for name in names:
        roller.replicas[name].inflight = {f"q{next(ids)}" for _ in range(rng.randint(0, 8))}
    roller._decide()  # the state the roller's own events would have left (aborts, loads)
    loads = {n: tuple(sorted(r.inflight)) for n, r in roller.replicas.items()}
    cap = rng.randint(1, 6)
    plan = greedy(BalanceContext(loads, cap, rng.choice([0.0, 0.25, 0.5])))
    version_of = {rid: roller.version_of(n) for n, q in loads.items() for rid in q}
    placed = place_migrations(
        plan, {n: len(q) for n, q in loads.items()}, lambda m: roller.holding(roller.version_of(m.source)), cap
    )
    counts = {n: len(q) for n, q in loads.items()}
    assert len({m.request_id for m in placed}) == len(placed)  # nothing moved twice
    planned = {m.request_id: m.source for m in plan}
    for move in placed:
        assert planned[move.request_id] == move.source and move.request_id in loads[move.source]
        target = roller.replicas[move.target]
        # the target continues on the very version the request started with, inside the window
        assert move.target != move.source and target.loading is None
        assert target.version == version_of[move.request_id] and is_fresh(latest, target.version, staleness)
        counts[move.target] += 1
        counts[move.source] -= 1
        assert counts[move.target] <= cap
    # executed through the roller as the router does it (every move reserved on its target
    # first, then released on its source): the target keeps the request's version until the
    # continuation is done, whatever the releases make the roller load
    for move in placed:
        version = version_of[move.request_id]
        assert roller.start(move.target, move.request_id, version=version) == version
    for move in placed:
        roller.finish(move.source, move.request_id)
    for move in placed:
        target = roller.replicas[move.target]
        assert target.loading is None and target.version == version_of[move.request_id]
        assert move.request_id in target.inflight and move.request_id not in roller.replicas[move.source].inflight
    # a move is dropped only when no replica holding its version had room
    for move in plan:
        if move.request_id not in {m.request_id for m in placed}:
            holders = [n for n in roller.holding(version_of[move.request_id]) if n != move.source]
            assert all(counts[n] >= cap for n in holders) or not holders


class Local:
    """A Ray actor handle's calling convention over an in-process object: ``h.f.remote(...)``
    is awaitable (a task for a coroutine, so fire-and-forget calls still run)."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.target, name)

        class Method:
            @staticmethod
            def remote(*args: Any, **kwargs: Any) -> Any:
                result = fn(*args, **kwargs)
                if asyncio.iscoroutine(result):
                    return asyncio.ensure_future(result)
                future = asyncio.get_running_loop().create_future()
                future.set_result(result)
                return future

        return Method


def _prompts(tiny: Assets, n: int) -> list[list[int]]:
    return chat_prompt_ids(tiny, (f"Add {i} and {3 * i}." for i in range(n)))


def _server(tiny: Assets, rank: int, versions: list[tuple[int, dict]]) -> HFServer:
    server = HFServer({"prompt_length": 40, "response_length": 48, "seed": 0}, {"local_path": str(tiny.model)}, rank)
    server.eos_ids = set()  # every request decodes its full budget: long enough to move mid-decode
    asyncio.run(server.set_staleness(1))
    for steps, state in versions:
        asyncio.run(server.update_weights(state, global_steps=steps))
    return server


def _base(tiny: Assets) -> tuple[HFServer, dict]:
    """A plain server on the tiny model, and a copy of its weights (version 1 of the tests)."""
    base = HFServer({"prompt_length": 40, "response_length": 48}, {"local_path": str(tiny.model)})
    return base, {k: v.clone() for k, v in base.model.state_dict().items()}


def _newer(v1: dict) -> dict:
    """Version 2: version 1 perturbed, so a sample joining the two would show in its tokens."""
    return {k: v + 0.05 * torch.randn_like(v) for k, v in v1.items()}


def _rebalancing() -> DoraConfig:
    """Plans a migration as soon as two replicas' loads differ by two."""
    return DoraConfig(cap_before_rebalance=8, cap_after_rebalance=4, rebalance_threshold=0.25)


def _router(handles: dict[str, Any], config: DoraConfig) -> tuple[DoraLoadBalancer, DoraLLMServerClient]:
    """The real router over ``handles`` (stopping requests, staleness 1) and a client on it."""
    lb = DoraLoadBalancer(handles, config=config, stop_requests=True, staleness=1)
    return lb, DoraLLMServerClient(OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "hf"}}}), Local(lb))


GREEDY = {"temperature": 0, "logprobs": True, "max_tokens": 36}


async def _started(
    client: DoraLLMServerClient, batch: list[list[int]], server: HFServer, running: int, tokens: int | Callable[[], int]
) -> list[asyncio.Task]:
    """Start ``batch`` greedily through ``client``; return once ``server`` runs ``running`` requests
    and the first has generated ``tokens`` (a callable: drawn again at every poll)."""
    calls = [
        asyncio.create_task(client.generate(f"s{i}", prompt_ids=p, sampling_params=dict(GREEDY)))
        for i, p in enumerate(batch)
    ]
    threshold = tokens if callable(tokens) else lambda: tokens
    while len(server._running) < running or len(server._running[0].tokens) < threshold():
        await asyncio.sleep(0.001)
    return calls


def test_migrated_requests_continue_on_their_version_and_equal_the_unmoved_decode(tiny: Assets) -> None:
    """Four requests start on replica a; replica b joins, the core's plan moves two of them;
    each is stopped on a and continued on b from its prefix on version 1, although b's newest
    weights are version 2. Every sample is one version, equal to greedy without the move."""
    base, v1 = _base(tiny)
    v2 = _newer(v1)
    a, b = _server(tiny, 0, [(1, v1)]), _server(tiny, 1, [(1, v1), (2, v2)])
    batch = _prompts(tiny, 4)
    reference = [asyncio.run(a.generate(p, dict(GREEDY), request_id=f"ref{i}")) for i, p in enumerate(batch)]
    lb, client = _router({"a": Local(a)}, _rebalancing())

    async def scenario() -> tuple[list, dict]:
        calls = await _started(client, batch, a, 4, 4)
        await lb.add_servers({"b": Local(b)})  # loads 4 vs 0: the plan moves two to b
        outs = await asyncio.wait_for(asyncio.gather(*calls), 60)
        return outs, await lb.end_step()

    outs, metrics = asyncio.run(scenario())
    assert metrics["dora/lb/planned_migrations"] == 2 and metrics["dora/lb/executed_migrations"] == 2
    assert metrics["dora/lb/continued_migrations"] == 2 and metrics["dora/lb/migrated_tokens"] >= 8
    assert sorted(o.extra_fields["dora_migrations"] for o in outs) == [0, 0, 1, 1]
    assert b.stats["requests"] == 2  # the two continuations ran on b
    for out, ref in zip(outs, reference, strict=True):
        assert out.extra_fields["min_global_steps"] == out.extra_fields["max_global_steps"] == 1
        assert out.token_ids == ref.token_ids and len(out.token_ids) == GREEDY["max_tokens"]
        assert torch.allclose(torch.tensor(out.log_probs), torch.tensor(ref.log_probs), atol=1e-4)
        if out.extra_fields["dora_migrations"]:
            assert 4 <= out.extra_fields["dora_migrated_tokens"] < GREEDY["max_tokens"]


def test_a_migration_to_a_replica_without_the_version_restarts_from_the_prompt(tiny: Assets) -> None:
    """Replica b holds only version 2: the continuation is refused there and the request
    restarts from its prompt; nothing is lost, and no sample joins tokens of two versions."""
    base, v1 = _base(tiny)
    v2 = _newer(v1)
    a, b = _server(tiny, 0, [(1, v1)]), _server(tiny, 1, [(2, v2)])
    asyncio.run(b.set_staleness(0))
    batch = _prompts(tiny, 4)
    refs = {
        steps: [asyncio.run(s.generate(p, dict(GREEDY), request_id=f"r{i}")) for i, p in enumerate(batch)]
        for steps, s in ((1, a), (2, b))
    }
    lb, client = _router({"a": Local(a)}, _rebalancing())

    async def scenario() -> list:
        calls = await _started(client, batch, a, 4, 4)
        await lb.add_servers({"b": Local(b)})
        return await asyncio.wait_for(asyncio.gather(*calls), 60)

    outs = asyncio.run(scenario())
    assert sum(o.extra_fields["dora_restarts"] for o in outs) == 2
    for i, out in enumerate(outs):
        steps = out.extra_fields["min_global_steps"]
        assert steps == out.extra_fields["max_global_steps"] and steps in (1, 2)
        assert out.token_ids == refs[steps][i].token_ids and out.extra_fields["dora_migrated_tokens"] == 0


def test_stale_requests_are_stopped_at_publish_and_restarted_on_the_newest_version(tiny: Assets) -> None:
    """Multi-version path: requests running on version 1 when version 3 is published (staleness
    1) are stopped at once by ``end_step(3)``, restarted by the client on version 3, counted in
    ``dora/lb/stale_aborted``; the freed slot goes to the restart immediately."""
    base, v1 = _base(tiny)
    a = _server(tiny, 0, [(1, v1)])
    batch = _prompts(tiny, 2)
    lb, client = _router({"a": Local(a)}, DoraConfig())
    ref = [asyncio.run(base.generate(p, dict(GREEDY), request_id=f"r{i}")) for i, p in enumerate(batch)]

    async def scenario() -> tuple[list, dict]:
        calls = await _started(client, batch, a, 2, 2)
        await a.update_weights(v1, global_steps=2)
        await a.update_weights(v1, global_steps=3)  # same weights: the restart decodes the same tokens
        metrics = await lb.end_step(3)
        return await asyncio.wait_for(asyncio.gather(*calls), 60), metrics

    outs, metrics = asyncio.run(scenario())
    assert metrics["dora/lb/stale_aborted"] == 2 and a.stats["stale_stopped"] == 2
    for out, r in zip(outs, ref, strict=True):
        assert out.extra_fields["min_global_steps"] == out.extra_fields["max_global_steps"] == 3
        assert out.extra_fields["dora_restarts"] == 1 and out.token_ids == r.token_ids


def test_single_version_replicas_execute_a_plan_on_the_replica_holding_the_version(tiny: Assets) -> None:
    """Replica-granular versioning: two single-version servers on version 1 under the roller; a
    plan moving two of replica a's four running requests to b is executed (b reserved in the
    roller, the requests stopped on a and continued on b on version 1). The samples equal the
    unmoved greedy decode and the roller ends with nothing in flight anywhere."""
    base, v1 = _base(tiny)
    servers = {}
    for rank, name in enumerate(("a", "b")):
        servers[name] = HFServer({"prompt_length": 40, "response_length": 48}, {"local_path": str(tiny.model)}, rank)
        servers[name].eos_ids = set()
        asyncio.run(servers[name].set_single_version(True))
        asyncio.run(servers[name].update_weights(v1, global_steps=1))
    a, b = servers["a"], servers["b"]
    batch = _prompts(tiny, 4)
    reference = [asyncio.run(a.generate(p, dict(GREEDY), request_id=f"ref{i}")) for i, p in enumerate(batch)]
    lb, client = _router({n: Local(s) for n, s in servers.items()}, DoraConfig(balancer="none"))

    async def scenario() -> tuple[list, dict]:
        await lb.enable_single_version(1, 1)
        for i in range(4):
            lb._request_id_to_server[f"s{i}"] = "a"  # verl's sticky sessions put all four on a
        calls = await _started(client, batch, a, 4, 4)
        lb._execute([Migration("s3", "a", "b"), Migration("s2", "a", "b")])
        assert lb.roller.replicas["b"].inflight == {"s2", "s3"}  # reserved before the stop lands
        outs = await asyncio.wait_for(asyncio.gather(*calls), 60)
        return outs, await lb.end_step()

    outs, metrics = asyncio.run(scenario())
    assert metrics["dora/lb/executed_migrations"] == 2 and metrics["dora/lb/continued_migrations"] == 2
    assert [o.extra_fields["dora_migrations"] for o in outs] == [0, 0, 1, 1] and b.stats["requests"] == 2
    for out, ref in zip(outs, reference, strict=True):
        assert out.extra_fields["min_global_steps"] == out.extra_fields["max_global_steps"] == 1
        assert out.token_ids == ref.token_ids
    assert all(not r.inflight for r in lb.roller.replicas.values())


def test_migrate_requests_must_be_a_boolean() -> None:
    from longcat_plugins.schedulers.settings import DoraSettings

    with pytest.raises(ValueError, match="migrate_requests must be true or false"):
        DoraSettings(migrate_requests="yes")  # type: ignore[arg-type]
    assert DoraSettings().migrate_requests is True


class Dying(Local):
    """``Local`` for a replica that can die as a Ray actor does: from :meth:`kill` on, every
    pending and later call fails with ``RayActorError`` (its partial work and unsent replies are
    lost). ``before_call(method, kwargs)`` runs as each call arrives, before it is served."""

    def __init__(self, target: Any, before_call: Any = None) -> None:
        super().__init__(target)
        self.dead = False
        self.failed = 0  # calls that failed because it died: each one makes its caller notice
        self.before_call = before_call
        self._pending: set[asyncio.Future] = set()

    def kill(self) -> None:
        self.dead = True
        for fut in list(self._pending):
            if not fut.done():
                self.failed += 1
                fut.set_exception(ray.exceptions.RayActorError(error_msg="replica died"))

    def __getattr__(self, name: str) -> Any:
        inner = Local.__getattr__(self, name)
        handle = self

        class Method:
            @staticmethod
            def remote(*args: Any, **kwargs: Any) -> Any:
                outer = asyncio.get_running_loop().create_future()
                if handle.before_call is not None:
                    handle.before_call(name, kwargs)
                if handle.dead:
                    handle.failed += 1
                    outer.set_exception(ray.exceptions.RayActorError(error_msg="replica died"))
                    return outer
                handle._pending.add(outer)
                work = inner.remote(*args, **kwargs)

                def done(f: asyncio.Future) -> None:
                    handle._pending.discard(outer)
                    if not outer.done():
                        outer.set_exception(f.exception()) if f.exception() else outer.set_result(f.result())

                work.add_done_callback(done)
                return outer

        return Method


def _death_mid_migration(tiny: Assets, victim: str, when: str, seed: int = 0) -> dict[str, float]:
    """Three single-version ``hf`` replicas on version 1 under the roller; four requests run on
    a, a plan moves two (s2, s3) to b, and ``victim`` dies ``when``: ``stop_reply`` (a stopped the
    request but died before replying), ``continuation`` (as the first pinned continuation
    reaches b, before b serves it), ``random`` (after a seeded delay). Every request must
    complete exactly once, equal to the greedy one-version decode (tokens and log-probs), and
    the balancer and the roller must hold nothing afterwards. Returns the step's metrics."""
    rng = random.Random(seed)
    base, v1 = _base(tiny)
    batch = _prompts(tiny, 4)
    reference = [asyncio.run(base.generate(p, dict(GREEDY), request_id=f"ref{i}")) for i, p in enumerate(batch)]
    servers = {}
    for rank, name in enumerate(("a", "b", "c")):
        servers[name] = HFServer({"prompt_length": 40, "response_length": 48}, {"local_path": str(tiny.model)}, rank)
        servers[name].eos_ids = set()
        asyncio.run(servers[name].set_single_version(True))
        asyncio.run(servers[name].update_weights(v1, global_steps=1))
    handles = {name: Dying(server) for name, server in servers.items()}
    if when == "continuation":

        def on_b(method: str, kwargs: dict) -> None:
            if method == "generate" and kwargs.get("dora_version") is not None:
                handles[victim].kill()

        handles["b"].before_call = on_b
    if when == "stop_reply":
        stop = servers["a"].stop_request

        async def stop_then_die(*args: Any, **kwargs: Any) -> Any:
            result = await stop(*args, **kwargs)
            handles[victim].kill()
            return result

        servers["a"].stop_request = stop_then_die  # type: ignore[method-assign]
    lb, client = _router(dict(handles), DoraConfig(balancer="none"))
    a = servers["a"]

    async def scenario() -> tuple[list, dict]:
        await lb.enable_single_version(1, 1)
        for i in range(4):
            lb._request_id_to_server[f"s{i}"] = "a"  # verl's sticky sessions put all four on a
        calls = await _started(client, batch, a, 4, lambda: rng.randint(2, 8))
        lb._execute([Migration("s3", "a", "b"), Migration("s2", "a", "b")])
        if when == "random":
            await asyncio.sleep(rng.uniform(0, 0.15))
            handles[victim].kill()
        return await asyncio.wait_for(asyncio.gather(*calls), 60), await lb.end_step()

    outs, metrics = asyncio.run(scenario())
    assert len(outs) == 4  # one output per request: none lost, none twice
    for out, ref in zip(outs, reference, strict=True):
        assert out.stop_reason not in ("aborted", "migrated", "version_unavailable")
        assert out.extra_fields["min_global_steps"] == out.extra_fields["max_global_steps"] == 1
        assert out.token_ids == ref.token_ids and len(out.token_ids) == GREEDY["max_tokens"]
        assert torch.allclose(torch.tensor(out.log_probs), torch.tensor(ref.log_probs), atol=1e-4)
    if handles[victim].failed:  # a caller met the death: the replica is taken out
        assert victim not in lb._inflight_requests and victim not in lb.roller.replicas
    assert not lb._reserved and not lb._migrating  # every reservation released
    assert all(not r.inflight for r in lb.roller.replicas.values())
    assert all(n == 0 for n in lb._inflight_requests.values())
    moved = outs[2:]
    restarts = [o.extra_fields["dora_restarts"] for o in outs]
    # a restart is only ever caused by a call that met a death: none without one, at most one each
    assert sum(restarts) <= sum(h.failed for h in handles.values())
    if when == "random":
        # the seeded death may come after some work is already finished (under load a move can
        # complete on b, or a's requests end, before the kill): each request either restarted
        # from the prompt or finished where it was, never both and never anything else
        for o in moved:
            restarted = o.extra_fields["dora_restarts"] == 1 and o.extra_fields["dora_migrated_tokens"] == 0
            carried = o.extra_fields["dora_restarts"] == 0 and o.extra_fields["dora_migrations"] == 1
            assert restarted or carried, o.extra_fields
            assert restarted or o.extra_fields["dora_migrated_tokens"] > 0, o.extra_fields
        assert all(r in (0, 1) for r in restarts)
        if not handles[victim].failed:  # the death met no call: nothing restarted
            assert not any(restarts)
        return metrics
    if victim == "b" or when == "stop_reply":  # the moves' prefixes are lost: restarted from the prompt
        assert all(o.extra_fields["dora_restarts"] == 1 and o.extra_fields["dora_migrated_tokens"] == 0 for o in moved)
    if victim == "a" and when == "continuation":  # the moves carried their prefix to b
        assert metrics["dora/lb/continued_migrations"] == 2
        assert all(o.extra_fields["dora_migrations"] == 1 and o.extra_fields["dora_migrated_tokens"] for o in moved)
    if victim == "a":  # a's other requests restarted elsewhere
        assert all(o.extra_fields["dora_restarts"] == 1 for o in outs[:2])
    return metrics


@pytest.mark.parametrize("victim,when", [("a", "stop_reply"), ("a", "continuation"), ("b", "continuation")])
def test_replica_death_mid_migration_loses_and_duplicates_nothing(tiny: Assets, victim: str, when: str) -> None:
    """The source dies after stopping the moved requests, before its reply (they restart), or
    once the continuation reached the target (they continue there, the rest restart); the
    target dies as the continuation reaches it (it restarts from the prompt, prefix dropped)."""
    _death_mid_migration(tiny, victim, when)


@pytest.mark.parametrize("seed", range(int(os.environ.get("DEATH_SEEDS", 6))))
def test_replica_death_at_a_random_moment_of_a_migration(tiny: Assets, seed: int) -> None:
    """The source, the target or the bystander c (where restarts may go) dies at a seeded moment
    between the plan and the end of the decode (before the stop, between stop and continuation,
    while the continuation runs)."""
    _death_mid_migration(tiny, random.Random(seed).choice("abc"), "random", seed)
