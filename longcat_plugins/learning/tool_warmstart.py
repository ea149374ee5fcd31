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

import json
import random
import string
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from longcat_plugins.environments.generate import GenConfig
from longcat_plugins.environments.golden import RenderSettings, sft_rows, task_infos, write_sft_parquet
from longcat_plugins.learning.assets import build_model, building, check_size, default_cache_dir
from longcat_plugins.learning.sft import SFTConfig
from longcat_plugins.learning.warmstart import (
    TOOL_CHAT_TEMPLATE,
    AgentPlan,
    WarmStart,
    build_trajectory_tokenizer,
    held_out,
    plan_digest,
    rl_overrides,
    static_lines,
    train_warm_start,
)
from longcat_plugins.runtime.launch import FP32_TRAINING

DOMAIN = "retail"
#: short golden chains (the generator's minimum is a lookup then an action)
SHORT_CHAINS = GenConfig(min_chain=1, max_chain=2)
#: how the warm start's trajectories are rendered; the demo's loop settings must agree
RENDER = RenderSettings(tools_style="compact", render_tools="auto")
#: a built tool-use warm start (the shared shape, :class:`~.warmstart.WarmStart`)
ToolWarmStart = WarmStart


@dataclass(frozen=True)
class WarmStartPlan(AgentPlan):
    """What to build: sizes of the data and of the SFT run (its updates in all here)."""

    #: ~2.4 tasks each: ~950 distinct golden trajectories, so the arguments a call must copy vary
    #: (memorising fails, copying pays) rather than repeating 350 of them for many epochs
    train_envs: int = 400
    #: ~48 held-out tasks: one task is ~2 points of held-out success
    val_envs: int = 20
    #: SFT updates in all (epochs follow from the row count). Measured before: 99 updates of batch
    #: 32 (9 epochs of 353 trajectories) gave well-formed calls (93%) to the golden tool (23%) with
    #: never its arguments (0% greedy success): copying an id needs many more, smaller updates
    sft_steps: int = 400
    #: the ~4% of trajectories longer than this (of 210-420 tokens, median ~265) are left out of the
    #: SFT data, which saves a third of every step
    sft_max_length: int = 352
    #: spaces as tokens of their own: with byte-level BPE the first letter of a value in the user's
    #: message ("is DKP72P" -> 'ĠD','K',...) is another token than in the call ('"DKP72P"' -> 'D','K',
    #: ...), so the model cannot copy it by matching tokens (an induction head's mechanism)
    space_tokens: bool = False
    #: re-valued copies of each golden trajectory added to the SFT data (see :func:`revalued_rows`):
    #: with a few epochs over ~900 trajectories a tiny model learns each training value by heart
    #: (its message -> its id) instead of copying; fresh values in every copy leave copying as the
    #: only way to lower the loss on them
    revalued: int = 0
    #: > 0: every string a task states for the agent to copy (codes, emails, phones, names, ...; both
    #: splits) is drawn from a fixed pool of this many per kind, and each pool value and each record
    #: id (``SHP-0003``) is one token of the tokenizer (:func:`value_tokens`): copying it is one
    #: content-based attention lookup rather than a ~6-token induction chain
    value_pool: int = 0
    #: tied input and output embeddings (:func:`~longcat_plugins.learning.assets.build_model`): the
    #: copy of a one-token value is then one circuit for all values rather than one learned per value
    #: token, most of which a few thousand trajectories show only a handful of times
    tie_embeddings: bool = False
    #: > 0: the model's width instead of the size's (MLP twice as wide, the size's layers and heads).
    #: Measured with bench/tool_copy_probe.py: at width 64 the copy of a one-token value stays at
    #: chance for 1,000 updates; at 128 it forms within them
    hidden_size: int = 0
    #: > 0: for this share of the SFT rows (re-valued copies included) a *stop-early twin* is added:
    #: the same trajectory cut after the first tool result and closed with "Done." as if the task
    #: were finished (:func:`shortcut_rows`), which the rubric never credits. At the point after the
    #: lookup the SFT data then say "act" and "stop" about equally often (share 1.0: once each), so
    #: the warm start stops early on part of its tasks: the commonest flaw of a tool agent, one
    #: decision the same for every task, which RL can unlearn from the rubric alone (GRPO on the
    #: golden-only warm starts did not improve their copying: docs/learning.md)
    shortcuts: float = 0.0

    def key(self) -> str:
        """A short digest of every field: a changed plan builds into its own cache directory
        (``space_tokens``, ``revalued``, ``value_pool``, ``tie_embeddings``, ``hidden_size`` and
        ``shortcuts`` count only when set, so the plans measured before them keep their keys)."""
        fields = asdict(self)
        optional = (("space_tokens", False), ("revalued", 0), ("value_pool", 0), ("tie_embeddings", False))
        for name, default in (*optional, ("hidden_size", 0), ("shortcuts", 0.0)):
            if fields[name] == default:
                del fields[name]
        return plan_digest(fields)

    def gen_config(self) -> GenConfig:
        """The generator's settings for both splits: short chains, pooled values if planned."""
        return replace(SHORT_CHAINS, value_pool=self.value_pool)

    def sft_config(self, rows: int) -> SFTConfig:
        """verl SFT hyperparameters for ``rows`` trajectories: whole trajectories in each sample,
        ``sft_steps`` updates (enough epochs over the data to reach them)."""
        return SFTConfig.for_steps(
            rows, self.sft_steps, self.sft_batch_size, self.sft_lr, self.sft_max_length, self.seed
        )


