"""Does the paper's system learn as one, and does every component act in it? (issue 31, item 3)

``configs/longcat.yaml`` (DORA with staleness 1 and two multi-version ``hf`` replicas, triplet
clip + truncated IS + ``longcat_grpo`` with incomplete-signal masking, the step planner's budget
allocation, oversampling and curriculum under DORA, online filtering, replay, self-verification
and the reward router) on the arithmetic warm start, exactly as ``longcat-plugins demo --recipe
longcat`` runs it, per seed; ``--recipes longcat,arithmetic`` adds the plain demo (sync GRPO)
on the same warm start and seeds as the reference.

Per run: greedy held-out exact match before training and after the last step (verl's
``val-core`` metric), ``wall_s`` (the sum of verl's ``timing_s/step``: training only, no start-up
or validation), and ``components_active``: the components whose own metrics show they acted
(:func:`longcat_plugins.evaluation.system.components_active`).

    .venv/bin/python bench/bench_system.py [--recipes longcat] [--seeds 0,1,2] [--steps 12]
        [--out bench/results/system.json]

Writes ``{"runs": [...]}`` with the provenance record beside the runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from options import choice_list, seed_list
from provenance import REPO, provenance
from training_run import seed_overrides, train_or_raise

#: recipe -> the trainer it runs
TRAINERS = {"longcat": "dora", "arithmetic": "sync"}


def run(recipe: str, seed: int, steps: int, work: Path) -> dict:
    from longcat_plugins.evaluation.system import components_active
    from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start
    from longcat_plugins.learning.demos import SYSTEM_VERDICTS, prepare_demo
    from longcat_plugins.runtime.launch import heldout_accuracy, resolve_config

    warm = ensure_warm_start(None, size="tiny", verdicts=SYSTEM_VERDICTS if recipe == "longcat" else 0.0)
    demo = prepare_demo(recipe, warm, steps, init="warm")
    seeded = ("data.seed=", "actor_rollout_ref.actor.data_loader_seed=", "actor_rollout_ref.rollout.seed=")
    result = train_or_raise(
        resolve_config(demo.config),
        [
            *(o for o in demo.overrides if not o.startswith((*seeded, "trainer.save_freq="))),
            *seed_overrides(seed),
            "trainer.save_freq=-1",
            "trainer.use_v1=true",
        ],
        work / f"{recipe}-seed{seed}",
        f"{recipe}/seed {seed}",
    )
    accuracy = heldout_accuracy(result.steps)
    trained = [s for s in result.steps if "timing_s/step" in s]
    if accuracy is None or len(trained) != steps:
        raise RuntimeError(f"{recipe}/seed {seed}: missing validations or steps in {result.metrics}")
    return {
        "recipe": recipe,
        "trainer": TRAINERS[recipe],
        "seed": seed,
        "steps": steps,
        "acc_before": accuracy[0],
        "acc_after": accuracy[1],
        "wall_s": round(sum(float(s["timing_s/step"]) for s in trained), 2),
        "components_active": components_active(result.steps) if recipe == "longcat" else [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--recipes", type=choice_list(TRAINERS), default="longcat", help=f"subset of {','.join(TRAINERS)}"
    )
    parser.add_argument("--seeds", type=seed_list, default="0,1,2")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "system.json")
    args = parser.parse_args()
    recipes, seeds = args.recipes, args.seeds
    runs = []
    with tempfile.TemporaryDirectory(prefix="longcat-system-") as work:
        for recipe in recipes:
            for seed in seeds:
                runs.append(run(recipe, seed, args.steps, Path(work)))
                print(json.dumps(runs[-1]), flush=True)
    from longcat_plugins.evaluation.system import EVIDENCE

    out = {
        "runs": runs,
        "provenance": provenance(seeds=seeds),
        "evidence": {name: why for name, (why, _) in EVIDENCE.items()},
    }
    args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
