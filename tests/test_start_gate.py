"""The start gate and the bench's overlapped runs: several runs start up at once, one trains at a
time, in order; a run held for its turn has that time left out of its start-up."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import bench_module

GATE = "longcat_plugins.schedulers.start_gate"


def test_no_gate_means_no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    from longcat_plugins.schedulers.start_gate import ENV_GATE, wait_for_gate

    monkeypatch.delenv(ENV_GATE, raising=False)
    assert wait_for_gate() is None


def test_the_gate_holds_until_its_file_exists_and_says_how_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from longcat_plugins.schedulers.start_gate import ENV_GATE, wait_for_gate

    gate = tmp_path / "gate"
    monkeypatch.setenv(ENV_GATE, str(gate))
    threading.Timer(0.4, gate.touch).start()
    waited = wait_for_gate()
    assert waited is not None and 0.35 <= waited < 5
    out = capsys.readouterr().out
    assert f"waiting for {gate}" in out
    match = bench_module("bench_dora_cpu").GATE_OPENED.search(out)  # the line the bench reads
    assert match and float(match.group(1)) == pytest.approx(waited, abs=1e-3)


@pytest.mark.parametrize("name", ["GatedAgentLoopManager", "GatedPrestartedAgentLoopManager"])
def test_a_gated_manager_is_created_only_after_the_gate_opens(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl's ``create`` (which starts the agent-loop workers) runs after the wait, not before."""
    import importlib

    from verl.trainer.ppo.v1 import AgentLoopManagerTQ

    module = importlib.import_module(GATE)
    calls: list[float] = []
    monkeypatch.setattr(AgentLoopManagerTQ, "create", classmethod(lambda cls, **kw: calls.append(time.time()) or kw))
    gate = tmp_path / "gate"
    monkeypatch.setenv(module.ENV_GATE, str(gate))
    opened: list[float] = []

    def open_gate() -> None:
        opened.append(time.time())
        gate.touch()

    threading.Timer(0.3, open_gate).start()
    config = object()
    assert getattr(module, name).create(config=config) == {"config": config}
    assert len(calls) == 1 and calls[0] >= opened[0]


def test_the_bench_names_each_runs_gated_twin() -> None:
    from longcat_plugins.schedulers.start_gate import GatedAgentLoopManager, GatedPrestartedAgentLoopManager

    bench = bench_module("bench_dora_cpu")
    key = bench.AGENT_LOOP_MANAGER
    runs = bench.runs(384)
    fqn = {c: f"{c.__module__}.{c.__qualname__}" for c in (GatedAgentLoopManager, GatedPrestartedAgentLoopManager)}
    for name, manager in [
        ("sync", GatedAgentLoopManager),  # verl's default manager
        ("dora_1_window_w1", GatedPrestartedAgentLoopManager),  # the dora recipe's
        ("dora_1_serial", GatedAgentLoopManager),  # its override back to verl's
    ]:
        config, extra = runs[name]
        out = bench.gated_overrides(config, extra)
        assert [o for o in out if key in o] == [f"++{key}={fqn[manager]}"], name
        assert [o for o in out if key not in o] == [o for o in extra if key not in o]
    with pytest.raises(SystemExit, match="my.Manager"):
        bench.gated_overrides("cpu_demo", [f"{key}=my.Manager"])


def test_startup_leaves_out_the_time_a_run_was_held() -> None:
    bench = bench_module("bench_dora_cpu")
    timed = [
        (4.0, "ray init kwargs: {}"),
        (36.0, "(TaskRunnerV1 pid=1) all initialize finished, ready to fit"),
        (36.5, "(TaskRunnerV1 pid=1) longcat start gate: waiting for /tmp/g"),
        (66.5, "(TaskRunnerV1 pid=1) longcat start gate: open after 30.000 s"),
        (77.0, "(TaskRunnerV1 pid=1) step:1 - timing_s/step:9.0"),
    ]
    out = bench.startup_phases(timed, [{"timing_s/step": 9.0}, {"timing_s/step": 2.0}])
    assert out["startup_s_with_gate"] == pytest.approx(68.0)
    assert out["gate_wait_s"] == pytest.approx(30.0)
    assert out["startup_s"] == pytest.approx(38.0)
    assert out["phases_s"]["ready_to_fit->first_step_start"] == pytest.approx(2.0)
    assert sum(out["phases_s"].values()) == pytest.approx(out["startup_s"])


class _FakeRun:
    """A run with a start-up and a training phase, held by the real start gate."""

    def __init__(self, log: list[tuple[str, str, float]], label: str, startup_s: float, train_s: float) -> None:
        self.log, self.label, self.startup_s, self.train_s = log, label, startup_s, train_s

    def __call__(self, gate: Path, on_start: Any) -> str:
        from longcat_plugins.schedulers.start_gate import wait_for_gate

        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True)
        on_start(proc)
        try:
            self.log.append((self.label, "start", time.perf_counter()))
            time.sleep(self.startup_s)
            self.log.append((self.label, "up", time.perf_counter()))
            wait_for_gate(str(gate))
            self.log.append((self.label, "train", time.perf_counter()))
            time.sleep(self.train_s)
            self.log.append((self.label, "done", time.perf_counter()))
            return self.label
        finally:
            proc.kill()
            proc.wait()


