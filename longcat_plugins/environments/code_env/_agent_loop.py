"""``longcat_code_agent``: the tool-agent loop over a code episode (import via the plugin host or this module).

The loop is :class:`~longcat_plugins.environments._agent_loop.LongcatToolAgentLoop` itself (model
turn -> verl's hermes parser -> tools -> context management, reward delivered as
``reward_score``); this subclass only opens a :class:`~.episode.CodeEpisode` instead of a
tool-use environment episode, ends the trajectory on ``submit``, returns the workspace to the
pool, and marks the sample invalid (NaN, ``longcat_reward_valid = 0``) when the sandbox failed.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, fields
from typing import Any

from longcat_plugins.environments._agent_loop import LongcatToolAgentLoop, ToolAgentSettings
from longcat_plugins.environments.code_env.episode import CodeEnvSettings, CodeEpisode
from longcat_plugins.environments.code_env.tasks import AGENT_NAME

#: how often an episode waiting for a free workspace looks again (s)
ACQUIRE_POLL_S = 0.05


@dataclass(frozen=True)
class CodeAgentSettings(ToolAgentSettings, CodeEnvSettings):
    """Settings of ``longcat_code_agent`` (``longcat.settings.environment.longcat_code_agent``):
    the tool-agent loop's plus the sandbox and pool knobs of :class:`CodeEnvSettings`."""

    #: a model turn carries whole files (write_file, edit): more room than a tool-use turn
    max_turn_tokens: int = 1024
    #: file contents and shell output are longer than tool-use JSON
    max_tool_response_chars: int = 4000

    def __post_init__(self) -> None:
        ToolAgentSettings.__post_init__(self)
        CodeEnvSettings.__post_init__(self)

    def env(self) -> CodeEnvSettings:
        """The environment's own settings (the key of the process's workspace pool)."""
        return CodeEnvSettings(**{f.name: getattr(self, f.name) for f in fields(CodeEnvSettings)})


def load_code_settings() -> CodeAgentSettings:
    """The settings from the process's ``longcat:`` selection (defaults when the host has none)."""
    from longcat_plugins.host import UnknownComponentError, get_host

    try:
        found = get_host().settings_for("environment", AGENT_NAME)
    except UnknownComponentError:
        return CodeAgentSettings()
    return found if found is not None else CodeAgentSettings()


class LongcatCodeAgentLoop(LongcatToolAgentLoop):
    """Fix a repository in a sandboxed workspace with search, read, write, edit and shell tools, rewarded by hidden tests."""

    def __init__(self, *args: Any, settings: CodeAgentSettings | None = None, **kwargs: Any) -> None:
        super().__init__(*args, settings=settings if settings is not None else load_code_settings(), **kwargs)
        self._episode: CodeEpisode | None = None

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        try:
            return await super().run(sampling_params, **kwargs)
        finally:
            if self._episode is not None:
                await asyncio.get_running_loop().run_in_executor(None, self._episode.close)

    async def _open_episode(self, extra_info: Any, level: int) -> CodeEpisode:
        """A workspace from the pool; waiting happens here, on the event loop, never in an executor thread
        (threads parked in the pool would starve the tool calls of the episodes that hold workspaces)."""
        settings = self.settings.env()  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        while True:
            try:
                self._episode = await loop.run_in_executor(None, lambda: _open_now(extra_info, settings))
                return self._episode
            except TimeoutError:
                await asyncio.sleep(ACQUIRE_POLL_S)

    def _episode_done(self, episode: Any) -> bool:
        return bool(getattr(episode, "submitted", False))

    def _infra_error(self, outcome: Any) -> str | None:
        """A sandbox that failed scores NaN: the sample is invalid, with the sandbox's reason."""
        if math.isfinite(float(outcome.score)):
            return None
        return str(outcome.notes.get("infra_error", "sandbox failure"))[:500]


def _open_now(extra_info: Any, settings: CodeEnvSettings) -> CodeEpisode:
    """Open an episode if a workspace is free now; TimeoutError otherwise."""
    return CodeEpisode.open(extra_info, settings, timeout=0)
