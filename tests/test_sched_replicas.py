"""Replica-granular versioning (``core/replicas.py``): the decision rules, by hand on small cases
and as invariants over many random schedules of publishes, request arrivals, completions and
(slow or fast) weight loads.

The simulator below keeps its own ledger of every request (queued, in flight where and on which
version, completed) and of every replica's version, and checks the roller's decisions against
it, so a roller that loses, duplicates, recomputes or mixes versions is caught by the ledger,
not by reading the roller's own state back."""

from __future__ import annotations

import asyncio
import random

import pytest

from longcat_plugins.learning.assets import Assets
from longcat_plugins.schedulers.core.queue import is_fresh
from longcat_plugins.schedulers.core.replicas import Actions, ReplicaRoller


def test_an_idle_replica_loads_at_once_and_a_busy_one_drains_first() -> None:
    roller = ReplicaRoller(["a", "b"], staleness=1)
    roller.start("a", "r1")
    actions = roller.publish(1)
    assert actions.load == ("b",) and not actions.aborted
    assert roller.accepting() == ["a"]  # b is loading; a still serves version 0 (inside the window)
    assert roller.loaded("b", 1).load == ()
    assert roller.accepting() == ["b"]  # a is behind the newest version: it drains
    assert roller.finish("a", "r1").load == ("a",)
    assert roller.loaded("a", 1).load == ()
    assert roller.accepting() == ["a", "b"]


def test_a_replica_whose_version_leaves_the_window_is_aborted_and_loads() -> None:
    roller = ReplicaRoller(["a", "b"], staleness=1)
    roller.start("a", "r1")
    roller.publish(1)  # b loads 1; a drains version 0
    roller.loaded("b", 1)
    actions = roller.publish(2)  # version 0 is now 2 behind: out of the window
    assert actions.aborted == {"a": ("r1",)}
    assert set(actions.load) == {"a", "b"} or actions.load == ("a",)
    assert roller.counters["aborted_requests"] == 1


def test_when_every_replica_is_idle_one_keeps_serving_during_the_update() -> None:
    roller = ReplicaRoller(["a", "b", "c"], staleness=1)
    actions = roller.publish(1)
    assert sorted(actions.load) == ["a", "b"] and roller.accepting() == ["c"]
    assert roller.loaded("a", 1).load == ("c",)  # a serves the newest version now: c rolls
    assert roller.accepting() == ["a"]
    assert roller.loaded("b", 1).load == ()


def test_under_steady_load_one_replica_is_designated_to_drain() -> None:
    roller = ReplicaRoller(["a", "b"], staleness=2)
    roller.start("a", "r1")
    roller.start("a", "r2")
    roller.start("b", "r3")
    assert roller.publish(1).load == ()
    assert roller.accepting() == ["a"]  # b (fewest in flight) drains towards version 1
    assert roller.finish("b", "r3").load == ("b",)


def test_a_load_executed_after_the_next_publish_takes_the_newest_version() -> None:
    """With a transport that sends weights only at a sync (NCCL), a replica that drained between
    syncs loads at the next one, with that sync's weights."""
    roller = ReplicaRoller(["a", "b"], staleness=2)
    roller.start("a", "r1")
    roller.publish(1)  # b loads 1
    roller.loaded("b", 1)
    assert roller.finish("a", "r1").load == ("a",)  # a drained: asked to load 1 ...
    roller.publish(2)
    roller.loaded("a", 2)  # ... and loads 2 at the next sync
    assert roller.version_of("a") == 2 and roller.accepting() == ["a"]


def test_bad_events_are_errors() -> None:
    roller = ReplicaRoller(["a", "b"], staleness=1)
    with pytest.raises(ValueError, match="must be newer"):
        roller.publish(0)
    roller.publish(1)  # a loads, b serves
    with pytest.raises(ValueError, match="not accepting"):
        roller.start("a", "r1")
    with pytest.raises(ValueError, match="was loading 1; it cannot have loaded 2"):
        roller.loaded("a", 2)  # never published
    with pytest.raises(ValueError, match="was loading None"):
        roller.loaded("b", 1)
    with pytest.raises(ValueError, match="staleness"):
        ReplicaRoller(["a"], staleness=-1)


