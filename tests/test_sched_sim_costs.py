"""The simulator's cost terms against independent float64 references (context-dependent decode,
prefill, KV admission, preemption and recompute, memory per held weight version), the report's
hold-back rule in the core, and randomised invariants over many seeds."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from longcat_plugins.schedulers.core import DoraConfig, DoraController, PromptRef
from longcat_plugins.schedulers.core.config import ConfigError
from longcat_plugins.schedulers.core.types import Request
from longcat_plugins.schedulers.sim import ClusterSpec, Simulation, long_tail_workload, simulate
from longcat_plugins.schedulers.sim import engine as sim_engine
from longcat_plugins.schedulers.sim.engine import Device, Flight
from longcat_plugins.schedulers.sim.workload import DomainSpec, Trajectory, Workload


def single(prompt: int, length: int) -> Workload:
    return Workload(
        domains={"d": DomainSpec(median_tokens=length, sigma=0.0, tail_prob=0.0, prompt_tokens=prompt)}, prompts=4
    )


def no_filter(**over: Any) -> DoraConfig:
    base: dict[str, Any] = dict(staleness=1, batch_size=1, group_size=1, filter_all_correct=False,
                                filter_all_wrong=False)  # fmt: skip
    base.update(over)
    return DoraConfig(**base)


# -- decode and prefill: one request, closed form -------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "length", "per_ktoken"), [(1000, 3000, 0.001), (8000, 1500, 0.002), (500, 800, 0.0)]
)
def test_one_request_takes_prefill_plus_the_context_dependent_decode_sum(
    monkeypatch: pytest.MonkeyPatch, prompt: int, length: int, per_ktoken: float
) -> None:
    """Step n of a lone request (context prompt + n) lasts a + b + k (prompt + n) / 1000; its
    prefill prompt / rate. Reference: the exact float64 sum; the simulator re-evaluates the rate
    every DECODE_CHUNK_TOKENS."""
    monkeypatch.setattr(sim_engine, "DECODE_CHUNK_TOKENS", 4.0)
    cl = ClusterSpec(devices=2, train_devices=1, step_per_ktoken_s=per_ktoken)
    sim = Simulation("sync", single(prompt, length), cl, no_filter(), resolution_s=1e-4)
    result = sim.run(1, warmup_steps=0)
    a, b, k = 0.025, 0.0025, per_ktoken
    decode = sum(a + b + k * (prompt + n) / 1000.0 for n in range(length))
    prefill = prompt / 20000.0
    train = 20.0 + 2.0 * (prompt + length) / 1000.0 / 2
    expected = prefill + decode + train
    assert result.step_seconds[0] == pytest.approx(expected, rel=2e-3)
    if per_ktoken > 0:  # the context term is far above the tolerance: a context-free model fails
        free = prefill + length * (a + b) + train
        assert abs(free - expected) > 20 * 2e-3 * expected


def test_decode_rate_formula() -> None:
    cl = ClusterSpec(step_base_s=0.02, step_per_request_s=0.003, step_per_ktoken_s=0.0004)
    assert cl.decode_rate(0, 1e6) == 0.0
    assert cl.decode_rate(5, 40000.0) == pytest.approx(1.0 / (0.02 + 5 * 0.003 + 0.0004 * 40.0), rel=1e-12)
    assert cl.decode_rate(5, 80000.0) < cl.decode_rate(5, 40000.0)  # longer contexts decode slower


# -- KV admission, preemption, recompute, version memory ------------------------------------------


def flight(rid: str, context: int, version: int = 0) -> Flight:
    req = Request(rid, "d-0", 0, "g", 0, version, "d", "dev", 0.0)
    return Flight(req, Trajectory((1000,), (), context), 1000.0, float(context), versions=[version])


def device_sim(kv: int, version_kv: int = 0, mode: str = "dora") -> tuple[Simulation, Device]:
    cl = ClusterSpec(devices=2, train_devices=1, kv_capacity_tokens=kv, version_kv_tokens=version_kv)
    sim = Simulation(mode, single(100, 100), cl, no_filter())
    dev = Device("devX", "gen")
    return sim, dev


def put(dev: Device, f: Flight) -> None:
    dev.flights[f.request.request_id] = f
    dev.waiting.append(f.request.request_id)


def test_admission_control_preemption_and_recompute() -> None:
    sim, dev = device_sim(10000)
    for i in range(4):
        put(dev, flight(f"r{i}", 3000))
    sim._schedule(dev)
    # admission: three fit (9000 <= 10000), the fourth waits; each prefill occupies the device
    assert [f.admitted for f in dev.flights.values()] == [True, True, True, False]
    assert list(dev.waiting) == ["r3"]
    assert dev.busy_until == pytest.approx(9000 / 20000.0)
    assert sim.recomputed == 0.0 and sim._rate(dev) == 0.0  # prefilling: no decoding yet

    # contexts grow past the budget: the newest admitted (r2) is preempted to the queue front
    for rid in ("r0", "r1", "r2"):
        dev.flights[rid].context = 3500.0
    sim.t = 1.0
    sim._schedule(dev)
    assert sim.preemptions == 1
    assert [rid for rid, f in dev.flights.items() if f.admitted] == ["r0", "r1"]
    assert list(dev.waiting) == ["r2", "r3"]  # 7000 + 3500 > 10000: r2 waits, so does r3 behind it

    # r0 finishes: r2 (queue front) is re-admitted and re-prefilled from prompt + generated
    # (recomputation); r3 fits behind it (3500 + 3500 + 3000 = 10000) and is prefilled once
    dev.flights.pop("r0")
    sim._schedule(dev)
    assert dev.flights["r2"].admitted and dev.flights["r3"].admitted and not dev.waiting
    assert dev.flights["r3"].seq > dev.flights["r2"].seq
    assert sim.recomputed == pytest.approx(3500.0)
    assert dev.busy_until == pytest.approx(1.0 + (3500 + 3000) / 20000.0)
    assert dev.flights["r2"].wake_at == pytest.approx(1.0 + 3500 / 20000.0)
    assert dev.flights["r3"].wake_at == pytest.approx(dev.busy_until)


def test_a_request_larger_than_the_budget_still_runs_alone() -> None:
    sim, dev = device_sim(1000)
    put(dev, flight("big", 5000))
    put(dev, flight("next", 10))
    sim._schedule(dev)
    assert dev.flights["big"].admitted and not dev.flights["next"].admitted


def test_every_held_version_costs_kv() -> None:
    sim, dev = device_sim(10000, version_kv=4000)
    put(dev, flight("old", 3000, version=0))
    put(dev, flight("new", 3000, version=1))
    sim.version = 1
    assert sim.versions_held(dev) == 2
    sim.publish_at = 5.0  # version 2 loading beside them
    assert sim.versions_held(dev) == 3
    assert sim.cluster.kv_budget(3) == 10000 - 2 * 4000
    sim._schedule(dev)
    assert [f.admitted for f in dev.flights.values()] == [True, False]  # 3000 + 3000 > 2000
    single_version, dev1 = device_sim(10000, version_kv=4000, mode="partial")
    put(dev1, flight("old", 3000, version=0))
    put(dev1, flight("new", 3000, version=1))
    assert single_version.versions_held(dev1) == 1


def test_version_memory_cannot_change_single_version_modes() -> None:
    wl = long_tail_workload(seed=3, prompts=128)
    c = DoraConfig(staleness=1, batch_size=8, group_size=4)
    for mode in ("sync", "one_step_off", "partial"):
        a = simulate(mode, wl, ClusterSpec(devices=8, train_devices=2, version_kv_tokens=0), c, steps=3, warmup_steps=0)
        b = simulate(mode, wl, ClusterSpec(devices=8, train_devices=2, version_kv_tokens=200000), c, steps=3,
                     warmup_steps=0)  # fmt: skip
        assert a.step_seconds == b.step_seconds and a.versions_held_mean == 1.0


def test_partial_rollout_recomputes_at_every_switch_dora_does_not() -> None:
    wl = long_tail_workload(seed=1, prompts=128)
    cl = ClusterSpec(devices=8, train_devices=2, kv_capacity_tokens=1 << 30)
    c = DoraConfig(staleness=1, batch_size=8, group_size=4)
    assert simulate("partial", wl, cl, c, steps=4, warmup_steps=0).recomputed_token_fraction > 0.05
    dora = simulate("dora", wl, cl, c, steps=4, warmup_steps=0)
    assert dora.recomputed_token_fraction == 0.0 and dora.preemptions_per_sample == 0.0


def test_a_tight_kv_budget_preempts_and_slows_every_mode() -> None:
    wl = long_tail_workload(seed=2, prompts=128)
    c = DoraConfig(staleness=1, batch_size=8, group_size=4)
    for mode in ("sync", "partial", "dora"):
        roomy = simulate(mode, wl, ClusterSpec(devices=8, train_devices=2, kv_capacity_tokens=1 << 30), c, steps=3,
                         warmup_steps=0)  # fmt: skip
        tight = simulate(mode, wl, ClusterSpec(devices=8, train_devices=2, kv_capacity_tokens=12000), c, steps=3,
                         warmup_steps=0)  # fmt: skip
        assert tight.preemptions_per_sample > 0 and tight.recomputed_token_fraction > 0, mode
        assert tight.throughput < roomy.throughput, mode


# -- the report's hold-back rule ------------------------------------------------------------------


def refs(n: int) -> list[PromptRef]:
    return [PromptRef(f"p{i}") for i in range(n)]


@pytest.mark.parametrize(("limit", "allowed"), [(0.0, 0), (0.25, 2), (0.5, 4), (None, 8)])
def test_hold_back_limits_new_groups_on_the_old_version_while_it_trains(
    limit: float | None, allowed: int | None
) -> None:
    cfg = DoraConfig(staleness=2, batch_size=8, group_size=1, old_version_start_limit=limit, cap_before_rebalance=1000,
                     cap_after_rebalance=1000, filter_all_correct=False, filter_all_wrong=False)  # fmt: skip
    ctrl = DoraController(cfg, refs(200))
    t = 0.0
    first = []
    while (req := ctrl.next_request("i", t)) is not None:
        first.append(req)
    for req in first[:8]:
        ctrl.on_sample_finished(req.to_sample(1.0, finished_at=t), t)
    assert ctrl.ready_batch(0, now=t) is not None  # the trainer now updates version 0
    # finished work frees quota: what starts now is on version 0, the version being trained
    for req in first[8:]:
        ctrl.on_sample_finished(req.to_sample(1.0, finished_at=t), t)
    started = []
    while (req := ctrl.next_request("i", t)) is not None:
        started.append(req)
    assert all(r.version == 0 for r in started)
    assert len(started) == allowed  # None: the quotas alone (one batch freed) limit the starts
    ctrl.publish_version(1, now=t)  # new weights: the limit resets
    assert ctrl.started_while_training == 0
    for r in started:
        ctrl.on_sample_finished(r.to_sample(1.0, finished_at=t), t)
    ctrl.ready_batch(1, now=t)
    ctrl.publish_version(2, now=t)
    req = ctrl.next_request("i", t)
    assert req is not None and req.version == 2


def test_hold_back_survives_a_checkpoint() -> None:
    cfg = DoraConfig(staleness=1, batch_size=4, group_size=1, old_version_start_limit=0.5,
                     filter_all_correct=False, filter_all_wrong=False)  # fmt: skip
    ctrl = DoraController(cfg, refs(50))
    ctrl.started_while_training = 2
    other = DoraController(cfg, refs(50))
    other.load_state_dict(ctrl.state_dict())
    assert other.started_while_training == 2


def test_bad_hold_back_and_unknown_quota_domain_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"DoraConfig\.old_version_start_limit"):
        DoraConfig(old_version_start_limit=-0.5)
    with pytest.raises(ConfigError, match=r"longcat\.schedulers\.dora\.domain_oversampling\.agnet: no such domain"):
        DoraConfig.from_mapping(
            {"domain_ratios": {"math": 1, "agent": 1}, "domain_oversampling": {"agnet": 2.0}}, "longcat.schedulers.dora"
        )


# -- randomised invariants ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(24))
def test_random_runs_keep_one_version_per_sample_the_bound_and_every_request(seed: int) -> None:
    """Random clusters (tight KV budgets and heavy version memory included, so preemption and
    recomputation happen), modes, staleness and hold-back: every trained sample has one version
    within the bound, no (group, index) is trained twice, and every request the engine started
    is finished, aborted or still in flight at the end: exactly one of them."""
    rng = random.Random(seed)
    mode = rng.choice(["dora", "dora_elastic"])
    staleness = rng.choice([0, 1, 2])
    devices = rng.randrange(4, 10)
    cl = ClusterSpec(
        devices=devices,
        train_devices=rng.randrange(1, devices // 2 + 1),
        kv_capacity_tokens=rng.choice([8000, 20000, 65536, 262144]),
        version_kv_tokens=rng.choice([0, 4000, 16000]),
        step_per_ktoken_s=rng.choice([0.0, 0.0001, 0.001]),
    )
    cfg = DoraConfig(staleness=staleness, batch_size=rng.choice([2, 4, 6]), group_size=rng.choice([2, 4]),
                     old_version_start_limit=rng.choice([None, 0.0, 0.5]))  # fmt: skip
    sim = Simulation(mode, long_tail_workload(seed=seed, prompts=96), cl, cfg, seed=seed)
    started: list[str] = []
    finished: list[str] = []
    aborted: list[str] = []
    trained: list[tuple[str, int]] = []
    batches: list[tuple[int, list[Any]]] = []
    start, on_finished = sim._start, sim.policy.on_finished
    take_aborted, ready_batch = sim.policy.take_aborted, sim.policy.ready_batch

    def spy_start(dev: Device, req: Request) -> None:
        started.append(req.request_id)
        start(dev, req)

    def spy_finished(req: Request, reward: float, payload: dict[str, Any], now: float) -> None:
        finished.append(req.request_id)
        on_finished(req, reward, payload, now)

    def spy_aborted() -> list[Request]:
        out = take_aborted()
        aborted.extend(r.request_id for r in out)
        return out

    def spy_batch(version: int, now: float) -> Any:
        batch = ready_batch(version, now)
        if batch is not None:
            batches.append((version, batch))
        return batch

    sim._start, sim.policy.on_finished = spy_start, spy_finished  # type: ignore[method-assign]
    sim.policy.take_aborted, sim.policy.ready_batch = spy_aborted, spy_batch  # type: ignore[method-assign]
    result = sim.run(4, warmup_steps=0, max_time_s=2e5)
    for version, batch in batches:
        for s in batch:
            assert len(set(s.payload["versions"])) == 1 and s.payload["versions"][0] == s.version
            assert 0 <= version - s.version <= staleness
            trained.append((s.group_id, s.index))
    assert len(trained) == len(set(trained)) == 4 * cfg.batch_size * cfg.group_size
    assert result.mixed_version_samples == 0
    in_flight = [rid for dev in sim.devices for rid in dev.flights]
    assert len(started) == len(set(started))
    assert Counter(finished) + Counter(aborted) + Counter(in_flight) == Counter(started)