#: record ids ``<prefix>-0001`` .. of each entity made single tokens under a value pool (an
#: environment of the short-chain generator has at most a few dozen records of an entity)
KEY_TOKENS = 99


def value_tokens(pool: int) -> list[str]:
    """Every value of the :data:`DOMAIN`'s pools of size ``pool`` and its record ids: the strings a
    task asks the agent to copy, each made one token under ``WarmStartPlan(value_pool=pool)``."""
    from longcat_plugins.environments.spec import load_spec
    from longcat_plugins.environments.values import POOL_KINDS, value_pool

    values = {v: None for kind in POOL_KINDS for v in value_pool(kind, pool)}
    for entity in load_spec(DOMAIN).entities.values():
        values.update({f"{entity.prefix}-{n:04d}": None for n in range(1, KEY_TOKENS + 1)})
    return list(values)


def build_tool_tokenizer(
    out: Path,
    rows: list[dict[str, Any]],
    seed: int,
    vocab_size: int,
    space_tokens: bool = False,
    value_pool: int = 0,
) -> None:
    """A BPE tokenizer trained on the rendered trajectories, plus the recurring system-prompt lines
    (and under a ``value_pool``, :func:`value_tokens`) as tokens."""
    groups = [static_lines(rows), *([value_tokens(value_pool)] if value_pool else [])]
    build_trajectory_tokenizer(out, rows, seed, vocab_size, groups, space_tokens)


#: the plan ``demo --recipe tool_agent`` builds: 4,000 verl SFT updates of a 128-d tied model on
#: one-token pooled values, with a stop-early twin of every row. Whether the copy of a value into a
#: call forms within those updates is a matter of the seed (init, data and order): seed 0's build
#: copied the first call's value on 15.6% of the held-out tasks, seed 1's on 86.7%, which then stops
#: early greedily (0% success) and succeeds on 20% of its sampled episodes: what GRPO can unlearn
#: (``bench/results/tool_warm_start_demo.json``)
DEMO_PLAN = WarmStartPlan(
    sft_steps=4000, revalued=4, value_pool=20, tie_embeddings=True, hidden_size=128, shortcuts=1.0, seed=1
)


