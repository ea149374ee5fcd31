"""Run ``verl.trainer.main_ppo`` on a recipe as a child process, with progress and a summary.

The child is stock verl: the launcher only adds defaults for where things go (Hydra's run dir,
checkpoints, a JSONL metrics file through verl's own ``file`` logger) unless the caller set
them, streams the output into ``train.log``, follows ``step:N`` lines for the progress bar,
and reads the metrics file back for the summary.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STEP_LINE = re.compile(r"\bstep:(\d+) - ")
#: the legacy trainer prints the step count it computed (epochs x batches, or the cap)
TOTAL_LINE = re.compile(r"\bTotal training steps: (\d+)")
SUMMARY_KEYS = {
    "reward": "critic/score/mean",
    "pg_loss": "actor/pg_loss",
    "grad_norm": "actor/grad_norm",
    "response_len": "response_length/mean",
    "step_s": "timing_s/step",
}
#: overrides that train the actor and the reference in fp32: verl's FSDP engine autocasts to bf16
#: by default, which a CPU computes ~6x slower than fp32 (a tiny model's forward+backward on
#: 2 x 4,608 tokens: 9.2 s in bf16, 1.6 s in fp32). The warm starts are SFT-trained in fp32 too.
FP32_TRAINING = tuple(
    f"+actor_rollout_ref.{role}.fsdp_config.mixed_precision={{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}}"
    for role in ("actor", "ref")
)


def configs_dir() -> Path:
    """The recipes: packaged with the wheel, or the repository's ``configs/`` in a checkout."""
    packaged = Path(__file__).resolve().parents[1] / "_configs"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "configs"


def resolve_config(name: str | Path) -> Path:
    """A path to a recipe YAML, or the name of one of ours (``cpu_demo``)."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path.resolve()
    candidate = configs_dir() / f"{path.stem}.yaml"
    if candidate.is_file():
        return candidate
    ours = sorted(p.stem for p in configs_dir().glob("*.yaml"))
    raise FileNotFoundError(f"config {str(name)!r} not found (a YAML path, or one of: {', '.join(ours)})")


#: rollout engine -> the runtime config group that serves it on the CPU runtime
ROLLOUT_RUNTIMES = {"hf": "cpu", "vllm": "cpu_vllm"}


def rollout_overrides(config: Path, rollout: str) -> list[str]:
    """The override that puts ``config`` on the CPU runtime with ``rollout`` (``hf``: the recipe
    as it is). A recipe whose defaults already pick a ``runtime`` is switched (``runtime=...``);
    one without gets the group appended (``+runtime=...``)."""
    if rollout not in ROLLOUT_RUNTIMES:
        raise ValueError(f"unknown rollout {rollout!r}; choices: {', '.join(ROLLOUT_RUNTIMES)}")
    if rollout == "hf":
        return []
    from omegaconf import OmegaConf

    defaults = OmegaConf.to_container(OmegaConf.load(config)).get("defaults") or []  # type: ignore[union-attr]
    has_group = any(isinstance(d, dict) and "runtime" in d for d in defaults)
    return [f"{'' if has_group else '+'}runtime={ROLLOUT_RUNTIMES[rollout]}"]


def has_override(overrides: Sequence[str], key: str) -> bool:
    return any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides)


def planned_steps(config: Path, overrides: Sequence[str]) -> int | None:
    """``trainer.total_training_steps`` from the overrides or the recipe's own YAML, for the
    progress bar before the trainer starts (``None`` when neither sets it)."""
    value: Any = None
    for override in overrides:
        key, _, raw = override.lstrip("+~").partition("=")
        if key == "trainer.total_training_steps":
            value = raw
    if value is None:
        try:
            from omegaconf import OmegaConf

            value = OmegaConf.select(OmegaConf.load(config), "trainer.total_training_steps", default=None)
        except Exception:  # noqa: BLE001 - the trainer reports a broken recipe itself
            return None
    try:
        steps = int(value)
    except (TypeError, ValueError):
        return None
    return steps if steps > 0 else None


@dataclass
class RunResult:
    returncode: int
    run_dir: Path
    log: Path
    metrics: Path
    checkpoints: Path
    steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def last_step(self) -> int:
        return max((s["step"] for s in self.steps), default=0)

    def logger_dirs(self) -> dict[str, Path]:
        """Where verl's ``tensorboard`` and ``wandb`` loggers wrote, for those that did."""
        out = {}
        tensorboard = Path(os.environ.get("TENSORBOARD_DIR", self.run_dir / "tensorboard"))
        wandb = Path(os.environ.get("WANDB_DIR", self.run_dir)) / "wandb"
        if tensorboard.is_dir():
            out["tensorboard"] = tensorboard
        if wandb.is_dir():
            out["wandb"] = wandb
        return out


