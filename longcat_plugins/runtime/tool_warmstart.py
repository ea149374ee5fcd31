"""The tool-use warm start: a tiny model SFT'd on golden trajectories of generated environments.

A random model never emits ``<tool_call>``, so the tool-agent demo's rubric reward is 0 for every
sample and GRPO has nothing to learn from. This builds, once per plan (size, seed, data and SFT
settings: one directory each), under the asset cache directory:

- ``envs-train/``, ``envs-val/``: generated ``retail`` environments with short golden chains;
  the validation environments are held out (another generator seed);
- ``sft.parquet``: the train tasks' golden trajectories (:mod:`longcat_plugins.environments.golden`),
  rendered in the agent loop's own format;
- ``base/``: a tokenizer trained on those trajectories (the policy and tool-list lines become
  single tokens, so the ~3.9K-token prompt of the byte-level tokenizer is under 200 tokens here) and a
  random model of that vocabulary;
- ``model/``: ``base`` supervised fine-tuned on ``sft.parquet`` with verl's SFT trainer;
- ``train.parquet``/``val.parquet``: the RL task rows (noise 0) for ``longcat_tool_agent``.

Everything is written into a temporary directory and renamed into place when complete.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from longcat_plugins.environments.generate import GenConfig
from longcat_plugins.environments.golden import RenderSettings, sft_rows, task_infos, write_sft_parquet
from longcat_plugins.runtime.assets import SIZES, build_model, build_tokenizer, building, default_cache_dir
from longcat_plugins.runtime.sft import SFTConfig

DOMAIN = "retail"
#: chat template of the tool-agent tokenizer: no newline after an assistant turn, because the
#: model's own turn ends at its EOS and the agent loop appends the next message right after it;
#: with this template the SFT token stream is the one the loop builds at rollout time.
TOOL_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}</s>"
    "{% if message['role'] != 'assistant' %}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
#: short golden chains (the generator's minimum is a lookup then an action)
SHORT_CHAINS = GenConfig(min_chain=1, max_chain=2)
#: warm-up then cosine decay (verl's default is a constant learning rate)
SFT_SCHEDULE = ("optim.lr_scheduler_type=cosine", "optim.lr_warmup_steps=10")
#: how the warm start's trajectories are rendered; the demo's loop settings must agree
RENDER = RenderSettings(tools_style="compact", render_tools="auto")


@dataclass(frozen=True)
class ToolWarmStart:
    root: Path
    model: Path
    base: Path
    sft: Path
    train: Path
    val: Path

    def exists(self) -> bool:
        return (self.model / "config.json").exists() and self.train.exists() and self.val.exists()


@dataclass(frozen=True)
class WarmStartPlan:
    """What to build: sizes of the data and of the SFT run."""

    size: str = "tiny"
    seed: int = 0
    train_envs: int = 150
    val_envs: int = 10
    vocab_size: int = 1024
    #: 9 epochs of batch 32 (99 steps) gave a model that calls tools (93% well-formed first calls)
    #: but picks the golden tool in 23% and never its arguments (0% greedy success). More updates
    #: are the next step; 16 epochs of batch 16 (352 steps) is not yet measured: its build did not
    #: finish in a 10-minute slot of the shared 2 cores (``bench/bench_tool_warm_starts.py``)
    sft_epochs: int = 16
    sft_lr: float = 5e-3
    sft_batch_size: int = 16
    #: verl pads every sample to this length: the longest golden trajectory is ~420 tokens
    sft_max_length: int = 512

    def key(self) -> str:
        """A short digest of every field: a changed plan builds into its own cache directory."""
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]

    def sft_config(self) -> SFTConfig:
        """verl SFT hyperparameters: whole trajectories (a few hundred tokens) in each sample."""
        return SFTConfig(
            epochs=self.sft_epochs,
            lr=self.sft_lr,
            batch_size=self.sft_batch_size,
            max_length=self.sft_max_length,
            seed=self.seed,
        )


def static_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Lines of the system prompts that recur across environments (the policy and tool signatures).

    They become single tokens: a model reads them as symbols, and the prompt shrinks ~30x.
    """
    counts: dict[str, int] = {}
    for row in rows:
        for line in {ln for ln in row["messages"][0]["content"].split("\n") if len(ln) > 8}:
            counts[line] = counts.get(line, 0) + 1
    return sorted(line for line, n in counts.items() if n >= 2)


def build_tool_tokenizer(out: Path, rows: list[dict[str, Any]], seed: int, vocab_size: int) -> None:
    """A BPE tokenizer trained on the rendered trajectories, plus the recurring system-prompt lines as tokens."""
    from jinja2 import Template
    from transformers import AutoTokenizer

    template = Template(TOOL_CHAT_TEMPLATE)
    corpus = [template.render(messages=r["messages"], add_generation_prompt=False) for r in rows]
    build_tokenizer(out, seed, vocab_size, corpus=corpus, chat_template=TOOL_CHAT_TEMPLATE)
    tok = AutoTokenizer.from_pretrained(out)
    tok.add_tokens(static_lines(rows))
    tok.save_pretrained(out)


