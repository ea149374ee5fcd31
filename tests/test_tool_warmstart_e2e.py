"""The tool-use warm start end to end: verl's SFT trainer builds it, and GRPO through the agent loop then has signal.

A small plan keeps it short (a few SFT steps on ~30 environments' golden trajectories): enough
for the model to answer in hermes tool calls, which is what this checks; how far RL then raises
held-out success is the bench's job (``bench/bench_learning_tool_agent.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from longcat_plugins.runtime.launch import resolve_config, run_training
from longcat_plugins.runtime.tool_warmstart import WarmStartPlan, ensure_tool_warm_start, warm_overrides

PLAN = WarmStartPlan(train_envs=30, val_envs=2, sft_epochs=30, sft_batch_size=32)


@pytest.mark.slow
@pytest.mark.ray
def test_warm_start_makes_tool_calls_and_rewards_vary_within_groups(tmp_path: Path, ray_tmp: Path) -> None:
    cache = tmp_path / "cache"
    warm = ensure_tool_warm_start(cache, PLAN)
    assert warm.exists() and not [p for p in cache.iterdir() if p.name.startswith(".")]  # atomic: no leftovers
    assert json.loads((warm.root / "warmstart.json").read_text())["train_envs"] == PLAN.train_envs
    assert ensure_tool_warm_start(cache, PLAN) == warm  # cached: a second call builds nothing
    overrides = [o for o in warm_overrides(warm, 1) if not o.startswith("data.train_batch_size")]
    result = run_training(
        resolve_config("tool_agent_cpu"),
        [
            *overrides,
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "trainer.total_training_steps=1",
            "trainer.save_freq=-1",
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        ],
        tmp_path / "run",
    )
    assert result.returncode == 0, result.log.read_text()[-5000:]
    by_step = {s["step"]: s for s in result.steps}
    val = by_step[0]
    # the warm start answers with hermes tool calls that the parser reads and the episode runs
    assert val["val-aux/longcat_env/retail/env_tool_calls/mean@1"] > 0, val
    assert val["val-aux/longcat_env/retail/env_format_score/mean@1"] > 0, val
    step = by_step[1]
    assert step["training/num_turns/mean"] > 2  # a tool call, its result, another turn
    # GRPO advantages are nonzero only where rewards differ within a group: there is signal
    assert step["critic/advantages/max"] > 0 > step["critic/advantages/min"], step
