"""``longcat_tool_agent_no_tools``: the tool agent's episode with every tool taken away (E7's second path).

The dual-path tool-necessity selection (first LongCat-Flash-Thinking report, agentic RL) runs each
task twice: with the environment's tools and without them. This loop is ``longcat_tool_agent``
unchanged (same system policy, user simulator, turn and token budgets, rubric reward) except that
the model is shown no tool schemas and any call it writes anyway is answered with an error that
executes nothing, so a task it solves here it solved from the conversation alone.
"""

from __future__ import annotations

from typing import Any

from longcat_plugins.environments._agent_loop import LongcatToolAgentLoop
from longcat_plugins.environments.contract import ToolResult

AGENT_NAME = "longcat_tool_agent_no_tools"
NO_TOOLS_ERROR = '{"error": "no tools are available in this setting"}'


class EpisodeWithoutTools:
    """An episode that lists no tools and executes no call; everything else is the episode's."""

    def __init__(self, episode: Any) -> None:
        self._episode = episode

    def tool_schemas(self) -> list[dict[str, Any]]:
        return []

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(NO_TOOLS_ERROR, ok=False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._episode, name)


class NoToolsAgentLoop(LongcatToolAgentLoop):
    """The tool agent's episode with no tools offered and none executed (the without-tools path of tool-necessity selection)."""

    async def _open_episode(self, extra_info: Any, level: int) -> Any:
        return EpisodeWithoutTools(await super()._open_episode(extra_info, level))
