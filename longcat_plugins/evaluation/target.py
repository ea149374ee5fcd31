"""What ``longcat-plugins eval`` was pointed at: a run directory, a verl actor checkpoint or an
HF model directory, resolved to an HF model directory plus the recipe that trained it.

A run directory is what ``longcat-plugins train``/``demo`` writes (``metrics.jsonl``,
``hydra/.hydra`` with the composed recipe, ``checkpoints/global_step_N/actor``); its latest
checkpoint is evaluated with its own recipe. A verl FSDP actor checkpoint is merged into an HF
model with verl's own model merger (``python -m verl.model_merger merge --backend fsdp``), unless
it already holds HF weights (``checkpoint.save_contents`` with ``hf_model``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


class TargetError(ValueError):
    """The path given cannot be evaluated; the message names it and says why."""


@dataclass(frozen=True)
class Recipe:
    """How a run was launched: its recipe file and the Hydra overrides it was given."""

    config: Path
    overrides: list[str]


@dataclass(frozen=True)
class Target:
    """``kind`` is ``run``, ``actor`` or ``hf``; ``model`` is an HF directory once :func:`materialize` ran."""

    kind: str
    path: Path
    #: the HF model directory, or the FSDP actor checkpoint still to merge
    checkpoint: Path
    recipe: Recipe | None
    step: int | None = None


def is_hf_model(path: Path) -> bool:
    return (path / "config.json").is_file() and any((path / w).is_file() for w in _HF_WEIGHTS)


def is_actor_checkpoint(path: Path) -> bool:
    """A verl FSDP actor checkpoint: rank shards plus the ``huggingface/`` config it was saved with."""
    return (path / "huggingface" / "config.json").is_file() and any(path.glob("model_world_size_*_rank_*.pt"))


def is_run_dir(path: Path) -> bool:
    return (path / "metrics.jsonl").is_file() or (path / "hydra" / ".hydra" / "config.yaml").is_file()


def latest_checkpoint(checkpoints: Path) -> tuple[int, Path] | None:
    """``(step, global_step_N/actor)`` of the newest actor checkpoint under ``checkpoints``."""
    found = []
    for child in checkpoints.iterdir() if checkpoints.is_dir() else ():
        match = _STEP_DIR.match(child.name)
        if match and is_actor_checkpoint(child / "actor"):
            found.append((int(match.group(1)), child / "actor"))
    return max(found) if found else None


def run_recipe(run_dir: Path) -> Recipe | None:
    """The recipe and overrides a run was launched with, from Hydra's record in ``hydra/.hydra``."""
    from omegaconf import OmegaConf

    record = run_dir / "hydra" / ".hydra"
    if not (record / "hydra.yaml").is_file():
        return None
    hydra: Any = OmegaConf.load(record / "hydra.yaml").hydra
    name = hydra.job.config_name
    main = next((s for s in hydra.runtime.config_sources if s.provider == "main"), None)
    if main is None or main.get("schema") != "file":
        return None
    config = Path(str(main.path)) / f"{name}.yaml"
    overrides = list(OmegaConf.load(record / "overrides.yaml")) if (record / "overrides.yaml").is_file() else []
    return Recipe(config, [str(o) for o in overrides])


def _run_dir_of(path: Path) -> Path | None:
    """The run directory a checkpoint lives in (``RUN/checkpoints/global_step_N/actor``), if any."""
    for parent in path.parents:
        if is_run_dir(parent):
            return parent
    return None


def resolve(arg: str) -> Target:
    """Classify ``arg``; :class:`TargetError` naming it when it is none of the three."""
    path = Path(arg).expanduser().resolve()
    if not path.exists():
        raise TargetError(f"CHECKPOINT_OR_RUN {arg!r} does not exist")
    if not path.is_dir():
        raise TargetError(f"CHECKPOINT_OR_RUN {arg!r} is a file; give a run directory or a checkpoint directory")
    if is_hf_model(path):
        owner = _run_dir_of(path)
        return Target("hf", path, path, run_recipe(owner) if owner else None)
    if is_actor_checkpoint(path / "actor"):  # global_step_N itself
        path = path / "actor"
    if is_actor_checkpoint(path):
        owner = _run_dir_of(path)
        step = _STEP_DIR.match(path.parent.name)
        return Target("actor", path, path, run_recipe(owner) if owner else None, int(step.group(1)) if step else None)
    if is_run_dir(path):
        latest = latest_checkpoint(path / "checkpoints")
        if latest is None:
            raise TargetError(
                f"CHECKPOINT_OR_RUN {arg!r} is a run directory without checkpoints under {path / 'checkpoints'} "
                "(train with trainer.save_freq > 0, or give a checkpoint directory)"
            )
        step, actor = latest
        return Target("run", path, actor, run_recipe(path), step)
    raise TargetError(
        f"CHECKPOINT_OR_RUN {arg!r} is neither a run directory (metrics.jsonl, hydra/.hydra), a verl actor "
        "checkpoint (global_step_N/actor) nor an HF model directory (config.json and weights)"
    )


def materialize(target: Target, work_dir: Path) -> Path:
    """An HF model directory for ``target``: as is, the checkpoint's own HF weights, or merged by verl."""
    if target.kind == "hf":
        return target.checkpoint
    if is_hf_model(target.checkpoint / "huggingface"):
        return target.checkpoint / "huggingface"
    return merge_actor_checkpoint(target.checkpoint, work_dir / "merged-model")


def merge_actor_checkpoint(actor: Path, out: Path) -> Path:
    """verl's own model merger (``python -m verl.model_merger merge``) on a verl FSDP actor
    checkpoint: an HF model directory at ``out``; a RuntimeError with the merger's last lines otherwise."""
    command = [
        sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(actor),
        "--target_dir",
        str(out),
    ]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0 or not is_hf_model(out):
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise RuntimeError(f"verl's model merger failed on {actor} (exit {proc.returncode}):\n{tail}")
    return out