#: the vLLM lane's tool warm start (``tests/test_vllm_lane.py``): the cheapest plan found whose model
#: writes hermes calls the environment can run, for ``tiny32`` (the size CPU vLLM serves). 300 SFT
#: updates on the golden trajectories of 60 environments: greedily, every first turn on its held-out
#: tasks is a well-formed call to the golden first tool, whose values it does not copy (it solves
#: nothing): ``bench/bench_tool_warm_starts.py --candidates lane``. (A first try, 150 updates on 40
#: environments, wrote well-formed calls to tools the environments do not have: one probe, not recorded)
LANE_PLAN = WarmStartPlan(size="tiny32", train_envs=60, val_envs=4, sft_steps=300)


def demo_plan(size: str) -> WarmStartPlan:
    """:data:`DEMO_PLAN` at ``size`` (above ``tiny`` at the size's own width: not measured there)."""
    return DEMO_PLAN if size == DEMO_PLAN.size else replace(DEMO_PLAN, size=size, hidden_size=0)


def rl_rows(tasks_parquet: Path, out: Path, split: str) -> None:
    """The env generator's task rows at noise 0 (the warm start's distribution), written atomically."""
    import pandas as pd

    rows = pd.read_parquet(tasks_parquet)
    rows["extra_info"] = [{**dict(i), "split": split, "noise_level": 0} for i in rows["extra_info"]]
    tmp = out.with_name(out.name + ".tmp")
    rows.to_parquet(tmp)
    tmp.replace(out)


#: environments one generator run yields reliably: its seed chains favour tools not yet used, so
#: later indices fail more often (seed 0: 50 of the first 50, 19 of indices 150-199)
TRAIN_CHUNK = 120


def generate_train_environments(out: Path, count: int, seed: int, config: GenConfig = SHORT_CHAINS) -> None:
    """``count`` environments as chunks of :data:`TRAIN_CHUNK` from generator seeds ``seed``,
    ``seed + 1``, ... (``out/<k>/``), their task rows merged into ``out/tasks.parquet``."""
    import pandas as pd

    from longcat_plugins.environments.envgen import generate_environments

    parts = []
    for k, start in enumerate(range(0, count, TRAIN_CHUNK)):
        n = min(TRAIN_CHUNK, count - start)
        generate_environments(DOMAIN, n, out / str(k), seed=seed + k, config=config)
        parts.append(pd.read_parquet(out / str(k) / "tasks.parquet"))
    pd.concat(parts, ignore_index=True).to_parquet(out / "tasks.parquet")


def prepare_data(tmp: Path, plan: WarmStartPlan) -> list[dict[str, Any]]:
    """Environments, RL rows, SFT rows and the tokenizer + random model under ``tmp``; returns the SFT rows."""
    from longcat_plugins.environments.envgen import generate_environments

    generate_train_environments(tmp / "envs-train", plan.train_envs, plan.seed, plan.gen_config())
    generate_environments(
        DOMAIN, plan.val_envs, tmp / "envs-val", seed=plan.seed + 10_000, config=plan.gen_config(), split="test"
    )
    rl_rows(tmp / "envs-train" / "tasks.parquet", tmp / "train.parquet", "train")
    rl_rows(tmp / "envs-val" / "tasks.parquet", tmp / "val.parquet", "test")

    class _NoTemplateTools:  # the tool tokenizer's template has no tools slot: tools go to the system prompt
        chat_template = TOOL_CHAT_TEMPLATE

    rows = sft_rows(task_infos(tmp / "envs-train" / "tasks.parquet"), _NoTemplateTools(), RENDER)
    (tmp / "base").mkdir()
    build_tool_tokenizer(tmp / "base", rows, plan.seed, plan.vocab_size, plan.space_tokens, plan.value_pool)
    rows = rows + revalued_rows(rows, plan.revalued, plan.seed, plan.value_pool)
    rows = rows + shortcut_rows(rows, plan.shortcuts, plan.seed)
    rows = fitting_rows(rows, tmp / "base", plan.sft_max_length)
    write_sft_parquet(rows, tmp / "sft.parquet")
    build_model(tmp / "base", plan.size, plan.seed, plan.tie_embeddings, plan.hidden_size)
    return rows


