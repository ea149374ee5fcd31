"""The DORA bench's start-up anatomy and the provenance of a copied tree: the figures the
GPU docs quote come from these two pieces of bench code."""

from __future__ import annotations

import pytest
from conftest import bench_module


def test_startup_phases_split_the_time_before_step_one_at_verls_milestones() -> None:
    bench = bench_module("bench_dora_cpu")
    timed = [
        (0.5, "UserWarning: torchtitan engine is not available"),
        (4.0, "ray init kwargs: {'num_cpus': 8}"),
        (10.0, "INFO worker.py:2038 -- Started a local Ray instance."),
        (15.0, "\x1b[36m(TaskRunnerV1 pid=12)\x1b[0m {'actor_rollout_ref': ..."),
        (20.0, "(TaskRunnerV1 pid=12) INFO:...:create worker group dict_keys(['actor_rollout'])"),
        (21.0, "(TaskRunnerV1 pid=12) INFO:...:create worker group dict_keys(['again'])"),  # first one counts
        (30.0, "(TaskRunnerV1 pid=12) INFO:...:actor and ref model engine initialized"),
        (36.0, "(TaskRunnerV1 pid=12) INFO:...:all initialize finished, ready to fit"),
        (47.0, "(TaskRunnerV1 pid=12) step:1 - global_seqlen/min:1205.0 - timing_s/step:9.0"),
        (49.0, "(TaskRunnerV1 pid=12) step:2 - timing_s/step:2.0"),
    ]
    steps = [{"timing_s/step": 9.0}, {"timing_s/step": 2.0}, {"timing_s/step": 3.0}]
    out = bench.startup_phases(timed, steps)
    assert out["startup_s"] == pytest.approx(38.0)  # step 1's line at 47 s, less its 9 s
    assert out["first_step_extra_s"] == pytest.approx(9.0 - 2.5)
    phases = out["phases_s"]
    assert list(phases) == [
        "launch->driver_ready",
        "driver_ready->ray_up",
        "ray_up->task_runner_up",
        "task_runner_up->worker_group_create",
        "worker_group_create->engines_ready",
        "engines_ready->ready_to_fit",
        "ready_to_fit->first_step_start",
    ]
    assert phases["worker_group_create->engines_ready"] == pytest.approx(10.0)
    assert sum(phases.values()) == pytest.approx(out["startup_s"])


def test_startup_phases_without_a_first_step_keep_the_milestones_seen() -> None:
    """A run cut short (the lent GPU's time ran out) still says how far it got."""
    bench = bench_module("bench_dora_cpu")
    out = bench.startup_phases([(3.0, "ray init kwargs: {}"), (70.0, "Started a local Ray instance")], [])
    assert out == {"milestones_s": {"driver_ready": 3.0, "ray_up": 70.0}}


def test_provenance_takes_the_sent_commit_over_a_stale_git(monkeypatch: pytest.MonkeyPatch) -> None:
    prov = bench_module("provenance")
    monkeypatch.setenv(prov.ENV_COMMIT, "a" * 40)
    monkeypatch.setenv(prov.ENV_DIRTY, "0")
    record = prov.provenance(seeds=[0])
    assert (record["commit"], record["dirty"]) == ("a" * 40, False)
    monkeypatch.delenv(prov.ENV_DIRTY)
    assert prov.provenance(seeds=[0])["dirty"] is True  # unsaid: assume the sent tree differed
    monkeypatch.delenv(prov.ENV_COMMIT)
    assert prov.provenance(seeds=[0])["commit"] != "a" * 40


def test_a_cut_invocation_loses_no_record_and_ratios_keep_their_own_sessions_sync() -> None:
    """A lent session re-runs ``sync`` and what fits: the runs it re-ran replace theirs, the run it
    planned but never reached stays, and the earlier session's records of that group move to
    ``_prev_session`` (with their own sync), so no ratio mixes two sessions."""
    bench = bench_module("bench_dora_cpu")

    def rec(run: str, device: str = "cuda", tag: str = "", tokens: float = 1.0) -> dict:
        return {"run": run + tag, "tag": tag, "device": device, "seed": 0, "tokens_per_s": tokens}

    earlier = [rec("sync", tokens=10), rec("dora_1", tokens=14), rec("sync", "cpu", tokens=5), rec("sync", tag="_x")]
    new = [rec("sync", tokens=20), rec("dora_1_window", tokens=30)]  # dora_1 was planned, then cut off
    merged = bench.merge_records(earlier, new)
    by_run = {(r["device"], r["run"]): r for r in merged}
    assert by_run[("cuda", "sync")]["tokens_per_s"] == 20 and ("cuda", "dora_1_window") in by_run
    assert by_run[("cuda", "sync_prev_session")]["tokens_per_s"] == 10
    assert by_run[("cuda", "dora_1_prev_session")]["tag"] == "_prev_session"
    assert ("cuda", "dora_1") not in by_run, "an old dora_1 would be compared with the new sync"
    assert ("cpu", "sync") in by_run and ("cuda", "sync_x") in by_run, "other groups are untouched"
    assert len(merged) == 6
    # a later session moves the group again: the session before it goes one further back, whole
    again = bench.merge_records(merged, [rec("sync", tokens=40)])
    prev = sorted(r["tokens_per_s"] for r in again if r["tag"] == "_prev_session")
    assert prev == [20, 30], prev
    older = {r["run"]: r["tokens_per_s"] for r in again if r["tag"] == "_prev_session_2"}
    assert older == {"sync_prev_session_2": 10, "dora_1_prev_session_2": 14}, older
    thrice = bench.merge_records(again, [rec("sync", tokens=50)])
    assert sorted(r["tag"] for r in thrice if r["device"] == "cuda" and r["tag"].startswith("_prev")) == [
        "_prev_session",
        "_prev_session_2",
        "_prev_session_2",
        "_prev_session_3",
        "_prev_session_3",
    ]  # 40 alone; 20 and 30; 10 and 14
    assert len(thrice) == len(again) + 1
    # without a new sync, earlier records stay where they are
    assert bench.merge_records(earlier, [rec("dora_1", tokens=15)])[-1]["tokens_per_s"] == 15
