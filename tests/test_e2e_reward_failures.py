"""Slow: rewards that raise, in real runs of stock ``main_ppo`` on the CPU runtime (issue 32).

* the shipped router recipe (``longcat_router`` + stock ``grpo``) with one prompt in four routed
  to a reward that raises: every step's loss is finite, gradients flow, and the failures are in
  the metrics (before: one invalid sample made the step's loss NaN, exit 0);
* a user's ``reward.custom_reward_function`` under verl's stock ``naive`` manager that raises on
  a quarter of the samples: the run stops with a non-zero exit naming the reward (before: the
  groups were dropped silently, exit 0, no metric).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from longcat_plugins.learning.assets import ensure_assets
from longcat_plugins.runtime.launch import resolve_config, run_training

pytestmark = [pytest.mark.slow, pytest.mark.ray]

USER_REWARD = '''
def picky(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """A user's reward that cannot handle one data source."""
    if data_source.startswith("boom"):
        raise ValueError(f"picky cannot score {data_source}")
    return 0.5 if solution_str.strip() else 0.0
'''


def dataset(path: Path, n: int = 8) -> Path:
    """Math rows, and every fourth row a ``boom_*`` source: with ``data.shuffle=false`` each batch
    of 4 prompts x n=4 holds 4 of 16 samples (25%) whose reward raises."""
    import pandas as pd

    rows = []
    for i in range(n):
        a, b = i + 2, 3
        rows.append(
            {
                "data_source": "boom_arith" if i % 4 == 3 else "math_arith",
                "prompt": [{"role": "user", "content": f"{a}+{b}=? Answer in \\boxed{{}}."}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"index": i},
            }
        )
    pd.DataFrame(rows).to_parquet(path)
    return path


def common(data: Path, ray_tmp: Path, reward_file: Path) -> list[str]:
    return [
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.shuffle=false",
        f"actor_rollout_ref.model.path={ensure_assets().model}",
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        f"reward.custom_reward_function.path={reward_file}",
        "reward.custom_reward_function.name=picky",
        "trainer.total_training_steps=2",
    ]


def test_the_router_recipe_trains_through_a_failing_reward_with_a_finite_loss(tmp_path: Path, ray_tmp: Path) -> None:
    reward_file = tmp_path / "picky.py"
    reward_file.write_text(textwrap.dedent(USER_REWARD))
    result = run_training(
        resolve_config("reward_router_cpu"),
        [
            *common(dataset(tmp_path / "d.parquet"), ray_tmp, reward_file),
            # boom_* goes to the user's function through the router's `custom` route; math_* to the
            # demo's partial-credit reward, so a random model's groups differ and gradients flow
            "~longcat.settings.reward.longcat_router.routes",
            "+longcat.settings.reward.longcat_router.routes={math*: arithmetic, boom*: custom}",
            "+longcat.settings.reward.failures.max_failed_share=0.5",
        ],
        tmp_path / "run",
    )
    log = result.log.read_text()
    assert result.returncode == 0, log[-5000:]
    assert [s["step"] for s in result.steps] == [1, 2]
    for step in result.steps:
        assert math.isfinite(step["actor/pg_loss"]), step
        assert math.isfinite(step["actor/grad_norm"]) and step["actor/grad_norm"] > 0, step
        assert step["longcat/reward/failed/custom"] == 4.0 and step["longcat/reward/failed/arithmetic"] == 0.0, step
        assert step["longcat/reward/invalid_share"] == 0.25, step
    assert "reward 'custom' raised" in log and "picky cannot score boom_arith" in log


def test_a_stock_manager_run_stops_naming_the_reward_that_raises(tmp_path: Path, ray_tmp: Path) -> None:
    reward_file = tmp_path / "picky.py"
    reward_file.write_text(textwrap.dedent(USER_REWARD))
    result = run_training(
        resolve_config("cpu_demo"),
        [*common(dataset(tmp_path / "d.parquet"), ray_tmp, reward_file), "reward.reward_manager.name=naive"],
        tmp_path / "run",
    )
    log = result.log.read_text()
    assert result.returncode != 0, log[-5000:]
    assert result.steps == []  # stopped at the first step, before its update
    assert "training step 1: reward 'picky' raised on 4 of 16 samples (25% of the step > " in log, log[-5000:]
    assert "ValueError: picky cannot score boom_arith" in log
