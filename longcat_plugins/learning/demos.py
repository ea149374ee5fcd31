"""The demos ``longcat-plugins demo --recipe`` runs: each is a recipe in ``configs/`` plus the
locally built data it needs, so every family can be seen end to end on a laptop.

- ``arithmetic``: GRPO on the arithmetic task (``cpu_demo.yaml``). By default on a warm start
  (:mod:`.arithmetic_warmstart`: the ``a+b-c`` variant, SFT-ed until partly right) with the exact-match
  reward and greedy held-out validation every few steps; ``--init random`` trains the random
  model on the one-operation task with the partial-credit reward instead.
- ``tool_agent``: GRPO through the ``longcat_tool_agent`` agent loop on generated ``retail``
  environments, with noise and context management (``tool_agent_cpu.yaml``).
- ``code_agent``: GRPO through the ``longcat_code_agent`` agent loop on generated repository
  tasks, shell and hidden tests in the code sandbox (``code_agent_cpu.yaml``). By default on the
  code-agent warm start (:mod:`.code_warmstart`: SFT on golden fixes, partly right on held-out
  tasks) with greedy held-out validation; ``--init random`` trains the random model instead.
- ``dora``: the ``dora`` v1 trainer with two ``hf`` replicas holding different policy versions
  on a long-tailed workload (``dora_cpu.yaml``).
- ``longcat``: the paper's system in one recipe (``longcat.yaml``): DORA with staleness, the
  triplet-clip objective, the step planner's strategies under DORA, self-verification and the
  reward router, on the arithmetic warm start.
- ``longcat_tool``: the same system on the tool environment (``longcat_tool.yaml``): tool
  episodes of ``longcat_tool_agent`` judged by self-verification against their rubric score, on
  the tool warm start that also writes verdicts (:mod:`.tool_verdicts`).

Data is built once under the assets' cache directory, atomically, so an interrupted build
leaves nothing half-written behind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from longcat_plugins.learning.assets import Assets
from longcat_plugins.runtime.launch import configs_dir

if TYPE_CHECKING:
    from longcat_plugins.learning.tool_warmstart import ToolWarmStart

#: recipe name -> (config in configs/, one line for ``--help``)
RECIPES: dict[str, tuple[str, str]] = {
    "arithmetic": ("cpu_demo", "GRPO on a warm-started arithmetic model; held-out exact match rises"),
    "tool_agent": ("tool_agent_cpu", "GRPO through the longcat_tool_agent loop on generated retail environments"),
    "dora": ("dora_cpu", "the dora trainer: two hf replicas, mixed policy versions, long-tailed lengths"),
    "code_agent": ("code_agent_cpu", "GRPO through the longcat_code_agent loop on generated repository tasks"),
    "longcat": (
        "longcat",
        "the paper's system: DORA, triplet clip, data strategies, self-verification, the reward router",
    ),
    "longcat_tool": (
        "longcat_tool",
        "the paper's system on tool episodes: self-verification judged by the rubric, the router",
    ),
}

#: the recipes that start from the arithmetic warm start
ARITHMETIC_WARM = ("arithmetic", "longcat")
#: the recipes that have a warm start (their default ``--init``)
WARM_RECIPES = (*ARITHMETIC_WARM, "tool_agent", "code_agent", "longcat_tool")
#: the recipes that run only on a warm start
WARM_ONLY = ("longcat", "longcat_tool")
#: prompt tokens of the system recipe: the verification prompts (problem + candidate + "Right?")
#: reach 34 on the arithmetic task
SYSTEM_PROMPT_TOKENS = 40
#: the system recipe's warm start also learned to write verdicts on this share of its questions
#: (A6 needs a policy that can say "correct"/"incorrect" for its verification groups to carry signal)
SYSTEM_VERDICTS = 0.5
#: the system recipe trains on this many of the warm start's 936 questions, so that tasks recur
#: within its 12 steps and their own pass rates (not the live mean) drive the budget (D4)
SYSTEM_TRAIN_QUESTIONS = 96

#: recipe -> its config on the vLLM lane, where the plain ``runtime=cpu_vllm`` switch is not enough
#: (DORA on vLLM replicas holds one version per replica: dora_gpu's settings, on CPU)
VLLM_TWINS: dict[str, str] = {"dora": "dora_cpu_vllm", "longcat": "longcat_cpu_vllm"}

#: repository tasks the code-agent demo trains on
DEMO_CODE_TASKS = 16

#: environments the tool-agent demo trains on (3 tasks each on average)
DEMO_ENVIRONMENTS = 2


@dataclass(frozen=True)
class Demo:
    config: str
    overrides: list[str]


#: what the warm-started arithmetic demo changes in ``cpu_demo.yaml``: the exact-match reward
#: (no credit for anything but ``The answer is N.``), 16 prompts x 8 samples a step (groups
#: with mixed outcomes), short responses, and greedy validation before training and every
#: ``WARM_TEST_FREQ`` steps (the recipe's ``val_kwargs`` are greedy, n=1)
WARM_TEST_FREQ = 3
#: the warm-started demo's default length
WARM_DEMO_STEPS = 12
#: the tool agent's demo length (what it learns there: bench/results/demo_tool_agent.json)
TOOL_WARM_DEMO_STEPS = 20
WARM_OVERRIDES = [
    "reward.custom_reward_function.name=arithmetic_exact",
    "data.train_batch_size=16",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.rollout.n=8",
    "data.max_response_length=12",
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "trainer.val_before_train=true",
    # seed 0 for data order and sampling: bench_learning.py's vanilla seed-0 configuration
    "data.seed=0",
    "actor_rollout_ref.actor.data_loader_seed=0",
    "actor_rollout_ref.rollout.seed=0",
]


def prepare_demo(recipe: str, built: Assets, steps: int, init: str = "random") -> Demo:
    """The recipe's config and the overrides that point it at locally built data (``init``:
    ``warm`` when ``built`` is a warm start, see :func:`.arithmetic_warmstart.ensure_warm_start`)."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown demo recipe {recipe!r}; choices: {', '.join(RECIPES)}")
    if init not in ("warm", "random"):
        raise ValueError(f"init must be 'warm' or 'random', got {init!r}")
    if init == "warm" and recipe not in WARM_RECIPES:
        raise ValueError(f"--init warm: recipe {recipe!r} has no warm start yet; use --init random")
    overrides = [
        f"actor_rollout_ref.model.path={built.model}",
        f"trainer.total_training_steps={steps}",
        f"trainer.save_freq={steps}",
    ]
    if recipe == "arithmetic":
        overrides += [f"data.train_files={built.train}", f"data.val_files={built.val}"]
        if init == "warm":
            overrides += [*WARM_OVERRIDES, f"trainer.test_freq={min(WARM_TEST_FREQ, steps)}"]
    elif recipe == "longcat":
        if init != "warm":
            raise ValueError("recipe 'longcat' runs on the arithmetic warm start; use --init warm")
        overrides += [f"data.train_files={built.train}", f"data.val_files={built.val}"]
        # the router scores the task (system/longcat.yaml), not a custom reward function
        overrides += [o for o in WARM_OVERRIDES if not o.startswith("reward.custom_reward_function.")]
        overrides += [
            f"data.max_prompt_length={SYSTEM_PROMPT_TOKENS}",
            f"data.train_max_samples={SYSTEM_TRAIN_QUESTIONS}",
            "trainer.total_epochs=100",  # the steps decide the length: 96 questions are 6 steps an epoch
            f"trainer.test_freq={min(WARM_TEST_FREQ, steps)}",
        ]
    elif recipe == "tool_agent" and init == "warm":
        from longcat_plugins.learning.tool_warmstart import demo_plan, ensure_tool_warm_start

        size = json.loads((built.root / "assets.json").read_text()).get("size", "tiny")
        return tool_warm_demo(ensure_tool_warm_start(built.root.parent, demo_plan(size)), steps)
    elif recipe == "longcat_tool":
        if init != "warm":
            raise ValueError("recipe 'longcat_tool' runs on the tool warm start; use --init warm")
        from longcat_plugins.learning.tool_verdicts import ensure_verdict_warm_start
        from longcat_plugins.learning.tool_warmstart import demo_plan, ensure_tool_warm_start

        size = json.loads((built.root / "assets.json").read_text()).get("size", "tiny")
        warm = ensure_tool_warm_start(built.root.parent, demo_plan(size))
        return tool_system_demo(ensure_verdict_warm_start(warm), steps)
    elif recipe == "code_agent" and init == "warm":
        from longcat_plugins.learning import code_warmstart

        size = json.loads((built.root / "assets.json").read_text()).get("size", "tiny")
        plan = code_warmstart.CodeWarmStartPlan(size=size)
        warm = code_warmstart.warm_overrides(code_warmstart.ensure_code_warm_start(built.root.parent, plan), steps)
        overrides = [o for o in overrides if not o.startswith("actor_rollout_ref.model.path=")] + warm
    elif recipe == "tool_agent":
        train, val = _tool_agent_data(built.root / "demo-envs-retail")
        overrides += [f"data.train_files={train}", f"data.val_files={val}"]
    elif recipe == "code_agent":
        train, val = _code_agent_data(built.root / "demo-code-tasks")
        overrides += [f"data.train_files={train}", f"data.val_files={val}"]
    else:
        from longcat_plugins.schedulers.workload import AGENT_NAME, write_skewed_dataset

        skewed = built.root / "demo-skewed.parquet"
        if not skewed.exists():
            write_skewed_dataset(built.train, skewed, long_tokens=384, short_tokens=8)
        overrides += [
            f"data.train_files={skewed}",
            f"data.val_files={built.val}",
            "data.max_response_length=384",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={configs_dir() / 'agent_loops' / 'skewed.yaml'}",
            f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
            "trainer.v1.separate_async.num_warmup_batches=2",
        ]
    return Demo(RECIPES[recipe][0], overrides)


