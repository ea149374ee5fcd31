"""Data strategies on the learning bench: same warm start, same rollout budget per step,
uniform n vs dynamic budget allocation (both values) vs pass-rate oversampling vs curriculum.

    .venv/bin/python bench/bench_data.py [--strategies uniform,budget_greedy,...] [--seeds 0,1,2]
        [--steps 12] [--tasks 64] [--out bench/results/data.json] [--append]

Every run starts from the same warm start (:func:`longcat_plugins.learning.arithmetic_warmstart.ensure_warm_start`)
with the warm-started demo's recipe (exact-match reward, 16 prompts x 8 samples a step, greedy
held-out validation before and after) on the ``longcat_data`` trainer, so every strategy, the
uniform baseline included, runs through the same code and metrics; only the strategy settings
differ. The budget is the same for all: 16 x 8 = 128 rollouts per step. Training draws from the
first ``--tasks`` training questions (``data.train_max_samples``) so a task recurs every few
steps and its pass rate is live (with all 936 questions most tasks would be seen once).

Per run: ``rollout_tokens`` (generated response tokens, summed over steps),
``zero_variance_group_frac`` (trained groups whose rewards were all equal / trained groups),
``trained_samples_per_rollout_token``, and verl's held-out greedy accuracy before and after
(``acc_before``/``acc_after``). Writes ``{"runs": [...]}`` and a PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from options import choice_list, seed_list
from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes
from training_run import seeded_run, train_or_raise, validated_steps

S = "+longcat.settings.scheduler.longcat_data"
#: strategy -> settings overrides on the longcat_data trainer
STRATEGIES: dict[str, list[str]] = {
    "uniform": [],
    "budget_greedy": [f"{S}.budget.enable=true", f"{S}.budget.value=informative"],
    "budget_knapsack": [f"{S}.budget.enable=true", f"{S}.budget.value=knapsack"],
    "pass_rate_oversampling": [
        f"{S}.oversampling.enable=true",
        f"{S}.oversampling.k_max=2",
        f"{S}.oversampling.group_size=4",
    ],
    "curriculum": [f"{S}.curriculum.enable=true", f"{S}.pool_factor=2"],
}


def run(strategy: str, seed: int, steps: int, tasks: int, assets, work: Path) -> dict:
    from longcat_plugins.learning.demos import prepare_demo
    from longcat_plugins.runtime.launch import resolve_config

    demo = prepare_demo("arithmetic", assets, steps, init="warm")
    result = train_or_raise(
        resolve_config(demo.config),
        [
            *demo.overrides,
            *seeded_run(seed, steps),
            "trainer.save_freq=-1",
            f"data.train_max_samples={tasks}",
            "trainer.v1.trainer_mode=longcat_data",
            *STRATEGIES[strategy],
        ],
        work / f"{strategy}-seed{seed}",
        f"{strategy}/seed {seed}",
    )
    accs, trained = validated_steps(result, steps, f"{strategy}/seed {seed}", "longcat/data/trained_groups")
    groups = sum(r["longcat/data/trained_groups"] for r in trained)
    zero = sum(r["longcat/data/zero_variance_group_frac"] * r["longcat/data/trained_groups"] for r in trained)
    tokens = int(sum(r["longcat/data/rollout_tokens"] for r in trained))
    samples = sum(r["longcat/data/trained_samples"] for r in trained)
    return {
        "strategy": strategy,
        "seed": seed,
        "steps": len(trained),
        "rollout_tokens": tokens,
        "zero_variance_group_frac": round(zero / groups, 4),
        "trained_samples_per_rollout_token": round(samples / tokens, 5),
        "acc_before": accs[0],
        "acc_after": accs[-1],
        "curve": [
            {
                "step": r["step"],
                "rollout_tokens": int(r["longcat/data/rollout_tokens/total"]),
                "zero_variance_group_frac": r["longcat/data/zero_variance_group_frac"],
            }
            for r in trained
        ],
    }


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    names = list(dict.fromkeys(r["strategy"] for r in runs))
    for i, name in enumerate(names):
        mine = [r for r in runs if r["strategy"] == name]
        xs = [i + 0.1 * (j - len(mine) / 2) for j in range(len(mine))]
        axes[0].scatter(xs, [r["zero_variance_group_frac"] for r in mine], label=name)
        for r in mine:
            axes[1].plot(
                [0, r["rollout_tokens"]],
                [r["acc_before"], r["acc_after"]],
                marker="o",
                color=f"C{i}",
                label=name if r is mine[0] else None,
            )
    axes[0].set_xticks(range(len(names)), names, rotation=20, fontsize=8)
    axes[0].set_ylabel("zero-variance groups / trained groups")
    axes[1].set_xlabel("rollout tokens")
    axes[1].set_ylabel("held-out greedy exact match")
    axes[1].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("data strategies on the warm-started tiny Llama, same rollout budget per step (one dot per seed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategies", type=choice_list(STRATEGIES), default=",".join(STRATEGIES))
    parser.add_argument("--seeds", type=seed_list, default="0,1,2")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--tasks", type=int, default=64, help="training questions drawn from (data.train_max_samples)")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--out", default="bench/results/data.json")
    parser.add_argument("--append", action="store_true", help="add to the runs already in --out")
    args = parser.parse_args()
    strategies, seeds = args.strategies, args.seeds

    from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start

    assets = ensure_warm_start(size=args.size)
    out = Path(args.out)
    origin, kept = provenance(seeds=seeds), earlier(out, args.append)
    runs = json.loads(out.read_text())["runs"] if args.append and out.exists() else []
    work = Path(tempfile.mkdtemp(prefix="longcat-data-"))
    for strategy in strategies:
        for seed in seeds:
            r = run(strategy, seed, args.steps, args.tasks, assets, work)
            runs = [x for x in runs if (x["strategy"], x["seed"]) != (strategy, seed)] + [r]
            print(
                f"{strategy:>22} seed {seed}: zero-variance groups {r['zero_variance_group_frac']:.3f}, "
                f"{r['rollout_tokens']} rollout tokens, held-out {100 * r['acc_before']:.1f}% -> {100 * r['acc_after']:.1f}%",
                flush=True,
            )
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(stamp({"runs": runs}, origin, kept), indent=2))
            plot(runs, out.with_suffix(".png"))
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