def test_runs_start_up_together_and_train_one_at_a_time_with_nothing_starting_beside_them(tmp_path: Path) -> None:
    overlap = bench_module("overlap")
    log: list[tuple[str, str, float]] = []
    labels = ["a", "b", "c", "d"]
    startup = {"a": 0.2, "b": 0.8, "c": 0.5, "d": 0.3}
    jobs = [(x, _FakeRun(log, x, startup_s=startup[x], train_s=0.3)) for x in labels]
    started = time.perf_counter()
    out = list(overlap.in_batches(jobs, depth=3, gate_dir=tmp_path / "gates", poll_s=0.01))
    wall = time.perf_counter() - started
    assert [(k, r, e) for k, r, e, _ in out] == [(k, x, None) for k, x in enumerate(labels)]
    at = {(x, what): t for x, what, t in log}
    for prev, nxt in zip(labels, labels[1:], strict=False):  # no two trainings overlap, in order
        assert at[(nxt, "train")] >= at[(prev, "done")]
    for x in "abc":  # one batch: started together, and every run was up before the first trained
        assert at[(x, "start")] < at[("a", "train")] and at[(x, "up")] <= at[("a", "train")]
    assert at[("d", "start")] >= at[("c", "done")]  # the next batch starts when this one has ended
    assert wall < sum(startup.values()) + 4 * 0.3  # the start-ups were spent side by side
    info = [o for *_, o in out]
    assert [o["batch"] for o in info] == [0, 0, 0, 1]
    assert info[0]["others_alive"] == ["b", "c"] and info[2]["others_alive"] == [] and info[3]["others_alive"] == []
    for o in info:
        assert o["started_s"] <= o["ready_s"] <= o["gate_opened_s"] <= o["finished_s"]


def test_a_run_that_fails_while_starting_is_reported_and_the_others_train(tmp_path: Path) -> None:
    overlap = bench_module("overlap")
    log: list[tuple[str, str, float]] = []
    procs: list[subprocess.Popen[str]] = []

    def broken(gate: Path, on_start: Any) -> str:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True)
        procs.append(proc)
        on_start(proc)
        raise RuntimeError("b failed while starting")

    jobs = [("a", _FakeRun(log, "a", 0.2, 0.2)), ("b", broken), ("c", _FakeRun(log, "c", 0.3, 0.1))]
    out = list(overlap.in_batches(jobs, depth=3, gate_dir=tmp_path / "gates", poll_s=0.01))
    assert [r for _, r, _, _ in out] == ["a", None, "c"]
    assert isinstance(out[1][2], RuntimeError) and "b failed while starting" in str(out[1][2])
    assert ("c", "done") in {(x, what) for x, what, _ in log}
    assert procs[0].poll() is not None  # the failed run's process tree was stopped


def test_a_run_the_gate_did_not_hold_is_reported(tmp_path: Path) -> None:
    overlap = bench_module("overlap")
    log: list[tuple[str, str, float]] = []
    jobs = [("a", _FakeRun(log, "a", 0.0, 0.1)), ("b", lambda gate, on_start: "b trained at once")]
    out = list(overlap.in_batches(jobs, depth=2, gate_dir=tmp_path / "gates", poll_s=0.01))
    assert out[0][2] is None
    assert isinstance(out[1][2], SystemExit) and "b ended before its start gate was opened" in str(out[1][2])


@pytest.mark.slow
@pytest.mark.ray
def test_the_bench_starts_two_real_runs_together_and_trains_them_one_after_the_other(tmp_path: Path) -> None:
    """Two real verl runs (sync, then dora) started together: each is held at its gate until both
    are up, dora until sync has ended, and each record leaves the time held out of its start-up."""
    from conftest import REPO

    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_dora_cpu.py"), "--steps", "1", "--seeds", "0", "--overlap", "2",
         "--only", "sync", "dora_1_window_w1", "--out", str(tmp_path), "--name", "overlap", "--work", str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = {r["run"]: r for r in json.loads((tmp_path / "overlap.json").read_text())["results"]}
    sync, dora = records["sync"], records["dora_1_window_w1"]
    assert sync["overlap"]["others_alive"] == ["dora_1_window_w1 (seed 0)"]  # idle at its gate
    # they started up together, both were up before sync trained, and dora trained after it
    assert dora["overlap"]["started_s"] < sync["overlap"]["ready_s"]
    assert dora["overlap"]["ready_s"] <= sync["overlap"]["gate_opened_s"]
    assert dora["overlap"]["gate_opened_s"] >= sync["overlap"]["finished_s"]
    for r in (sync, dora):
        startup = r["startup"]
        assert startup["gate_wait_s"] >= 0
        assert startup["startup_s"] == pytest.approx(startup["startup_s_with_gate"] - startup["gate_wait_s"], abs=2e-3)
        assert r["steps"] == 1 and r["trained_len_n"] == 16
    assert dora["startup"]["agent_loops_prestarted"] == 1  # the gated twin kept the dora recipe's manager
