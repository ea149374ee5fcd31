"""Dual-path tool-necessity selection: the keep rule against a float64 reference, the
without-tools path (no schemas shown, no call executed), matching samples to rows through the
validation dump, and bad input exiting 2 with the argument named."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli
from env_agent_helpers import ENV_PATH, KVEnvironment, ScriptedServer, build_loop, hermes
from omegaconf import OmegaConf

from longcat_plugins.environments.agent_loop import ToolAgentSettings
from longcat_plugins.environments.no_tools import NO_TOOLS_ERROR, NoToolsAgentLoop
from longcat_plugins.environments.tool_selection import (
    AGENT,
    KEY_PREFIX,
    SelectionError,
    Thresholds,
    load_tasks,
    pass_rates,
    path_data,
    read_dump,
)


def reference_keep(s_with: np.ndarray, s_without: np.ndarray, t1: float, t2: float, t3: float) -> np.ndarray:
    """The report's set {x | v_x > tau1 and s_with > tau2 and s_without < tau3}, in float64."""
    v = s_with.astype(np.float64) - s_without.astype(np.float64)
    return (v > t1) & (s_with > t2) & (s_without < t3)


@pytest.mark.parametrize("seed", range(5))
def test_keep_rule_matches_a_float64_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 8  # pass rates are multiples of 1/n, so the boundaries (equalities) occur
    s_with, s_without = rng.integers(0, n + 1, 500) / n, rng.integers(0, n + 1, 500) / n
    t1, t2, t3 = float(rng.choice([-0.5, 0.0, 0.25])), float(rng.choice([0.0, 0.5])), float(rng.choice([0.5, 1.0]))
    th = Thresholds(t1, t2, t3)
    got = np.array([th.keep(float(w), float(wo)) for w, wo in zip(s_with, s_without, strict=True)])
    assert (got == reference_keep(s_with, s_without, t1, t2, t3)).all()


def test_keep_rule_is_strict_at_every_threshold() -> None:
    th = Thresholds(tau1=0.25, tau2=0.5, tau3=0.5)
    assert th.keep(0.75, 0.25)
    assert not th.keep(0.75, 0.5)  # s_without == tau3
    assert not th.keep(0.5, 0.0)  # s_with == tau2
    assert not th.keep(0.625, 0.375)  # v == tau1
    assert not Thresholds().keep(0.0, 0.0)  # solved by neither path: tools did not help


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"tau1": 1.5}, "--tau1"), ({"tau1": -1.01}, "--tau1"), ({"tau2": -0.1}, "--tau2"), ({"tau3": 2.0}, "--tau3")],
)
def test_thresholds_outside_their_range_name_the_argument(kwargs: dict, name: str) -> None:
    with pytest.raises(SelectionError, match=name):
        Thresholds(**kwargs)


