"""End to end on the CPU runtime, on the suite's shared run (``shared_cpu_run``: 2 steps, sampled
validation before training, every logger, a checkpoint at step 2): verl's trainer
logs the ``reward:passk`` validation metrics, equal to a float64 reference computed from verl's
own dump of the validation samples, through the file, TensorBoard and offline wandb loggers;
``eval`` then writes pass@k for the run's checkpoint and ``plot`` draws the run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import SHARED_RUN_GROUP, SHARED_VAL_N, SharedRun, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.ray]

N = SHARED_VAL_N


def reference_from_dump(dump: Path) -> dict[str, float]:
    """pass@k / pass^k / avg@k from verl's validation dump (one JSON line per sample, ``uid`` =
    ``{prompt}_{session}_{index}``, ``acc`` from the arithmetic reward), in float64 from the formula."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for line in dump.read_text().splitlines():
        row = json.loads(line)
        groups[row["uid"].rsplit("_", 2)[0]].append(float(row["acc"]) >= 1.0)
    assert groups and all(len(g) == N for g in groups.values()), {u: len(g) for u, g in groups.items()}
    out = {}
    for k in (1, 2, 4):
        cs = [sum(g) for g in groups.values()]
        out[f"pass@{k}"] = sum(1 - math.comb(N - c, k) / math.comb(N, k) for c in cs) / len(cs)
        out[f"pass^{k}"] = sum(math.comb(c, k) / math.comb(N, k) for c in cs) / len(cs)
        out[f"avg@{k}"] = sum(c / N for c in cs) / len(cs)
    return out


def wandb_history(run_dir: Path) -> list[dict]:
    """The offline run's logged rows, read back with wandb's own reader of its transaction log."""
    (log,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "wandb"), "leet", "inspect", "--json", str(log)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


@SHARED_RUN_GROUP
def test_passk_metrics_loggers_eval_and_plot(shared_cpu_run: SharedRun, tmp_path: Path, ray_tmp: Path) -> None:
    result, dump = shared_cpu_run.result, shared_cpu_run.val_dump
    run_dir = result.run_dir
    # 1. verl's file logger: our keys beside verl's own, equal to the reference from the dump
    (val,) = [s for s in result.steps if any(k.startswith("longcat/val/") for k in s)]
    (source,) = {k[len("longcat/val/") :].rsplit("/", 1)[0] for k in val if k.startswith("longcat/val/")}
    want = reference_from_dump(dump / "0.jsonl")
    for name, value in want.items():
        assert val[f"longcat/val/{source}/{name}"] == pytest.approx(value, abs=1e-12), name
    assert val[f"longcat/val/{source}/avg@1"] == pytest.approx(val[f"val-core/{source}/acc/mean@{N}"])

    # 2. TensorBoard and offline wandb recorded the same values; the summary knows where they are
    assert result.logger_dirs() == {"tensorboard": run_dir / "tensorboard", "wandb": run_dir / "wandb"}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    (scalar,) = events.Scalars(f"longcat/val/{source}/pass@4")
    assert (scalar.step, scalar.value) == (0, pytest.approx(want["pass@4"], abs=1e-6))
    (row,) = [r for r in wandb_history(run_dir) if f"longcat/val/{source}/pass@2" in r]
    assert row["_step"] == 0
    for name in ("pass@2", "pass^2", "avg@4"):
        assert row[f"longcat/val/{source}/{name}"] == pytest.approx(want[name], abs=1e-12)

    # 3. eval: the run's latest checkpoint, merged by verl, generated in validation-only mode
    out = tmp_path / "eval.json"
    proc = run_cli(
        "eval", str(run_dir), "--n", str(N), "--k", "1,4", "-o", str(out), "--work-dir", str(tmp_path / "eval"),
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["target"] == {"kind": "run", "path": str(run_dir.resolve()), "step": 2}
    assert Path(doc["model"]) == (tmp_path / "eval" / "merged-model").resolve()
    got = doc["data_sources"][source]
    assert set(got) == {"pass@1", "pass^1", "avg@1", "pass@4", "pass^4", "avg@4", "n"} and got["n"] == N
    assert 0.0 <= got["pass^4"] <= got["pass@1"] <= got["pass@4"] <= 1.0
    assert got["pass@1"] == pytest.approx(got["avg@1"])

    # 4. plot the run
    png = tmp_path / "run.png"
    proc = run_cli("plot", str(run_dir), "-o", str(png))
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:4] == b"\x89PNG" and "pass@k" in proc.stdout
