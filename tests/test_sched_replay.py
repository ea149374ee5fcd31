"""D2 replay inside the DORA sampler: finished groups that went stale are kept (by their
TransferQueue uid, trajectories left in TransferQueue) instead of dropped, and
``round(reuse_ratio * batch)`` of them join each later batch, each once, never beyond
``replay_capacity``. verl's real ``ReplayBufferAsync`` logic over the in-memory TransferQueue
of ``test_sched_unify`` (no Ray)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from conftest import run_cli
from sched_helpers import FakeTQ
from test_sched_unify import finished_group, make_buffer

from longcat_plugins.runtime.launch import configs_dir
from longcat_plugins.schedulers.core.config import ConfigError
from longcat_plugins.schedulers.sampler import DoraReplayBuffer, version_lag
from longcat_plugins.schedulers.settings import DoraSettings

KEY = "longcat.settings.scheduler.dora"


def sample(tq: FakeTQ, buffer: DoraReplayBuffer, step: int, size: int) -> tuple[dict[str, list], dict[str, Any]]:
    """One batch (uid -> trajectory versions) and its metrics; the trainer then clears its keys."""
    batch, metrics = buffer.sample(global_steps=step, partition_id="train", batch_size=size)
    groups: dict[str, list] = {}
    for key, tag in zip(batch.keys, batch.tags, strict=True):
        groups.setdefault(key.split("_")[0], []).append(tag["min_global_steps"])
    tq.kv_clear(batch.keys, "train")
    return groups, metrics


def orphans(tq: FakeTQ) -> set[str]:
    """Groups whose trajectories are in TransferQueue without their prompt key (kept for replay)."""
    store = tq.store["train"]
    return {k.split("_")[0] for k, t in store.items() if not t.get("is_prompt")} - {
        k for k, t in store.items() if t.get("is_prompt")
    }


def test_stale_groups_are_buffered_and_replayed_at_the_ratio_each_once(tq: FakeTQ) -> None:
    refills: list[int] = []
    buffer = make_buffer(refills, staleness=1, reuse_ratio=0.5, replay_capacity=3)
    for i in range(4):  # step 3 trains version 2: version 0 is stale, version 2 fresh
        finished_group(tq, f"old{i}", submitted=1, version=0)
        finished_group(tq, f"f{i}", submitted=3, version=2)
    groups, metrics = sample(tq, buffer, step=3, size=4)
    # four stale groups evicted and buffered; the buffer keeps three (old0, the oldest, dropped and cleared)
    assert metrics["dora/replay/buffered"] == 4 and metrics["dora/replay/dropped"] == 1
    replayed = {uid for uid in groups if uid.startswith("old")}
    assert metrics["dora/replay/replayed"] == len(replayed) == 2 and replayed <= {"old1", "old2", "old3"}
    assert sorted(uid for uid in groups if uid.startswith("f")) == ["f0", "f1"]  # oldest fresh first
    assert all(v == [0, 0] for uid, v in groups.items() if uid in replayed)  # the whole group, as generated
    assert metrics["dora/staleness/max"] == 0.0 and metrics["dora/replay/staleness/max"] == version_lag(3, 0)
    assert sum(refills) == 4  # verl regenerates every evicted prompt
    left = {"old1", "old2", "old3"} - replayed
    assert orphans(tq) == left == set(buffer.replay.items)  # old0's trajectories were cleared
    for i in range(4):
        finished_group(tq, f"g{i}", submitted=4, version=3)
    groups2, metrics2 = sample(tq, buffer, step=4, size=4)
    assert metrics2["dora/replay/replayed"] == 1 and left <= set(groups2)  # min(round(0.5 * 4), 1)
    assert len(groups2) == 4 and not set(groups2) & set(groups)  # nothing trained twice
    groups3, metrics3 = sample(tq, buffer, step=5, size=2)  # the leftover fresh ones, nothing to replay
    assert metrics3["dora/replay/replayed"] == 0 and not orphans(tq) and len(buffer.replay) == 0
    assert len(groups3) == 2 and not set(groups3) & (set(groups) | set(groups2))


def test_default_reuse_ratio_drops_stale_groups_as_before(tq: FakeTQ) -> None:
    buffer = make_buffer([], staleness=1)
    assert buffer.replay is None
    finished_group(tq, "old", submitted=1, version=0)
    for i in range(2):
        finished_group(tq, f"f{i}", submitted=3, version=2)
    groups, metrics = sample(tq, buffer, step=3, size=2)
    assert sorted(groups) == ["f0", "f1"] and "dora/replay/replayed" not in metrics
    assert not tq.store["train"]  # the stale group's prompt and trajectories are gone


@pytest.mark.parametrize("seed", range(20))
def test_replay_invariants_over_random_streams(tq: FakeTQ, seed: int) -> None:
    """Random arrivals of fresh and stale groups (some filtered by D1): each batch holds
    ``min(round(ratio * size), buffered)`` replayed groups, the fresh ones are within the bound,
    no group is trained twice, the buffer never exceeds its capacity, every buffered group is
    replayed, dropped or still held, and TransferQueue keeps trajectories only of held ones."""
    rng = random.Random(seed)
    ratio, capacity, staleness = rng.choice([0.25, 0.5, 1.0]), rng.randint(1, 4), rng.randint(0, 2)
    filtering = rng.random() < 0.5
    buffer = make_buffer([], staleness=staleness, reuse_ratio=ratio, replay_capacity=capacity, online_filter=filtering)
    trained: set[str] = set()
    signal: dict[str, bool] = {}
    totals = {"buffered": 0, "replayed": 0, "dropped": 0}
    uid = 0
    for step in range(2, 10):
        size = rng.randint(1, 4)
        for _ in range(size + rng.randint(0, 3)):  # enough fresh groups, and some stale ones
            version = rng.randint(max(0, step - 5), step - 1)
            rewards = [rng.choice([0.0, 1.0]) for _ in range(2)] if filtering else [None, None]
            signal[f"u{uid:03d}"] = not filtering or len(set(rewards)) > 1
            finished_group(tq, f"u{uid:03d}", submitted=step, version=version, rewards=rewards)
            uid += 1
        for _ in range(size):  # the fresh groups the batch needs (mixed rewards: never filtered)
            signal[f"u{uid:03d}"] = True
            finished_group(tq, f"u{uid:03d}", submitted=step, version=step - 1, rewards=[0.0, 1.0])
            uid += 1
        groups, metrics = sample(tq, buffer, step=step, size=size)
        replayed = {u for u, versions in groups.items() if version_lag(step, min(versions)) > staleness}
        assert int(metrics["dora/replay/replayed"]) == len(replayed)
        want = round(ratio * size)
        assert len(replayed) == min(want, len(replayed) + len(buffer.replay))  # at the ratio, or all held
        assert len(groups) == size and not set(groups) & trained  # each group trained once, none missing
        assert all(signal[u] for u in replayed)  # D1's no-signal groups are never kept for replay
        assert len(buffer.replay) <= capacity
        assert metrics["dora/staleness/max"] <= staleness  # the bound holds for the fresh samples
        trained |= set(groups)
        for name in totals:
            totals[name] += int(metrics[f"dora/replay/{name}"])
        # every buffered group was replayed, dropped (capacity) or is still held
        assert totals["buffered"] == totals["replayed"] + totals["dropped"] + len(buffer.replay)
        assert orphans(tq) == set(buffer.replay.items)  # no trajectories leaked, none missing


def test_reuse_ratio_is_checked_with_its_key_path() -> None:
    with pytest.raises(ConfigError, match=rf"{KEY}.reuse_ratio must be a number in \[0.0, 1.0\], got 1.5"):
        DoraSettings(reuse_ratio=1.5)
    with pytest.raises(ConfigError, match=rf"{KEY}.replay_capacity must be > 0 when reuse_ratio > 0"):
        DoraSettings(reuse_ratio=0.5, replay_capacity=0)


def test_a_bad_reuse_ratio_exits_2_naming_the_key() -> None:
    bad = run_cli("validate", str(configs_dir() / "dora_cpu.yaml"), f"+{KEY}.reuse_ratio=1.5")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2 and f"{KEY}.reuse_ratio must be a number in [0.0, 1.0], got 1.5" in out, out