def rl_rows(tasks_parquet: Path, out: Path, split: str) -> None:
    """The env generator's task rows at noise 0 (the warm start's distribution), written atomically."""
    import pandas as pd

    rows = pd.read_parquet(tasks_parquet)
    rows["extra_info"] = [{**dict(i), "split": split, "noise_level": 0} for i in rows["extra_info"]]
    tmp = out.with_name(out.name + ".tmp")
    rows.to_parquet(tmp)
    tmp.replace(out)


def prepare_data(tmp: Path, plan: WarmStartPlan) -> list[dict[str, Any]]:
    """Environments, RL rows, SFT rows and the tokenizer + random model under ``tmp``; returns the SFT rows."""
    from longcat_plugins.environments.envgen import generate_environments

    generate_environments(DOMAIN, plan.train_envs, tmp / "envs-train", seed=plan.seed, config=SHORT_CHAINS)
    generate_environments(
        DOMAIN, plan.val_envs, tmp / "envs-val", seed=plan.seed + 10_000, config=SHORT_CHAINS, split="test"
    )
    rl_rows(tmp / "envs-train" / "tasks.parquet", tmp / "train.parquet", "train")
    rl_rows(tmp / "envs-val" / "tasks.parquet", tmp / "val.parquet", "test")

    class _NoTemplateTools:  # the tool tokenizer's template has no tools slot: tools go to the system prompt
        chat_template = TOOL_CHAT_TEMPLATE

    rows = sft_rows(task_infos(tmp / "envs-train" / "tasks.parquet"), _NoTemplateTools(), RENDER)
    write_sft_parquet(rows, tmp / "sft.parquet")
    (tmp / "base").mkdir()
    build_tool_tokenizer(tmp / "base", rows, plan.seed, plan.vocab_size)
    build_model(tmp / "base", plan.size, plan.seed)
    return rows


def ensure_tool_warm_start(cache_dir: Path | None = None, plan: WarmStartPlan | None = None) -> ToolWarmStart:
    """Build (once) and return the tool-use warm start for ``plan`` (see the module doc)."""
    plan = plan or WarmStartPlan()
    if plan.size not in SIZES:
        raise ValueError(f"unknown model size {plan.size!r}; choices: {', '.join(SIZES)}")
    root = (cache_dir or default_cache_dir()) / f"toolwarm-{plan.size}-seed{plan.seed}-{plan.key()}"
    built = ToolWarmStart(
        root, root / "model", root / "base", root / "sft.parquet", root / "train.parquet", root / "val.parquet"
    )
    if built.exists():
        return built
    with building(root) as tmp:
        prepare_data(tmp, plan)
        _fix_env_paths(tmp, root.resolve())
        from longcat_plugins.runtime.sft import run_sft

        run_sft(tmp / "base", tmp / "sft.parquet", tmp / "model", plan.sft_config(), overrides=SFT_SCHEDULE)
        (tmp / "warmstart.json").write_text(json.dumps(asdict(plan), indent=2))
    return built


def _fix_env_paths(tmp: Path, root: Path) -> None:
    """Point the rows' absolute ``env_path`` at where the environments will live after the rename."""
    import pandas as pd

    for name in ("train.parquet", "val.parquet", "sft.parquet", "envs-train/tasks.parquet", "envs-val/tasks.parquet"):
        path = tmp / name
        df = pd.read_parquet(path)
        if "extra_info" in df.columns:
            df["extra_info"] = [
                {**dict(i), "env_path": str(i["env_path"]).replace(str(tmp), str(root))} for i in df["extra_info"]
            ]
        if "env_path" in df.columns:
            df["env_path"] = [str(p).replace(str(tmp), str(root)) for p in df["env_path"]]
        df.to_parquet(path)


#: where the loop's settings live in a recipe
_LOOP = "longcat.settings.environment.longcat_tool_agent"


def warm_overrides(warm: ToolWarmStart, steps: int) -> list[str]:
    """Overrides of ``tool_agent_cpu.yaml`` that train the warm start on its own task distribution.

    Noise 0 and no context resets (the SFT trajectories have neither), turns long enough for one
    hermes call, and a greedy validation on the held-out environments before training, every
    ``steps // 5`` steps and after the last (the demo's ``held-out success`` line).
    """
    return [
        f"actor_rollout_ref.model.path={warm.model}",
        f"data.train_files={warm.train}",
        f"data.val_files={warm.val}",
        "data.max_prompt_length=192",  # the longest golden prompt is ~170 tokens with the tool tokenizer
        "data.max_response_length=384",  # the longest golden trajectory's response is ~270
        "data.train_batch_size=8",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.optim.lr=2e-4",
        f"{_LOOP}.noise_curriculum.enabled=false",
        f"{_LOOP}.discard_turns=0",
        f"{_LOOP}.discard_turns_growth=0",
        f"{_LOOP}.max_turn_tokens=64",
        f"{_LOOP}.max_turns=4",
        "trainer.val_before_train=true",
        f"trainer.test_freq={max(1, steps // 5)}",
    ]


#: the validation metric of the tool agent's rubric success (``acc`` of the loop's reward info)
HELD_OUT_METRIC = f"val-core/longcat_env/{DOMAIN}/acc/mean@1"


def held_out_success(steps: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(first, last) held-out success from a run's per-step metrics, or None without two validations."""
    values = [s[HELD_OUT_METRIC] for s in steps if HELD_OUT_METRIC in s]
    return (float(values[0]), float(values[-1])) if len(values) >= 2 else None
