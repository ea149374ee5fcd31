"""Two GRPO steps through stock ``main_ppo`` with ``longcat_code_agent`` on generated repository tasks (CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import trained_steps

from longcat_plugins.learning.assets import Assets
from longcat_plugins.runtime.launch import FP32_TRAINING, resolve_config, run_training


@pytest.mark.slow
@pytest.mark.ray
def test_two_grpo_steps_through_the_code_agent(tiny_assets: Assets, tmp_path: Path, ray_tmp: Path) -> None:
    import pandas as pd

    from longcat_plugins.environments.code_env.tasks import write_tasks

    tasks = write_tasks(tmp_path / "code", 4, seed=0, mode="bug", hidden=4)  # untouched repos pass some tests
    val = tmp_path / "val.parquet"
    pd.read_parquet(tasks).head(2).to_parquet(val)
    result = run_training(
        resolve_config("code_agent_cpu"),
        [
            f"data.train_files={tasks}",
            f"data.val_files={val}",
            f"actor_rollout_ref.model.path={tiny_assets.model}",
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
            *FP32_TRAINING,
            "trainer.val_before_train=true",
            "trainer.test_freq=-1",
        ],
        tmp_path / "run",
    )
    by_step = trained_steps(result)
    for step in (1, 2):
        # hidden tests on the (untouched) repositories: the broken function passes some, not all
        assert 0.0 < by_step[step]["critic/score/mean"] < 1.0
        assert by_step[step]["prompt_length/max"] < 2048
    prefix = "val-aux/longcat_code_env/"
    for key in ("env_rubric_score", "env_turns", "env_tool_calls", "env_tool_errors", "longcat_reward_valid"):
        assert f"{prefix}{key}/mean@1" in by_step[0], sorted(by_step[0])
    assert by_step[0][f"{prefix}longcat_reward_valid/mean@1"] == 1.0  # the sandbox worked in the Ray workers
