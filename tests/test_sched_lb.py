"""DoraLoadBalancer: verl's router with the report's two-phase per-replica cap (S3).

The balancer is a plain class (verl wraps it with ``ray.remote`` when it builds the actor), so
these tests drive it directly on an asyncio loop with a hand-set clock; the expected cap,
rebalance step and load ratio are worked out by hand from the report's rule and the core's
definitions, not read back from the code under test.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
import ray

from longcat_plugins.schedulers.core.config import ConfigError, DoraConfig
from longcat_plugins.schedulers.load_balancer import NO_SERVERS, DoraLoadBalancer
from longcat_plugins.schedulers.settings import SETTINGS_PATH, DoraSettings


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(servers: tuple[str, ...] = ("a", "b"), **config: object) -> tuple[DoraLoadBalancer, Clock]:
    clock = Clock()
    lb = DoraLoadBalancer({s: f"handle-{s}" for s in servers}, config=DoraConfig(**config), clock=clock)
    return lb, clock


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_cap_before_rebalance_holds_and_a_waiting_acquire_gets_the_freed_slot() -> None:
    async def scenario() -> None:
        lb, _ = make()  # caps 8 then 4, threshold 0.5
        placed = [await lb.acquire_server(f"r{i}") for i in range(16)]
        assert lb.get_status()["servers"] == {"a": 8, "b": 8}
        assert placed[0][1] == f"handle-{placed[0][0]}"
        waiter = asyncio.create_task(lb.acquire_server("late"))
        await settle()
        assert not waiter.done(), "every replica is at cap_before_rebalance=8: the acquire must wait"
        a_request = next(f"r{i}" for i, (sid, _) in enumerate(placed) if sid == "a")
        await lb.release_server("a", a_request)
        server_id, handle = await asyncio.wait_for(waiter, 1.0)
        assert (server_id, handle) == ("a", "handle-a")
        assert lb.get_status()["servers"] == {"a": 8, "b": 8}
        assert lb.cap.rebalanced is False  # loads 8/8 never spread
        metrics = lb.get_lb_metrics()
        assert metrics["dora/lb/waits"] == 1.0
        assert metrics["dora/lb/peak_inflight"] == 8.0

    run(scenario())


def test_phase_switches_when_the_load_spread_reaches_the_threshold() -> None:
    async def scenario() -> None:
        lb, _ = make(cap_before_rebalance=8, cap_after_rebalance=4, rebalance_threshold=0.5)
        held = {"a": [], "b": []}
        for i in range(16):
            sid, _ = await lb.acquire_server(f"r{i}")
            held[sid].append(f"r{i}")
        # The long tail: a's requests finish, b's keep decoding. Spread of min(n, 4) / 4:
        # a=3 -> |0.75 - 1| = 0.25 < 0.5, a=2 -> 0.5: the first rebalance.
        for _ in range(5):
            await lb.release_server("a", held["a"].pop())
        assert lb.cap.cap == 8 and not lb.cap.rebalanced
        await lb.release_server("a", held["a"].pop())
        assert lb.cap.rebalanced and lb.cap.cap == 4
        metrics = lb.get_lb_metrics()
        assert metrics["dora/lb/rebalances"] == 1.0 and metrics["dora/lb/rebalanced"] == 1.0
        # greedy plans b -> a until a reaches the new cap of 4: two moves (never executed in verl)
        assert metrics["dora/lb/planned_migrations"] == 2.0
        # after the switch a takes 2 more (to 4), and the next request waits although a held 8 before
        assert [(await lb.acquire_server(f"n{i}"))[0] for i in range(2)] == ["a", "a"]
        waiter = asyncio.create_task(lb.acquire_server("n2"))
        await settle()
        assert not waiter.done()
        # a new version: the cap returns to 8 and the waiter is admitted
        ended = await lb.end_step()
        assert ended["dora/lb/cap"] == 4.0  # the ended step's phase
        assert (await asyncio.wait_for(waiter, 1.0))[0] == "a"
        # a=5, b=8: spread |1 - 1| = 0, so the new step stays at the high cap
        assert lb.cap.cap == 8 and lb.get_lb_metrics()["dora/lb/rebalances"] == 0.0

    run(scenario())


def test_request_load_ratio_idle_ratio_and_wait_time_follow_the_core_definition() -> None:
    async def scenario() -> None:
        lb, clock = make(servers=("a", "b"), load_ratio_capacity=4, cap_before_rebalance=1, cap_after_rebalance=1)
        await lb.acquire_server("x")  # one replica holds 1 request, the other none
        clock.now = 10.0
        waiter = asyncio.create_task(lb.acquire_server("y"))  # b is free: no wait
        await settle()
        assert waiter.done()
        clock.now = 20.0
        blocked = asyncio.create_task(lb.acquire_server("z"))
        await settle()
        clock.now = 23.0
        await lb.release_server(*[(sid, "x") for sid, ids in lb._requests.items() if "x" in ids][0])
        await asyncio.wait_for(blocked, 1.0)
        clock.now = 30.0
        m = await lb.end_step()
        # ∫ Σ min(n_i, 4)/4 dt: [0,10) 1/4, [10,23) 2/4, [23,30) 2/4 -> 2.5 + 6.5 + 3.5 = 12.5
        # over Σ ∫ dt = 2 replicas x 30 s = 60
        assert m["dora/lb/request_load_ratio"] == pytest.approx(12.5 / 60)
        # idle: one replica empty during [0, 10) and none after (the release and acquire are at t=23)
        assert m["dora/lb/idle_ratio"] == pytest.approx(10 / 60)
        assert m["dora/lb/waits"] == 1.0 and m["dora/lb/wait_s"] == pytest.approx(3.0)
        assert m["dora/lb/inflight/a"] + m["dora/lb/inflight/b"] == m["dora/lb/inflight_total"] == 2.0
        clock.now = 40.0  # the new step measures from its own start
        assert lb.get_lb_metrics()["dora/lb/request_load_ratio"] == pytest.approx(0.25)

    run(scenario())


def test_sticky_session_is_kept_under_the_cap_and_left_when_its_replica_is_full() -> None:
    async def scenario() -> None:
        lb, _ = make(cap_before_rebalance=2, cap_after_rebalance=2, rebalance_threshold=1.0)
        first, _ = await lb.acquire_server("conv")
        await lb.release_server(first, "conv")
        assert (await lb.acquire_server("conv"))[0] == first  # second turn, same replica
        await lb.acquire_server("other")  # least loaded: the other replica
        await lb.acquire_server("fill")  # fills the tie: one of them reaches 2
        full = next(sid for sid, n in lb.get_status()["servers"].items() if n == 2)
        lb._request_id_to_server["turn"] = full
        assert (await lb.acquire_server("turn"))[0] != full

    run(scenario())


def test_added_server_admits_waiters_and_an_empty_pool_raises_verls_error() -> None:
    async def scenario() -> None:
        lb, _ = make(servers=("a",), cap_before_rebalance=1, cap_after_rebalance=1)
        await lb.acquire_server("r0")
        waiter = asyncio.create_task(lb.acquire_server("r1"))
        await settle()
        assert not waiter.done()
        await lb.add_servers({"hybrid": "handle-hybrid"})  # the elastic group is lent
        assert await asyncio.wait_for(waiter, 1.0) == ("hybrid", "handle-hybrid")
        stuck = asyncio.create_task(lb.acquire_server("r2"))
        await settle()
        await lb.remove_servers(["a", "hybrid"])
        with pytest.raises(RuntimeError, match=NO_SERVERS):
            await asyncio.wait_for(stuck, 1.0)

    run(scenario())


def test_settings_carry_the_core_names_and_report_bad_values_by_key_path() -> None:
    settings = DoraSettings(cap_before_rebalance=6, cap_after_rebalance=3, rebalance_threshold=0.25)
    config = settings.balancer_config()
    assert (config.cap_before_rebalance, config.cap_after_rebalance, config.rebalance_threshold) == (6, 3, 0.25)
    assert DoraSettings().load_balancer == "dora"
    with pytest.raises(ConfigError, match=rf"{SETTINGS_PATH}\.cap_after_rebalance must be <= cap_before"):
        DoraSettings(cap_before_rebalance=2, cap_after_rebalance=3)
    with pytest.raises(ConfigError, match=rf"{SETTINGS_PATH}\.rebalance_threshold"):
        DoraSettings(rebalance_threshold=1.5)
    with pytest.raises(ValueError, match="load_balancer must be one of"):
        DoraSettings(load_balancer="round_robin")


def test_configured_subclass_is_what_verls_router_factory_instantiates() -> None:
    cls = DoraLoadBalancer.configured(DoraConfig(cap_before_rebalance=3, cap_after_rebalance=2))
    assert issubclass(cls, DoraLoadBalancer)
    # verl's get_router_handle calls cls(servers=..., max_cache_size=...) and nothing else
    lb = cls(servers={"a": 1}, max_cache_size=16)
    assert lb.cap.cap == 3 and lb.require_release_fields() == ["request_id"]


@pytest.mark.slow
@pytest.mark.ray
def test_the_actor_built_by_verls_router_factory_waits_over_ray(ray_tmp: Path) -> None:
    """The same class as a Ray actor, built by verl's ``get_router_handle(load_balancer_cls=...)``
    (the ``LLMServerManager`` path) and by :func:`create_dora_load_balancer` (the trainer's)."""
    import ray
    from verl.workers.rollout.router import get_router_handle

    from longcat_plugins.schedulers.load_balancer import create_dora_load_balancer

    config = DoraConfig(cap_before_rebalance=1, cap_after_rebalance=1)
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=str(ray_tmp))
    try:
        for lb in (
            get_router_handle({"a": "handle-a"}, load_balancer_cls=DoraLoadBalancer.configured(config)),
            create_dora_load_balancer({"a": "handle-a"}, config),
        ):
            assert ray.get(lb.acquire_server.remote(request_id="r0"), timeout=60) == ("a", "handle-a")
            waiting = lb.acquire_server.remote(request_id="r1")
            ready, _ = ray.wait([waiting], timeout=1.0)
            assert not ready, "replica a is at its cap of 1: the second acquire must wait"
            lb.release_server.remote(server_id="a", request_id="r0")  # fire and forget, as verl's client
            assert ray.get(waiting, timeout=30) == ("a", "handle-a")
            metrics = ray.get(lb.end_step.remote())
            assert metrics["dora/lb/waits"] == 1.0 and metrics["dora/lb/inflight/a"] == 1.0
            assert ray.get(lb.get_status.remote())["servers"] == {"a": 1}  # verl's own method still works
    finally:
        ray.shutdown()


