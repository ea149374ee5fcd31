"""Bad input on the CPU runtime: a clear error naming the option and what to use instead."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from longcat_plugins.config import compose, to_plain
from longcat_plugins.learning.assets import ensure_assets
from longcat_plugins.runtime.preflight import check_cpu_config

RECIPE = REPO / "configs" / "cpu_demo.yaml"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_assets(tmp_path_factory.mktemp("assets")).model


def problems(model: Path, *overrides: str, available: int = 1 << 40) -> dict[str, str]:
    cfg = to_plain(compose(RECIPE, [f"actor_rollout_ref.model.path={model}", *overrides]))
    return {p.path: p.message for p in check_cpu_config(cfg, available_bytes=available)}


def test_the_demo_recipe_is_clean(model: Path) -> None:
    assert problems(model) == {}


@pytest.mark.parametrize(
    ("override", "key", "says"),
    [
        (
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.name",
            "set up the vLLM lane: bash scripts/setup-cpu.sh --vllm",
        ),
        (
            "actor_rollout_ref.actor.strategy=fsdp",
            "actor_rollout_ref.actor.strategy",
            "FSDP1 refuses CPU parameters; use fsdp2",
        ),
        (
            "actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2",
            "actor_rollout_ref.model.override_config.attn_implementation",
            "needs CUDA; use sdpa",
        ),
        (
            "actor_rollout_ref.model.use_remove_padding=true",
            "actor_rollout_ref.model.use_remove_padding",
            "set it to false",
        ),
        ("trainer.device=cuda", "trainer.device", "use trainer.device=cpu"),
        ("ray_kwargs.ray_init.num_gpus=null", "ray_kwargs.ray_init.num_gpus", "logical GPUs"),
    ],
)
def test_gpu_only_options(model: Path, override: str, key: str, says: str) -> None:
    found = problems(model, override)
    assert key in found and says in found[key], found


def test_missing_model_and_model_too_large(model: Path, tmp_path: Path) -> None:
    found = problems(tmp_path / "nowhere")
    assert "does not exist; nothing is downloaded" in found["actor_rollout_ref.model.path"]
    found = problems(model, available=1024)
    assert "GiB is free; use a smaller model" in found["actor_rollout_ref.model.path"]


def test_stock_main_ppo_refuses_before_ray(model: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main_ppo",
            f"--config-path={RECIPE.parent}",
            f"--config-name={RECIPE.stem}",
            f"actor_rollout_ref.model.path={model}",
            "data.train_files=x",
            "data.val_files=x",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.actor.strategy=fsdp",
            f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "LONGCAT_RUNTIME": "cpu"},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "actor_rollout_ref.rollout.name: 'vllm'" in proc.stderr
    assert "actor_rollout_ref.actor.strategy: FSDP1" in proc.stderr
    assert "ray init kwargs" not in proc.stdout


def test_joining_a_cluster_leaves_resources_to_its_nodes(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    joined = problems(model, "+ray_kwargs.ray_init.address=10.0.0.1:6379")
    # Ray refuses num_cpus/num_gpus when connecting: each is named, with how to drop it
    assert set(joined) == {"ray_kwargs.ray_init.num_cpus", "ray_kwargs.ray_init.num_gpus"}, joined
    assert "~ray_kwargs.ray_init.num_gpus" in joined["ray_kwargs.ray_init.num_gpus"]
    clean = (
        "+ray_kwargs.ray_init.address=10.0.0.1:6379",
        "~ray_kwargs.ray_init.num_cpus",
        "~ray_kwargs.ray_init.num_gpus",
    )
    assert problems(model, *clean) == {}
    # RAY_ADDRESS joins as well; without either, the logical-GPU count is required again
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert problems(model, *clean[1:]) == {}
    monkeypatch.delenv("RAY_ADDRESS")
    assert "ray_kwargs.ray_init.num_gpus" in problems(model, *clean[1:])
