"""Self-verification (A6) through stock ``main_ppo`` and verl's v1 trainer: a window of one step
and a threshold no reward rise can meet force the phase on after step 2, so step 3 trains the
policy's verdicts on its own step-1/2 rollouts in the same GRPO batch as the main prompts."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import train_cpu

from longcat_plugins.learning.assets import Assets

pytestmark = [pytest.mark.slow, pytest.mark.ray]

SETTINGS = "+longcat.settings.scheduler.longcat_data"


def test_a_plateau_starts_verification_prompts_that_train_with_the_main_batch(
    tiny_assets: Assets, tmp_path: Path, ray_tmp: Path
) -> None:
    result, _ = train_cpu(
        tiny_assets,
        tmp_path / "run",
        ray_tmp,
        "trainer.v1.trainer_mode=longcat_data",
        "trainer.total_training_steps=3",
        "reward.custom_reward_function.name=selfverify",
        "+longcat.settings.reward.selfverify.main=arithmetic",  # partial credit for the random model
        f"{SETTINGS}.correct_threshold=0.1",  # partial credit: both sides of it occur
        f"{SETTINGS}.selfverify.enable=true",
        f"{SETTINGS}.selfverify.window=1",
        f"{SETTINGS}.selfverify.min_delta=1.0",  # no rise of a [0, 1] reward over one step is >= 1
        f"{SETTINGS}.selfverify.tasks=2",
        f"{SETTINGS}.selfverify.max_steps=1",
        # short enough for the recipe's 32-token prompts and 16-token responses
        f"{SETTINGS}.selfverify.prompt='{{problem}} {{solution}} Right?'",
        f"{SETTINGS}.selfverify.correct='The answer is 1.'",
        f"{SETTINGS}.selfverify.incorrect='The answer is 0.'",
    )
    steps = {s["step"]: s for s in result.steps}
    assert sorted(steps) == [1, 2, 3]
    for step in (1, 2):
        assert steps[step]["longcat/selfverify/phase"] == 0.0
        assert "longcat/selfverify/verify_accuracy" not in steps[step]
        assert steps[step]["critic/score/min"] >= 0.0  # only the main task's [0, 1] rewards
    assert steps[2]["longcat/selfverify/phase_started"] == 1.0
    third = steps[3]
    assert third["longcat/selfverify/phase"] == 1.0 and third["longcat/selfverify/phase_ended"] == 1.0
    # 2 verification prompts x rollout.n = 4 samples, scored by the verdict rule, in the same batch
    assert third["longcat/selfverify/verify_samples"] == 8
    # how many of the 2 prompts (problem + a random model's response) outgrew the 32-token prompt
    assert third["longcat/selfverify/truncated_prompts"] in (0.0, 1.0, 2.0)
    assert 0.0 <= third["longcat/selfverify/verify_accuracy"] <= 1.0
    assert third["critic/score/min"] >= -1.0
    if third["longcat/selfverify/verify_unparseable"] > 0:  # a random model rarely writes a verdict
        assert third["critic/score/min"] == -1.0
    # the share of clear verdicts saying "correct" is there exactly when some verdict was clear
    says = third.get("longcat/selfverify/verify_says_correct")
    assert (says is None) == (third["longcat/selfverify/verify_unparseable"] == 1.0)
    assert says is None or 0.0 <= says <= 1.0
    assert 0.0 <= third["longcat/selfverify/main_accuracy"] <= 1.0
    assert third["longcat/data/trained_samples"] == 16  # the main groups; verification on top
