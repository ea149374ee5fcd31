"""``longcat_tool_agent``: verl's agent loop over a longcat tool-use environment (E1) with E4 context management.

Selected per sample by ``agent_name: longcat_tool_agent`` (the env generator writes it). For each
sample the loop opens an :class:`~longcat_plugins.environments.contract.Episode` from
``extra_info`` (``env_path``, ``task_id``; environments are loaded once per agent-loop worker),
then runs model turn -> verl tool parser -> ``episode.call_tool`` -> tool message, asking the
simulated user (``episode.user_reply``) whenever the model answers without a tool call, until the
user ends, the turn budget or the response length runs out. The rubric outcome
(``episode.evaluate``) is the sample's reward, delivered the verl way: ``AgentLoopOutput.reward_score``
(verl then skips its reward loop for the sample) with the metrics in
``extra_fields["reward_extra_info"]``.

Context management (report §3.3.2): past a token threshold the model summarises the history and
the context restarts as [system, question, summary]; past a turn limit (progressive schedule) a
discard-all reset restarts from [system, question]. The environment's database state survives
both. Every segment becomes its own training output (verl 0.9's v1 trainer stores several
outputs per session, all carrying the trajectory's reward); the legacy trainer accepts exactly
one output per sample, so there only the final segment is trained.
"""

# Import verl's agent-loop module to completion *before* ours: verl's agent_loop.py imports
# another registry (core_algos) half-way through, and the plugin host may be built at that
# moment; the host imports the implementation module (_agent_loop), which must not be the module
# that is half-executed. So this public module is a thin re-export and is never imported by the host.
from __future__ import annotations

import verl.experimental.agent_loop.agent_loop  # noqa: F401  (see above)

from longcat_plugins.environments._agent_loop import (
    METRIC_PREFIX,
    EpisodeStats,
    LongcatToolAgentLoop,
    Segment,
    ToolAgentSettings,
    load_settings,
    opening_messages,
    renders_tools_in_template,
    tool_message_body,
    tools_system_block,
)
from longcat_plugins.environments.episodes import (
    AGENT_NAME,
    episode_spec,
    load_environment_cached,
    open_episode,
)

__all__ = [
    "AGENT_NAME",
    "METRIC_PREFIX",
    "EpisodeStats",
    "LongcatToolAgentLoop",
    "Segment",
    "ToolAgentSettings",
    "episode_spec",
    "load_environment_cached",
    "load_settings",
    "open_episode",
    "opening_messages",
    "renders_tools_in_template",
    "tool_message_body",
    "tools_system_block",
]
