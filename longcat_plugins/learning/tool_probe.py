"""A quick, in-process look at what a tool-use checkpoint does on held-out tasks (no Ray).

Each task of a ``longcat_tool_agent`` parquet is played through a fresh clean episode the way the
agent loop plays it: the loop's opening messages, one model turn at a time (plain transformers
``generate``, at most ``max_turn_tokens``), the turn read by verl's own tool parser, the calls run
against the episode, the results appended as tool messages, a turn without a call ending the
episode when the simulated user has nothing to add, and the rubric scoring the final answer.

Counted per episode, so a failure can be placed: was the first turn a well-formed hermes call
(``well_formed``), to the golden chain's first tool (``right_tool``) with its arguments
(``right_args``)? Did every golden call happen (``golden_calls``)? Did the model stop with an
answer (``finished``), and was the rubric met (``success``, what the RL reward's ``acc`` is)?
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the counts :func:`probe` reports, as shares of the episodes played
SHARES = ("well_formed", "right_tool", "right_args", "golden_calls", "finished", "success")


@dataclass
class Episode:
    """What one played episode did (see the module doc for each field)."""

    well_formed: bool = False
    right_tool: bool = False
    right_args: bool = False
    golden_calls: bool = False
    finished: bool = False
    success: bool = False


def next_turn(
    model: Any, tokenizer: Any, messages: list[dict[str, Any]], max_turn_tokens: int, do_sample: bool
) -> list[int]:
    """The token ids of the model's next assistant turn after ``messages`` (plain transformers)."""
    import torch

    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    prompt = torch.tensor([list(ids)])
    with torch.no_grad():
        gen = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=max_turn_tokens,
            do_sample=do_sample,
            temperature=1.0 if do_sample else None,
            top_p=None,
            top_k=None,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    return gen[0, prompt.shape[1] :].tolist()


def play(
    model: Any,
    tokenizer: Any,
    info: dict[str, Any],
    *,
    do_sample: bool,
    max_turns: int = 4,
    max_turn_tokens: int = 64,
    tools_style: str = "compact",
) -> Episode:
    """One episode of the task ``info`` (an env generator ``extra_info``) at noise 0."""
    from verl.experimental.agent_loop.tool_parser import ToolParser

    from longcat_plugins.environments.agent_loop import opening_messages, tool_message_body
    from longcat_plugins.environments.episodes import open_episode

    episode = open_episode({**info, "noise_level": 0})
    golden = [(n, dict(a)) for n, a in episode.golden_chain()]
    system, question, _ = opening_messages(episode, tools_style, False)
    messages: list[dict[str, Any]] = [system, question]
    parser = ToolParser.get_tool_parser("hermes", tokenizer)
    made: list[tuple[str, Any]] = []
    out = Episode()
    final = ""
    for turn in range(max_turns):
        new = next_turn(model, tokenizer, messages, max_turn_tokens, do_sample)
        content, calls = asyncio.run(parser.extract_tool_calls(new, None))
        text = tokenizer.decode(new, skip_special_tokens=True)
        if turn == 0 and calls:
            out.well_formed = True
            name, args = calls[0].name, call_arguments(calls[0].arguments)
            out.right_tool = bool(golden) and name == golden[0][0]
            out.right_args = out.right_tool and args == golden[0][1]
        if calls:
            messages.append({"role": "assistant", "content": text})
            for call in calls:
                args = call_arguments(call.arguments)
                made.append((call.name, args))
                result = episode.call_tool(call.name, args) if isinstance(args, dict) else None
                body = tool_message_body(result.content, 2000) if result is not None else "Error: arguments"
                messages.append({"role": "tool", "name": call.name, "content": body})
            continue
        reply = episode.user_reply(content or text)
        if reply is None:
            final, out.finished = content or text, True
            break
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": str(reply)}]
    out.golden_calls = all(g in made for g in golden)
    out.success = bool(episode.evaluate(final).success)
    return out


def probe(model_dir: Path, tasks_parquet: Path, n: int = 1, do_sample: bool = False, seed: int = 0) -> dict[str, Any]:
    """Shares of :data:`SHARES` over ``n`` episodes per task, and per task how many succeeded."""
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from longcat_plugins.rewards.plain import plain

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    torch.manual_seed(seed)
    per_task: list[int] = []
    played: list[Episode] = []
    for info in pd.read_parquet(tasks_parquet)["extra_info"]:
        eps = [play(model, tokenizer, dict(plain(info)), do_sample=do_sample) for _ in range(n)]
        played += eps
        per_task.append(sum(e.success for e in eps))
    shares = {k: sum(getattr(e, k) for e in played) / len(played) for k in SHARES}
    return {**shares, "episodes": len(played), "successes_per_task": per_task}


def call_arguments(arguments: Any) -> Any:
    """A parsed tool call's arguments: the JSON they spell, or the raw text when it is not JSON
    (the probes then answer the call with an error instead of running it)."""
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return arguments