# -- health probe: a dead replica is dropped between requests --------------------------------------


class Replica:
    """A rollout server actor handle as the probe sees it: Ray's built-in ``__ray_ready__``
    answers, fails with ``ActorDiedError`` once the actor died, or hangs while it is busy."""

    def __init__(self) -> None:
        self.dead = False
        self.busy = False
        self.unavailable = False
        self.pings = 0
        handle = self

        class Ready:
            @staticmethod
            async def remote() -> bool:
                handle.pings += 1
                if handle.dead:
                    raise ray.exceptions.ActorDiedError()
                if handle.unavailable:
                    raise ray.exceptions.ActorUnavailableError("restarting", None)
                if handle.busy:
                    await asyncio.sleep(3600)
                return True

        self.__ray_ready__ = Ready


def test_the_probe_drops_a_dead_replica_between_requests_and_keeps_busy_ones() -> None:
    async def scenario() -> None:
        replicas = {s: Replica() for s in ("a", "b", "c", "d")}
        lb = DoraLoadBalancer(dict(replicas), config=DoraConfig(), clock=Clock())
        held = [await lb.acquire_server(f"r{i}") for i in range(8)]
        for sid, _ in held:  # every request finished: nothing in flight, no client will notice
            await lb.release_server(sid, next(f"r{i}" for i, (s, _) in enumerate(held) if s == sid))
        replicas["b"].dead = True
        replicas["c"].busy = True  # does not answer in time: busy is not dead
        replicas["d"].unavailable = True  # restarting or unreachable for a moment: not dead either
        assert await lb.probe(timeout_s=0.05) == ["b"]
        assert sorted(lb.get_status()["servers"]) == ["a", "c", "d"]
        assert all(replicas[s].pings == 1 for s in replicas)
        routed = {(await lb.acquire_server(f"n{i}"))[0] for i in range(12)}
        assert "b" not in routed and routed <= {"a", "c", "d"}
        assert lb.get_lb_metrics()["dora/lb/dead_replicas"] == 1.0
        assert await lb.probe(timeout_s=0.05) == []  # found once, removed once

    run(scenario())


