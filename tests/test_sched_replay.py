"""D2 replay inside the DORA sampler: finished groups that went stale are kept (by their
TransferQueue uid, trajectories left in TransferQueue) instead of dropped, and
``round(reuse_ratio * batch)`` of them join each later batch, each once, never beyond
``replay_capacity``. verl's real ``ReplayBufferAsync`` logic over the in-memory TransferQueue
of ``test_sched_unify`` (no Ray)."""

from __future__ import annotations

import copy
import random
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from sched_helpers import FakeTQ
from test_sched_dispatch import roundtrip
from test_sched_unify import buffer_with, finished_group, make_buffer

from longcat_plugins.runtime.launch import configs_dir
from longcat_plugins.schedulers.core.config import ConfigError
from longcat_plugins.schedulers.dispatch import DispatchPlanner, dispatch_window
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


# -- checkpoint and resume ------------------------------------------------------------------------


class World:
    """The ``dora`` trainer's side of one run, in process: the dispatch planner issues prompt
    groups into TransferQueue (the fake) as the trainer does, rollouts finish them on the
    version they started on (some late, so they go stale and are kept for replay), the sampler
    takes batches, and after each step the trainer clears the batch's keys. verl checkpoints
    after a step's training and *before* that clear (mid-step), with TransferQueue's storage."""

    BATCH = 4

    def __init__(self, tq: FakeTQ, settings: DoraSettings, seed: int) -> None:
        self.tq = tq
        self.rng = random.Random(seed)
        self.step = 1
        self.next_row = 0
        self.uid = 0
        self.started: dict[str, int] = {}  # pending uid -> the version it started on
        window = dispatch_window(self.BATCH, 2)
        self.planner = DispatchPlanner(
            settings.dispatch_config(self.BATCH, window), self._fetch, window, 4 * window, new_uid=self._new_uid
        )
        self.buffer = buffer_with(settings, lambda k: self.dispatch())
        self.buffer.on_poll = self._poll
        self.buffer.on_sampled = self._on_sampled
        self.trained: list[tuple[int, str, bool]] = []  # (step, uid, replayed)
        self.issued: list[tuple[str, int]] = []  # (uid, prompt row)

    def _fetch(self) -> tuple[str, str, int]:
        row, self.next_row = self.next_row, self.next_row + 1
        return "x", f"task{row % 7}", row

    def _new_uid(self) -> str:
        self.uid += 1
        return f"g{self.uid:04d}"

    def dispatch(self) -> int:
        live = {k for k, t in self.tq.store["train"].items() if t.get("is_prompt")}
        issues = self.planner.plan(live)
        for issue in issues:
            self.tq.prompt(issue.uid, self.step, "pending")
            self.tq.values["train"][issue.uid] = {"row": issue.payload}
            self.started[issue.uid] = self.step - 1
            self.issued.append((issue.uid, issue.payload))
        return len(issues)

    def finish(self, uid: str) -> None:
        submitted = self.tq.store["train"][uid]["global_steps"]
        rewards = [float(self.rng.random() < 0.5) for _ in range(2)]
        finished_group(self.tq, uid, submitted=submitted, version=self.started.pop(uid), rewards=rewards)

    def rollouts(self) -> None:
        """Between steps: each pending group finishes with probability 0.4 (late ones go stale)."""
        for uid in sorted(self.started):
            if self.rng.random() < 0.25:
                self.finish(uid)

    def _poll(self) -> None:
        """While the trainer waits for a batch: top up, and every pending group finishes."""
        self.dispatch()
        for uid in sorted(self.started):
            self.finish(uid)

    def _on_sampled(self, batch: Any) -> None:
        data = self.tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["rm_scores"])
        per_uid: dict[str, list[float | None]] = {}
        for key, score in zip(batch.keys, list(data["rm_scores"]), strict=True):
            per_uid.setdefault(key.split("_")[0], []).append(float(score.sum().item()))
        for uid, rewards in per_uid.items():
            self.planner.observe(uid, rewards)
        self.planner.take(per_uid)
        self.dispatch()

    def train(self) -> tuple[Any, dict[str, Any]]:
        """A step up to its checkpoint: rollouts, the batch, its training (recorded)."""
        self.rollouts()
        batch, metrics = self.buffer.sample(global_steps=self.step, partition_id="train", batch_size=self.BATCH)
        replayed = set(self.buffer.last_sample.get("replayed_groups", []))
        for uid in sorted({key.split("_")[0] for key in batch.keys}):
            self.trained.append((self.step, uid, uid in replayed))
        return batch, metrics

    def end_step(self, batch: Any) -> None:
        self.tq.kv_clear(batch.keys, "train")
        self.step += 1

    def state(self) -> dict[str, Any]:
        """What the checkpoint holds: verl's TransferQueue (storage included) and dataloader
        position, our planner (``dora_dispatch.pt``) and replay buffer (``dora_replay.pt``)."""
        return {
            "tq": copy.deepcopy((self.tq.store, self.tq.values)),
            "dispatch": self.planner.state_dict(),
            "replay": self.buffer.replay_state_dict(),
            "world": (self.step, self.next_row, self.uid, dict(self.started), self.rng.getstate()),
        }

    def resume(self, saved: dict[str, Any]) -> None:
        """A new process: verl restores TransferQueue and re-issues its pending groups at the
        resumed step (``_reissue_inflight_prompts``: they restart on the current version); the
        trainer loads the planner and then the replay buffer."""
        self.tq.store, self.tq.values = copy.deepcopy(saved["tq"])
        step, self.next_row, self.uid, started, rng = saved["world"]
        self.step = step + 1
        self.rng.setstate(rng)
        self.started = {}
        for uid in started:
            self.tq.prompt(uid, self.step, "pending")
            self.started[uid] = self.step - 1
        self.planner.load_state_dict(saved["dispatch"])
        self.resumed = self.buffer.load_replay_state_dict(saved["replay"])