class Ledger:
    """The simulator's own record of every request and replica, checked against the roller."""

    def __init__(self, roller: ReplicaRoller, names: list[str]) -> None:
        self.roller = roller
        self.version = {n: roller.latest for n in names}  # what each replica really holds
        self.queue: list[str] = []
        self.inflight: dict[str, tuple[str, int]] = {}  # request -> (replica, version)
        self.done: dict[str, int] = {}  # request -> version that generated it
        self.pending_loads: list[tuple[str, int]] = []
        self.restarts = 0
        self.next_id = 0

    def submit(self) -> None:
        self.queue.append(f"r{self.next_id}")
        self.next_id += 1

    def apply(self, actions: Actions, before: dict[str, int]) -> None:
        roller = self.roller
        for replica, ids in actions.aborted.items():
            # only work whose version left the window is ever aborted (no recomputation inside it)
            assert not is_fresh(roller.latest, before[replica], roller.staleness), (replica, before)
            assert set(ids) == {r for r, (rep, _) in self.inflight.items() if rep == replica}
            for rid in ids:
                del self.inflight[rid]
                self.queue.append(rid)  # re-issued from its prompt
                self.restarts += 1
        for replica in actions.load:
            assert not any(rep == replica for rep, _ in self.inflight.values()), "loads only when drained"
            self.pending_loads.append((replica, actions.version))
        fresh_loaded = [r for r in actions.load if is_fresh(roller.latest, before[r], roller.staleness)]
        if fresh_loaded:
            # rolling: loading replicas that could still generate never takes the last of them
            assert roller.generating(), (fresh_loaded, roller.replicas)

    def dispatch(self, rng: random.Random) -> None:
        while self.queue:
            accepting = self.roller.accepting()
            if not accepting:
                return
            replica = rng.choice(accepting)
            rid = self.queue.pop(0)
            version = self.roller.start(replica, rid)
            assert version == self.version[replica]
            # new work goes only to the newest version any generating replica holds
            assert version == max(self.version[r] for r in self.roller.generating())
            assert is_fresh(self.roller.latest, version, self.roller.staleness)
            self.inflight[rid] = (replica, version)

    def check(self) -> None:
        roller = self.roller
        ids = list(self.queue) + list(self.inflight) + list(self.done)
        assert len(ids) == len(set(ids)) == self.next_id, "nothing lost, nothing duplicated"
        for replica, state in roller.replicas.items():
            assert state.inflight == {r for r, (rep, _) in self.inflight.items() if rep == replica}
            assert state.version == self.version[replica]
            # staleness bound: a replica is inside the window or already loading
            assert state.loading is not None or is_fresh(roller.latest, state.version, roller.staleness)
        alive = {self.version[r] for r, s in roller.replicas.items() if s.loading is None}
        assert len(alive) <= roller.staleness + 1
        if self.queue:
            # generation capacity never zero while work waits: something accepts or is loading
            assert roller.accepting() or any(s.loading is not None for s in roller.replicas.values())


def simulate(seed: int) -> Ledger:
    rng = random.Random(seed)
    names = [f"rep{i}" for i in range(rng.randint(2, 5))]
    roller = ReplicaRoller(names, staleness=rng.randint(1, 3))
    ledger = Ledger(roller, names)
    load_speed = rng.choice([0.2, 0.5, 0.9])  # slow loads let publishes overtake them
    publish_rate = rng.choice([0.02, 0.05, 0.15])

    def event(fn, *args) -> None:  # noqa: ANN001
        before = dict(ledger.version)
        ledger.apply(fn(*args), before)
        ledger.dispatch(rng)
        ledger.check()

    for tick in range(600):
        steady = tick < 450
        if steady and rng.random() < 0.6:
            ledger.submit()
            ledger.dispatch(rng)
        if ledger.inflight and rng.random() < 0.5:
            rid = rng.choice(sorted(ledger.inflight))
            replica, version = ledger.inflight.pop(rid)
            assert ledger.version[replica] == version, "one version per sample"
            assert is_fresh(roller.latest, version, roller.staleness), "finished inside the window"
            ledger.done[rid] = version
            event(roller.finish, replica, rid)
        if ledger.pending_loads and rng.random() < load_speed:
            replica, version = ledger.pending_loads.pop(rng.randrange(len(ledger.pending_loads)))
            if rng.random() < 0.3:
                version = roller.latest  # executed after a later publish: the newest weights
            ledger.version[replica] = version
            event(roller.loaded, replica, version)
        if steady and rng.random() < publish_rate:
            event(roller.publish, roller.latest + 1)
        ledger.check()
    # quiesce: no new work or versions; everything finishes and every replica catches up
    for _ in range(10_000):
        if not (ledger.queue or ledger.inflight or ledger.pending_loads):
            break
        if ledger.inflight:
            rid = sorted(ledger.inflight)[0]
            replica, version = ledger.inflight.pop(rid)
            assert ledger.version[replica] == version
            ledger.done[rid] = version
            event(roller.finish, replica, rid)
        if ledger.pending_loads:
            replica, version = ledger.pending_loads.pop(0)
            ledger.version[replica] = version
            event(roller.loaded, replica, version)
        ledger.dispatch(rng)
    assert not ledger.queue and not ledger.inflight and not ledger.pending_loads
    assert len(ledger.done) == ledger.next_id, "every request completed exactly once"
    assert all(v == roller.latest for v in ledger.version.values()), "every replica reached the newest version"
    assert roller.counters["aborted_requests"] == ledger.restarts
    return ledger


