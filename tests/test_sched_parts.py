"""The DORA core's parts: two-phase cap and balancer, eviction policies, oversampling,
filtering, replay ratio, quotas, config errors."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from longcat_plugins.schedulers.core import (
    EVICTION_POLICIES,
    ConfigError,
    DoraConfig,
    DoraController,
    PromptRef,
    Request,
    filter_verdict,
    oversampling_coefficient,
    register_eviction_policy,
)
from longcat_plugins.schedulers.core.balancer import BalanceContext, balancer_names, greedy
from longcat_plugins.schedulers.core.quotas import DomainQuotas


def refs(n: int, domain: str = "d", pass_rate: float | None = None) -> list[PromptRef]:
    return [PromptRef(f"{domain}{i}", domain, pass_rate) for i in range(n)]


def fill(ctrl: DoraController, name: str, now: float = 0.0) -> list[Request]:
    out = []
    while (req := ctrl.next_request(name, now)) is not None:
        out.append(req)
    return out


# -- balancer ------------------------------------------------------------------------------------


def test_two_phase_cap_8_then_4_then_reset_on_publish() -> None:
    cfg = DoraConfig(batch_size=16, group_size=4, cap_before_rebalance=8, cap_after_rebalance=4)
    ctrl = DoraController(cfg, refs(64))
    a = fill(ctrl, "a")
    assert len(a) == 8 and ctrl.load("a") == 8  # phase 1: up to 8 per device
    ctrl.add_instance("b", 0.0)
    plan = ctrl.rebalance(1.0)  # spread 1.0 - 0.0 >= 0.5: moves a->b until 4/4
    assert [(m.source, m.target) for m in plan] == [("a", "b")] * 4
    assert ctrl.load("a") == ctrl.load("b") == 4 and ctrl.cap_now() == 4
    assert {r.instance for r in ctrl.in_flight_requests("b")} == {"b"}
    assert ctrl.next_request("a", 1.0) is None and ctrl.next_request("b", 1.0) is None  # phase 2: 4
    ctrl.publish_version(1, now=2.0)
    assert ctrl.cap_now() == 8 and ctrl.next_request("a", 2.0) is not None  # new step: 8 again


def test_balancer_below_threshold_does_nothing_and_keeps_phase_one() -> None:
    ctrl = DoraController(DoraConfig(batch_size=16, rebalance_threshold=0.9), refs(64))
    fill(ctrl, "a")
    ctrl.add_instance("b", 0.0)
    # a has 8 (fraction capped at 1.0), b 0: spread 1.0 >= 0.9 -> rebalances
    assert ctrl.rebalance(1.0)
    ctrl2 = DoraController(DoraConfig(batch_size=16, rebalance_threshold=0.9), refs(64))
    for name in ("a", "b"):
        fill(ctrl2, name)
    assert ctrl2.rebalance(1.0) == [] and ctrl2.cap_now() == 8


def test_greedy_plan_balances_random_loads() -> None:
    rng = random.Random(0)
    for _ in range(200):
        loads = {f"i{k}": tuple(f"r{k}.{j}" for j in range(rng.randrange(0, 10))) for k in range(rng.randrange(2, 6))}
        plan = greedy(BalanceContext(loads, 4, 0.0))
        after = Counter({k: len(v) for k, v in loads.items()})
        for m in plan:
            assert m.request_id in loads[m.source]
            after[m.source] -= 1
            after[m.target] += 1
        assert sum(after.values()) == sum(len(v) for v in loads.values())
        assert max(after.values()) - min(after.values()) <= 1 or min(after.values()) >= 4


# -- versions ------------------------------------------------------------------------------------


def test_staleness_window_keeps_staleness_plus_one_versions() -> None:
    for s in range(4):
        ctrl = DoraController(DoraConfig(staleness=s), refs(4))
        for v in range(1, 10):
            evicted = ctrl.publish_version(v)
            assert ctrl.live_versions == list(range(max(0, v - s), v + 1))
            assert evicted == ([v - s - 1] if v - s - 1 >= 0 else [])
        with pytest.raises(ValueError, match="newer"):
            ctrl.publish_version(3)


def test_evicting_a_version_aborts_its_work_and_ignores_late_results() -> None:
    if "newest_only" not in EVICTION_POLICIES:

        @register_eviction_policy("newest_only")
        def newest_only(ctx):  # type: ignore[no-untyped-def]
            return [v for v in ctx.live if v != ctx.latest]

    with pytest.raises(ValueError, match="already registered"):
        register_eviction_policy("newest_only")(lambda ctx: [])
    cfg = DoraConfig(staleness=2, batch_size=2, group_size=3, eviction="newest_only")
    ctrl = DoraController(cfg, refs(8))
    reqs = fill(ctrl, "a")
    done = reqs[0]
    ctrl.on_sample_finished(done.to_sample(1.0, finished_at=1.0), 1.0)
    assert ctrl.publish_version(1, now=2.0) == [0]
    aborted = ctrl.take_aborted()
    assert {r.request_id for r in aborted} == {r.request_id for r in reqs[1:]}
    assert ctrl.in_flight_requests() == [] and ctrl.load("a") == 0
    assert ctrl.on_sample_finished(reqs[1].to_sample(1.0, finished_at=3.0), 3.0) is False
    # the aborted prompts are regenerated first, on the new version
    again = fill(ctrl, "a", 3.0)
    assert {r.version for r in again} == {1}
    first_uids = list(dict.fromkeys(r.uid for r in reqs))
    again_uids = list(dict.fromkeys(r.uid for r in again))
    assert again_uids[: len(first_uids)] == first_uids


def test_idle_or_stale_evicts_versions_without_work() -> None:
    cfg = DoraConfig(staleness=3, batch_size=1, group_size=1, eviction="idle_or_stale")
    ctrl = DoraController(cfg, refs(4))
    req = ctrl.next_request("a", 0.0)
    assert req is not None
    assert ctrl.publish_version(1) == []  # version 0 still has a request in flight
    ctrl.on_sample_finished(req.to_sample(0.5, finished_at=1.0), 1.0)
    assert ctrl.publish_version(2) == [0, 1]


def test_policy_may_not_evict_the_newest() -> None:
    if "evil" not in EVICTION_POLICIES:
        register_eviction_policy("evil")(lambda ctx: [ctx.latest])
    ctrl = DoraController(DoraConfig(eviction="evil"), refs(2))
    with pytest.raises(ValueError, match="newest"):
        ctrl.publish_version(1)


# -- oversampling --------------------------------------------------------------------------------


def test_oversampling_coefficient_is_monotone() -> None:
    ks = [oversampling_coefficient(p / 100, 1, 4) for p in range(101)]
    assert ks[0] == 4 and ks[-1] == 1 and all(a >= b for a, b in zip(ks, ks[1:], strict=False))
    with pytest.raises(ValueError, match="pass_rate"):
        oversampling_coefficient(1.5, 1, 4)


def test_hard_prompt_is_duplicated_into_k_independent_groups() -> None:
    cfg = DoraConfig(batch_size=5, staleness=0, group_size=2, oversampling_max=4, shuffle_prompts=False)
    ctrl = DoraController(cfg, [PromptRef("hard", "d", 0.0), PromptRef("easy", "d", 1.0)])
    reqs = fill(ctrl, "a") + fill(ctrl, "b")
    by_uid: dict[str, set[str]] = {}
    for r in reqs:
        by_uid.setdefault(r.uid, set()).add(r.group_id)
    assert len(by_uid["hard"]) == 4 and len(by_uid["easy"]) == 1
    per_group = Counter(r.group_id for r in reqs if r.uid == "hard")
    assert set(per_group.values()) == {2}  # each duplicate is a full group of n


def test_pass_rate_updates_from_finished_groups() -> None:
    cfg = DoraConfig(batch_size=1, group_size=2, staleness=0, oversampling_max=3, pass_rate_momentum=1.0)
    ctrl = DoraController(cfg, [PromptRef("p", "d", 1.0)])
    first = fill(ctrl, "a")
    assert len({r.group_id for r in first}) == 1
    for r in first:
        ctrl.on_sample_finished(r.to_sample(0.0, finished_at=1.0), 1.0)  # all wrong -> pass rate 0
    nxt = fill(ctrl, "a", 2.0)
    assert len({r.group_id for r in nxt}) == 3


# -- filtering -----------------------------------------------------------------------------------


def test_filter_verdicts() -> None:
    assert filter_verdict([1.0, 1.0, 1.0]) == "all_correct"
    assert filter_verdict([0.0, 0.0]) == "all_wrong"
    assert filter_verdict([0.0, 1.0]) is None
    assert filter_verdict([1.0, None, 1.0]) == "all_correct"  # uncomputable rewards ignored
    assert filter_verdict([None, None]) is None
    assert filter_verdict([1.0, 1.0], drop_all_correct=False) is None
    assert filter_verdict([0.2, 0.7], correct_threshold=0.5, wrong_threshold=0.1) is None


@pytest.mark.parametrize(
    "rewards",
    [[1.0] * 4, [-0.5] * 4, [-1.0] * 4, [-0.5, -1.0, -1.0, -1.0], [1.0, -0.5], [1.0, -1.0, None], [0.3, 0.3]],
)
def test_verification_groups_are_filtered_only_without_signal(rewards: list) -> None:
    """RISE's verification rewards are not the task's pass/fail: wrong verdicts beside no verdict
    (-0.5 / -1) are below the wrong threshold but carry a signal, and must be kept."""
    valid = [r for r in rewards if r is not None]
    expected = None if len(set(valid)) > 1 else ("all_correct" if valid[0] >= 1.0 else "all_wrong")
    assert filter_verdict(rewards, by_signal=True) == expected
    side = {"drop_all_correct": False} if expected == "all_correct" else {"drop_all_wrong": False}
    assert filter_verdict(rewards, by_signal=True, **side) is None


def test_all_same_groups_never_reach_a_batch() -> None:
    cfg = DoraConfig(batch_size=2, group_size=2, staleness=4)
    ctrl = DoraController(cfg, refs(12))
    rewards = {}
    for req in fill(ctrl, "a") + fill(ctrl, "b"):
        kind = int(req.uid[1:]) % 3  # 0: all wrong, 1: all correct, 2: mixed
        r = {0: 0.0, 1: 1.0, 2: float(req.index % 2)}[kind]
        rewards[req.group_id] = kind
        ctrl.on_sample_finished(req.to_sample(r, finished_at=1.0), 1.0)
    m = ctrl.metrics()
    assert m["dora/filtered_all_wrong"] > 0 and m["dora/filtered_all_correct"] > 0
    batch = ctrl.ready_batch()
    assert batch is not None and {rewards[s.group_id] for s in batch} == {2}


# -- replay --------------------------------------------------------------------------------------


def test_replay_reuse_ratio_is_exact_when_the_buffer_has_enough() -> None:
    cfg = DoraConfig(staleness=0, batch_size=8, group_size=1, reuse_ratio=0.25, filter_all_correct=False,
                     filter_all_wrong=False, max_outstanding_batches=3)  # fmt: skip
    ctrl = DoraController(cfg, refs(200))
    version, ratios, t = 0, [], 0.0
    for _ in range(12):
        t += 1
        for req in fill(ctrl, "a", t) + fill(ctrl, "b", t) + fill(ctrl, "c", t):
            ctrl.on_sample_finished(req.to_sample(0.5, finished_at=t), t)
        buffered = len(ctrl.replay)
        batch = ctrl.ready_batch(version, now=t)
        assert batch is not None
        n_replayed = len({s.group_id for s in batch if s.replayed})
        ratios.append((buffered, n_replayed))
        for s in batch:
            if s.replayed:
                assert version - s.version > cfg.staleness  # older than the bound, by design
            else:
                assert version - s.version <= cfg.staleness
        version += 1
        ctrl.publish_version(version, now=t)
    assert any(b >= 2 for b, _ in ratios)
    for buffered, n in ratios:
        assert n == min(2, buffered)
    # shuffled: replayed groups are not always at the same positions
    assert ctrl.metrics()["dora/replayed_groups"] >= 10


# -- quotas --------------------------------------------------------------------------------------


def test_slow_domain_gets_a_larger_rollout_quota() -> None:
    cfg = DoraConfig(batch_size=8, domain_ratios={"fast": 1, "slow": 1}, domain_oversampling={"slow": 2.0})
    q = DomainQuotas(cfg, ["fast", "slow"])
    assert q.quota == {"fast": 8, "slow": 16}
    ctrl = DoraController(cfg, refs(50, "fast") + refs(50, "slow"))
    reqs = fill(ctrl, "a") + fill(ctrl, "b")
    for i in range(200):
        reqs += fill(ctrl, f"x{i}")
    started = Counter({d: len({r.group_id for r in reqs if r.domain == d}) for d in ("fast", "slow")})
    assert started == {"fast": 8, "slow": 16}


def test_balanced_selection_respects_bounds() -> None:
    rng = random.Random(3)
    for _ in range(300):
        ratios = {d: rng.choice([1, 2, 3]) for d in "abc"}
        cfg = DoraConfig(batch_size=12, domain_ratios=ratios, domain_tolerance=0.15)
        q = DomainQuotas(cfg, "abc")
        cands = [(rng.choice("abc"), i) for i in range(rng.randrange(0, 30))]
        picked = q.select(cands, 12)
        if picked is None:
            continue
        counts = Counter(cands[i][0] for i in picked)
        assert len(picked) == 12 and q.within_tolerance(counts)


# -- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"staleness": -1}, "staleness"),
        ({"batch_size": 0}, "batch_size"),
        ({"cap_after_rebalance": 9}, "cap_after_rebalance"),
        ({"reuse_ratio": 1.5}, "reuse_ratio"),
        ({"eviction": "nope"}, "eviction"),
        ({"balancer": "nope"}, "balancer"),
        ({"domain_ratios": {"a": -1}}, "domain_ratios.a"),
        ({"oversampling_min": 3, "oversampling_max": 2}, "oversampling_max"),
    ],
)
def test_config_errors_name_the_field(over: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=rf"DoraConfig\.{field}"):
        DoraConfig(**over)


def test_from_mapping_names_the_key_path() -> None:
    with pytest.raises(ConfigError, match=r"longcat\.schedulers\.dora: unknown key"):
        DoraConfig.from_mapping({"stalenes": 1}, "longcat.schedulers.dora")
    with pytest.raises(ConfigError, match=r"longcat\.schedulers\.dora\.batch_size"):
        DoraConfig.from_mapping({"batch_size": "8"}, "longcat.schedulers.dora")
    assert DoraConfig.from_mapping({"staleness": 2}).staleness == 2


def test_domains_and_tolerance_are_checked_against_the_prompts() -> None:
    with pytest.raises(ConfigError, match="domain_ratios has no entry"):
        DoraController(DoraConfig(domain_ratios={"a": 1}), refs(2, "b"))
    with pytest.raises(ConfigError, match="domain_tolerance"):
        DoraController(DoraConfig(batch_size=8, domain_ratios={"a": 1, "b": 1, "c": 1}, domain_tolerance=0.0),
                       refs(2, "a") + refs(2, "b") + refs(2, "c"))  # fmt: skip
    with pytest.raises(ConfigError, match="unique"):
        DoraController(DoraConfig(), refs(2) + refs(1))
    assert {"greedy", "none"} <= set(balancer_names())


def test_the_catch_up_loop_ends_when_the_run_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """The single-version replicas' catch-up thread stops before Ray shuts down with the run (a
    Ray call from it after the shutdown made Ray end the driver with status 1)."""
    import threading
    import time
    import types

    import ray

    from longcat_plugins.schedulers.trainer import ReplicaVersionCheckpointEngineManager

    polls: list[float] = []

    def take_loads(timeout: float) -> list[str]:
        polls.append(timeout)
        time.sleep(0.01)
        return []

    monkeypatch.setattr(ray, "get", lambda ref: ref)
    manager = object.__new__(ReplicaVersionCheckpointEngineManager)
    manager._stop, manager._lock = threading.Event(), threading.Lock()
    manager.load_balancer = types.SimpleNamespace(take_loads=types.SimpleNamespace(remote=take_loads))
    manager._thread = threading.Thread(target=manager._catch_up_loop, daemon=True)
    manager._thread.start()
    while not polls:
        time.sleep(0.01)
    manager.stop_catch_up()
    assert not manager._thread.is_alive()
    after = len(polls)
    time.sleep(0.05)
    assert len(polls) == after, "no Ray call after the run ended"
