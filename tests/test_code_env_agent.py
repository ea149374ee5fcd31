"""``longcat_code_agent`` through verl's real agent-loop pieces (continuous-token builder, hermes
parser) with a scripted rollout server, and the task generator: golden trajectories score 1,
broken ones less, a sandbox failure gives an invalid (NaN) sample, the workspace returns to the pool."""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from env_agent_helpers import ScriptedServer, build_loop, hermes
from omegaconf import OmegaConf

from longcat_plugins.environments.code_env import episode as episode_mod
from longcat_plugins.environments.code_env._agent_loop import CodeAgentSettings, LongcatCodeAgentLoop
from longcat_plugins.environments.code_env.tasks import AGENT_NAME, load_task, make_task, write_tasks
from longcat_plugins.rewards.result import ERROR_KEY, VALID_KEY


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("code_tasks")
    write_tasks(out, 4, seed=3, mode="mixed", distractors=2, depth=1, hidden=5)
    return pd.read_parquet(out / "tasks.parquet")


@pytest.fixture
def settings() -> Iterator[CodeAgentSettings]:
    base = "/run" if os.geteuid() == 0 and os.path.isdir("/run") else None
    root = tempfile.mkdtemp(prefix="lccode-loop-", dir=base)
    os.chmod(root, 0o711)
    s = CodeAgentSettings(pool_size=2, max_turns=8, work_root=root, test_wall_s=2.0, shell_wall_s=3.0)
    yield s
    pool = episode_mod._pools.pop(s.env(), None)
    if pool is not None:
        pool.close()
        assert not os.path.exists(pool.root)
    assert os.listdir(root) == []
    shutil.rmtree(root, ignore_errors=True)


def make_code_loop(tokenizer: Any, server: ScriptedServer, settings: CodeAgentSettings) -> LongcatCodeAgentLoop:
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 4096, "multi_turn": {}}},
            "trainer": {"use_v1": False},
            "data": {},
        }
    )
    return build_loop(LongcatCodeAgentLoop, config, server, tokenizer, settings)


def run_row(tokenizer: Any, row: dict[str, Any], script: list[str], settings: CodeAgentSettings) -> Any:
    async def go() -> Any:
        loop = make_code_loop(tokenizer, ScriptedServer(tokenizer, script), settings)
        return await loop.run({"temperature": 1.0, "logprobs": True}, **row)

    return asyncio.run(go())


def golden_script(row: dict[str, Any]) -> list[str]:
    task = load_task(row["extra_info"]["task_dir"])
    fix = task.golden_edit
    return [
        hermes("search", {"pattern": f"def {task.fn}"}),
        hermes("read_file", {"path": fix["path"]}),
        hermes("edit", {"path": fix["path"], "old": fix["old"], "new": fix["new"]}),
        hermes("shell", {"command": f"PYTHONPATH=. python3 {task.public_test}"}),
        hermes("submit", {}),
    ]


def test_tasks_are_deterministic_and_well_formed(tmp_path: Path, tasks: pd.DataFrame) -> None:
    assert make_task(7) == make_task(7) and make_task(7) != make_task(8)
    a, b = tmp_path / "a", tmp_path / "b"
    write_tasks(a, 3, seed=1)
    write_tasks(b, 3, seed=1)
    for p in sorted((a / "tasks").rglob("*")):
        q = b / p.relative_to(a)
        assert q.exists() and (p.is_dir() or p.read_bytes() == q.read_bytes()), p
    assert set(tasks["agent_name"]) == {AGENT_NAME}
    assert {"prompt", "data_source", "reward_model", "extra_info"} <= set(tasks.columns)
    deep = make_task(5, "missing", distractors=3, depth=2, hidden=7)
    assert deep.target_path.count("/") == 3 and len(deep.hidden) == 7
    assert 'raise NotImplementedError("TODO")' in deep.files[deep.target_path]
    assert sum(p.endswith("_utils.py") for p in deep.files) == 2
    with pytest.raises(ValueError, match="mode"):
        make_task(0, "easy")
    with pytest.raises(ValueError, match="depth"):
        make_task(0, depth=9)


