"""The in-process tool-use probe counts what a policy did, through real episodes, a real tokenizer and
verl's hermes parser: a policy replaying the golden trajectory scores every share; one that calls
the right tool with a wrong argument is placed exactly there, and is never credited a success."""

from __future__ import annotations

import json
from typing import Any

import pytest
from env_agent_helpers import ScriptedModel

from longcat_plugins.environments.envgen import generate_environments
from longcat_plugins.environments.golden import hermes_call, sft_rows, task_infos
from longcat_plugins.learning.tool_probe import SHARES, play
from longcat_plugins.learning.tool_warmstart import RENDER, SHORT_CHAINS, build_tool_tokenizer
from longcat_plugins.learning.warmstart import TOOL_CHAT_TEMPLATE


class _TemplateOnly:
    chat_template = TOOL_CHAT_TEMPLATE


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("probe")
    generate_environments("retail", 2, root / "envs", seed=5, config=SHORT_CHAINS)
    infos = task_infos(root / "envs" / "tasks.parquet")
    rows = sft_rows(infos, _TemplateOnly(), RENDER)
    build_tool_tokenizer(root / "tok", rows, seed=0, vocab_size=512)
    return infos, rows, AutoTokenizer.from_pretrained(root / "tok")


def test_golden_replay_scores_every_share(tasks: tuple[list[dict[str, Any]], list[dict[str, Any]], Any]) -> None:
    infos, rows, tok = tasks
    for info, row in zip(infos, rows, strict=True):
        turns = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        played = play(ScriptedModel(tok, turns), tok, info, do_sample=False)
        assert all(getattr(played, k) for k in SHARES), (info["task_id"], played)


def test_a_wrong_argument_is_placed_and_not_credited(
    tasks: tuple[list[dict[str, Any]], list[dict[str, Any]], Any],
) -> None:
    """Wrong arguments on every call of an action task: right tool, wrong arguments, no golden
    call made, no success (an output task could still be answered from a guess)."""
    from longcat_plugins.environments.episodes import open_episode

    infos, rows, tok = tasks
    info, row = next(
        (i, r)
        for i, r in zip(infos, rows, strict=True)
        if not any(item["kind"] == "output" for item in open_episode(i).task.rubric)
    )
    turns = []
    for m in row["messages"]:
        if m["role"] == "assistant" and m["content"].startswith("<tool_call>"):
            call = json.loads(m["content"].removeprefix("<tool_call>").removesuffix("</tool_call>"))
            turns.append(hermes_call(call["name"], {k: str(v) + "X" for k, v in call["arguments"].items()}))
    turns.append(row["messages"][-1]["content"])
    played = play(ScriptedModel(tok, turns), tok, info, do_sample=False)
    assert played.well_formed and played.right_tool and not played.right_args
    assert played.finished and not played.golden_calls and not played.success


def test_no_call_and_an_empty_answer_earn_nothing(
    tasks: tuple[list[dict[str, Any]], list[dict[str, Any]], Any],
) -> None:
    infos, _, tok = tasks
    played = play(ScriptedModel(tok, ["Done."]), tok, infos[0], do_sample=False)
    assert played.finished and not any(getattr(played, k) for k in SHARES if k != "finished")
