"""Dual-path tool-necessity selection (first LongCat-Flash-Thinking report, agentic RL).

Each candidate task is run ``n`` times with the environment's tools (``longcat_tool_agent``) and
``n`` times without them (``longcat_tool_agent_no_tools``), both through verl's own rollout: one
validation-only pass of ``verl.trainer.main_ppo`` over two copies of every row, one per path
(verl picks the agent loop per row by ``agent_name``; ``trainer.val_only``, sampling on,
``val_kwargs.n = n``), the way ``longcat-plugins eval`` generates; one pass pays verl's start-up once. The pass rates
s_with(x) and s_without(x) are the shares of a task's samples whose episode reward reaches
``threshold``; the tool necessity is v_x = s_with(x) - s_without(x), and x is kept when
v_x > tau1, s_with(x) > tau2 and s_without(x) < tau3 (the report's rule; it gives no values, the
defaults here are ours). Kept rows are written unchanged plus the three scores, atomically.

Samples are matched to their task through ``reward_model.ground_truth``, which the tool agent
never reads (its reward is the episode's rubric): each copy of a row carries its path and row
number there (``longcat-select:<path>:<row>``), and verl's validation dump returns it as ``gts``
with every sample.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from longcat_plugins.atomic import write_parquet_atomic

WITH, WITHOUT = "with_tools", "without_tools"
AGENT = {WITH: "longcat_tool_agent", WITHOUT: "longcat_tool_agent_no_tools"}
KEY_PREFIX = "longcat-select:"
REQUIRED_COLUMNS = ("prompt", "reward_model", "extra_info", "agent_name")
SCORE_COLUMNS = ("s_with_tool", "s_without_tool", "tool_necessity")


class SelectionError(ValueError):
    """Bad input to the selection, naming the argument (the CLI exits 2 on it)."""


@dataclass(frozen=True)
class Thresholds:
    """Keep x when v_x > tau1, s_with > tau2 and s_without < tau3."""

    tau1: float = 0.0
    tau2: float = 0.0
    tau3: float = 0.5

    def __post_init__(self) -> None:
        if not -1.0 <= self.tau1 <= 1.0:
            raise SelectionError(f"--tau1 {self.tau1!r}: v_x = s_with - s_without lies in [-1, 1]; tau1 must too")
        for name in ("tau2", "tau3"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise SelectionError(f"--{name} {value!r}: a pass rate threshold must be in [0, 1]")

    def keep(self, s_with: float, s_without: float) -> bool:
        """The report's rule: tools help by more than tau1, solvable with them, hard without."""
        return (s_with - s_without) > self.tau1 and s_with > self.tau2 and s_without < self.tau3


def pass_rates(scores: dict[int, list[float]], rows: int, threshold: float) -> list[float]:
    """Per row, the share of its samples whose reward is at least ``threshold``."""
    out = []
    for i in range(rows):
        samples = scores.get(i)
        if not samples:
            raise RuntimeError(f"no sample of row {i} came back from the rollout")
        out.append(sum(s >= threshold for s in samples) / len(samples))
    return out


def read_dump(folder: Path) -> dict[str, dict[int, list[float]]]:
    """Rewards per path and row from verl's validation dump (``<step>.jsonl``; ``gts`` carries
    ``longcat-select:<path>:<row>``)."""
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise RuntimeError(f"verl wrote no validation dump under {folder}")
    out: dict[str, dict[int, list[float]]] = {WITH: {}, WITHOUT: {}}
    for line in files[-1].read_text().splitlines():
        record = json.loads(line)
        gts = str(record.get("gts"))
        if gts.startswith(KEY_PREFIX):
            path, _, row = gts[len(KEY_PREFIX) :].rpartition(":")
            out[path].setdefault(int(row), []).append(float(record["score"]))
    return out


def load_tasks(data: Path) -> Any:
    """The candidate tasks; errors name ``DATA`` and what is wrong."""
    import pandas as pd

    if not data.is_file():
        raise SelectionError(f"DATA {str(data)!r} does not exist")
    try:
        frame = pd.read_parquet(data)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise SelectionError(f"DATA {str(data)!r} is not a readable parquet file: {exc}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise SelectionError(
            f"DATA {str(data)!r} has no column(s) {missing} (a tool-task parquet from envgen has them)"
        )
    if len(frame) == 0:
        raise SelectionError(f"DATA {str(data)!r} has no rows")
    return frame.reset_index(drop=True)


