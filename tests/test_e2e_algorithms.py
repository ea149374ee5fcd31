"""The algorithm family through verl's real trainer on the CPU runtime: 2 GRPO steps with
``triplet_clip`` + ``longcat_grpo`` (on the v1 trainer) and with ``longcat_gspo`` (on the legacy
trainer), switched on by the objective config group alone, reporting the ``longcat/`` metrics.
Both are the suite's shared runs (conftest), so the objectives cost no Ray start-up of their own."""

from __future__ import annotations

import math

import pytest
from conftest import (
    LEGACY_RUN_GROUP,
    LEGACY_RUN_OBJECTIVE,
    SHARED_RUN_GROUP,
    SHARED_RUN_OBJECTIVE,
    SharedRun,
)
from omegaconf import OmegaConf

from longcat_plugins.runtime.launch import RunResult

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


def assert_objective_ran(result: RunResult, objective: str) -> None:
    steps = [s for s in result.steps if s["step"] > 0]  # step 0: a validation before training
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        for key in EXPECTED[objective]:
            assert key in step and math.isfinite(step[key]) and 0.0 <= step[key] <= 1.0, (key, step.get(key))
        assert math.isfinite(step["actor/pg_loss"]) and step["actor/grad_norm"] > 0
        assert step["critic/advantages/max"] > 0 > step["critic/advantages/min"]
    # the config the trainer actually ran (Hydra records it) selected our components
    ran = OmegaConf.load(result.run_dir / "hydra" / ".hydra" / "config.yaml")
    assert ran.actor_rollout_ref.actor.policy_loss.loss_mode == objective
    assert ran.algorithm.adv_estimator == "longcat_grpo"
    assert ran.actor_rollout_ref.actor.ppo_mini_batch_size == 2  # two mini-batches a step: clip bounds act


@SHARED_RUN_GROUP
def test_triplet_clip_on_the_v1_trainer(shared_cpu_run: SharedRun) -> None:
    """The suite's shared run (v1 trainer) trains with ``+objective=triplet_clip``."""
    assert "+objective=triplet_clip" in SHARED_RUN_OBJECTIVE
    assert_objective_ran(shared_cpu_run.result, "triplet_clip")


@LEGACY_RUN_GROUP
def test_longcat_gspo_on_the_legacy_trainer(legacy_cpu_run: tuple[RunResult, list[dict]]) -> None:
    """The suite's legacy-trainer run trains with ``+objective=longcat_gspo``."""
    assert "+objective=longcat_gspo" in LEGACY_RUN_OBJECTIVE
    assert_objective_ran(legacy_cpu_run[0], "longcat_gspo")