def test_the_probe_takes_a_dead_single_version_replica_out_of_the_roller() -> None:
    """Under replica-granular versioning the dead replica leaves the roller too: the survivors
    accept, its in-flight requests are no longer counted, and nothing is routed to it."""

    async def scenario() -> None:
        replicas = {s: Replica() for s in ("a", "b", "c")}
        lb = DoraLoadBalancer(dict(replicas), config=DoraConfig(), clock=Clock())
        await lb.enable_single_version(staleness=1, version=0)
        placed = [await lb.acquire_server(f"r{i}") for i in range(6)]
        assert {sid for sid, _ in placed} == {"a", "b", "c"}
        replicas["a"].dead = True
        assert await lb.probe(timeout_s=0.05) == ["a"]
        assert lb.roller is not None and "a" not in lb.roller.replicas
        assert sorted(lb.roller.accepting()) == ["b", "c"]
        assert "a" not in lb.get_status()["servers"]
        routed = [(await lb.acquire_server(f"n{i}"))[0] for i in range(4)]
        assert "a" not in routed, routed

    run(scenario())


def test_the_probe_runs_on_its_own_between_requests() -> None:
    async def scenario() -> None:
        replicas = {s: Replica() for s in ("a", "b")}
        lb = DoraLoadBalancer(dict(replicas), config=DoraConfig(), clock=Clock())
        await lb.start_health_probe(0.01, timeout_s=0.05)
        replicas["a"].dead = True
        for _ in range(100):  # no acquire, no release: only the probe can notice
            await asyncio.sleep(0.01)
            if "a" not in lb.get_status()["servers"]:
                break
        assert sorted(lb.get_status()["servers"]) == ["b"]
        assert lb.get_lb_metrics()["dora/lb/dead_replicas"] == 1.0
        off = DoraLoadBalancer({"x": Replica()}, config=DoraConfig(), clock=Clock())
        await off.start_health_probe(0.0)
        assert off._probe_task is None  # 0: off

    run(scenario())


