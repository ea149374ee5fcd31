"""`longcat-plugins envgen` as a user runs it: environments + a verl parquet, key-path spec errors,
refusal to overwrite, and no partial output when generation fails or is interrupted."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from longcat_plugins.cli import main
from longcat_plugins.environments import cli as env_cli
from longcat_plugins.environments import envgen as envgen_mod
from longcat_plugins.environments.runtime import load_environment
from longcat_plugins.environments.spec import BUILTIN_SPECS
from longcat_plugins.environments.verify import Verdict


def invoke(*args: str) -> object:
    # rich reads COLUMNS once, when the module's console is made; a test worker's stdout is no
    # terminal, so without this the console is 80 wide and wraps the table and paths
    env_cli.console.width = 200
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "200"})


def test_envgen_writes_environments_and_a_verl_parquet(tmp_path: Path) -> None:
    out = tmp_path / "food"
    result = invoke("envgen", "food_delivery", "--count", "6", "--out", str(out), "--seed", "4")
    assert result.exit_code == 0, result.output
    assert "environments" in result.output and "tasks.parquet" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["envs", "graph.json", "stats.json", "tasks.parquet"]
    assert len(list((out / "envs").iterdir())) == 6
    stats = json.loads((out / "stats.json").read_text())
    assert stats["environments"] == 6 and stats["tools_per_env"]["min"] >= 20
    df = pd.read_parquet(out / "tasks.parquet")
    assert list(df.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"]
    assert len(df) == stats["tasks"] and set(df.agent_name) == {"longcat_tool_agent"}
    assert list(df.extra_info.map(lambda e: e["index"])) == list(range(len(df)))
    row = df.iloc[0]
    assert row.data_source == "longcat_env/food_delivery" and row.ability == "agentic_tool_use"
    assert [m["role"] for m in row.prompt] == ["system", "user"]
    assert row.reward_model["style"] == "rubric"
    env = load_environment(row.extra_info["env_path"])
    task = env.task_by_id[row.extra_info["task_id"]]
    assert json.loads(row.reward_model["ground_truth"]) == task.rubric
    assert Path(row.extra_info["env_path"]) == out / row.extra_info["env_rel_path"]
    ep = env.new_episode(task.task_id, seed=0)
    assert row.prompt[1]["content"] == ep.first_user_message()
    for name, args in ep.golden_chain():
        assert ep.call_tool(name, args).ok
    assert ep.evaluate(ep.golden_answer()).success
    # same seed, same environments
    again = invoke("envgen", "food_delivery", "-n", "6", "-o", str(tmp_path / "again"), "--seed", "4")
    assert again.exit_code == 0
    for name in ("db.json", "tasks.json"):
        a = (out / "envs" / "env_00003" / name).read_text()
        assert a == (tmp_path / "again" / "envs" / "env_00003" / name).read_text()


def test_bad_spec_names_file_and_key(tmp_path: Path) -> None:
    raw = yaml.safe_load((BUILTIN_SPECS / "travel.yaml").read_text())
    raw["tools"][5]["field"] = "shoe_size"
    spec = tmp_path / "travel_bad.yaml"
    spec.write_text(yaml.safe_dump(raw))
    result = invoke("envgen", str(spec), "-n", "2", "-o", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert str(spec) in result.output and "tools[5](update_traveler_phone).field" in result.output
    assert "shoe_size" in result.output
    assert not (tmp_path / "out").exists()
    missing = invoke("envgen", "no_such_domain", "-n", "2", "-o", str(tmp_path / "out"))
    assert missing.exit_code == 2 and "no_such_domain" in missing.output and "retail" in missing.output


def test_refuses_non_empty_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = invoke("envgen", "retail", "-n", "2", "-o", str(out))
    assert result.exit_code == 2 and "exists and is not empty" in result.output
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert invoke("envgen", "retail", "-n", "2", "-o", str(empty)).exit_code == 0
    assert (empty / "tasks.parquet").exists()


def test_no_partial_output_when_verification_rejects_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(envgen_mod, "verify_environment", lambda env, **kw: Verdict(False, {"golden_rubric_failed": 1}))
    result = invoke("envgen", "retail", "-n", "3", "-o", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "gave only 0/3 verified environments" in result.output and "golden_rubric_failed" in result.output
    assert list(tmp_path.iterdir()) == []  # neither the output nor the temporary directory


def test_no_partial_output_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = envgen_mod.verify_environment
    calls = []

    def interrupt_on_third(env: object, **kw: object) -> Verdict:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(env, **kw)

    monkeypatch.setattr(envgen_mod, "verify_environment", interrupt_on_third)
    result = invoke("envgen", "retail", "-n", "5", "-o", str(tmp_path / "out"))
    assert result.exit_code == 130 and "nothing was written" in result.output
    assert list(tmp_path.iterdir()) == []
