"""Does the paper's system learn as one, and does every component act in it? (issue 31, item 3)

``configs/longcat.yaml`` (DORA with staleness 1 and two multi-version ``hf`` replicas, triplet
clip + truncated IS + ``longcat_grpo`` with incomplete-signal masking, the step planner's budget
allocation, oversampling and curriculum under DORA, online filtering, replay, self-verification
and the reward router) on the arithmetic warm start, exactly as ``longcat-plugins demo --recipe
longcat`` runs it, per seed; ``--recipes longcat,arithmetic`` adds the plain demo (sync GRPO)
on the same warm start and seeds as the reference. ``--recipes longcat_tool`` runs the tool
variant (``configs/longcat_tool.yaml``) as ``demo --recipe longcat_tool`` does, on the tool warm
start continued on verdicts, its held-out accuracy the rubric's on the demo's validation tasks
and its components those of :data:`~longcat_plugins.evaluation.system.TOOL_SYSTEM`.

Per run: greedy held-out exact match before training and after the last step (verl's
``val-core`` metric), ``wall_s`` (the sum of verl's ``timing_s/step``: training only, no start-up
or validation), ``components_active``: the components whose own metrics show they acted
(:func:`longcat_plugins.evaluation.system.components_active`), and ``time_to_target_s``: the
training wall-clock at the first validation reaching ``target`` held-out accuracy (``None`` if
none does), defined as ``bench_learning.py``'s (``bench/heldout_curve.py``), with the
validation ``curve`` it was read from. ``--test-freq`` validates more often than the demo does
(its every 3 steps) so that the figure is as fine as ``bench_learning.py``'s; validation does not
change the recipe or update the policy, but it does shift when DORA's asynchronous generation
happens, so such a run is not the demo's run bit for bit. ``test_freq`` is recorded per run.

    .venv/bin/python bench/bench_system.py [--recipes longcat] [--seeds 0,1,2] [--steps 12]
        [--test-freq 3] [--target 0.6] [--out bench/results/system.json]

Writes ``{"runs": [...]}`` with the provenance record beside the runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from heldout_curve import time_to_target, validation_curve  # one definition for every learning bench
from options import choice_list, seed_list
from provenance import REPO, provenance
from training_run import seed_overrides, train_or_raise

#: recipe -> the trainer it runs
TRAINERS = {"longcat": "dora", "arithmetic": "sync", "longcat_tool": "dora"}


def run(recipe: str, seed: int, steps: int, work: Path, test_freq: int | None, target: float) -> dict:
    """One demo run of ``recipe`` on ``seed``; ``test_freq`` replaces the demo's validation
    interval (``None``: the demo's own)."""
    from longcat_plugins.evaluation.system import EVIDENCE, TOOL_SYSTEM, components_active
    from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start
    from longcat_plugins.learning.demos import SYSTEM_VERDICTS, prepare_demo
    from longcat_plugins.runtime.launch import resolve_config

    if recipe == "longcat_tool":  # the demo builds its tool warm start (+ verdicts) beside the assets
        from longcat_plugins.learning.assets import ensure_assets

        built = ensure_assets(None, size="tiny")
    else:
        built = ensure_warm_start(None, size="tiny", verdicts=SYSTEM_VERDICTS if recipe == "longcat" else 0.0)
    demo = prepare_demo(recipe, built, steps, init="warm")
    seeded = ("data.seed=", "actor_rollout_ref.actor.data_loader_seed=", "actor_rollout_ref.rollout.seed=")
    replaced = (*seeded, "trainer.save_freq=", *(("trainer.test_freq=",) if test_freq is not None else ()))
    demo_freq = [int(o.split("=", 1)[1]) for o in demo.overrides if o.startswith("trainer.test_freq=")]
    if test_freq is None and len(demo_freq) != 1:
        raise RuntimeError(f"demo {recipe!r} sets no single trainer.test_freq: {demo.overrides}")
    freq = test_freq if test_freq is not None else demo_freq[0]
    result = train_or_raise(
        resolve_config(demo.config),
        [
            *(o for o in demo.overrides if not o.startswith(replaced)),
            f"trainer.test_freq={freq}",
            *seed_overrides(seed),
            "trainer.save_freq=-1",
            "trainer.use_v1=true",
        ],
        work / f"{recipe}-seed{seed}",
        f"{recipe}/seed {seed}",
    )
    curve = validation_curve(result.steps)
    required = {"longcat": list(EVIDENCE), "longcat_tool": list(TOOL_SYSTEM)}.get(recipe, [])
    trained = [s for s in result.steps if "timing_s/step" in s]
    if len(curve) < 2 or curve[0]["step"] != 0 or curve[-1]["step"] != steps or len(trained) != steps:
        raise RuntimeError(f"{recipe}/seed {seed}: missing validations or steps in {result.metrics}")
    return {
        "recipe": recipe,
        "trainer": TRAINERS[recipe],
        "seed": seed,
        "steps": steps,
        "acc_before": curve[0]["acc"],
        "acc_after": curve[-1]["acc"],
        "wall_s": round(sum(float(s["timing_s/step"]) for s in trained), 2),
        "components_required": required,
        "components_active": components_active(result.steps, required) if required else [],
        "target": target,
        "time_to_target_s": time_to_target(curve, target),
        "test_freq": freq,
        "curve": curve,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--recipes", type=choice_list(TRAINERS), default="longcat", help=f"subset of {','.join(TRAINERS)}"
    )
    parser.add_argument("--seeds", type=seed_list, default="0,1,2")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument(
        "--test-freq", type=int, default=None, help="validate every N steps (default: the demo's own interval)"
    )
    parser.add_argument("--target", type=float, default=0.6, help="held-out accuracy for time_to_target_s")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "system.json")
    args = parser.parse_args()
    recipes, seeds = args.recipes, args.seeds
    if args.test_freq is not None and not 1 <= args.test_freq <= args.steps:
        parser.error(f"--test-freq: {args.test_freq} must lie in 1..--steps ({args.steps})")
    origin = provenance(seeds=seeds)  # before the runs: the code they imported, not the tree later
    runs = []
    with tempfile.TemporaryDirectory(prefix="longcat-system-") as work:
        for recipe in recipes:
            for seed in seeds:
                started = time.monotonic()
                runs.append(run(recipe, seed, args.steps, Path(work), args.test_freq, args.target))
                print(json.dumps(runs[-1]), f"({time.monotonic() - started:.0f} s with start-up)", flush=True)
    from longcat_plugins.evaluation.system import EVIDENCE, TOOL_EVIDENCE

    out = {
        "runs": runs,
        "provenance": origin,
        "evidence": {name: why for name, (why, _) in {**EVIDENCE, **TOOL_EVIDENCE}.items()},
    }
    args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
