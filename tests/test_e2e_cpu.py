"""verl's real trainer on the CPU runtime, end to end: 2 GRPO steps with the v1 and the legacy
trainer, the rollout's weights changing every step, and resume from a checkpoint."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import train_cpu as train

from longcat_plugins.runtime.assets import Assets

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def assert_learning_step(step: dict) -> None:
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert math.isfinite(step[key]), (key, step[key])
    assert step["actor/grad_norm"] > 0
    assert step["critic/score/mean"] > 0, "the partial-credit reward should be non-zero"


@pytest.mark.parametrize("use_v1", [True, False], ids=["v1", "legacy"])
def test_two_grpo_steps(tiny_assets: Assets, tmp_path: Path, ray_tmp: Path, use_v1: bool) -> None:
    result, updates = train(
        tiny_assets,
        tmp_path / "run",
        ray_tmp,
        "trainer.total_training_steps=2",
        f"trainer.use_v1={str(use_v1).lower()}",
    )
    assert [s["step"] for s in result.steps] == [1, 2]
    for step in result.steps:
        assert_learning_step(step)
    assert any(s["actor/pg_loss"] != 0 for s in result.steps)
    # the rollout server received the trainer's weights after each step, and they changed
    assert [u["global_steps"] for u in updates][-2:] == [1, 2], updates
    digests = [u["digest"] for u in updates]
    assert len(set(digests)) == len(digests), "weights pushed to the rollout did not change between steps"


def test_resume_continues_from_the_saved_step(tiny_assets: Assets, tmp_path: Path, ray_tmp: Path) -> None:
    ckpt = tmp_path / "ckpt"
    first, _ = train(
        tiny_assets,
        tmp_path / "first",
        ray_tmp,
        "trainer.total_training_steps=2",
        "trainer.save_freq=2",
        f"trainer.default_local_dir={ckpt}",
    )
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    second, updates = train(
        tiny_assets,
        tmp_path / "second",
        ray_tmp,
        "trainer.total_training_steps=3",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={ckpt}",
        "trainer.resume_mode=auto",
    )
    assert [s["step"] for s in second.steps] == [3], "a resumed run trains only the steps after the checkpoint"
    assert_learning_step(second.steps[0])
    assert updates[-1]["global_steps"] == 3
