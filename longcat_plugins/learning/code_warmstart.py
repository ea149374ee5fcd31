"""The code-agent warm start: a tiny model SFT'd on golden trajectories of generated code tasks.

A random model never emits ``<tool_call>``, so every ``longcat_code_agent`` sample earns what the
untouched repository earns and GRPO has nothing to learn from. This builds, once per plan, under
the asset cache directory, in two directories named by digests of :class:`CodeWarmStartPlan`
(``codewarm-data-*``: everything but the SFT run, so a new SFT setting reuses it; ``codewarm-*``:
the SFT'd model):

- ``tasks-train/``, ``tasks-val/``: generated repository tasks (a broken function, no distractor
  module, top-level package: the short trajectories a tiny model can learn); the validation
  tasks are held out (another generator seed);
- ``sft.parquet``: the train tasks' golden trajectories (``read_file`` of the target module, the
  golden ``edit``, ``submit``; :mod:`longcat_plugins.environments.code_env.golden`), rendered in
  the loop's own format with real tool results from the sandboxed workspace;
- ``base/``: a BPE tokenizer trained on those trajectories, with the recurring system-prompt
  lines and the recurring source lines of the fixes (raw, as ``read_file`` shows them, and
  JSON-escaped, as an ``edit`` call carries them) as single tokens, and a random model of that
  vocabulary;
- ``model/``: ``base`` supervised fine-tuned on ``sft.parquet`` with verl's SFT trainer;
- ``train.parquet``/``val.parquet``: the RL task rows for ``longcat_code_agent``.

Each directory is written into a temporary sibling and renamed into place when complete.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from longcat_plugins.environments.golden import RenderSettings
from longcat_plugins.learning.assets import build_model, building, check_size, default_cache_dir
from longcat_plugins.learning.sft import SFTConfig
from longcat_plugins.learning.warmstart import (
    AgentPlan,
    WarmStart,
    build_trajectory_tokenizer,
    plan_digest,
    rl_overrides,
    static_lines,
    train_warm_start,
)

#: how the trajectories are rendered; ``code_agent_cpu.yaml`` (compact tools) and the code loop's
#: default ``max_tool_response_chars`` agree
RENDER = RenderSettings(tools_style="compact", render_tools="auto", max_tool_response_chars=4000)
#: the validation metrics of the code loop's reward: ``acc`` (every hidden test passed) and the score
HELD_OUT_METRIC = "val-core/longcat_code_env/acc/mean@1"
HELD_OUT_SCORE = "val-aux/longcat_code_env/reward/mean@1"
#: a built code-agent warm start (the shared shape, :class:`~.warmstart.WarmStart`)
CodeWarmStart = WarmStart


@dataclass(frozen=True)
class CodeWarmStartPlan(AgentPlan):
    """What to build: the task knobs, the data sizes and the SFT run (its epochs here)."""

    train_tasks: int = 192
    val_tasks: int = 32
    #: task knobs: a broken function (partial credit before the fix), no distractors, no sub-packages
    mode: str = "bug"
    distractors: int = 0
    depth: int = 0
    hidden: int = 4
    #: every n-th trajectory searches for the function first (0: never)
    search_every: int = 0
    sft_epochs: int = 12

    def data_key(self) -> str:
        """The digest of the fields the data depends on (not the SFT run's)."""
        data = {k: v for k, v in asdict(self).items() if not k.startswith("sft_")}
        return plan_digest(data)

    def sft_config(self) -> SFTConfig:
        return SFTConfig(
            epochs=self.sft_epochs,
            lr=self.sft_lr,
            batch_size=self.sft_batch_size,
            max_length=self.sft_max_length,
            seed=self.seed,
        )


def code_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Source lines of the golden edits that recur across tasks, raw and JSON-escaped.

    A fix is a handful of such lines, so the model emits (and reads) each as one symbol.
    """
    counts: dict[str, int] = {}
    for row in rows:
        seen: set[str] = set()
        for m in row["messages"]:
            if m["role"] != "assistant" or '"name": "edit"' not in m["content"]:
                continue
            args = json.loads(m["content"].removeprefix("<tool_call>").removesuffix("</tool_call>"))["arguments"]
            for text in (args["old"], args["new"]):
                for line in text.split("\n"):
                    if len(line.strip()) > 3:
                        seen |= {line, json.dumps(line, ensure_ascii=False)[1:-1]}
        for line in seen:
            counts[line] = counts.get(line, 0) + 1
    return sorted(line for line, n in counts.items() if n >= 2)


def call_pieces(rows: list[dict[str, Any]]) -> list[str]:
    """The fixed text of the trajectories' tool calls around their argument values (and the
    JSON-escaped newline), so a call costs a token per piece plus its values."""
    from longcat_plugins.environments.golden import hermes_call

    hole = "\x00HOLE\x00"
    pieces = {"\\n"}
    for row in rows:
        for m in row["messages"]:
            if m["role"] == "assistant" and m["content"].startswith("<tool_call>"):
                call = json.loads(m["content"].removeprefix("<tool_call>").removesuffix("</tool_call>"))
                skeleton = hermes_call(call["name"], {k: hole for k in call["arguments"]})
                pieces |= {p for p in skeleton.split(json.dumps(hole)[1:-1]) if p}
    return sorted(pieces)


def build_code_tokenizer(out: Path, rows: list[dict[str, Any]], seed: int, vocab_size: int) -> None:
    """BPE on the rendered trajectories, plus the recurring prompt lines, source lines and call
    skeletons as tokens."""
    pieces = sorted(set(static_lines(rows)) | set(code_lines(rows)) | set(call_pieces(rows)))
    build_trajectory_tokenizer(out, rows, seed, vocab_size, [pieces])


def write_split(out: Path, final: Path, n: int, seed: int, plan: CodeWarmStartPlan, split: str) -> Path:
    """``n`` tasks under ``out`` whose rows name their folders under ``final`` (where ``out`` is renamed to)."""
    import pandas as pd

    from longcat_plugins.environments.code_env.tasks import write_tasks

    parquet = write_tasks(out, n, seed, plan.mode, plan.distractors, plan.depth, plan.hidden, split)
    rows = pd.read_parquet(parquet)
    rows["extra_info"] = [{**dict(i), "task_dir": str(final / "tasks" / str(i["task_id"]))} for i in rows["extra_info"]]
    rows.to_parquet(parquet)
    return parquet


def prepare_data(tmp: Path, root: Path, plan: CodeWarmStartPlan) -> list[dict[str, Any]]:
    """Tasks, RL rows, SFT rows and the tokenizer + random model under ``tmp`` (renamed to ``root``)."""
    import shutil

    import pandas as pd

    from longcat_plugins.environments.code_env.episode import CodeEnvSettings
    from longcat_plugins.environments.code_env.golden import sft_rows
    from longcat_plugins.environments.golden import write_sft_parquet
    from longcat_plugins.rewards.plain import plain

    train = write_split(tmp / "tasks-train", root / "tasks-train", plan.train_tasks, plan.seed, plan, "train")
    val = write_split(tmp / "tasks-val", root / "tasks-val", plan.val_tasks, plan.seed + 10_000, plan, "test")
    shutil.copy(train, tmp / "train.parquet")
    shutil.copy(val, tmp / "val.parquet")
    # the golden episodes run on the tasks where they are now (tmp), then the rows are pointed at root
    infos = [
        {**dict(plain(i)), "task_dir": str(tmp / "tasks-train" / "tasks" / str(i["task_id"]))}
        for i in pd.read_parquet(train)["extra_info"]
    ]
    rows = sft_rows(infos, CodeEnvSettings(), RENDER, plan.search_every)
    for row in rows:
        row["task_dir"] = row["task_dir"].replace(str(tmp), str(root))
    write_sft_parquet(rows, tmp / "sft.parquet")
    (tmp / "base").mkdir()
    build_code_tokenizer(tmp / "base", rows, plan.seed, plan.vocab_size)
    build_model(tmp / "base", plan.size, plan.seed)
    return rows


def code_warm_start_paths(cache_dir: Path | None, plan: CodeWarmStartPlan) -> CodeWarmStart:
    """Where the warm start for ``plan`` lives (built or not)."""
    check_size(plan.size)
    cache = (cache_dir or default_cache_dir()).resolve()
    data = cache / f"codewarm-data-{plan.size}-seed{plan.seed}-{plan.data_key()}"
    root = cache / f"codewarm-{plan.size}-seed{plan.seed}-{plan.key()}"
    return WarmStart(
        root, root / "model", data / "train.parquet", data / "val.parquet", base=data / "base", sft=data / "sft.parquet"
    )


def ensure_code_warm_start(cache_dir: Path | None = None, plan: CodeWarmStartPlan | None = None) -> CodeWarmStart:
    """Build (once) and return the code-agent warm start for ``plan`` (see the module doc).

    Two atomic steps, each its own cache directory: the data (tasks, golden trajectories,
    tokenizer and random base model; keyed by everything but the SFT fields) and the SFT'd model
    (keyed by the whole plan), so a new SFT setting reuses the data.
    """
    plan = plan or CodeWarmStartPlan()
    built = code_warm_start_paths(cache_dir, plan)
    root, data = built.root, built.base.parent
    if built.exists():
        return built
    if not (data / "base" / "config.json").exists():
        with building(data) as tmp:
            prepare_data(tmp, data, plan)
    with building(root) as tmp:
        train_warm_start(tmp, built.base, built.sft, plan.sft_config(), {**asdict(plan), "data": str(data)})
    return built


#: where the loop's settings live in the recipe
_LOOP = "longcat.settings.environment.longcat_code_agent"


def warm_overrides(warm: CodeWarmStart, steps: int) -> list[str]:
    """Overrides of ``code_agent_cpu.yaml`` that train the warm start on its own task distribution.

    Turns long enough for one ``edit`` call (the recipe already has no context resets, like the
    SFT trajectories), 4 samples per task (groups whose outcomes differ), and a greedy validation on the held-out
    tasks before training, every ``steps // 3`` steps and after the last.
    """
    return [
        *rl_overrides(warm, prompt_length=192, response_length=256, batch=4, micro_batch=16, lr=1e-4, test_freq=steps),
        f"{_LOOP}.max_turns=4",
        f"{_LOOP}.max_turn_tokens=96",
    ]