def build_command(config: Path, overrides: Sequence[str], run_dir: Path) -> list[str]:
    defaults = {
        "hydra.run.dir": str(run_dir / "hydra"),
        "trainer.default_local_dir": str(run_dir / "checkpoints"),
        "trainer.logger": "[console,file]",
    }
    extra = [f"{k}={v}" for k, v in defaults.items() if not has_override(overrides, k)]
    return [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        f"--config-path={config.parent}",
        f"--config-name={config.stem}",
        *extra,
        *overrides,
    ]


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """verl's file logger writes one ``{"step": N, "data": {...}}`` line per step."""
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            steps.append({"step": record["step"], **record["data"]})
    return steps


def run_training(
    config: Path,
    overrides: Sequence[str],
    run_dir: Path,
    on_line: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    on_start: Callable[[subprocess.Popen[str]], None] | None = None,
) -> RunResult:
    """Run one training job to completion; ``on_line`` sees every output line, ``on_start`` the
    child process as soon as it exists (a caller that runs several at once can stop it)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log, metrics = run_dir / "train.log", run_dir / "metrics.jsonl"
    checkpoints = Path(
        next((o.split("=", 1)[1] for o in overrides if has_override([o], "trainer.default_local_dir")), "")
        or run_dir / "checkpoints"
    ).resolve()
    # verl's tensorboard logger writes under $TENSORBOARD_DIR, wandb under $WANDB_DIR: keep both in the run dir
    logger_dirs = {"TENSORBOARD_DIR": str(run_dir / "tensorboard"), "WANDB_DIR": str(run_dir)}
    child_env = {
        **logger_dirs,
        **os.environ,
        "VERL_FILE_LOGGER_PATH": str(metrics),
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    command = build_command(config, overrides, run_dir)
    with open(log, "w") as sink:
        sink.write("$ " + " ".join(command) + "\n")
        # the child runs where the user is, so relative paths (in overrides and in the recipe)
        # mean what they mean in the user's shell; everything we place goes under run_dir
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env)
        assert proc.stdout is not None
        if on_start is not None:
            on_start(proc)
        for line in proc.stdout:
            sink.write(line)
            if on_line is not None:
                on_line(line)
        returncode = proc.wait()
    return RunResult(returncode, run_dir, log, metrics, checkpoints, read_metrics(metrics))


def val_accuracy(record: dict[str, Any]) -> float | None:
    """Held-out accuracy of one metrics record: verl's ``val-core/<data_source>/acc/mean@N``
    (greedy exact match when ``val_kwargs`` is greedy with n=1), averaged over data sources."""
    values = [v for k, v in record.items() if k.startswith("val-core/") and "/acc/mean@" in k]
    return sum(values) / len(values) if values else None


def heldout_accuracy(steps: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(first, last) held-out accuracy of a run, or None without two validations."""
    values = [a for a in (val_accuracy(s) for s in sorted(steps, key=lambda s: s["step"])) if a is not None]
    return (values[0], values[-1]) if len(values) >= 2 else None


def summary_rows(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per training step, with the held-out accuracy where a validation ran; records with
    none of these (nothing logged for the step) are left out. Step 0 is verl's validation before
    training: its row shows only ``val_acc``."""
    rows = [
        {"step": s["step"], **{k: s.get(v) for k, v in SUMMARY_KEYS.items()}, "val_acc": val_accuracy(s)} for s in steps
    ]
    return [r for r in rows if any(r[k] is not None for k in (*SUMMARY_KEYS, "val_acc"))]