def held_trajectories(tq: FakeTQ) -> set[str]:
    """Groups with trajectories in TransferQueue but no prompt key."""
    return orphans(tq)


RESUME_SEEDS = range(30)


def resume_case(seed: int) -> tuple[DoraSettings, int, int]:
    """A random bound, reuse ratio, capacity and oversampling; steps before and after the checkpoint."""
    rng = random.Random(seed)
    settings = DoraSettings(
        staleness=rng.choice([0, 1, 2]),
        reuse_ratio=rng.choice([0.25, 0.5, 1.0]),
        replay_capacity=rng.randint(2, 8),
        oversampling_max=rng.choice([1, 2]),
        default_pass_rate=rng.choice([0.0, 0.5]),
    )
    return settings, rng.randint(3, 7), rng.randint(3, 7)


def test_the_resume_seeds_carry_kept_groups_across_the_checkpoint(tq: FakeTQ) -> None:
    """The randomised resume test is not vacuous: in most seeds the checkpoint holds kept
    groups, and in several of them a group kept before the checkpoint is replayed after it."""
    held = replayed_after = 0
    for seed in RESUME_SEEDS:
        tq.store, tq.values = {"train": {}}, {"train": {}}
        settings, before, after = resume_case(seed)
        world = World(tq, settings, seed)
        for _ in range(before):
            batch, _ = world.train()
            items = list(world.buffer.replay.items)
            world.end_step(batch)
        for _ in range(after):
            world.end_step(world.train()[0])
        held += bool(items)
        replayed_after += any(again and step > before and uid in items for step, uid, again in world.trained)
    assert held >= 15 and replayed_after >= 5, (held, replayed_after)


