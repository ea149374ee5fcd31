"""One verl training run for a bench: verl's three seeds set to the run's seed, a private Ray temp
folder (short, since Ray's socket paths must fit 107 bytes; removed afterwards), and a failed run
that stops the bench naming its log, never a row measured from a run that did not finish."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def seed_overrides(seed: int) -> list[str]:
    """The run seed: data order, data loader and rollout sampling."""
    return [
        f"data.seed={seed}",
        f"actor_rollout_ref.actor.data_loader_seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed}",
    ]


def seeded_run(seed: int, test_freq: int) -> list[str]:
    """The run seed, validation every ``test_freq`` steps, and epochs enough that
    ``trainer.total_training_steps`` is what stops the run."""
    return ["trainer.total_epochs=100", f"trainer.test_freq={test_freq}", *seed_overrides(seed)]


def train_or_raise(
    config: Path, overrides: Sequence[str], run_dir: Path, label: str, env: dict[str, str] | None = None
) -> Any:
    """``runtime.launch.run_training`` under a private Ray temp folder; its ``RunResult``. A non-zero
    exit raises ``RuntimeError`` naming ``label`` and the run's log. verl's v1 replay buffer polls
    every 50 ms on every device (the CPU runtime's; verl's own 2 s rounds a tiny model's steps up to
    whole polls on a GPU) unless the caller or the environment sets ``LONGCAT_V1_POLL_INTERVAL``."""
    import os

    from longcat_plugins.runtime.fixes import CPU_POLL_INTERVAL, ENV_POLL
    from longcat_plugins.runtime.launch import run_training

    if ENV_POLL not in os.environ and ENV_POLL not in (env or {}):
        env = {**(env or {}), ENV_POLL: str(CPU_POLL_INTERVAL)}
    ray_tmp = Path(tempfile.mkdtemp(prefix="lcb", dir="/tmp"))
    try:
        result = run_training(config, [*overrides, f"+ray_kwargs.ray_init._temp_dir={ray_tmp}"], run_dir, env=env)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{label} failed (exit {result.returncode}); see {result.log}")
    return result


def demo_data(assets: Any, steps: int) -> list[str]:
    """The tiny demo's data and model (an ``Assets``), trained for ``steps`` steps."""
    return [
        f"data.train_files={assets.train}",
        f"data.val_files={assets.val}",
        f"actor_rollout_ref.model.path={assets.model}",
        f"trainer.total_training_steps={steps}",
    ]


def validated_steps(result: Any, steps: int, label: str, metric: str) -> tuple[list[float], list[dict[str, Any]]]:
    """A finished run's held-out accuracies and its ``steps`` step records that carry ``metric``, in
    step order; fewer than two validations or a step without ``metric`` raises ``RuntimeError``."""
    from longcat_plugins.runtime.launch import val_accuracy

    records = sorted(result.steps, key=lambda s: s["step"])
    accs = [a for a in (val_accuracy(r) for r in records) if a is not None]
    trained = [r for r in records if metric in r]
    if len(accs) < 2 or len(trained) != steps:
        raise RuntimeError(f"{label}: missing validations or {metric} in {result.metrics}")
    return accs, trained
