"""Episodes from dataset rows: environments loaded once per process, one fresh episode per sample.

verl-free on purpose: the agent loop, the verl tools and the reward function all open episodes
the same way, and the reward function runs in processes that never import verl's agent loop.
"""

from __future__ import annotations

from typing import Any

from longcat_plugins.per_process import PerProcess
from longcat_plugins.rewards.plain import plain

AGENT_NAME = "longcat_tool_agent"

_ENVIRONMENTS: PerProcess[str, Any] = PerProcess()
_env_cache = _ENVIRONMENTS.values


def load_environment_cached(env_path: str) -> Any:
    """The environment at ``env_path``, loaded once per process."""

    def load() -> Any:
        from longcat_plugins.environments.runtime import load_environment

        return load_environment(env_path)

    return _ENVIRONMENTS.get(env_path, load)


def episode_spec(extra_info: Any, where: str = "extra_info") -> tuple[str, str, int]:
    """(env_path, task_id, seed) of a sample; a ValueError naming the missing key otherwise."""
    info = plain(extra_info) or {}
    if not isinstance(info, dict):
        raise ValueError(f"{where} must be a mapping with env_path and task_id, got {type(info).__name__}")
    missing = [k for k in ("env_path", "task_id") if not info.get(k)]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}: a {AGENT_NAME} sample needs env_path and task_id")
    seed = info.get("seed", info.get("index", 0))
    return str(info["env_path"]), str(info["task_id"]), int(seed or 0)


def open_episode(extra_info: Any, noise_level: int = -1) -> Any:
    """A fresh episode for one sample (``extra_info`` as the env generator writes it).

    ``noise_level`` >= 0 forces that rung of the noise ladder (E3); otherwise the sample's own
    ``noise_level`` applies, and without one the episode is clean.
    """
    env_path, task_id, seed = episode_spec(extra_info)
    env = load_environment_cached(env_path)
    info = plain(extra_info)
    level = noise_level if noise_level >= 0 else info.get("noise_level") if isinstance(info, dict) else None
    if level is None or int(level) < 0:
        return env.new_episode(task_id, seed=seed)
    from longcat_plugins.environments.noise import NoiseConfig

    return env.new_episode(task_id, seed=seed, noise=NoiseConfig.at_level(int(level)))
