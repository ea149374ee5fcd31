"""What a code-agent checkpoint does on held-out repository tasks, in process (no Ray).

Each task of a ``longcat_code_agent`` parquet is played through a real :class:`CodeEpisode` (a
pooled, sandboxed workspace; hidden tests in the sandbox) the way the agent loop plays it: the
loop's opening messages, one model turn at a time (plain transformers ``generate``, greedy or
sampled, at most ``max_turn_tokens``), the turn read by verl's hermes tool parser, the calls run
against the episode and their results appended as tool messages; ``submit`` or a turn without a
call ends the episode, and the hidden tests score the workspace as it is then.

Counted per episode, so a failure can be placed: was the first turn a well-formed call
(``well_formed``), did the model read the target module (``read_target``), did an ``edit``
apply (``edit_applied``), did it ``submit``, and the reward itself: ``score`` (the share of
hidden tests passed) and ``solved`` (all of them, what the loop's ``acc`` is).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the per-episode flags :func:`probe` reports as shares
SHARES = ("well_formed", "read_target", "edit_applied", "submitted", "solved")


@dataclass
class CodeEpisodeResult:
    """What one played episode did (see the module doc)."""

    well_formed: bool = False
    read_target: bool = False
    edit_applied: bool = False
    submitted: bool = False
    solved: bool = False
    score: float = 0.0


def play(
    model: Any,
    tokenizer: Any,
    info: dict[str, Any],
    pool: Any,
    *,
    do_sample: bool = False,
    max_turns: int = 4,
    max_turn_tokens: int = 96,
    max_tool_response_chars: int = 4000,
    tools_style: str = "compact",
) -> CodeEpisodeResult:
    """One episode of the task ``info`` (a row's ``extra_info``) on a workspace of ``pool``."""
    from verl.experimental.agent_loop.tool_parser import ToolParser

    from longcat_plugins.environments.agent_loop import opening_messages, tool_message_body
    from longcat_plugins.environments.code_env.episode import CodeEnvSettings, CodeEpisode, get_task
    from longcat_plugins.learning.tool_probe import call_arguments, next_turn

    task = get_task(str(info["task_dir"]))
    episode = CodeEpisode(task, pool, CodeEnvSettings(), pool.acquire(str(info["task_dir"])))
    out = CodeEpisodeResult()
    try:
        system, question, _ = opening_messages(episode, tools_style, False)
        messages: list[dict[str, Any]] = [system, question]
        parser = ToolParser.get_tool_parser("hermes", tokenizer)
        for turn in range(max_turns):
            new = next_turn(model, tokenizer, messages, max_turn_tokens, do_sample)
            _, calls = asyncio.run(parser.extract_tool_calls(new, None))
            if turn == 0:
                out.well_formed = bool(calls)
            if not calls:
                break
            messages.append({"role": "assistant", "content": tokenizer.decode(new, skip_special_tokens=True)})
            for call in calls:
                args = call_arguments(call.arguments)
                result = episode.call_tool(call.name, args) if isinstance(args, dict) else None
                if result is not None and result.ok:
                    out.read_target |= call.name == "read_file" and args.get("path") == task.target_path
                    out.edit_applied |= call.name == "edit"
                body = tool_message_body(result.content, max_tool_response_chars) if result else "Error: arguments"
                messages.append({"role": "tool", "name": call.name, "content": body})
            if episode.submitted:
                out.submitted = True
                break
        outcome = episode.evaluate()
        out.score, out.solved = float(outcome.score), bool(outcome.success)
    finally:
        episode.close()
    return out


def probe(
    model_dir: Path, tasks_parquet: Path, n: int = 1, do_sample: bool = False, seed: int = 0, limit: int | None = None
) -> dict[str, Any]:
    """Shares of :data:`SHARES`, the mean score, and each episode's score, over ``n`` episodes per task."""
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from longcat_plugins.environments.code_env.episode import CodeEnvSettings
    from longcat_plugins.environments.code_env.pool import WorkspacePool
    from longcat_plugins.rewards.plain import plain
    from longcat_plugins.rewards.sandbox import Sandbox

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    torch.manual_seed(seed)
    settings = CodeEnvSettings()
    sandbox = Sandbox(settings.isolation, settings.shell_limits(), max_concurrent=1)
    infos = [dict(plain(i)) for i in pd.read_parquet(tasks_parquet)["extra_info"]][:limit]
    played: list[CodeEpisodeResult] = []
    with WorkspacePool(sandbox, 1) as pool:
        for info in infos:
            played += [play(model, tokenizer, info, pool, do_sample=do_sample) for _ in range(n)]
    shares = {k: sum(getattr(e, k) for e in played) / len(played) for k in SHARES}
    scores = [e.score for e in played]
    return {
        **shares,
        "mean_score": sum(scores) / len(scores),
        "episodes": len(played),
        "scores": scores,
    }
