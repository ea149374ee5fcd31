"""`longcat-plugins fuse` stopped by a signal, in a real subprocess: Ctrl-C while plugins load
is never taken for a broken plugin, SIGTERM mid-merge cleans up like Ctrl-C (exit 143), and a
temporary directory left by a killed run is removed by the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import make_dist
from test_fusion_support import leftovers, random_family, write_family

from longcat_plugins.fusion.engine import _machine, clean_stale_temp_dirs

#: a plugin that announces (by a file) that it is being imported, then takes its time
SLOW_IMPORT = """
    import os, pathlib, time
    pathlib.Path(os.environ["LC_MARKER"]).write_text("importing")
    time.sleep(60)
"""

#: a fusion method that announces the first real tensor, then merges slowly
SLOW_METHOD = """
    import os, pathlib, time
    from longcat_plugins import FusionMethod, hookimpl

    def slow(base, experts, weights, ctx):
        '''Task arithmetic, one second per tensor.'''
        if ctx.name != "<probe>":
            pathlib.Path(os.environ["LC_MARKER"]).write_text(ctx.name)
            time.sleep(1.0)
        return base + sum(w * (e - base) for w, e in zip(weights, experts)), {}

    @hookimpl
    def register_fusion_methods():
        return [FusionMethod("slow", slow)]
"""


def _config(tmp_path: Path, method: str) -> tuple[Path, Path]:
    base, experts = random_family(n_experts=2, seed=1)
    base_dir, expert_dirs = write_family(tmp_path / "in", base, experts, shards=2)
    out = tmp_path / "out" / "fused"
    cfg = tmp_path / "fuse.yaml"
    data = {"base": str(base_dir), "experts": [{"path": str(p)} for p in expert_dirs], "method": method}
    cfg.write_text(yaml.safe_dump({**data, "output": str(out)}))
    return cfg, out


def _terminal_signals() -> None:
    """Ctrl-C and SIGTERM as a terminal gives them: a test runner started in the background by a
    non-interactive shell inherits SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start(cfg: Path, marker: Path, timeout: float = 120.0) -> subprocess.Popen[str]:
    """``fuse`` in a subprocess, returned once its plugin wrote ``marker`` (it is then stalled)."""
    env = {**os.environ, "LC_MARKER": str(marker), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "longcat_plugins", "fuse", str(cfg)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_terminal_signals,
    )
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"fuse ended (rc {proc.returncode}) before the marker: {out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the marker never appeared")
        time.sleep(0.05)
    return proc


#: where a run stalls -> (distribution, its modules, its entry points, the method the run fuses with)
STALLS = {
    "import": ("slow-import", {"slow_import": SLOW_IMPORT}, {"slow": "slow_import"}, "task_arithmetic"),
    "merge": ("slow-merge", {"slow_merge": SLOW_METHOD}, {"slowm": "slow_merge"}, "slow"),
}


def _stalled(tmp_path: Path, fake_site: Path, where: str) -> tuple[subprocess.Popen[str], Path, Path, Path]:
    """A ``fuse`` run stalled while its plugins load (``import``) or mid-merge (``merge``):
    (the process, its config, its output, the marker its plugin wrote)."""
    dist, modules, entry_points, method = STALLS[where]
    make_dist(fake_site, dist, modules, entry_points)
    cfg, out = _config(tmp_path, method)
    marker = tmp_path / "marker"
    return _start(cfg, marker), cfg, out, marker


def test_ctrl_c_while_plugins_load_stops_the_run(tmp_path: Path, fake_site: Path) -> None:
    proc, _, out, _ = _stalled(tmp_path, fake_site, "import")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "broken" not in err
    assert not out.parent.exists()


def test_sigterm_mid_merge_cleans_up_and_exits_143(tmp_path: Path, fake_site: Path) -> None:
    proc, _, out, _ = _stalled(tmp_path, fake_site, "merge")
    assert [p for p in leftovers(out.parent) if ".fusing-" in p], "the merge should be writing its temp dir"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + 15, err
    assert "terminated" in err and "nothing was written" in err
    assert not out.parent.exists(), "the run made out/ for its output: it must remove it again"


def test_a_killed_runs_temp_dir_is_removed_by_the_next_run(tmp_path: Path, fake_site: Path) -> None:
    proc, cfg, out, marker = _stalled(tmp_path, fake_site, "merge")
    proc.kill()  # SIGKILL: no clean-up is possible, the directory stays
    proc.communicate(timeout=60)
    (stale,) = [p for p in leftovers(out.parent) if ".fusing-" in p]
    assert f"-{proc.pid}-" in stale

    # a live run's directory and another machine's are never touched; an old-style one is reported
    live = out.parent / f".fused.fusing-{_machine()}-{os.getpid()}-live"
    other = out.parent / ".fused.fusing-elsewhere-1-abc"
    old_style = out.parent / ".fused.fusing-q1w2e3"
    for d in (live, other, old_style):
        d.mkdir()
    warnings = clean_stale_temp_dirs(out)
    assert not (out.parent / stale).exists()
    assert live.exists() and other.exists() and old_style.exists()
    assert any(stale in w and "removed" in w for w in warnings)
    assert any(str(old_style) in w and "older version" in w for w in warnings)
    for d in (live, other, old_style):
        d.rmdir()

    # and the next real run cleans a killed run's directory by itself, then says so
    marker.unlink()
    proc = _start(cfg, marker)
    proc.kill()
    proc.communicate(timeout=60)
    result = subprocess.run(
        [sys.executable, "-m", "longcat_plugins", "fuse", str(cfg)],
        env={**os.environ, "LC_MARKER": str(marker), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "interrupted run" in result.stderr
    assert leftovers(out.parent) == [] and (out / "fusion.json").exists()