def test_pass_rates_and_the_dump_match_samples_to_paths_and_rows(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    lines = [
        {"gts": f"{KEY_PREFIX}with_tools:1", "score": 1.0},
        {"gts": f"{KEY_PREFIX}with_tools:0", "score": 0.4},
        {"gts": f"{KEY_PREFIX}without_tools:1", "score": 0.0},
        {"gts": f"{KEY_PREFIX}with_tools:1", "score": 0.0},
        {"gts": f"{KEY_PREFIX}with_tools:0", "score": 1.0},
        {"gts": f"{KEY_PREFIX}without_tools:0", "score": 1.0},
        {"gts": "something else", "score": 1.0},  # not one of ours: ignored
    ]
    (dump / "0.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    scores = read_dump(dump)
    assert scores == {"with_tools": {0: [0.4, 1.0], 1: [1.0, 0.0]}, "without_tools": {1: [0.0], 0: [1.0]}}
    assert pass_rates(scores["with_tools"], 2, 1.0) == [0.5, 0.5]
    assert pass_rates(scores["with_tools"], 2, 0.3) == [1.0, 0.5]
    assert pass_rates(scores["without_tools"], 2, 1.0) == [1.0, 0.0]
    with pytest.raises(RuntimeError, match="row 2"):
        pass_rates(scores["with_tools"], 3, 1.0)


def tool_tasks(path: Path, rows: int = 3) -> Path:
    frame = pd.DataFrame(
        {
            "data_source": ["longcat_env/kv"] * rows,
            "prompt": [[{"role": "user", "content": "ignored"}]] * rows,
            "reward_model": [{"style": "rubric", "ground_truth": "[]"}] * rows,
            "extra_info": [{"env_path": ENV_PATH, "task_id": f"t{i}", "index": i} for i in range(rows)],
            "agent_name": ["longcat_tool_agent"] * rows,
        }
    )
    frame.to_parquet(path)
    return path


def test_each_row_is_copied_once_per_path_with_its_agent_loop_and_key(tmp_path: Path) -> None:
    frame = load_tasks(tool_tasks(tmp_path / "tasks.parquet"))
    both = pd.read_parquet(path_data(frame, tmp_path / "both.parquet"))
    assert list(both["agent_name"]) == [AGENT["with_tools"]] * 3 + [AGENT["without_tools"]] * 3
    assert [rm["ground_truth"] for rm in both["reward_model"]] == [
        f"{KEY_PREFIX}{path}:{i}" for path in ("with_tools", "without_tools") for i in range(3)
    ]
    assert [e["task_id"] for e in both["extra_info"]] == ["t0", "t1", "t2"] * 2


def make_no_tools_loop(tokenizer: Any, server: ScriptedServer) -> NoToolsAgentLoop:
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 2048, "response_length": 2048, "multi_turn": {}}},
            "trainer": {"use_v1": True},
            "data": {},
        }
    )
    return build_loop(NoToolsAgentLoop, config, server, tokenizer, ToolAgentSettings())


def test_without_tools_the_golden_chain_executes_nothing_and_earns_nothing(tokenizer: Any, env: KVEnvironment) -> None:
    golden = env.new_episode("t1", seed=0).golden_chain()
    env.episodes.clear()
    server = ScriptedServer(tokenizer, [hermes(name, args) for name, args in golden] + ["All keys are set."])

    async def go() -> Any:
        loop = make_no_tools_loop(tokenizer, server)
        return await loop.run(
            {"temperature": 1.0, "logprobs": True},
            raw_prompt=[{"role": "user", "content": "ignored"}],
            extra_info={"env_path": ENV_PATH, "task_id": "t1", "index": 0},
            global_steps=0,
        )

    out = asyncio.run(go())
    out = out[-1] if isinstance(out, list) else out
    assert out.reward_score < 1.0
    assert env.episodes[0].db == {}  # no call reached the environment
    shown = server.requests[0]["text"]
    assert "set_value" not in shown and "<tools>" not in shown  # no tool was shown, no tool block
    env_text = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0])
    assert env_text.count("no tools are available") == len(golden) and NO_TOOLS_ERROR.startswith('{"error"')


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["--tau1", "1.5"], "--tau1"),
        (["--tau3", "-0.2"], "--tau3"),
        (["--n", "0"], "--n"),
        (["--model", "/nonexistent/model"], "--model"),
    ],
)
def test_cli_bad_arguments_exit_2_naming_them(tmp_path: Path, args: list[str], name: str) -> None:
    data = tool_tasks(tmp_path / "tasks.parquet")
    model = ["--model", str(tmp_path)] if "--model" not in args else []
    out = tmp_path / "out.parquet"
    result = run_cli("select-tool-tasks", str(data), "-o", str(out), *model, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert name in result.stderr and not out.exists()


def test_cli_bad_data_exits_2_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    missing = run_cli("select-tool-tasks", str(tmp_path / "nope.parquet"), "-o", str(out), "--model", str(tmp_path))
    assert missing.returncode == 2 and "DATA" in missing.stderr and "does not exist" in missing.stderr
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"prompt": ["x"]}).to_parquet(bad)
    cols = run_cli("select-tool-tasks", str(bad), "-o", str(out), "--model", str(tmp_path))
    assert cols.returncode == 2 and "reward_model" in cols.stderr and "DATA" in cols.stderr
    assert not out.exists()