@pytest.mark.parametrize("block", range(4))
def test_invariants_over_random_schedules(block: int) -> None:
    """200 seeds in all (4 blocks of 50): 2-5 replicas, staleness 1-3, fast and slow loads."""
    totals = {"restarts": 0, "requests": 0, "publishes": 0, "designated": 0, "kept_back": 0}
    for seed in range(block * 50, block * 50 + 50):
        ledger = simulate(seed)
        totals["restarts"] += ledger.restarts
        totals["requests"] += ledger.next_id
        totals["publishes"] += ledger.roller.latest
        totals["designated"] += ledger.roller.counters["designated"]
        totals["kept_back"] += ledger.roller.counters["kept_back"]
    # the schedules exercise every path (window aborts, designated drains, kept-back replicas)
    assert totals["publishes"] > 100 and totals["requests"] > 1000, totals
    assert totals["restarts"] > 0 and totals["designated"] > 0 and totals["kept_back"] > 0, totals


def test_the_dora_balancer_routes_by_the_rollers_decisions() -> None:
    """The verl router under replica-granular versioning: new requests only to accepting
    replicas, a waiting acquire woken by a finished load, drained replicas queued for loading."""
    from longcat_plugins.schedulers.core.config import DoraConfig
    from longcat_plugins.schedulers.load_balancer import DoraLoadBalancer

    async def scenario() -> None:
        lb = DoraLoadBalancer({"a": "ha", "b": "hb"}, config=DoraConfig())
        await lb.enable_single_version(staleness=1, version=0)
        first, _ = await lb.acquire_server("r1")
        other = "b" if first == "a" else "a"
        plan = await lb.publish(1)
        assert plan == {"version": 1, "load": [other], "aborted": {}}
        # the idle replica is loading: new work goes to the busy one, still on version 0
        assert (await lb.acquire_server("r2"))[0] == first
        await lb.loaded([other], 1)
        assert (await lb.acquire_server("r3"))[0] == other  # the newest version takes new work
        await lb.release_server(first, "r1")
        await lb.release_server(first, "r2")
        assert await lb.take_loads(0.1) == [first]  # drained: loads between weight syncs
        await lb.loaded([first], 1)
        await lb.release_server(other, "r3")
        metrics = lb.get_lb_metrics()
        assert metrics["dora/replica/version/a"] == metrics["dora/replica/version/b"] == 1.0
        assert metrics["dora/replica/aborted_requests"] == 0.0
        # a version leaving the window aborts the replica's requests; their late release is ignored
        busy, _ = await lb.acquire_server("r4")
        await lb.publish(2)
        plan = await lb.publish(3)
        assert busy in plan["aborted"] and plan["aborted"][busy] == ["r4"], plan
        await lb.release_server(busy, "r4")
        assert lb.get_lb_metrics()["dora/replica/aborted_requests"] == 1.0

    asyncio.run(scenario())


def test_a_request_leaving_the_window_is_aborted_on_a_real_server_and_restarted_on_one_version(
    tiny_assets: Assets,
) -> None:
    """The balancer's roller and two single-version ``hf`` servers (in process, no Ray): a long
    request on a replica whose version leaves the window is aborted mid-decode, the replica loads,
    and the restarted request runs start to finish on the newest version."""
    from longcat_plugins.runtime.hf_rollout import HFServer
    from longcat_plugins.schedulers.core.config import DoraConfig
    from longcat_plugins.schedulers.load_balancer import DoraLoadBalancer

    config = {"prompt_length": 32, "response_length": 300, "seed": 0}
    servers = {name: HFServer(config, {"local_path": str(tiny_assets.model)}) for name in ("a", "b")}
    for server in servers.values():
        server.eos_ids = set()  # full-length decodes: the long request is still running when aborted
    weights = {k: v.clone() for k, v in servers["a"].model.state_dict().items()}
    prompt = [1, 2, 3, 4]

    async def scenario() -> None:
        lb = DoraLoadBalancer(servers, config=DoraConfig())
        for server in servers.values():
            await server.set_single_version(True)
        await lb.enable_single_version(staleness=1, version=0)
        first, server = await lb.acquire_server("long")
        other = "b" if first == "a" else "a"
        running = asyncio.create_task(server.generate(prompt, {"temperature": 1.0}, request_id="long"))
        while not server._running:
            await asyncio.sleep(0.001)
        assert (await lb.publish(1))["load"] == [other]
        await servers[other].update_weights(weights, global_steps=1)
        await lb.loaded([other], 1)
        plan = await lb.publish(2)  # version 0 is now outside the window of 1
        assert plan["aborted"] == {first: ["long"]} and first in plan["load"], plan
        await server.abort_all_requests()
        assert (await asyncio.wait_for(running, 5.0)).stop_reason == "aborted"
        await lb.release_server(first, "long")
        for name in plan["load"]:
            await servers[name].update_weights(weights, global_steps=2)
        await lb.loaded(plan["load"], 2)
        again, handle = await lb.acquire_server("long")
        out = await handle.generate(prompt, {"temperature": 1.0}, request_id="long")
        assert out.stop_reason == "completed" and out.extra_fields["global_steps"] == 2
        assert all(s.get_stats()["max_versions_held"] == 1 for s in servers.values())
        assert servers[first].stats["aborted"] == 1 and lb.get_lb_metrics()["dora/replica/aborted_requests"] == 1.0

    asyncio.run(scenario())
