"""The algorithm family through verl's real trainer on the CPU runtime: 2 GRPO steps with
``triplet_clip`` + ``longcat_grpo`` and with ``longcat_gspo``, switched on by the objective
config group alone, reporting the ``longcat/`` metrics."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import train_cpu
from omegaconf import OmegaConf

from longcat_plugins.runtime.assets import Assets

pytestmark = [pytest.mark.slow, pytest.mark.ray]

EXPECTED = {
    "triplet_clip": [
        "actor/longcat/triplet/pos_high_clipfrac",
        "actor/longcat/triplet/neg_low_clipfrac",
        "actor/longcat/triplet/neg_dual_clipfrac",
        "actor/longcat/is_truncated_frac",
    ],
    "longcat_gspo": ["actor/longcat/is_truncated_frac"],
}


@pytest.mark.parametrize("objective", sorted(EXPECTED))
def test_two_steps_with_each_objective(tiny_assets: Assets, tmp_path: Path, ray_tmp: Path, objective: str) -> None:
    # two mini-batches per step, so the second is off-policy and the clip bounds are exercised
    result, _ = train_cpu(
        tiny_assets,
        tmp_path / "run",
        ray_tmp,
        f"+objective={objective}",
        "trainer.total_training_steps=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    )
    assert [s["step"] for s in result.steps] == [1, 2]
    for step in result.steps:
        for key in EXPECTED[objective]:
            assert key in step and math.isfinite(step[key]) and 0.0 <= step[key] <= 1.0, (key, step.get(key))
        assert math.isfinite(step["actor/pg_loss"]) and step["actor/grad_norm"] > 0
        assert step["critic/advantages/max"] > 0 > step["critic/advantages/min"]
    # the config the trainer actually ran (Hydra records it) selected our components
    ran = OmegaConf.load(result.run_dir / "hydra" / ".hydra" / "config.yaml")
    assert ran.actor_rollout_ref.actor.policy_loss.loss_mode == objective
    assert ran.algorithm.adv_estimator == "longcat_grpo"
