"""The built-in environments family (2601 report §3.1.1, §3.3.2-3.3.3); exposed as plugin ``longcat.environments`` by :mod:`longcat_plugins.builtins`."""

from __future__ import annotations

from longcat_plugins.components import Component


def components() -> list[Component]:
    """The environments components this package ships, named by ``module:attr``: the agent
    loop and tool subclass verl classes and are imported only when used."""
    from longcat_plugins.components import AgentLoop, Tool

    mod = "longcat_plugins.environments"
    return [
        AgentLoop(
            "longcat_tool_agent",
            f"{mod}._agent_loop:LongcatToolAgentLoop",
            config=f"{mod}._agent_loop:ToolAgentSettings",
            summary=(
                "Multi-turn tool use against a longcat environment episode, rewarded by its rubric, "
                "with context management (2601 report §3.3.2)."
            ),
        ),
        AgentLoop(
            "longcat_tool_agent_no_tools",
            f"{mod}.no_tools:NoToolsAgentLoop",
            config=f"{mod}._agent_loop:ToolAgentSettings",
            summary="The tool agent's episode with no tools offered and none executed (the without-tools path of tool-necessity selection).",
        ),
        AgentLoop(
            "longcat_single_turn",
            "longcat_plugins.data.agent_loop:BudgetedSingleTurnAgentLoop",
            summary="verl's single-turn agent loop with a per-request response budget (``longcat_max_tokens``).",
        ),
        AgentLoop(
            "longcat_code_agent",
            f"{mod}.code_env._agent_loop:LongcatCodeAgentLoop",
            config=f"{mod}.code_env._agent_loop:CodeAgentSettings",
            summary=(
                "Fix a repository in a sandboxed workspace with search, read, write, edit and shell tools, "
                "rewarded by hidden tests."
            ),
        ),
        AgentLoop(
            "longcat_heavy_thinking",
            f"{mod}._heavy_agent_loop:LongcatHeavyThinkingAgentLoop",
            config=f"{mod}.heavy_thinking:HeavyThinkingSettings",
            summary=(
                "K parallel reasoning trajectories, then a summary over their answers that writes the final "
                "response (2601 report §4)."
            ),
        ),
        Tool(
            "longcat_env_tool",
            f"{mod}._tools_verl:EnvironmentTool",
            summary="One tool of a longcat environment, executed against the trajectory's episode.",
        ),
    ]
