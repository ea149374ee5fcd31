"""Train the checkpoints ``bench_heavy_thinking.py --model`` measures after RL: GRPO through the
``longcat_heavy_thinking`` agent loop, and plain GRPO with the same steps, from the arithmetic warm start.

Both runs start from the default warm start (:func:`longcat_plugins.learning.arithmetic_warmstart.ensure_warm_start`)
with the learning bench's recipe (the warm-started demo's overrides: exact-match reward, 16
prompts x 8 sessions a step, lr 1e-3, 12-token responses, greedy validation; and
``bench_learning.SCHEDULE``, cosine decay to 0 over the run), trained in fp32
(:data:`FP32_TRAINING`: verl's bf16 autocast is ~6x slower on a CPU), and export the HF
checkpoint at the last step only:

- ``heavy_rl``: ``configs/heavy_thinking_cpu.yaml`` (K = 2, one round, ``longcat_grpo``): every
  session is K = 2 trajectories plus a summary over their answers, each a training row with the
  reward of its own response (the summary's is the final answer's). A step is 16 x 8 x (K + 1) =
  384 rows, and verl's mini-batch is ``ppo_mini_batch_size`` x n = 128 rows (verl refuses a
  ``ppo_mini_batch_size`` above ``train_batch_size``), so a step is K + 1 = 3 optimizer updates;
- ``grpo``: ``configs/cpu_demo.yaml``, the learning bench's ``vanilla`` row (verl's ``grpo``);
- ``heavy_summary``: ``heavy_rl`` with ``train_parallel: false``: only the summaries train (128
  rows, one update a step); the candidates come from the same, otherwise untrained, policy.

Each run writes its row to ``--out`` (``{"runs": [...]}``: label, recipe, seed, steps, training
wall-clock = the sum of verl's ``timing_s/step``, verl's greedy validation before and after (for
``heavy_rl`` that is the final answer of greedy heavy thinking), the per-step mean training reward
(``heavy_rl``: also of its summaries and of its parallel trajectories apart, and the share of
summaries that repeat one of their candidates verbatim, from verl's rollout dumps), and
``checkpoint``, the HF export's path under ``--work``). One run per command keeps each under the
machine's 12-minute cap:

    .venv/bin/python bench/bench_heavy_thinking_rl.py --recipe heavy_rl --steps 20 [--seed 0]
        [--work $LONGCAT_CACHE/heavy-thinking-rl] [--out bench/results/heavy_thinking_rl.json] [--append]
    .venv/bin/python bench/bench_heavy_thinking_rl.py --recipe grpo --steps 20 --append
    .venv/bin/python bench/bench_heavy_thinking.py --model <checkpoint> --append
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

from bench_learning import SCHEDULE, final_checkpoint
from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes
from training_run import seeded_run, train_or_raise

from longcat_plugins.runtime.launch import FP32_TRAINING

#: heavy_thinking_cpu.yaml's width
K = 2
#: one candidate line of the summary prompt (``answers_block``: ``(n) answer``)
CANDIDATE = re.compile(r"^\(\d+\) (.*)$", re.MULTILINE)
#: label -> (recipe, overrides on the warm-started demo's)
RECIPES: dict[str, tuple[str, list[str]]] = {
    "heavy_rl": (
        "heavy_thinking_cpu",
        [f"longcat.settings.environment.longcat_heavy_thinking.k={K}"],
    ),
    "grpo": ("cpu_demo", []),
    # the summary stage alone: the loop returns only the summary, so every row is a summary
    "heavy_summary": (
        "heavy_thinking_cpu",
        [
            f"longcat.settings.environment.longcat_heavy_thinking.k={K}",
            "+longcat.settings.environment.longcat_heavy_thinking.train_parallel=false",
        ],
    ),
}


def stage_rewards(dumps: Path, k: int = K) -> dict[str, list[float]]:
    """Per training step, the mean reward of the summaries and of the parallel trajectories, from
    verl's rollout dumps (``trainer.rollout_data_dir``: one ``<step>.jsonl``, a row per output,
    ``uid`` = ``{prompt uid}_{session}_{output index}``; index ``k`` is the summary)."""
    out: dict[str, list[float]] = {"summary_reward": [], "parallel_reward": [], "summary_copies": []}
    for dump in sorted(dumps.glob("*.jsonl"), key=lambda p: int(p.stem)):
        rows = [json.loads(line) for line in dump.read_text().splitlines() if line.strip()]
        summary = [r for r in rows if int(r["uid"].rsplit("_", 1)[1]) == k]
        parallel = [r["score"] for r in rows if int(r["uid"].rsplit("_", 1)[1]) < k]
        out["summary_reward"].append(round(sum(r["score"] for r in summary) / max(len(summary), 1), 4))
        out["parallel_reward"].append(round(sum(parallel) / max(len(parallel), 1), 4))
        # the share of summaries that answer with one of their candidates' answers, verbatim
        copies = [r["output"].strip() in {c.strip() for c in CANDIDATE.findall(r["input"])} for r in summary]
        out["summary_copies"].append(round(sum(copies) / max(len(copies), 1), 4))
    return out


def train(recipe: str, steps: int, seed: int, work: Path) -> dict:
    """One run from the warm start; its row, with the HF export's path."""
    from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start
    from longcat_plugins.learning.demos import prepare_demo
    from longcat_plugins.runtime.launch import resolve_config, val_accuracy

    assets = ensure_warm_start()
    demo = prepare_demo("arithmetic", assets, steps, init="warm")
    config, extra = RECIPES[recipe]
    run_dir = work / f"{recipe}-seed{seed}-s{steps}"
    shutil.rmtree(run_dir, ignore_errors=True)  # the bench's own folder: no stale checkpoint survives
    result = train_or_raise(
        resolve_config(config),
        [
            *demo.overrides,
            *seeded_run(seed, steps),
            "actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]",
            *SCHEDULE,
            *FP32_TRAINING,
            *extra,
            *([f"trainer.rollout_data_dir={run_dir / 'rollouts'}"] if recipe == "heavy_rl" else []),
        ],
        run_dir,
        f"{recipe}/seed {seed}",
    )
    records = sorted(result.steps, key=lambda s: s["step"])
    vals = [a for a in (val_accuracy(r) for r in records) if a is not None]
    checkpoint = final_checkpoint(result.checkpoints)
    if checkpoint is None or len(vals) < 2:
        raise RuntimeError(f"{recipe}/seed {seed}: no HF export or fewer than two validations; see {result.log}")
    return {
        "label": recipe,
        "recipe": config,
        "seed": seed,
        "steps": result.last_step,
        "wall_s": round(sum(r.get("timing_s/step", 0.0) for r in records), 2),
        "val_before": vals[0],
        "val_after": vals[-1],
        "train_reward": [round(r["critic/score/mean"], 4) for r in records if "critic/score/mean" in r],
        **(stage_rewards(run_dir / "rollouts") if recipe == "heavy_rl" else {}),
        "overrides": [*SCHEDULE, *FP32_TRAINING, *extra],
        "checkpoint": str(checkpoint),
    }


def main() -> None:
    from longcat_plugins.learning.assets import default_cache_dir

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True, choices=sorted(RECIPES))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=None, help="run dirs (default: $LONGCAT_CACHE/heavy-thinking-rl)")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "results" / "heavy_thinking_rl.json"
    )
    parser.add_argument("--append", action="store_true", help="keep the other rows in --out")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps: must be >= 1, got {args.steps}")
    work = (args.work or default_cache_dir() / "heavy-thinking-rl").resolve()
    origin, kept = provenance(seeds=[args.seed]), earlier(args.out, args.append)
    row = train(args.recipe, args.steps, args.seed, work)
    print(json.dumps(row), flush=True)
    runs = json.loads(args.out.read_text())["runs"] if args.append and args.out.exists() else []
    runs = [r for r in runs if (r["label"], r["seed"], r["steps"]) != (row["label"], row["seed"], row["steps"])]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamp({"runs": [*runs, row]}, origin, kept), indent=2) + "\n")


if __name__ == "__main__":
    main()
