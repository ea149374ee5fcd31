"""The code-agent warm start's data, without training: golden trajectories of generated code tasks
rendered in exactly the ``longcat_code_agent`` loop's format (verl's hermes parser reads each call
back; the real loop replaying them builds verl's SFT tokenisation), deterministic per seed, a fix
that misses a hidden test rejected, and the demo overrides valid for the recipe."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from env_agent_helpers import ScriptedModel, ScriptedServer, build_loop
from omegaconf import OmegaConf
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

from longcat_plugins.config import compose, validate_config
from longcat_plugins.environments.code_env import episode as episode_mod
from longcat_plugins.environments.code_env._agent_loop import CodeAgentSettings, LongcatCodeAgentLoop
from longcat_plugins.environments.code_env.episode import CodeEnvSettings
from longcat_plugins.environments.code_env.golden import golden_calls, sft_rows
from longcat_plugins.environments.code_env.tasks import load_task, write_tasks
from longcat_plugins.environments.golden import GoldenChainError, hermes_call, write_sft_parquet
from longcat_plugins.learning.code_warmstart import (
    HELD_OUT_METRIC,
    RENDER,
    CodeWarmStart,
    CodeWarmStartPlan,
    build_code_tokenizer,
    call_pieces,
    code_lines,
    ensure_code_warm_start,
    warm_overrides,
)
from longcat_plugins.learning.warmstart import held_out
from longcat_plugins.rewards.plain import plain

REPO = Path(__file__).resolve().parents[1]
PLAN = CodeWarmStartPlan()


@pytest.fixture(scope="module")
def work_root() -> Iterator[str]:
    base = "/run" if os.geteuid() == 0 and os.path.isdir("/run") else None
    root = tempfile.mkdtemp(prefix="lccode-warm-", dir=base)
    os.chmod(root, 0o711)
    yield root
    assert os.listdir(root) == []  # every workspace the golden episodes used is gone
    shutil.rmtree(root, ignore_errors=True)


def _infos(out: Path, n: int, seed: int) -> list[dict[str, Any]]:
    write_tasks(out, n, seed, PLAN.mode, PLAN.distractors, PLAN.depth, PLAN.hidden)
    return [dict(plain(i)) for i in pd.read_parquet(out / "tasks.parquet")["extra_info"]]


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory, work_root: str) -> tuple[Path, list[dict[str, Any]], Any]:
    """Three tasks of the warm start's knobs, their SFT rows (one with a search first) and a tokenizer."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("codegolden")
    infos = _infos(root / "tasks", 3, seed=5)
    rows = sft_rows(infos, CodeEnvSettings(work_root=work_root), RENDER, search_every=3)
    build_code_tokenizer(root / "tok", rows, seed=0, vocab_size=512)
    write_sft_parquet(rows, root / "sft.parquet")
    return root, rows, AutoTokenizer.from_pretrained(root / "tok")


def test_calls_parse_back_and_tool_messages_are_the_workspaces_results(
    golden: tuple[Path, list[dict[str, Any]], Any],
) -> None:
    root, rows, tok = golden
    parser = ToolParser.get_tool_parser("hermes", tok)
    for k, row in enumerate(rows):
        task = load_task(row["task_dir"])
        chain = golden_calls(task, search=k == 2)
        assistant = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        assert len(assistant) == len(chain) == (4 if k == 2 else 3)
        for text, (name, args) in zip(assistant, chain, strict=True):
            ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
            _, calls = asyncio.run(parser.extract_tool_calls(ids))
            assert [(c.name, json.loads(c.arguments)) for c in calls] == [(name, args)]
        tools = {m["name"]: m["content"] for m in row["messages"] if m["role"] == "tool"}
        # read_file shows the broken module with line numbers; the edit's old text is exactly in it
        shown = "\n".join(line[7:] for line in tools["read_file"].split("\n"))
        assert task.golden_edit["old"] in shown and task.files[task.target_path].startswith(task.golden_edit["old"])
        assert tools["edit"].startswith("Edited ") and tools["submit"] == "Submitted."
        assert row["messages"][-1]["role"] == "tool"  # the loop appends submit's result, then ends


