"""Objectives on the CPU demo: reward curves over ~50 GRPO steps and step time, for stock
``vanilla``, stock ``gspo`` and our ``triplet_clip`` (same seed, same data, same model).

    .venv/bin/python bench/bench_objectives.py [--steps 50] [--out bench/results/objectives.json]

Writes the JSON and a PNG of the reward curves beside it. Each run is one ``main_ppo`` process;
runs go one after another, so compare ratios, not absolute seconds (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from provenance import provenance  # bench/provenance.py: the record every bench writes
from training_run import demo_data, train_or_raise

#: objective -> overrides on the cpu_demo recipe
OBJECTIVES: dict[str, list[str]] = {
    "vanilla": [],
    "gspo": [
        "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
        "actor_rollout_ref.actor.clip_ratio_low=0.0003",
        "actor_rollout_ref.actor.clip_ratio_high=0.0004",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    ],
    "triplet_clip": ["+objective=triplet_clip"],
}


def run(name: str, overrides: list[str], steps: int, assets, work: Path) -> dict:
    from longcat_plugins.runtime.launch import resolve_config

    result = train_or_raise(
        resolve_config("cpu_demo"),
        [
            *demo_data(assets, steps),
            "trainer.total_epochs=100",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            *overrides,
        ],
        work / name,
        name,
    )
    rewards = [s["critic/score/mean"] for s in result.steps]
    step_s = [s["timing_s/step"] for s in result.steps][1:]
    return {
        "objective": name,
        "reward": rewards,
        "exact_match": [s.get("critic/score/max", 0.0) for s in result.steps],
        "step_s_median": statistics.median(step_s),
        "update_actor_s_median": statistics.median(s["timing_s/update_actor"] for s in result.steps[1:]),
        "reward_first10": statistics.mean(rewards[:10]),
        "reward_last10": statistics.mean(rewards[-10:]),
    }


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for res in results:
        ax.plot(range(1, len(res["reward"]) + 1), res["reward"], label=res["objective"])
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward (partial credit)")
    ax.set_title("CPU demo: tiny Llama on arithmetic, same seed and data")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--out", default="bench/results/objectives.json")
    args = parser.parse_args()

    from longcat_plugins.learning.assets import ensure_assets

    origin = provenance(seeds=[0])
    work = Path(tempfile.mkdtemp(prefix="longcat-objectives-"))
    assets = ensure_assets(work / "assets", n_train=512)
    results = [run(name, overrides, args.steps, assets, work) for name, overrides in OBJECTIVES.items()]
    base = next(r for r in results if r["objective"] == "vanilla")
    for res in results:
        res["step_time_vs_vanilla"] = res["step_s_median"] / base["step_s_median"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": origin, "runs": results}, indent=2))
    plot(results, out.with_suffix(".png"))
    for res in results:
        print(
            f"{res['objective']:>13}: reward first10 {res['reward_first10']:.3f} -> last10 {res['reward_last10']:.3f}, "
            f"step {res['step_s_median']:.2f}s ({res['step_time_vs_vanilla']:.2f}x vanilla)"
        )
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
