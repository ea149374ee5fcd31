"""verl's real trainer on the CPU runtime, end to end: 2 GRPO steps with the v1 and the legacy
trainer, the rollout's weights changing every step, and resume from a checkpoint."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from longcat_plugins.runtime.assets import Assets, ensure_assets
from longcat_plugins.runtime.launch import RunResult, resolve_config, run_training

pytestmark = [pytest.mark.slow, pytest.mark.ray]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Assets:
    return ensure_assets(tmp_path_factory.mktemp("assets"), size="tiny")


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """Ray's session files for this test only. Ray's socket paths must stay under 107 bytes,
    so this is a short directory in /tmp, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="lcray", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def train(tiny: Assets, run_dir: Path, ray_tmp: Path, *overrides: str) -> tuple[RunResult, list[dict]]:
    trace = run_dir / "rollout_trace.jsonl"
    result = run_training(
        resolve_config("cpu_demo"),
        [
            f"data.train_files={tiny.train}",
            f"data.val_files={tiny.val}",
            f"actor_rollout_ref.model.path={tiny.model}",
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
            *overrides,
        ],
        run_dir,
        env={"LONGCAT_HF_ROLLOUT_TRACE": str(trace)},
    )
    assert result.returncode == 0, result.log.read_text()[-5000:]
    updates = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    return result, updates


def assert_learning_step(step: dict) -> None:
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert math.isfinite(step[key]), (key, step[key])
    assert step["actor/grad_norm"] > 0
    assert step["critic/score/mean"] > 0, "the partial-credit reward should be non-zero"


@pytest.mark.parametrize("use_v1", [True, False], ids=["v1", "legacy"])
def test_two_grpo_steps(tiny: Assets, tmp_path: Path, ray_tmp: Path, use_v1: bool) -> None:
    result, updates = train(
        tiny, tmp_path / "run", ray_tmp, "trainer.total_training_steps=2", f"trainer.use_v1={str(use_v1).lower()}"
    )
    assert [s["step"] for s in result.steps] == [1, 2]
    for step in result.steps:
        assert_learning_step(step)
    assert any(s["actor/pg_loss"] != 0 for s in result.steps)
    # the rollout server received the trainer's weights after each step, and they changed
    assert [u["global_steps"] for u in updates][-2:] == [1, 2], updates
    digests = [u["digest"] for u in updates]
    assert len(set(digests)) == len(digests), "weights pushed to the rollout did not change between steps"


def test_resume_continues_from_the_saved_step(tiny: Assets, tmp_path: Path, ray_tmp: Path) -> None:
    ckpt = tmp_path / "ckpt"
    first, _ = train(
        tiny,
        tmp_path / "first",
        ray_tmp,
        "trainer.total_training_steps=2",
        "trainer.save_freq=2",
        f"trainer.default_local_dir={ckpt}",
    )
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    second, updates = train(
        tiny,
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
