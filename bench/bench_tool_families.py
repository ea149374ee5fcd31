"""Where the ``longcat_tool`` recipe's held-out success comes from, and where it stops, per task family.

The recipe's held-out success rises from 11.7% to 50.0% and stays there (``system_tool.json``).
This runs the demo once (``longcat-plugins demo --recipe longcat_tool``'s configuration, its
default 8 steps unless ``--steps``), exports the policy at the last step, and plays the warm
start and the trained policy on the same held-out tasks with
:func:`longcat_plugins.learning.tool_probe.probe`: greedily (what validation measures) and
``--samples`` sampled episodes per task (what GRPO's groups can find). Each task is placed in its
family, the golden chain's first tool (a ``find_*`` lookup returns one record; a ``search_*``
returns a list the second call must pick from by a name in the question).

GRPO learns a task family only from groups that hold a success: a family whose sampled success is
0 at the warm start gives all-wrong groups, which carry no advantage (and online filtering drops).
Writes ``bench/results/tool_families.json``::

    {"run": {"seed", "steps", "held_out_curve"}, "samples", "tasks": [{"first_tool", "second_tool",
     "greedy_before", "greedy_after", "sampled_before", "sampled_after"}],
     "families": {first_tool: {"tasks", "greedy_before", "greedy_after", "sampled_before",
     "sampled_after"}}, "probe": {"before" | "after": {"greedy" | "sampled": shares}}}

    .venv/bin/python bench/bench_tool_families.py [--steps 8] [--seed 0] [--samples 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from heldout_curve import validation_curve  # noqa: E402
from provenance import REPO, provenance  # noqa: E402
from training_run import seed_overrides, train_or_raise  # noqa: E402


def families(val: Path) -> list[tuple[str, str]]:
    """Each held-out task's (first, second) golden tool."""
    import pandas as pd

    from longcat_plugins.environments.episodes import open_episode
    from longcat_plugins.rewards.plain import plain

    chains = [
        open_episode({**dict(plain(i)), "noise_level": 0}).golden_chain() for i in pd.read_parquet(val)["extra_info"]
    ]
    if any(len(chain) != 2 for chain in chains):
        raise SystemExit(f"{val}: expected two-call golden chains, got lengths {sorted({len(c) for c in chains})}")
    return [(chain[0][0], chain[1][0]) for chain in chains]


def probe_twice(model: Path, val: Path, samples: int, seed: int) -> dict[str, Any]:
    from longcat_plugins.learning.tool_probe import probe

    return {"greedy": probe(model, val), "sampled": probe(model, val, n=samples, do_sample=True, seed=seed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="GRPO steps (the demo's default: 8)")
    parser.add_argument("--seed", type=int, default=0, help="the run seed and the sampled probe's")
    parser.add_argument("--samples", type=int, default=8, help="sampled episodes per task")
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/tool_families.json")
    args = parser.parse_args()
    origin = provenance(seeds=[args.seed])

    from longcat_plugins.learning.assets import ensure_assets
    from longcat_plugins.learning.demos import prepare_demo
    from longcat_plugins.runtime.launch import resolve_config

    demo = prepare_demo("longcat_tool", ensure_assets(None, size="tiny"), args.steps, init="warm")
    value = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in demo.overrides if "=" in o}
    warm, val = Path(value["actor_rollout_ref.model.path"]), Path(value["data.val_files"])
    seeded = ("data.seed=", "actor_rollout_ref.actor.data_loader_seed=", "actor_rollout_ref.rollout.seed=")
    with tempfile.TemporaryDirectory(prefix="tool_families_") as work:
        result = train_or_raise(
            resolve_config(demo.config),
            [
                *(o for o in demo.overrides if not o.startswith(seeded)),
                *seed_overrides(args.seed),
                "actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]",
                "trainer.use_v1=true",
            ],
            Path(work) / "run",
            f"longcat_tool/seed {args.seed}",
        )
        exported = Path(result.checkpoints) / f"global_step_{args.steps}" / "actor" / "huggingface"
        if not any(exported.glob("*.safetensors")):
            raise SystemExit(f"no HF export at {exported}")
        print("probing the warm start and the trained policy", flush=True)
        before = probe_twice(warm, val, args.samples, args.seed)
        after = probe_twice(exported, val, args.samples, args.seed)
    pairs = families(val)
    tasks = [
        {
            "first_tool": first,
            "second_tool": second,
            "greedy_before": before["greedy"]["successes_per_task"][k],
            "greedy_after": after["greedy"]["successes_per_task"][k],
            "sampled_before": before["sampled"]["successes_per_task"][k],
            "sampled_after": after["sampled"]["successes_per_task"][k],
        }
        for k, (first, second) in enumerate(pairs)
    ]
    summary: dict[str, dict[str, float]] = {}
    for name in sorted({t["first_tool"] for t in tasks}):
        mine = [t for t in tasks if t["first_tool"] == name]
        summary[name] = {
            "tasks": len(mine),
            "greedy_before": sum(t["greedy_before"] for t in mine),
            "greedy_after": sum(t["greedy_after"] for t in mine),
            "sampled_before": sum(t["sampled_before"] for t in mine) / (args.samples * len(mine)),
            "sampled_after": sum(t["sampled_after"] for t in mine) / (args.samples * len(mine)),
        }
    shares = {
        when: {how: {k: v for k, v in got[how].items() if k != "successes_per_task"} for how in got}
        for when, got in (("before", before), ("after", after))
    }
    report = {
        "run": {
            "seed": args.seed,
            "steps": args.steps,
            "held_out_curve": validation_curve(result.steps),
            "warm_start": str(warm.relative_to(warm.parents[1])),
        },
        "samples": args.samples,
        "tasks": tasks,
        "families": summary,
        "probe": shares,
        "provenance": origin,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(args.out)
    for name, row in summary.items():
        print(f"{name:30s} {row}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