def path_data(frame: Any, out: Path) -> Path:
    """Two copies of every task, one per path: its agent loop, ``<path>:<row>`` as ``ground_truth``."""
    import pandas as pd

    copies = []
    for path in (WITH, WITHOUT):
        copy = frame.copy()
        copy["agent_name"] = AGENT[path]
        copy["reward_model"] = [
            {**dict(rm), "ground_truth": f"{KEY_PREFIX}{path}:{i}"} for i, rm in enumerate(frame["reward_model"])
        ]
        copies.append(copy)
    pd.concat(copies, ignore_index=True).to_parquet(out)
    return out


def path_overrides(model: Path, data: Path, n: int, temperature: float, dump: Path) -> list[str]:
    """One validation-only pass of n sampled trajectories per task."""
    return [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={data}",
        f"data.val_files={data}",
        "trainer.val_only=true",
        "trainer.val_before_train=true",
        "trainer.resume_mode=disable",
        "trainer.logger=[console,file]",
        f"trainer.validation_data_dir={dump}",
        f"actor_rollout_ref.rollout.val_kwargs.n={n}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        f"actor_rollout_ref.rollout.val_kwargs.temperature={temperature}",
        "++longcat.settings.environment.longcat_tool_agent.noise_curriculum.enabled=false",
    ]


@dataclass(frozen=True)
class Selection:
    """Per row: s_with, s_without, v_x, kept; and where the kept rows went."""

    s_with: list[float]
    s_without: list[float]
    kept: list[bool]
    output: Path

    @property
    def necessity(self) -> list[float]:
        return [w - wo for w, wo in zip(self.s_with, self.s_without, strict=True)]


def select_tool_tasks(
    data: Path,
    output: Path,
    *,
    model: Path,
    thresholds: Thresholds = Thresholds(),
    n: int = 4,
    threshold: float = 1.0,
    temperature: float = 1.0,
    config: str | Path = "tool_agent_cpu",
    overrides: Sequence[str] = (),
    work_dir: Path | None = None,
    on_stage: Callable[[str, int, int], None] | None = None,
) -> Selection:
    """Run both paths through verl's rollout, score, and write the kept tasks to ``output``.

    ``on_stage(stage, done, total)`` is called as the stages (rollout, scoring) start and end (the
    CLI's progress bar).
    Raises :class:`SelectionError` on bad input (before anything runs), ``RuntimeError`` when a
    rollout fails; ``output`` is written only when everything succeeded."""
    from longcat_plugins.runtime.launch import resolve_config, run_training

    if n < 1:
        raise SelectionError(f"--n {n}: need at least one sample per task and path")
    if not Path(model).is_dir():
        raise SelectionError(f"--model {str(model)!r} is not a model directory")
    try:
        recipe = resolve_config(str(config))
    except FileNotFoundError as exc:
        raise SelectionError(f"--config: {exc}") from None
    frame = load_tasks(Path(data))
    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="longcat-select-"))
    work.mkdir(parents=True, exist_ok=True)
    stage = on_stage or (lambda *_: None)
    stage(f"rolling out {len(frame)} tasks x {n}, with and without tools", 0, 2)
    tasks = path_data(frame, work / "tasks.parquet")
    result = run_training(
        recipe, [*path_overrides(Path(model), tasks, n, temperature, work / "dump"), *overrides], work / "run"
    )
    if result.returncode != 0:
        raise RuntimeError(f"the rollout failed (exit {result.returncode}); log: {result.log}")
    stage("scoring", 1, 2)
    scores = read_dump(work / "dump")
    rates = {path: pass_rates(scores[path], len(frame), threshold) for path in (WITH, WITHOUT)}
    stage("done", 2, 2)
    kept = [thresholds.keep(w, wo) for w, wo in zip(rates[WITH], rates[WITHOUT], strict=True)]
    out = frame.copy()
    out["s_with_tool"], out["s_without_tool"] = rates[WITH], rates[WITHOUT]
    out["tool_necessity"] = [w - wo for w, wo in zip(rates[WITH], rates[WITHOUT], strict=True)]
    write_parquet_atomic(out[kept].reset_index(drop=True), Path(output))
    return Selection(rates[WITH], rates[WITHOUT], kept, Path(output))


__all__ = ["Selection", "SelectionError", "Thresholds", "select_tool_tasks"]
