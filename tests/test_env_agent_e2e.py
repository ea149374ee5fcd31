"""Two GRPO steps through stock ``main_ppo`` with ``longcat_tool_agent`` on generated environments (CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import trained_steps

from longcat_plugins.learning.assets import Assets
from longcat_plugins.runtime.launch import FP32_TRAINING, resolve_config, run_training


@pytest.mark.slow
@pytest.mark.ray
def test_two_grpo_steps_through_the_agent_loop(tiny_assets: Assets, tmp_path: Path, ray_tmp: Path) -> None:
    import pandas as pd

    from longcat_plugins.environments.envgen import generate_environments

    generate_environments("retail", 2, tmp_path / "envs", seed=0)  # 6 tasks: 3 batches of 2
    tasks = tmp_path / "envs" / "tasks.parquet"
    val = tmp_path / "val.parquet"  # validation (it logs the episode metrics) on two tasks keeps the run short
    val_rows = pd.read_parquet(tasks).head(2)
    # a validation split at a fixed noise level: it keeps its level and does not feed the curriculum
    val_rows["extra_info"] = [{**dict(i), "split": "test", "noise_level": 2} for i in val_rows["extra_info"]]
    val_rows.to_parquet(val)
    result = run_training(
        resolve_config("tool_agent_cpu"),
        [
            f"data.train_files={tasks}",
            f"data.val_files={val}",
            f"actor_rollout_ref.model.path={tiny_assets.model}",
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
            *FP32_TRAINING,
            "trainer.val_before_train=true",
            f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
            "trainer.save_freq=2",  # one checkpoint at the end: the curriculum's state goes into it
            "trainer.test_freq=2",  # and a validation after training: the curriculum's metrics moved
            # every segment is summarised by the model after its first turn (the summary wins over
            # the recipe's discard limit), so every trajectory of two or more turns has segments
            "longcat.settings.environment.longcat_tool_agent.summary_threshold_tokens=1",
        ],
        tmp_path / "run",
    )
    by_step = trained_steps(result)
    for step in (1, 2):
        assert by_step[step]["training/num_turns/mean"] >= 2
        # the rubric scores are what trains: the random model solves nothing (a do-nothing episode
        # earns nothing, its no-collateral items included)
        assert 0.0 <= by_step[step]["critic/score/mean"] < 1.0
        assert by_step[step]["prompt_length/max"] < 4096  # policy + tools fit: nothing was cut off
    # the loop's episode metrics, logged by verl's validation from reward_extra_info
    val = by_step[0]
    prefix = "val-aux/longcat_env/retail/"
    for key in (
        "env_success",
        "env_rubric_score",
        "env_turns",
        "env_tool_calls",
        "env_tool_errors",
        "env_noise_level",
        "env_segments",
    ):
        assert f"{prefix}{key}/mean@1" in val, sorted(val)
    assert val[f"{prefix}env_noise_level/mean@1"] == 2.0  # the validation rows' own noise level
    # the run-wide curriculum's metrics ride on every sample (validation logs them; nothing trained yet)
    assert val[f"{prefix}env_curriculum_level/mean@1"] == 2.0
    assert val[f"{prefix}env_curriculum_level0_n/mean@1"] == 0.0
    assert val[f"{prefix}env_turns/mean@1"] >= 1.0
    assert val[f"{prefix}env_summaries/mean@1"] > 0  # context management ran, through the real rollout
    assert val[f"{prefix}env_segments/mean@1"] > 1
    # segments are trained as their own samples: more dumped samples than trajectories (2 prompts x n=2)
    dumps = sorted((tmp_path / "rollouts").glob("*.jsonl"))
    rows = [json.loads(line) for line in dumps[0].read_text().splitlines()]
    assert len(rows) > 4, len(rows)
    # the training episodes (in verl's agent-loop worker) fed the one curriculum: verl's v1 checkpoint
    # hook saved it with every training trajectory (2 steps x 2 prompts x n=2) counted
    state = json.loads((result.checkpoints / "global_step_2" / "longcat_noise_curriculum.json").read_text())
    assert state["curriculum"]["seen"] == 8, state
    assert state["curriculum"]["per_level"]["0"][1] > 0  # clean episodes measured the gap (seeded draws)
    # and the validation after training logs the moved curriculum (outcomes at clean and noisy levels)
    after = by_step[2]
    counted = sum(after[f"{prefix}env_curriculum_level{k}_n/mean@1"] for k in range(5))
    assert counted > 0 and f"{prefix}env_curriculum_gap/mean@1" in after, sorted(after)
    # the worker-side metrics and the driver-side checkpoint read the same actor
    assert after[f"{prefix}env_curriculum_level/mean@1"] == state["curriculum"]["level"]
    assert after[f"{prefix}env_curriculum_raises/mean@1"] == len(state["curriculum"]["raises"])
