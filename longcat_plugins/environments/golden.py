"""Golden trajectories for a tool-use warm start: each task's golden chain played through its real episode.

A random model never calls a tool, so GRPO through ``longcat_tool_agent`` has no gradient. A warm
start is supervised fine-tuned on these trajectories first. Each one is rendered in exactly the
loop's own chat format: the opening messages come from the loop's own code
(:func:`~longcat_plugins.environments.agent_loop.opening_messages`), every assistant turn is one
hermes ``<tool_call>`` (what verl's hermes parser reads back), every tool message holds the real
result the episode returned for that call, and the last assistant turn is the final answer that
states every required output. A trajectory whose golden chain does not earn the rubric's full
score (it should always do) is rejected, so SFT never teaches an unrewarded answer.

Rows are what verl's ``MultiTurnSFTDataset`` reads: a ``messages`` column (system/user/assistant/tool
dicts), plus the task's ``env_path``/``task_id`` for provenance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from longcat_plugins.environments.episodes import open_episode


class GoldenChainError(ValueError):
    """A task's golden chain failed when replayed through its episode (a tool refused, or the rubric was not met)."""


@dataclass(frozen=True)
class RenderSettings:
    """The loop settings that shape a trajectory's text (match ``longcat.settings.environment.longcat_tool_agent``)."""

    tools_style: str = "compact"
    render_tools: str = "auto"
    max_tool_response_chars: int = 2000


def hermes_call(name: str, arguments: dict[str, Any]) -> str:
    """One tool call as the hermes format writes it (verl's ``HermesToolParser`` reads it back)."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"


def golden_messages(extra_info: dict[str, Any], tokenizer: Any, settings: RenderSettings) -> list[dict[str, Any]]:
    """The chat of one task solved by its golden chain, at noise 0 (a fresh clean episode, real tool results)."""
    from longcat_plugins.environments.agent_loop import opening_messages, renders_tools_in_template, tool_message_body

    info = {**extra_info, "noise_level": 0}
    episode = open_episode(info)
    system, question, _ = opening_messages(
        episode, settings.tools_style, renders_tools_in_template(tokenizer, settings.render_tools)
    )
    messages: list[dict[str, Any]] = [system, question]
    where = f"{info.get('env_path')} task {info.get('task_id')}"
    for name, args in episode.golden_chain():
        result = episode.call_tool(name, args)
        if not result.ok:
            raise GoldenChainError(f"{where}: golden call {name}({args}) failed: {result.content}")
        messages.append({"role": "assistant", "content": hermes_call(name, args)})
        messages.append(
            {
                "role": "tool",
                "name": name,
                "content": tool_message_body(result.content, settings.max_tool_response_chars),
            }
        )
    answer = episode.golden_answer()
    outcome = episode.evaluate(answer)
    if not outcome.success:
        raise GoldenChainError(f"{where}: the golden chain does not meet the rubric: {outcome.details}")
    messages.append({"role": "assistant", "content": answer})
    return messages


def sft_rows(tasks: Iterable[dict[str, Any]], tokenizer: Any, settings: RenderSettings) -> list[dict[str, Any]]:
    """One SFT row per task (``extra_info`` dicts as the env generator writes them), in the given order."""
    rows = []
    for info in tasks:
        info = dict(info)
        rows.append(
            {
                "messages": golden_messages(info, tokenizer, settings),
                "env_path": str(info["env_path"]),
                "task_id": str(info["task_id"]),
            }
        )
    return rows


def task_infos(tasks_parquet: Path) -> list[dict[str, Any]]:
    """The ``extra_info`` of every row of an env generator's ``tasks.parquet``, in file order."""
    import pandas as pd

    from longcat_plugins.rewards.plain import plain

    return [dict(plain(i)) for i in pd.read_parquet(tasks_parquet)["extra_info"]]


def write_sft_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Write rows for verl's ``MultiTurnSFTDataset`` (``messages`` column), atomically."""
    import pandas as pd

    if not rows:
        raise ValueError(f"no SFT rows to write to {path}")
    tmp = path.with_name(path.name + ".tmp")
    pd.DataFrame(rows).to_parquet(tmp)
    tmp.replace(path)
