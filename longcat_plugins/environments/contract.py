"""The tool-use environment contract: what an agent loop codes against (E1).

An :class:`Environment` is one generated environment on disk (a tau2-bench-like folder: ``db.json``,
``tools.json``, ``policy.md``, ``tasks.json``, ``domain.json``; loaded by
:func:`longcat_plugins.environments.runtime.load_environment`); it hands out isolated
:class:`Episode` objects, one per rollout. Everything the model sees is a string; nothing an episode
does raises on bad model input (a bad call is an error :class:`ToolResult`), so a rollout never dies
on the policy's mistakes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from longcat_plugins.config import ConfigError

if TYPE_CHECKING:
    from longcat_plugins.environments.noise import NoiseConfig


class EnvironmentError_(Exception):
    """Base of the environments family's errors (bad spec, bad environment folder, unknown task)."""


class SpecError(ConfigError, EnvironmentError_):
    """A domain spec is malformed; the message names the file and every bad key path."""


class EnvironmentLoadError(EnvironmentError_, ValueError):
    """An environment folder is missing a file or holds inconsistent data; the message names it."""


@dataclass(frozen=True)
class ToolResult:
    """One tool response: ``content`` is what the model sees (JSON text)."""

    content: str
    #: False: error response (bad args, precondition failed, injected transient failure)
    ok: bool
    #: simulated latency of this call in seconds (tool noise records it; nothing sleeps)
    latency_s: float = 0.0
    #: True when this error is an injected transient failure: retrying the same call can succeed
    transient: bool = False


@dataclass(frozen=True)
class Outcome:
    """How an episode ended against its task's rubric."""

    success: bool
    #: in [0, 1]; fraction of rubric items met
    score: float
    #: per-rubric-item results (``index:kind[:what]`` -> bool), for metrics
    details: dict[str, Any] = field(default_factory=dict)
    #: diagnostics that are not rubric items (e.g. ``stray_changes``: what ``no_collateral`` saw)
    notes: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Episode(Protocol):
    """One isolated rollout of one task: its own database state, noise stream and user simulator."""

    task_id: str
    domain: str
    noise_level: int

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function schemas ``{"type": "function", "function": {name, description, parameters}}``."""
        ...

    def system_prompt(self) -> str:
        """The domain policy text."""
        ...

    def first_user_message(self) -> str:
        """What the user opens the conversation with."""
        ...

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run one tool call; never raises on bad model input."""
        ...

    def user_reply(self, assistant_text: str) -> str | None:
        """The user simulator's answer to an assistant message; None = the user ends the conversation."""
        ...

    def evaluate(self, final_answer: str = "") -> Outcome:
        """Check the final database state and the required outputs against the rubric."""
        ...

    def golden_chain(self) -> list[tuple[str, dict[str, Any]]]:
        """A valid solution (tool name, arguments) in order, for tests and scripted policies."""
        ...


@runtime_checkable
class TaskInfo(Protocol):
    """What an :class:`Environment` lists about each of its tasks."""

    task_id: str


class Environment(Protocol):
    """A loaded environment: its tasks and a factory of isolated episodes."""

    domain: str
    path: Path
    tasks: list[Any]

    def new_episode(self, task_id: str, *, seed: int, noise: NoiseConfig | None = None) -> Episode:
        """A fresh episode of ``task_id`` (copy-on-write over the shared initial database)."""
        ...


def __getattr__(name: str) -> Any:
    """``contract.load_environment``, for one release: it lives in :mod:`.runtime` now (the contract
    is the family's leaf, so it names no implementation). Resolved by name so the contract keeps
    no import of the runtime."""
    if name == "load_environment":
        import importlib
        import warnings

        new = "longcat_plugins.environments.runtime"
        warnings.warn(
            f"{__name__}.load_environment moved to {new}.load_environment: import it from there "
            "(the old path is removed in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new).load_environment
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