@pytest.mark.parametrize("seed", RESUME_SEEDS)
def test_replay_and_dispatch_resume_from_a_mid_step_checkpoint(tq: FakeTQ, seed: int, tmp_path: Path) -> None:
    """A checkpoint taken mid-step (after the batch trained, before its keys are cleared: where
    verl saves) and resumed in a new process (new planner, new sampler, TransferQueue restored):
    the resumed run trains exactly what the uninterrupted one does (same groups, same replays),
    nothing is lost or trained twice across the resume, each group is replayed at most once,
    the buffer never exceeds its capacity, every kept group is replayed, dropped or still held,
    and TransferQueue keeps trajectories only of held groups."""
    settings, before, after = resume_case(seed)

    def run(world: World, steps: int, totals: Counter[str]) -> None:
        for _ in range(steps):
            batch, metrics = world.train()
            world.end_step(batch)
            for name in ("buffered", "replayed", "dropped"):
                totals[name] += int(metrics[f"dora/replay/{name}"])
            assert len(world.buffer.replay) <= settings.replay_capacity
            assert held_trajectories(tq) == set(world.buffer.replay.items)
            assert totals["buffered"] == totals["replayed"] + totals["dropped"] + len(world.buffer.replay)

    world = World(tq, settings, seed)
    totals: Counter[str] = Counter()
    run(world, before - 1, totals)
    batch, metrics = world.train()  # the checkpointed step: trained, keys not yet cleared
    for name in ("buffered", "replayed", "dropped"):
        totals[name] += int(metrics[f"dora/replay/{name}"])
    saved = roundtrip(world.state(), tmp_path / "ckpt.pt")
    saved_totals, saved_trained, saved_issued = Counter(totals), list(world.trained), list(world.issued)

    # the uninterrupted run: the step ends, and (as a resumed verl would) pending groups restart
    world.end_step(batch)
    for uid in list(world.started):
        tq.prompt(uid, world.step, "pending")
        world.started[uid] = world.step - 1
    run(world, after, totals)
    reference = world.trained

    # the resumed run: a new process from the checkpoint files
    resumed = World(tq, settings, seed)
    resumed.resume(saved)
    assert resumed.resumed["missing"] == resumed.resumed["over_capacity"] == 0
    # the checkpointed batch's trajectories are cleared at load: they were trained already
    assert resumed.resumed["cleared"] == len({key.split("_")[0] for key in batch.keys})
    assert held_trajectories(tq) == set(resumed.buffer.replay.items) == set(saved["replay"]["items"])
    resumed.trained, resumed.issued = saved_trained, saved_issued
    run(resumed, after, saved_totals)
    assert resumed.trained == reference, "the resumed run trains what the uninterrupted one trains"
    uids = [uid for _, uid, _ in resumed.trained]
    assert len(uids) == len(set(uids)), "a group trained twice across the resume"
    replayed = [uid for _, uid, again in resumed.trained if again]
    assert len(replayed) == len(set(replayed)) and saved_totals["replayed"] == len(replayed)
    # dispatch resumed with it: the same prompt rows issued as the same groups, no row lost or
    # issued by two prompts (a row's copies are one prompt's groups)
    assert resumed.issued == world.issued and resumed.next_row == world.next_row
    assert len({row for _, row in resumed.issued}) == resumed.planner.counters["prompts"]


def test_a_resume_drops_what_did_not_come_back_and_counts_it(tq: FakeTQ) -> None:
    """Kept groups whose trajectories are missing after the restore are dropped and counted;
    a smaller ``replay_capacity`` drops the oldest (trajectories cleared); trajectories of no
    prompt and no kept group are cleared; a checkpoint without replay state keeps nothing."""
    buffer = make_buffer([], staleness=0, reuse_ratio=0.5, replay_capacity=4)
    for i in range(4):
        finished_group(tq, f"old{i}", submitted=1, version=0)
    for i in range(2):
        finished_group(tq, f"f{i}", submitted=3, version=2)
    groups, _ = sample(tq, buffer, step=3, size=2)  # 4 kept, 1 replayed: 3 held
    state = roundtrip(buffer.replay_state_dict(), Path(tempfile.mkdtemp()) / "r.pt")
    held = list(state["items"])
    assert len(held) == 3 and orphans(tq) == set(held)
    tq.kv_clear([f"{held[0]}_0_0", f"{held[0]}_1_0"], "train")  # did not come back
    tq.trajectory("trained", 0, 2)  # the checkpointed step's batch (no prompt key)
    # resumed with a wider bound (the leftover fresh group stays fresh) and a smaller buffer
    smaller = make_buffer([], staleness=2, reuse_ratio=0.5, replay_capacity=1)
    report = smaller.load_replay_state_dict(state)
    assert report == {"restored": 1, "missing": 1, "over_capacity": 1, "cleared": 1}
    assert smaller.replay.items == [held[2]] and orphans(tq) == {held[2]}  # the newest kept
    finished_group(tq, "n0", submitted=4, version=3)
    finished_group(tq, "n1", submitted=4, version=3)
    groups2, metrics = sample(tq, smaller, step=4, size=2)
    assert metrics["dora/replay/resume_missing"] == 1 and metrics["dora/replay/resume_cleared"] == 1
    assert metrics["dora/replay/dropped"] == 2 and metrics["dora/replay/replayed"] == 1 and held[2] in groups2
    assert not set(groups2) & set(groups)
    empty = make_buffer([], staleness=0, reuse_ratio=0.5)
    tq.trajectory("stray", 0, 2)
    assert empty.load_replay_state_dict(None) == {"restored": 0, "missing": 0, "over_capacity": 0, "cleared": 1}
    assert not orphans(tq)