def test_loop_replaying_the_rows_builds_the_sft_token_stream(
    golden: tuple[Path, list[dict[str, Any]], Any], work_root: str
) -> None:
    """prompt + response of the real code loop == verl's SFT tokenisation (plus the next turn's cue the
    loop appends after submit's result); SFT loss mask == the loop's model tokens."""
    root, rows, tok = golden
    ds = MultiTurnSFTDataset(
        str(root / "sft.parquet"),
        tok,
        OmegaConf.create({"max_length": 4096, "pad_mode": "no_padding", "truncation": "error"}),
    )
    settings = CodeAgentSettings(
        tools_style=RENDER.tools_style,
        render_tools=RENDER.render_tools,
        max_turn_tokens=512,
        max_turns=6,
        pool_size=1,
        work_root=work_root,
    )
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 4096, "multi_turn": {}}},
            "trainer": {"use_v1": False},
            "data": {},
        }
    )
    try:
        for i, row in enumerate(rows):
            script = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
            server = ScriptedServer(tok, list(script))
            info = {"task_dir": row["task_dir"], "task_id": row["task_id"]}

            async def go(server: ScriptedServer = server, info: dict[str, Any] = info) -> Any:
                loop = build_loop(LongcatCodeAgentLoop, config, server, tok, settings)
                return await loop.run({"temperature": 1.0}, extra_info=info, raw_prompt=[])

            out = asyncio.run(go())
            assert out.reward_score == 1.0 and out.extra_fields["longcat_segment"]["ending"] == "done"
            item = ds[i]
            # after submit's result the loop has already appended the next turn's generation prompt
            # (the turn never comes): the only tokens past the SFT sequence, none of them the model's
            cue = len(tok.apply_chat_template(row["messages"], add_generation_prompt=True, return_dict=False))
            cue -= len(tok.apply_chat_template(row["messages"], return_dict=False))
            assert cue == 1
            stream, mask = list(out.prompt_ids) + list(out.response_ids), list(out.response_mask)
            assert stream[:-cue] == item["input_ids"].tolist(), f"row {i}: token streams differ"
            assert stream[-cue:] == tok.encode("<|assistant|>", add_special_tokens=False) and mask[-cue:] == [0] * cue
            n = len(out.prompt_ids)
            loss_mask = item["loss_mask"].tolist()
            assert loss_mask[:n] == [0] * n and loss_mask[n:] == mask[:-cue]
    finally:
        pool = episode_mod._pools.pop(settings.env(), None)
        if pool is not None:
            pool.close()


def test_recurring_source_lines_and_call_skeletons_become_tokens() -> None:
    def edit(old: str, new: str) -> dict[str, Any]:
        call = hermes_call("edit", {"path": "pkg/m.py", "old": old, "new": new})
        return {"messages": [{"role": "assistant", "content": call}, {"role": "tool", "content": "Edited."}]}

    rows = [edit('def f(x):\n    """Doc."""\n    return x\n', "def f(x):\n    return -x\n")] * 2
    rows.append(edit("def g(y):\n    return y\n", "def g(y):\n    return 2 * y\n"))
    lines = code_lines(rows)
    assert {"def f(x):", '    """Doc."""', '    \\"\\"\\"Doc.\\"\\"\\"', "    return x", "    return -x"} <= set(lines)
    assert "def g(y):" not in lines  # one task only: not recurring
    pieces = call_pieces(rows)
    assert pieces == sorted(
        ["\\n", '<tool_call>{"name": "edit", "arguments": {"path": "', '", "old": "', '", "new": "', '"}}</tool_call>']
    )
    tok_text = rows[0]["messages"][0]["content"]
    assert all(p in tok_text for p in pieces)


def test_rows_and_tokenizer_are_deterministic(
    golden: tuple[Path, list[dict[str, Any]], Any], tmp_path: Path, work_root: str
) -> None:
    root, rows, _ = golden
    infos = _infos(tmp_path / "tasks", 3, seed=5)
    again = sft_rows(infos, CodeEnvSettings(work_root=work_root), RENDER, search_every=3)
    assert [r["messages"] for r in again] == [r["messages"] for r in rows]  # the task folders differ, not the text
    build_code_tokenizer(tmp_path / "tok", again, seed=0, vocab_size=512)
    assert (tmp_path / "tok" / "tokenizer.json").read_bytes() == (root / "tok" / "tokenizer.json").read_bytes()


