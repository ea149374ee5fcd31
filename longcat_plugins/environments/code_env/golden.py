"""Golden trajectories of code tasks, rendered exactly as ``longcat_code_agent`` builds them.

A random model never calls a tool, so GRPO through the code loop has no gradient. A warm start
is supervised fine-tuned on these trajectories first: each task's golden fix played through a
real :class:`~.episode.CodeEpisode` (a pooled, sandboxed workspace) as ``read_file`` of the target
module (optionally a ``search`` for the function first), the task's one golden ``edit``, and
``submit``. The opening messages come from the loop's own code
(:func:`~longcat_plugins.environments.agent_loop.opening_messages`), every assistant turn is one
hermes ``<tool_call>``, every tool message is the real result the episode returned, and the last
message is ``submit``'s result (the loop appends it before the trajectory ends). A trajectory
whose hidden tests do not all pass is rejected, so SFT never teaches an unrewarded fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from longcat_plugins.environments.code_env.episode import CodeEnvSettings, CodeEpisode
from longcat_plugins.environments.code_env.pool import WorkspacePool
from longcat_plugins.environments.code_env.tasks import CodeTask
from longcat_plugins.environments.golden import GoldenChainError, RenderSettings, hermes_call
from longcat_plugins.rewards.plain import plain


def golden_calls(task: CodeTask, search: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """The short solving chain: (search,) read the target module, the golden edit, submit."""
    fix = task.golden_edit
    calls: list[tuple[str, dict[str, Any]]] = [("search", {"pattern": f"def {task.fn}"})] if search else []
    return [
        *calls,
        ("read_file", {"path": fix["path"]}),
        ("edit", {"path": fix["path"], "old": fix["old"], "new": fix["new"]}),
        ("submit", {}),
    ]


def golden_messages(
    extra_info: dict[str, Any], pool: WorkspacePool, settings: CodeEnvSettings, render: RenderSettings, search: bool
) -> list[dict[str, Any]]:
    """The chat of one task solved by its golden chain on a workspace of ``pool`` (real tool results)."""
    from longcat_plugins.environments.agent_loop import opening_messages, tool_message_body
    from longcat_plugins.environments.code_env.episode import get_task

    info = dict(plain(extra_info))
    task = get_task(str(info["task_dir"]))
    episode = CodeEpisode(task, pool, settings, pool.acquire(str(info["task_dir"])))
    try:
        # the code tokenizer's template has no tools slot: the tool block goes to the system prompt
        system, question, _ = opening_messages(episode, render.tools_style, False)
        messages: list[dict[str, Any]] = [system, question]
        where = f"{info['task_dir']}"
        for name, args in golden_calls(task, search):
            result = episode.call_tool(name, args)
            if not result.ok:
                raise GoldenChainError(f"{where}: golden call {name} failed: {result.content}")
            messages.append({"role": "assistant", "content": hermes_call(name, args)})
            body = tool_message_body(result.content, render.max_tool_response_chars)
            messages.append({"role": "tool", "name": name, "content": body})
        outcome = episode.evaluate()
        if not outcome.success:
            raise GoldenChainError(f"{where}: the golden fix does not pass the hidden tests: {outcome.details}")
    finally:
        episode.close()
    return messages


def sft_rows(
    infos: Iterable[dict[str, Any]], settings: CodeEnvSettings, render: RenderSettings, search_every: int = 0
) -> list[dict[str, Any]]:
    """One SFT row per task (``extra_info`` of :func:`~.tasks.task_rows`), in order; every
    ``search_every``-th trajectory (0: none) starts with a ``search`` for the function."""
    from longcat_plugins.rewards.sandbox import Sandbox

    sandbox = Sandbox(
        settings.isolation, settings.shell_limits(), max_concurrent=1, work_root=settings.work_root or None
    )
    rows = []
    with WorkspacePool(sandbox, 1) as pool:
        for k, info in enumerate(infos):
            search = search_every > 0 and k % search_every == search_every - 1
            rows.append(
                {
                    "messages": golden_messages(info, pool, settings, render, search),
                    "task_dir": str(info["task_dir"]),
                    "task_id": str(info["task_id"]),
                }
            )
    return rows
