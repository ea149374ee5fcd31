"""Implementation of :mod:`longcat_plugins.environments.tools_verl` (import that module, not this one)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from longcat_plugins.atomic import write_parquet_atomic, write_text_atomic
from longcat_plugins.environments.episodes import load_environment_cached, open_episode

#: key of the episode outcome in ``agent_data.extra_fields`` (and so in the reward's ``extra_info``)
EPISODE_KEY = "longcat_episode"
MAX_OPEN_EPISODES = 4096


class _Episodes:
    """Open episodes by trajectory id, least recently used dropped first."""

    def __init__(self, capacity: int = MAX_OPEN_EPISODES) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_open(self, key: str, create_kwargs: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            state = self._items.get(key)
            if state is not None:
                self._items.move_to_end(key)
                return state
        episode = open_episode(create_kwargs, int(create_kwargs.get("noise_level", -1)))
        state = {"episode": episode, "calls": 0, "errors": 0}
        with self._lock:
            state = self._items.setdefault(key, state)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return state


_episodes = _Episodes()


class EnvironmentTool(BaseTool):
    """One tool of a longcat environment, executed against the trajectory's episode.

    Tool config entry (see :func:`write_tool_config`)::

        - class_name: longcat_plugins.environments.tools_verl.EnvironmentTool
          config: {type: native, env_path: /path/to/env, name: cancel_order}

    ``tool_schema`` may be omitted: it is read from the environment.
    """

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None) -> None:
        self.env_path = str(config.get("env_path") or "")
        if tool_schema is None:
            name = config.get("name")
            if not self.env_path or not name:
                raise ValueError(f"{type(self).__name__}: config needs env_path and name when tool_schema is omitted")
            tool_schema = schema_from_environment(self.env_path, str(name))
        self._create_kwargs: dict[str, dict[str, Any]] = {}
        super().__init__(config, tool_schema)

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id, response = await super().create(instance_id)
        create_kwargs = dict(kwargs.get("create_kwargs") or {})
        create_kwargs.setdefault("env_path", self.env_path)
        self._create_kwargs[instance_id] = create_kwargs
        return instance_id, response

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        create_kwargs = self._create_kwargs.get(instance_id, {"env_path": self.env_path})
        agent_data = kwargs.get("agent_data")
        if not create_kwargs.get("task_id"):  # one shared entry serves every tool of the sample
            create_kwargs = {**create_kwargs, **_shared_create_kwargs(agent_data)}
        key = getattr(agent_data, "request_id", None) or instance_id
        state = _episodes.get_or_open(key, create_kwargs)
        episode = state["episode"]
        result = episode.call_tool(self.name, dict(parameters or {}))
        state["calls"] += 1
        state["errors"] += int(not result.ok)
        outcome = episode.evaluate("")
        record = {
            "score": float(outcome.score),
            "success": float(bool(outcome.success)),
            "tool_calls": float(state["calls"]),
            "tool_errors": float(state["errors"]),
            "noise_level": float(getattr(episode, "noise_level", 0) or 0),
        }
        if agent_data is not None:
            agent_data.extra_fields[EPISODE_KEY] = record
        return ToolResponse(text=str(result.content)), 0.0, {"ok": bool(result.ok)}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._create_kwargs.pop(instance_id, None)


def _shared_create_kwargs(agent_data: Any) -> dict[str, Any]:
    for entry in (getattr(agent_data, "tools_kwargs", None) or {}).values():
        create = (entry or {}).get("create_kwargs") or {}
        if create.get("task_id"):
            return dict(create)
    return {}


def as_tool_agent_dataset(tasks_parquet: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """A copy of an env-generator parquet for verl's stock ``tool_agent``: ``agent_name`` set to
    ``tool_agent`` and ``extra_info.tools_kwargs.longcat_env.create_kwargs`` naming the episode
    (every :class:`EnvironmentTool` of the sample reads that one entry). Written atomically."""
    import pandas as pd

    df = pd.read_parquet(tasks_parquet)
    if "extra_info" not in df.columns:
        raise ValueError(f"{tasks_parquet}: no extra_info column (not an env-generator parquet)")

    def with_kwargs(info: Any) -> dict[str, Any]:
        info = dict(info)
        missing = [k for k in ("env_path", "task_id") if not info.get(k)]
        if missing:
            raise ValueError(f"{tasks_parquet}: extra_info of row {info.get('index')} lacks {', '.join(missing)}")
        create = {"env_path": str(info["env_path"]), "task_id": str(info["task_id"])}
        return {**info, "tools_kwargs": {"longcat_env": {"create_kwargs": create}}}

    df["extra_info"] = df["extra_info"].map(with_kwargs)
    df["agent_name"] = "tool_agent"
    return write_parquet_atomic(df, out)


def schema_from_environment(env_path: str, name: str) -> OpenAIFunctionToolSchema:
    """verl's schema object for tool ``name`` of the environment at ``env_path``."""
    env = load_environment_cached(env_path)
    first_task = env.tasks[0]
    task_id = getattr(first_task, "task_id", first_task)
    episode = env.new_episode(str(task_id), seed=0)
    for spec in episode.tool_schemas():
        fn = spec.get("function", spec)
        if fn.get("name") == name:
            return OpenAIFunctionToolSchema.model_validate(
                {"type": "function", "function": {**fn, "description": fn.get("description") or name}}
            )
    raise ValueError(f"environment {env_path} has no tool {name!r}")


def write_tool_config(env_path: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write a ``multi_turn.tool_config_path`` file listing every tool of one environment (atomically)."""
    import yaml

    env = load_environment_cached(str(env_path))
    first_task = env.tasks[0]
    episode = env.new_episode(str(getattr(first_task, "task_id", first_task)), seed=0)
    tools = []
    for spec in episode.tool_schemas():
        fn = spec.get("function", spec)
        tools.append(
            {
                "class_name": "longcat_plugins.environments.tools_verl.EnvironmentTool",
                "config": {"type": "native", "env_path": str(env_path), "name": fn["name"]},
                "tool_schema": {
                    "type": "function",
                    "function": {**fn, "description": fn.get("description") or fn["name"]},
                },
            }
        )
    return write_text_atomic(out, yaml.safe_dump({"tools": tools}, sort_keys=False))
