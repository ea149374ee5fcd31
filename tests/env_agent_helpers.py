"""Shared pieces of the agent-loop tests (a pytest plugin of tests/conftest.py, for its fixtures): verl's real agent-loop objects around a scripted server.

The server stands in for the rollout replica only: it returns token ids (encoded with the tiny
tokenizer) of whatever the script says, and the loop under test is verl's ``AgentLoopBase``
machinery (continuous-token builder, hermes parser) plus ours.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.workers.rollout.replica import TokenOutput

from longcat_plugins.environments import episodes
from longcat_plugins.environments.agent_loop import LongcatToolAgentLoop, ToolAgentSettings


def hermes(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


class ScriptedModel:
    """A stand-in for a transformers model in the in-process probes: ``generate`` answers each turn
    with the next scripted text and EOS, then ``last`` once the script is spent (the probe's
    harness under test, not a model)."""

    def __init__(self, tokenizer: Any, turns: list[str], last: str = "Done.") -> None:
        self.tokenizer, self.turns, self.last = tokenizer, list(turns), last

    def generate(self, prompt: Any, **kwargs: Any) -> Any:
        import torch

        text = self.turns.pop(0) if self.turns else self.last
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return torch.cat([prompt, torch.tensor([ids])], dim=1)


class ScriptedServer:
    """``server_manager.generate`` that replies with the next scripted text (or ``reply(prompt_text)``).

    Records every request (prompt ids, sampling params) for the assertions.
    """

    def __init__(self, tokenizer: Any, script: list[str] | Callable[[str], str]) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.requests: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kw: Any):
        prompt_text = self.tokenizer.decode(prompt_ids)
        self.requests.append({"prompt_ids": list(prompt_ids), "params": dict(sampling_params), "text": prompt_text})
        if callable(self.script):
            text = self.script(prompt_text)
        else:
            text = self.script.pop(0) if self.script else "I am done."
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        ids = ids[: int(sampling_params.get("max_tokens", len(ids)))]
        return TokenOutput(
            token_ids=ids,
            log_probs=[-0.5] * len(ids),
            stop_reason="completed",
            # what verl's LLMServerClient adds to every replica output
            extra_fields={"global_steps": 3, "min_global_steps": 3, "max_global_steps": 3},
        )


def build_loop(loop_cls: Any, config: Any, server: Any, tokenizer: Any, settings: Any) -> Any:
    """An agent loop of ``loop_cls`` on ``config`` (a trainer config) and a scripted server, as verl's worker builds it."""
    return loop_cls(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap(config.data),
        settings=settings,
    )


def make_loop(
    tokenizer: Any,
    server: ScriptedServer,
    settings: ToolAgentSettings,
    *,
    prompt_length: int = 2048,
    response_length: int = 2048,
    use_v1: bool = True,
) -> LongcatToolAgentLoop:
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": prompt_length, "response_length": response_length, "multi_turn": {}}
            },
            "trainer": {"use_v1": use_v1},
            "data": {},
        }
    )
    return build_loop(LongcatToolAgentLoop, config, server, tokenizer, settings)


def tiny_tokenizer(root: Path) -> Any:
    from transformers import AutoTokenizer

    from longcat_plugins.learning.assets import build_tokenizer

    if not (root / "tokenizer.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        build_tokenizer(root)
    return AutoTokenizer.from_pretrained(root)


# -- a minimal environment that follows the contract (fixtures ``env`` and ``tokenizer``) -------------------------------------------


@dataclass(frozen=True)
class FakeToolResult:
    content: str
    ok: bool


@dataclass(frozen=True)
class FakeOutcome:
    success: bool
    score: float
    details: dict[str, Any] = field(default_factory=dict)


class KVEpisode:
    """Task: set keys to target values; rubric: fraction of targets met."""

    domain = "kv"

    def __init__(self, task_id: str, target: dict[str, int], noise_level: int = 0) -> None:
        self.task_id, self.target, self.noise_level = task_id, target, noise_level
        self.db: dict[str, int] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def tool_schemas(self) -> list[dict[str, Any]]:
        set_params = {
            "type": "object",
            "properties": {"key": {"type": "string"}, "value": {"type": "integer"}},
            "required": ["key", "value"],
        }
        get_params = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
        return [
            {"type": "function", "function": {"name": "set_value", "description": "set", "parameters": set_params}},
            {"type": "function", "function": {"name": "get_value", "description": "get", "parameters": get_params}},
        ]

    def system_prompt(self) -> str:
        return "You manage a key-value store."

    def first_user_message(self) -> str:
        return "Please set " + ", ".join(f"{k}={v}" for k, v in self.target.items()) + "."

    def call_tool(self, name: str, arguments: dict[str, Any]) -> FakeToolResult:
        self.calls.append((name, arguments))
        if name == "set_value" and isinstance(arguments.get("key"), str) and isinstance(arguments.get("value"), int):
            self.db[arguments["key"]] = arguments["value"]
            return FakeToolResult('{"ok": true}', True)
        if name == "get_value" and isinstance(arguments.get("key"), str):
            return FakeToolResult(str(self.db.get(arguments["key"])), True)
        return FakeToolResult(f'{{"error": "bad call to {name}"}}', False)

    def user_reply(self, assistant_text: str) -> str | None:
        return None

    def evaluate(self, final_answer: str = "") -> FakeOutcome:
        met = sum(self.db.get(k) == v for k, v in self.target.items())
        return FakeOutcome(met == len(self.target), met / len(self.target))

    def golden_chain(self) -> list[tuple[str, dict[str, Any]]]:
        return [("set_value", {"key": k, "value": v}) for k, v in self.target.items()]


class KVEnvironment:
    domain = "kv"

    def __init__(self) -> None:
        self.tasks = ["t0", "t1"]
        self.targets = {"t0": {"a": 1, "b": 2}, "t1": {"x": 7, "y": 8, "z": 9}}
        self.episodes: list[KVEpisode] = []

    def new_episode(self, task_id: str, *, seed: int, noise: Any = None) -> KVEpisode:
        ep = KVEpisode(task_id, copy.deepcopy(self.targets[task_id]))
        self.episodes.append(ep)
        return ep


ENV_PATH = "/fake/kv-env"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> KVEnvironment:
    environment = KVEnvironment()
    monkeypatch.setitem(episodes._env_cache, ENV_PATH, environment)
    return environment