#: the first call's argument values that are re-drawn: strings of at least this many letters and
#: digits (ids, codes, emails, phones, names), not enum values (those are named in the system prompt)
REVALUE_MIN_CHARS = 5


def _fresh(value: str, rng: random.Random) -> str:
    """``value`` with each letter and digit redrawn in its class (case kept); an email's domain kept."""
    local, at, domain = value.partition("@")
    out = [
        rng.choice(string.ascii_uppercase)
        if c.isupper()
        else rng.choice(string.ascii_lowercase)
        if c.islower()
        else rng.choice(string.digits)
        if c.isdigit()
        else c
        for c in local
    ]
    return "".join(out) + at + domain


def revalued_rows(rows: list[dict[str, Any]], copies: int, seed: int, pool: int = 0) -> list[dict[str, Any]]:
    """``copies`` re-valued versions of each row: every string argument of the first call that the
    user's message states (at least :data:`REVALUE_MIN_CHARS` letters/digits, not in the system prompt)
    replaced by a fresh value of the same shape everywhere after the system prompt (message, calls,
    tool results, answer), so each copy is the same task about another record. Deterministic per ``seed``.

    ``pool``: the rows' values come from value pools of that size; a fresh value is another value of
    the same pool that the trajectory does not contain (so it is one token too), and a value of no
    pool is kept."""
    if copies < 0:
        raise ValueError(f"revalued: must be >= 0, got {copies}")
    rng = random.Random(f"revalue-{seed}")
    pools: dict[str, tuple[str, ...]] = {}
    if pool:
        from longcat_plugins.environments.values import POOL_KINDS, value_pool

        pools = {v: value_pool(kind, pool) for kind in POOL_KINDS for v in value_pool(kind, pool)}
    out = []
    for _ in range(copies):
        for row in rows:
            messages = [dict(m) for m in row["messages"]]
            system, question = messages[0]["content"], messages[1]["content"]
            first = json.loads(messages[2]["content"][len("<tool_call>") : -len("</tool_call>")])
            values = [
                v
                for v in first["arguments"].values()
                if isinstance(v, str)
                and sum(c.isalnum() for c in v) >= REVALUE_MIN_CHARS
                and v in question
                and v not in system
            ]
            for value in values:
                if pool and value not in pools:
                    continue
                if pool:
                    text = "".join(m["content"] for m in messages)
                    fresh = rng.choice([v for v in pools[value] if v not in text])
                else:
                    fresh = _fresh(value, rng)
                for m in messages[1:]:
                    m["content"] = m["content"].replace(value, fresh)
            out.append({**row, "messages": messages})
    return out


#: what a stop-early twin answers after the lookup: a claim of completion with nothing done
SHORTCUT_ANSWER = "Done."


def shortcut_rows(rows: list[dict[str, Any]], share: float, seed: int) -> list[dict[str, Any]]:
    """Stop-early twins of ``share`` of ``rows`` (the whole of each row once per unit of ``share``,
    the fraction drawn per row, deterministic per ``seed``): the trajectory up to and including the
    first tool result, then :data:`SHORTCUT_ANSWER`. Only rows with at least two calls get one (a
    one-call chain that stops after its call is the golden chain). The rubric never credits a twin:
    the task's action or its requested value is missing (``tests/test_env_golden.py`` plays each)."""
    if share < 0:
        raise ValueError(f"shortcuts: must be >= 0, got {share}")
    rng = random.Random(f"shortcut-{seed}")
    whole, fraction = divmod(share, 1.0)
    out = []
    for row in rows:
        messages = list(row["messages"])
        calls = [
            i for i, m in enumerate(messages) if m["role"] == "assistant" and m["content"].startswith("<tool_call>")
        ]
        twins = int(whole) + (rng.random() < fraction)
        if len(calls) < 2 or messages[calls[0] + 1]["role"] != "tool":
            continue
        cut = [dict(m) for m in messages[: calls[0] + 2]] + [{"role": "assistant", "content": SHORTCUT_ANSWER}]
        out.extend({**row, "messages": cut} for _ in range(twins))
    return out


