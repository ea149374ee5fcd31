"""Does dual-path tool-necessity selection (E7) pick the tasks RL learns from? Selected vs
unselected tasks' learning gain on the tool-use demo's warm start.

    PYTHONPATH=. .venv/bin/python bench/bench_tool_selection_gain.py [--tasks 64] [--n 4] \
        [--steps 40] [--lr 3e-4] [--seed 0] [--out bench/results/tool_selection_gain.json]

1. The first ``--tasks`` *training* tasks of the warm start (``tool_warmstart.DEMO_PLAN``) are run
   ``--n`` times with tools and without (``select_tool_tasks``, verl's rollout on the CPU runtime,
   the default thresholds: keep x when v_x > 0, s_with > 0, s_without < 0.5).
2. The kept tasks and as many of the others (the first of each, in file order) become two
   training sets of equal size.
3. Each trains the same GRPO run from the same warm start (``bench_learning_tool_agent.py
   --train-file``: the same tasks every step, ``--steps`` steps at ``--lr``, same seed), and its
   held-out success (the 64 held-out tasks, greedy) before and after is its learning gain.

Writes ``{"selection": {...}, "runs": [{"seed", "subset", "tasks", "steps", "wall_s",
"success_before", "success_after", "gain"}]}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from provenance import provenance, stamp  # bench/provenance.py: the record every bench writes

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "results" / "tool_selection_gain.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=64, help="candidate training tasks (the first N)")
    parser.add_argument("--n", type=int, default=4, help="samples per task and path")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None, help="run directories (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    origin = provenance(seeds=[args.seed])
    if args.tasks < 2 or args.n < 1 or args.steps < 1:
        raise SystemExit("--tasks >= 2, --n >= 1 and --steps >= 1")

    import pandas as pd

    from longcat_plugins.learning.assets import default_cache_dir
    from longcat_plugins.learning.tool_warmstart import RL_BATCH, demo_plan, ensure_tool_warm_start

    sys.path.insert(0, str(BENCH))
    from bench_tool_selection import run as select

    cache = args.cache_dir or default_cache_dir()
    warm = ensure_tool_warm_start(cache, demo_plan("tiny"))
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-toolsel-gain-"))
    (work / "select").mkdir(parents=True, exist_ok=True)
    sel = select(warm.root, args.tasks, args.n, args.seed, work / "select", split="train")
    candidates = pd.read_parquet(warm.train).head(args.tasks).reset_index(drop=True)
    kept = [t["row"] for t in sel["per_task"] if t["kept"]]
    rest = [t["row"] for t in sel["per_task"] if not t["kept"]]
    size = min(len(kept), len(rest))
    s_with = [t["s_with"] for t in sel["per_task"]]
    selection = {
        "warm_start": warm.root.name,
        **{k: sel[k] for k in ("tasks", "n", "tau1", "tau2", "tau3", "kept", "s_with_mean", "s_without_mean")},
        "s_with_kept": round(sum(s_with[i] for i in kept) / max(1, len(kept)), 4),
        "s_with_unselected": round(sum(s_with[i] for i in rest) / max(1, len(rest)), 4),
        "wall_s": sel["wall_s"],
    }
    print(json.dumps(selection), flush=True)
    if size < RL_BATCH:  # verl drops a last partial batch: fewer tasks than a batch would train nothing
        raise SystemExit(
            f"too few to compare: {len(kept)} tasks kept, {len(rest)} not, need {RL_BATCH} of each ({work})"
        )
    runs = []
    for subset, rows in (("selected", kept[:size]), ("unselected", rest[:size])):
        data = work / f"{subset}.parquet"
        candidates.iloc[rows].to_parquet(data)
        out = work / f"{subset}.json"
        command = [
            sys.executable,
            str(BENCH / "bench_learning_tool_agent.py"),
            f"--seeds={args.seed}",
            f"--steps={args.steps}",
            f"--lr={args.lr:g}",
            f"--test-freq={args.steps}",
            "--no-probe",
            f"--train-file={data}",
            f"--out={out}",
            f"--work={work / subset}",
            f"--cache-dir={cache}",
        ]
        proc = subprocess.run(command)
        if proc.returncode != 0:
            raise SystemExit(f"{subset}: the RL run failed (exit {proc.returncode}); runs in {work / subset}")
        run = json.loads(out.read_text())["runs"][0]
        runs.append(
            {
                "seed": args.seed,
                "subset": subset,
                "tasks": size,
                "rows": rows,
                "steps": run["steps"],
                "wall_s": run["wall_s"],
                "success_before": run["success_before"],
                "success_after": run["success_after"],
                "gain": round(run["success_after"] - run["success_before"], 4),
            }
        )
        print(f"{subset} ({size} tasks): {run['success_before']:.1%} -> {run['success_after']:.1%}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamp({"selection": selection, "runs": runs}, origin), indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
