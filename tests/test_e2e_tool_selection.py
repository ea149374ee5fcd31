"""``longcat-plugins select-tool-tasks`` end to end: two generated retail tasks, each rolled out
twice with tools and twice without in one validation-only pass of stock ``main_ppo`` on the
CPU runtime; the kept rows and their scores follow the rule, and the two paths really differ."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli

from longcat_plugins.environments.tool_selection import KEY_PREFIX, Thresholds, pass_rates, read_dump
from longcat_plugins.learning.assets import Assets

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def test_select_tool_tasks_runs_both_paths_through_verl(tiny_assets: Assets, tmp_path: Path, ray_tmp: Path) -> None:
    from longcat_plugins.environments.envgen import generate_environments

    generate_environments("retail", 1, tmp_path / "envs", seed=0)
    data = tmp_path / "two.parquet"
    pd.read_parquet(tmp_path / "envs" / "tasks.parquet").head(2).to_parquet(data)
    out, work = tmp_path / "kept.parquet", tmp_path / "work"
    th = Thresholds(tau1=-1.0, tau2=0.0, tau3=1.0)
    result = run_cli(
        "select-tool-tasks", str(data), "-o", str(out), "--model", str(tiny_assets.model),
        "--n", "2", "--tau1", "-1", "--tau2", "0", "--tau3", "1", "--threshold", "0.5",
        "--work-dir", str(work), f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "kept" in result.stdout and "2/2 stages" in result.stderr
    scores = read_dump(work / "dump")
    rates = {}
    for path in ("with_tools", "without_tools"):
        assert sorted(scores[path]) == [0, 1] and all(len(s) == 2 for s in scores[path].values())
        rates[path] = pass_rates(scores[path], 2, 0.5)
    dump = [json.loads(x) for x in next((work / "dump").glob("*.jsonl")).read_text().splitlines()]
    # with tools the policy is shown the environment's tools; without, none
    for d in dump:
        path = str(d["gts"])[len(KEY_PREFIX) :].rpartition(":")[0]
        assert ("<tools>" in d["input"]) == (path == "with_tools"), d["gts"]
    kept = pd.read_parquet(out)
    expected = [th.keep(w, wo) for w, wo in zip(rates["with_tools"], rates["without_tools"], strict=True)]
    assert len(kept) == sum(expected)
    if len(kept):
        assert list(kept["s_with_tool"]) == [r for r, k in zip(rates["with_tools"], expected, strict=True) if k]
        assert (kept["tool_necessity"] == kept["s_with_tool"] - kept["s_without_tool"]).all()