def tool_warm_demo(warm: ToolWarmStart, steps: int) -> Demo:
    """The tool-agent demo on ``warm`` (any plan's warm start: the demo's, or a bench candidate's)."""
    from longcat_plugins.learning.tool_warmstart import warm_overrides

    overrides = [f"trainer.total_training_steps={steps}", f"trainer.save_freq={steps}", *warm_overrides(warm, steps)]
    return Demo(RECIPES["tool_agent"][0], overrides)


#: the tool system recipe's prompt limit: a verification prompt (the task's message, a whole
#: episode's response, "Right?") reaches ~270 tokens with the tool warm start's tokenizer
SYSTEM_TOOL_PROMPT_TOKENS = 320
#: the tool system recipe trains on this many tasks, so that tasks recur within a few steps and
#: their own rubric pass rates (not the prior) drive the budget (D4) and the curriculum (D3)
SYSTEM_TOOL_TRAIN_TASKS = 32
#: the tool system demo's default length: the plateau detector needs 2 x window steps before a
#: verification phase can start
SYSTEM_TOOL_DEMO_STEPS = 8


def tool_system_demo(warm: ToolWarmStart, steps: int) -> Demo:
    """``longcat_tool.yaml`` on ``warm`` (a tool warm start that writes verdicts): the tool demo's
    training overrides (its batch, lr, fp32, clean noise-free episodes, greedy held-out
    validation), a prompt limit that fits the verification prompts, a small recurring task set."""
    from longcat_plugins.learning.tool_warmstart import warm_overrides

    mine = ("data.max_prompt_length=",)
    overrides = [o for o in warm_overrides(warm, steps) if not o.startswith(mine)]
    overrides += [
        f"trainer.total_training_steps={steps}",
        f"trainer.save_freq={steps}",
        f"data.max_prompt_length={SYSTEM_TOOL_PROMPT_TOKENS}",
        f"data.train_max_samples={SYSTEM_TOOL_TRAIN_TASKS}",
        "trainer.total_epochs=100",  # the steps decide the length
    ]
    return Demo(RECIPES["longcat_tool"][0], overrides)


