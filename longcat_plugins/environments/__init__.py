"""The built-in environments family (2601 report §3.1.1, §3.3.2-3.3.3); exposed as plugin ``longcat.environments`` by :mod:`longcat_plugins.builtins`."""

from __future__ import annotations

from longcat_plugins.components import Component


def components() -> list[Component]:
    """The environments components this package ships; the family's modules are imported here, lazily."""
    try:  # the agent loop and tools subclass verl classes; without verl there is nothing to register
        # import verl's agent-loop module first: importing it fires the bridge (which may build the
        # process-wide host and so call this function again) before our modules are half-initialised
        import verl.experimental.agent_loop.agent_loop  # noqa: F401
        import verl.tools.base_tool  # noqa: F401
    except ImportError:
        return []
    from longcat_plugins.components import AgentLoop, Tool
    from longcat_plugins.environments import _agent_loop as agent_loop
    from longcat_plugins.environments import _tools_verl as tools_verl

    return [
        AgentLoop(agent_loop.AGENT_NAME, agent_loop.LongcatToolAgentLoop, config=agent_loop.ToolAgentSettings),
        Tool("longcat_env_tool", tools_verl.EnvironmentTool),
    ]