def test_the_probe_scores_a_golden_and_an_idle_episode(
    golden: tuple[Path, list[dict[str, Any]], Any], work_root: str
) -> None:
    """The held-out probe plays the loop's turns against a real episode: the golden turns solve the
    task (every flag set, score 1); a model that only answers scores what the untouched repository earns."""
    from longcat_plugins.environments.code_env.pool import WorkspacePool
    from longcat_plugins.learning.code_probe import play
    from longcat_plugins.rewards.sandbox import Sandbox

    _, rows, tok = golden
    settings = CodeEnvSettings(work_root=work_root)
    row = rows[0]
    info = {"task_dir": row["task_dir"], "task_id": row["task_id"]}
    turns = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
    with WorkspacePool(Sandbox(settings.isolation, settings.shell_limits(), work_root=work_root), 1) as pool:
        solved = play(ScriptedModel(tok, turns, last="done"), tok, info, pool)
        idle = play(ScriptedModel(tok, ["I cannot fix it."], last="done"), tok, info, pool)
    assert (solved.well_formed, solved.read_target, solved.edit_applied, solved.submitted) == (True,) * 4
    assert solved.solved and solved.score == 1.0
    assert not (idle.well_formed or idle.edit_applied or idle.submitted or idle.solved)
    assert 0.0 <= idle.score < 1.0


def test_a_golden_fix_that_misses_a_hidden_test_is_rejected(tmp_path: Path, work_root: str) -> None:
    info = _infos(tmp_path / "tasks", 1, seed=9)[0]
    task_json = Path(info["task_dir"]) / "task.json"
    task = json.loads(task_json.read_text())
    task["golden_edit"]["new"] = task["golden_edit"]["old"].replace("def ", "def unused_", 1)  # the function is gone
    task_json.write_text(json.dumps(task))
    with pytest.raises(GoldenChainError, match="does not pass the hidden tests"):
        sft_rows([info], CodeEnvSettings(work_root=work_root), RENDER)


def test_warm_overrides_compose_and_validate_with_the_code_agent_recipe(tmp_path: Path) -> None:
    warm = CodeWarmStart(
        *(tmp_path / n for n in ("root", "model", "train", "val")), base=tmp_path / "base", sft=tmp_path / "sft.parquet"
    )
    cfg = compose(REPO / "configs" / "code_agent_cpu.yaml", warm_overrides(warm, 6))
    loop = cfg.longcat.settings.environment.longcat_code_agent
    assert loop.max_turns >= 3 + 1 and loop.tools_style == RENDER.tools_style  # read, edit, submit fit
    assert cfg.actor_rollout_ref.model.path == str(warm.model) and cfg.data.val_files == str(warm.val)
    assert cfg.trainer.val_before_train is True and cfg.trainer.test_freq == 6
    problems, _ = validate_config(cfg)
    assert problems == []


def test_plan_keys_and_held_out_and_bad_size(tmp_path: Path) -> None:
    assert PLAN.key() == CodeWarmStartPlan().key() and PLAN.key() != CodeWarmStartPlan(seed=1).key()
    assert PLAN.data_key() == CodeWarmStartPlan(sft_epochs=3).data_key() != CodeWarmStartPlan(hidden=6).data_key()
    # the default plan's cache directories (codewarm-data-tiny-seed0-<data_key>, codewarm-tiny-seed0-<key>)
    assert (CodeWarmStartPlan().key(), CodeWarmStartPlan().data_key()) == ("c62c5a0c53", "ca1cd4c0f5")
    steps = [{"step": 0, HELD_OUT_METRIC: 0.25}, {"step": 1}, {"step": 3, HELD_OUT_METRIC: 0.5}]
    assert held_out(steps, HELD_OUT_METRIC) == (0.25, 0.5) and held_out(steps[:2], HELD_OUT_METRIC) is None
    with pytest.raises(ValueError, match="unknown model size 'huge'"):
        ensure_code_warm_start(tmp_path, CodeWarmStartPlan(size="huge"))
    assert not list(tmp_path.iterdir())
