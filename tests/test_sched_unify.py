"""The verl sampler decides with the DORA core, not copies of it: one staleness rule, the core's
domain quotas choosing which finished groups a batch takes (the rest wait, never lost or
duplicated), and the core's D1 verdict dropping no-signal groups through verl's own evict/refill
path. verl's real ``ReplayBufferAsync`` logic over the in-memory TransferQueue of
``test_sched_verl`` (no Ray)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from sched_helpers import FakeTQ, dora_buffer

from longcat_plugins.schedulers import sampler as sampler_mod
from longcat_plugins.schedulers.core import queue as core_queue
from longcat_plugins.schedulers.core.config import ConfigError
from longcat_plugins.schedulers.core.queue import SampleQueue, is_fresh, sample_staleness
from longcat_plugins.schedulers.core.types import Group, Sample
from longcat_plugins.schedulers.core.versions import VersionSet
from longcat_plugins.schedulers.sampler import DoraReplayBuffer, version_lag
from longcat_plugins.schedulers.settings import DoraSettings


def buffer_with(settings: DoraSettings, refill_fn: Callable[[int], Any]) -> DoraReplayBuffer:
    """The DORA sampler as the dora trainer builds it, with ``settings`` and ``refill_fn``."""
    return dora_buffer(refill_fn, settings=settings, max_off_policy_threshold=None)


def make_buffer(refills: list[int], **settings: Any) -> DoraReplayBuffer:
    return buffer_with(DoraSettings(**settings), lambda k: refills.append(k) or k)


def finished_group(tq: FakeTQ, uid: str, submitted: int, version: int, n: int = 2, **fields: Any) -> None:
    tq.prompt(uid, submitted, "finished")
    rewards = fields.pop("rewards", [None] * n)
    for session, reward in enumerate(rewards):
        tq.trajectory(uid, session, version, reward, **fields)


def train_on(tq: FakeTQ, buffer: DoraReplayBuffer, step: int, batch_size: int) -> tuple[list[str], dict]:
    """One ``sample`` and what the trainer does after the step: clear the trained keys."""
    batch, metrics = buffer.sample(global_steps=step, partition_id="train", batch_size=batch_size)
    tq.kv_clear(batch.keys, "train")
    return sorted({key.split("_")[0] for key in batch.keys}), metrics


# -- S1: one staleness rule -----------------------------------------------------------------------


def test_the_sampler_has_no_staleness_rule_of_its_own() -> None:
    assert sampler_mod.is_fresh is core_queue.is_fresh and sampler_mod.sample_staleness is core_queue.sample_staleness
    # verl step s trains version s - 1; the lag is the core's staleness of that version
    for step in range(1, 6):
        for version in range(0, step):
            assert version_lag(step, version) == sample_staleness(step - 1, version) == (step - 1) - version


def test_core_queue_and_verl_sampler_expire_the_same_groups(tq: FakeTQ) -> None:
    step, bound = 6, 2  # trains version 5: versions 3..5 are fresh
    queue = SampleQueue()
    for version in range(0, 6):
        uid = f"v{version}"
        finished_group(tq, uid, submitted=step, version=version)
        group = Group(uid, uid, version, "d", version, 1)
        group.samples[0] = Sample(uid, uid, version, "d", "i0", 1.0)
        queue.push(group)
    buffer = make_buffer([], staleness=bound)
    buffer._sync_metadata_from_transfer_queue()
    from_sampler = buffer._stale_terminal_keys(step, "train")
    from_core = {g.uid for g in queue.expire(step - 1, bound)}
    assert from_sampler == from_core == {"v0", "v1", "v2"}
    # and the eviction policy agrees: versions no sample of which is still fresh
    versions = VersionSet(initial=0)
    for v in range(1, 6):
        versions.publish(v, bound, {})
    assert versions.live == [v for v in range(6) if is_fresh(5, v, bound)]


# -- S4: the core's domain quotas choose the batch ------------------------------------------------


@pytest.mark.parametrize("domain_key", ["data_source", "extra_info.domain"])
def test_skewed_pool_gives_a_balanced_batch_and_leftovers_wait_their_turn(tq: FakeTQ, domain_key: str) -> None:
    def group(uid: str, submitted: int, domain: str) -> None:
        if domain_key == "data_source":
            finished_group(tq, uid, submitted, version=1, data_source=domain)
        else:
            finished_group(tq, uid, submitted, version=1, extra_info={"domain": domain, "index": 0})

    # finished pool, oldest first: six math groups, then two code: oldest-first takes 4 math
    for i in range(6):
        group(f"m{i}", 1, "math")
    group("c0", 2, "code")
    group("c1", 2, "code")
    ratios, tolerance, batch_size = {"math": 1.0, "code": 1.0}, 0.125, 4
    buffer = make_buffer([], domain_ratios=ratios, domain_tolerance=tolerance, domain_key=domain_key)

    # independent bounds from the report's rule: count_d in [ceil((share-tol)B), floor((share+tol)B)]
    low = {d: math.ceil((0.5 - tolerance) * batch_size) for d in ratios}
    high = {d: math.floor((0.5 + tolerance) * batch_size) for d in ratios}

    handed_out: list[str] = []
    first, metrics = train_on(tq, buffer, 2, batch_size)
    counts = Counter(uid[0] for uid in first)
    assert all(low[d] <= counts[d[0]] <= high[d] for d in ratios), first
    assert first == ["c0", "c1", "m0", "m1"], "math: its two oldest groups"
    assert metrics["dora/domain/unbalanced_batch"] == 0.0 and metrics["dora/domain/math/trained_groups"] == 2.0
    handed_out += first
    # the four math groups not taken are still finished in the buffer
    assert {k for k, t in tq.store["train"].items() if t.get("is_prompt")} == {"m2", "m3", "m4", "m5"}

    group("c2", 3, "code")
    group("c3", 3, "code")
    second, _ = train_on(tq, buffer, 2, batch_size)
    assert second == ["c2", "c3", "m2", "m3"]
    handed_out += second

    group("c4", 4, "code")
    group("c5", 4, "code")
    third, _ = train_on(tq, buffer, 2, batch_size)
    handed_out += third
    assert Counter(handed_out) == Counter({f"m{i}": 1 for i in range(6)} | {f"c{i}": 1 for i in range(6)})
    assert not tq.store["train"], "every group handed out exactly once, nothing left behind"


def test_too_few_of_a_domain_gives_the_closest_batch_and_says_so(tq: FakeTQ) -> None:
    for i in range(5):
        finished_group(tq, f"m{i}", 1, version=1, data_source="math")
    finished_group(tq, "c0", 2, version=1, data_source="code")
    buffer = make_buffer([], domain_ratios={"math": 1.0, "code": 1.0}, domain_tolerance=0.0)
    uids, metrics = train_on(tq, buffer, 2, 4)
    assert uids == ["c0", "m0", "m1", "m2"], "every code group there is, then math oldest first"
    assert metrics["dora/domain/unbalanced_batch"] == 1.0
    assert metrics["dora/domain/max_share_error"] == pytest.approx(0.25)


def test_a_domain_the_settings_do_not_name_is_an_error_with_the_key_path(tq: FakeTQ) -> None:
    finished_group(tq, "a", 1, version=1, data_source="math")
    finished_group(tq, "b", 1, version=1, data_source="poetry")
    buffer = make_buffer([], domain_ratios={"math": 1.0, "code": 1.0})
    with pytest.raises(ConfigError, match=r"longcat\.settings\.scheduler\.dora.*domain_ratios.*poetry"):
        buffer.sample(global_steps=2, partition_id="train", batch_size=2)


def test_domain_settings_are_checked_with_their_key_path() -> None:
    from longcat_plugins.config import ConfigError as SettingsError
    from longcat_plugins.host import Host
    from longcat_plugins.selection import Selection

    def settings(**dora: Any) -> Any:
        return Host(Selection(settings={"scheduler": {"dora": dora}})).load().settings_for("scheduler", "dora")

    ok = settings(domain_ratios={"math": 3, "code": 1}, domain_tolerance=0.25, online_filter=True)
    assert ok.core_config(8).target_shares([]) == {"math": 0.75, "code": 0.25}
    for bad, key in (
        ({"domain_ratios": {"math": -1}}, "domain_ratios"),
        ({"domain_tolerance": 1.5}, "domain_tolerance"),
        ({"domain_ratios": ["math"]}, "domain_ratios"),
        ({"online_filtr": True}, "online_filtr"),
    ):
        with pytest.raises(SettingsError, match=rf"longcat\.settings\.scheduler\.dora.*{key}"):
            settings(**bad)
    # tolerance 0 cannot split a batch of 4 into thirds: named when the batch size is known
    thirds = DoraSettings(domain_ratios={"a": 1, "b": 1, "c": 1}, domain_tolerance=0.0)
    buffer = dora_buffer(settings=thirds, max_off_policy_threshold=None)
    with pytest.raises(ConfigError, match=r"longcat\.settings\.scheduler\.dora.*domain_tolerance"):
        buffer.domain_quotas(4, ["a", "b", "c"])


# -- D1: the core's verdict through verl's evict/refill path ----------------------------------------


def test_online_filter_drops_no_signal_groups_and_counts_them(tq: FakeTQ) -> None:
    pool = {
        "A": [1.0, 1.0],  # all correct
        "B": [0.0, 0.0],  # all wrong
        "C": [1.0, 0.0],
        "D": [0.5, 0.5],  # equal but neither side of the thresholds: the core keeps it
        "E": [1.0, 0.0],
    }
    for uid, rewards in pool.items():
        finished_group(tq, uid, 1, version=1, rewards=rewards)
    refills: list[int] = []

    def refill(k: int) -> int:  # verl submits k fresh prompts; here they finish at once
        refills.append(k)
        for i in range(k):
            finished_group(tq, f"R{i}", 2, version=1, rewards=[0.0, 1.0])
        return k

    buffer = make_buffer(refills, online_filter=True)
    buffer.refill_fn = refill
    uids, metrics = train_on(tq, buffer, 2, 5)

    def reference(rewards: list[float]) -> str | None:  # D1 from the report, written out
        if all(r >= 1.0 for r in rewards):
            return "all_correct"
        if all(r <= 0.0 for r in rewards):
            return "all_wrong"
        return None

    dropped = {uid for uid, rewards in pool.items() if reference(rewards)}
    assert dropped == {"A", "B"} and not dropped & set(uids)
    assert refills == [2], "one fresh prompt per dropped group, as verl does for stale ones"
    assert uids == ["C", "D", "E", "R0", "R1"]
    assert metrics["dora/filtered_groups"] == 2.0
    assert metrics["dora/filtered_groups/all_correct"] == 1.0 and metrics["dora/filtered_groups/all_wrong"] == 1.0
    assert metrics["training/filter_groups/evicted_samples"] == 2, "verl's own filter accounting saw them"
    assert not any(k.startswith(("A", "B")) for k in tq.store["train"])
    # their outcomes are kept for the trainer's planner (pass rates, verdicts), once
    assert buffer.take_filtered() == {uid: tuple(pool[uid]) for uid in dropped}
    assert buffer.take_filtered() == {}

    # the next batch starts counting afresh
    for uid in ("F", "G"):
        finished_group(tq, uid, 3, version=1, rewards=[0.0, 1.0])
    _, metrics = train_on(tq, buffer, 2, 2)
    assert metrics["dora/filtered_groups"] == 0.0


def test_groups_the_trainer_marks_as_verification_are_dropped_only_without_signal(tq: FakeTQ) -> None:
    """Verification groups (+1 / -0.5 / -1) under D1: a mix of wrong verdicts and no verdict is
    kept (all below the wrong threshold, but a signal); a constant one is dropped."""
    pool = {"V1": [-0.5, -1.0], "V2": [1.0, 1.0], "V3": [-1.0, -1.0], "M1": [0.0, -1.0], "M2": [1.0, 0.0]}
    for uid, rewards in pool.items():
        finished_group(tq, uid, 1, version=1, rewards=rewards)
    refills: list[int] = []
    buffer = make_buffer(refills, online_filter=True)
    buffer.judged_by_signal = lambda uid: uid.startswith("V")
    buffer.refill_fn = lambda k: refills.append(k) or 0
    uids, metrics = train_on(tq, buffer, 2, 2)
    assert sorted(uids) == ["M2", "V1"]
    assert buffer.take_filtered() == {"V2": (1.0, 1.0), "V3": (-1.0, -1.0), "M1": (0.0, -1.0)}
    assert metrics["dora/filtered_groups/all_correct"] == 1.0 and metrics["dora/filtered_groups/all_wrong"] == 2.0


def test_filter_sides_follow_the_core_settings(tq: FakeTQ) -> None:
    finished_group(tq, "A", 1, version=1, rewards=[1.0, 1.0])
    finished_group(tq, "B", 1, version=1, rewards=[0.0, 0.0])
    finished_group(tq, "C", 1, version=1, rewards=[1.0, 0.0])
    refills: list[int] = []
    buffer = make_buffer(refills, online_filter=True, filter_all_correct=False)
    buffer._sync_metadata_from_transfer_queue()
    assert buffer._dapo_filtered_keys("train")[0] == {"B"}
    off = make_buffer(refills)  # online_filter off: nothing read, nothing dropped
    off._sync_metadata_from_transfer_queue()
    assert off._dapo_filtered_keys("train") == (set(), Counter())
    uids, metrics = train_on(tq, off, 2, 3)
    assert uids == ["A", "B", "C"] and "dora/filtered_groups" not in metrics and refills == []


def test_filter_without_rewards_at_rollout_time_says_what_is_missing(tq: FakeTQ) -> None:
    finished_group(tq, "A", 1, version=1)
    buffer = make_buffer([], online_filter=True)
    with pytest.raises(RuntimeError, match="online_filter needs rewards"):
        buffer.sample(global_steps=2, partition_id="train", batch_size=1)