def fitting_rows(rows: list[dict[str, Any]], tokenizer_dir: Path, max_length: int) -> list[dict[str, Any]]:
    """The rows whose whole trajectory is at most ``max_length`` tokens (verl's SFT refuses longer ones)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    fit = [
        r
        for r in rows
        if len(tok.apply_chat_template(list(r["messages"]), tokenize=True, return_dict=False)) <= max_length
    ]
    if not fit:
        raise ValueError(f"sft_max_length: no golden trajectory fits in {max_length} tokens")
    return fit


def ensure_tool_warm_start(cache_dir: Path | None = None, plan: WarmStartPlan | None = None) -> ToolWarmStart:
    """Build (once) and return the tool-use warm start for ``plan`` (see the module doc)."""
    plan = plan or WarmStartPlan()
    check_size(plan.size)
    root = (cache_dir or default_cache_dir()) / f"toolwarm-{plan.size}-seed{plan.seed}-{plan.key()}"
    built = WarmStart(
        root, root / "model", root / "train.parquet", root / "val.parquet", base=root / "base", sft=root / "sft.parquet"
    )
    if built.exists():
        return built
    with building(root) as tmp:
        rows = prepare_data(tmp, plan)
        _fix_env_paths(tmp, root.resolve())
        config = plan.sft_config(len(rows))
        meta = {**asdict(plan), "sft_rows": len(rows), "sft_epochs": config.epochs}
        train_warm_start(tmp, tmp / "base", tmp / "sft.parquet", config, meta)
    return built


def _fix_env_paths(tmp: Path, root: Path) -> None:
    """Point the rows' absolute ``env_path`` at where the environments will live after the rename."""
    import pandas as pd

    for path in [tmp / n for n in ("train.parquet", "val.parquet", "sft.parquet")] + sorted(
        tmp.glob("envs-*/**/tasks.parquet")
    ):
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
#: tasks a GRPO step of the warm start's runs (one mini-batch: one update a step)
RL_BATCH = 8


def warm_overrides(warm: ToolWarmStart, steps: int) -> list[str]:
    """Overrides of ``tool_agent_cpu.yaml`` that train the warm start on its own task distribution.

    Noise 0 and no context resets (the SFT trajectories have neither), turns long enough for one
    hermes call, fp32 training as the warm start's SFT (bf16 autocast is ~6x slower on a CPU: the
    actor update of a step took 13-20 s in bf16), and a greedy validation on the held-out environments before training, every
    ``steps // 5`` steps and after the last (the demo's ``held-out success`` line).
    """
    return [
        # the longest golden prompt is ~170 tokens with the tool tokenizer, the longest response ~270;
        # lr 1e-3 (the arithmetic demo's) broke the copy of golden-only warm starts within 40 steps,
        # 3e-4 kept it and, on the demo's plan, unlearned the stop-early flaw (docs/learning.md)
        *rl_overrides(
            warm,
            prompt_length=192,
            response_length=384,
            batch=RL_BATCH,
            micro_batch=8,
            lr=3e-4,
            test_freq=max(1, steps // 5),
        ),
        f"{_LOOP}.noise_curriculum.enabled=false",
        f"{_LOOP}.discard_turns=0",
        f"{_LOOP}.discard_turns_growth=0",
        f"{_LOOP}.max_turn_tokens=64",
        f"{_LOOP}.max_turns=4",
        # the rubric alone: the warm start already writes the format, and a format share on a
        # failed episode, scaled by GRPO's std normalisation, pays a group for making fewer calls
        f"{_LOOP}.format_weight=0",
        *FP32_TRAINING,
    ]


#: the validation metric of the tool agent's rubric success (``acc`` of the loop's reward info)
HELD_OUT_METRIC = f"val-core/longcat_env/{DOMAIN}/acc/mean@1"


def held_out_success(steps: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(first, last) held-out success from a run's per-step metrics, or None without two validations."""
    return held_out(steps, HELD_OUT_METRIC)