def _tool_agent_data(out: Path) -> tuple[Path, Path]:
    """Generated environments' task parquet, and a two-task validation parquet at noise level 2."""
    import pandas as pd

    from longcat_plugins.environments.envgen import generate_environments

    tasks, val = out / "tasks.parquet", out.parent / f"{out.name}-val.parquet"
    if not tasks.exists():
        generate_environments("retail", DEMO_ENVIRONMENTS, out, seed=0)
    if not val.exists():
        rows = pd.read_parquet(tasks).head(2)
        rows["extra_info"] = [{**dict(i), "split": "test", "noise_level": 2} for i in rows["extra_info"]]
        tmp = val.with_suffix(".parquet.tmp")
        rows.to_parquet(tmp)
        tmp.replace(val)
    return tasks, val


def _code_agent_data(out: Path) -> tuple[Path, Path]:
    """Generated repository tasks (built atomically) and a two-task validation parquet."""
    import pandas as pd

    from longcat_plugins.environments.code_env.tasks import write_tasks
    from longcat_plugins.learning.assets import building

    out = out.resolve()
    tasks, val = out / "tasks.parquet", out / "val.parquet"
    if not val.exists():
        with building(out) as tmp:
            write_tasks(tmp, DEMO_CODE_TASKS, seed=0, mode="bug", hidden=4)
            # the parquet names the task folders by absolute path: point it at where they will live
            rows = pd.read_parquet(tmp / "tasks.parquet")
            rows["extra_info"] = [
                {**dict(i), "task_dir": str(out / "tasks" / str(i["task_id"]))} for i in rows["extra_info"]
            ]
            rows.to_parquet(tmp / "tasks.parquet")
            rows.head(2).to_parquet(tmp / "val.parquet")
    return tasks, val