def test_a_bad_health_probe_interval_is_refused_naming_the_key() -> None:
    for bad in (-1.0, float("nan"), "often", True):
        with pytest.raises(ValueError, match="health_probe_s must be a number of seconds >= 0"):
            DoraSettings(health_probe_s=bad)  # type: ignore[arg-type]
    assert DoraSettings().health_probe_s == 5.0 and DoraSettings(health_probe_s=0).health_probe_s == 0


class StoppingReplica:
    """A rollout server handle whose ``stop_request`` always lands (the request is still decoding)."""

    def __init__(self) -> None:
        self.stopped: list[str] = []
        handle = self

        class Stop:
            @staticmethod
            async def remote(request_id: str, reason: str) -> dict:
                handle.stopped.append(request_id)
                return {"stopped": True, "tokens": 5}

        self.stop_request = Stop


@pytest.mark.parametrize("seed", range(40))
def test_migrations_from_a_lent_replica_never_land_on_a_rolled_one_that_is_loading(seed: int) -> None:
    """Rolled replicas a, b (a loading version 1, b serving version 0) beside lent multi-version
    replicas y, z that the roller does not manage. The balancer does not know which version a
    request on y or z runs, so its migrations go only to the other lent replica; a managed
    request moves only to a holder of its version. Before, a plan from a lent replica to the
    loading one raised in the router (``cannot continue version 0``) and ended the step."""

    async def scenario() -> None:
        random.seed(seed)  # the router breaks ties between equally loaded replicas at random
        servers = {s: StoppingReplica() for s in ("a", "b", "y", "z")}
        config = DoraConfig(cap_before_rebalance=8, cap_after_rebalance=4, rebalance_threshold=0.5)
        lb = DoraLoadBalancer(dict(servers), config=config, stop_requests=True, staleness=1, clock=Clock())
        await lb.enable_single_version(staleness=1, version=0, replicas=["a", "b"])
        assert (await lb.publish(1))["load"] == ["a"]  # b is kept back to serve while a loads
        rng = random.Random(seed)
        held: dict[str, list[str]] = {s: [] for s in servers}
        for i in range(12):
            done = sorted((s, r) for s, q in held.items() for r in q if r not in lb._migrating)
            if rng.random() < 0.3 and done:  # a request finishes (one being migrated is left to the client)
                sid, rid = rng.choice(done)
                held[sid].remove(rid)
                await lb.release_server(sid, rid)
            sid, _ = await lb.acquire_server(f"r{i}")
            held[sid].append(f"r{i}")
        await settle()
        assert lb.roller is not None
        assert not lb.roller.replicas["a"].inflight and held["a"] == []
        moved = {rid: target for rid, target in lb._migrating.items()}
        for source, replica in servers.items():
            for rid in replica.stopped:
                assert rid in held[source]
                allowed = {"y", "z"} - {source} if source in ("y", "z") else {"b", "y", "z"} - {source}
                assert moved[rid] in allowed, (rid, source, moved[rid])
        metrics = lb.get_lb_metrics()
        assert metrics["dora/lb/executed_migrations"] == sum(len(r.stopped) for r in servers.values())

    run(scenario())