def test_golden_trajectory_scores_one(tokenizer: Any, tasks: pd.DataFrame, settings: CodeAgentSettings) -> None:
    for i in range(2):  # one broken, one missing function
        row = tasks.iloc[i].to_dict()
        out = run_row(tokenizer, row, golden_script(row), settings)
        info = out.extra_fields["reward_extra_info"]
        assert out.reward_score == 1.0 and info[VALID_KEY] == 1.0, info
        assert info["env_tool_calls"] == 5 and info["env_tool_errors"] == 0
        assert out.extra_fields["longcat_segment"]["ending"] == "done"
        text = tokenizer.decode(out.response_ids)
        assert "exit code 0" in text and "passed" in text and "Edited" in text
        assert set(out.response_mask) == {0, 1}


def test_broken_trajectories_score_less(tokenizer: Any, tasks: pd.DataFrame, settings: CodeAgentSettings) -> None:
    row = tasks.iloc[0].to_dict()
    task = load_task(row["extra_info"]["task_dir"])
    fix = task.golden_edit
    # no fix at all; an edit whose old text is absent (tool error, nothing changes); then a plain answer
    script = [
        hermes("edit", {"path": fix["path"], "old": "this text is not there", "new": "x"}),
        hermes("read_file", {"path": "../../etc/passwd"}),
        "I think it is fixed.",
    ]
    out = run_row(tokenizer, row, script, settings)
    info = out.extra_fields["reward_extra_info"]
    assert 0.0 <= out.reward_score < 1.0 and info[VALID_KEY] == 1.0
    assert info["env_tool_errors"] == 2 and info["env_finished"] == 1.0
    text = tokenizer.decode(out.response_ids)
    assert "not found" in text and "leaves the repository" in text
    # a fix of the public case only: partial credit at most
    header = fix["old"].split('"""')[0] + '"""' + fix["old"].split('"""')[1] + '"""\n'
    public = task.files[task.public_test].split("assert ")[1].split("\n")[0]
    call, expected = public.split(" == ")
    hack = header + f"    return {expected}\n"
    out = run_row(
        tokenizer, row, [hermes("write_file", {"path": fix["path"], "content": hack}), hermes("submit", {})], settings
    )
    assert out.reward_score < 1.0, call


def test_a_sandbox_failure_is_an_invalid_sample(
    tokenizer: Any, tasks: pd.DataFrame, settings: CodeAgentSettings
) -> None:
    row = tasks.iloc[1].to_dict()

    def script(prompt_text: str) -> str:
        pool = episode_mod._pools[settings.env()]
        for slot_dir in os.listdir(pool.root):  # the workspace vanishes under the sandbox
            shutil.rmtree(os.path.join(pool.root, slot_dir, "ws"), ignore_errors=True)
        return hermes("shell", {"command": "echo hi"}) if "not your fault" not in prompt_text else hermes("submit", {})

    out = run_row(tokenizer, row, script, settings)  # type: ignore[arg-type]
    info = out.extra_fields["reward_extra_info"]
    assert math.isnan(out.reward_score) and info[VALID_KEY] == 0.0 and "shell" in info[ERROR_KEY], info
    assert set(info) == set(run_row(tokenizer, row, golden_script(row), settings).extra_fields["reward_extra_info"])


def test_registered_in_verls_agent_loop_registry() -> None:
    import verl.experimental.agent_loop.agent_loop as m

    from longcat_plugins.host import get_host

    get_host()
    assert m._agent_loop_registry[AGENT_NAME]["_target_"].endswith("code_env._agent_loop.LongcatCodeAgentLoop")
    with pytest.raises(ValueError, match="pool_size"):
        CodeAgentSettings(pool_size=0)
    with pytest.raises(ValueError, match="tool_parser"):
        CodeAgentSettings(tool_parser="nope")
