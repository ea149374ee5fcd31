"""Is the code-agent warm start partly right? Build it with
:func:`longcat_plugins.learning.code_warmstart.ensure_code_warm_start` (golden trajectories, verl's
SFT trainer; cached) and play the held-out tasks in process
(:func:`longcat_plugins.learning.code_probe.probe`: real sandboxed workspaces, hidden tests):

- ``--phase build``: build only (the data step and the SFT step are cached separately, so a
  build cut by a time limit resumes at the step it was in); records ``build_s``;
- ``--phase greedy``: every held-out task once, greedy: the shares of well-formed first calls,
  reads of the target module, applied edits, submits, full solves (``solved``, the loop's
  ``acc``), and the mean hidden-test score (partial credit);
- ``--phase sampled``: ``--n`` episodes at temperature 1 for each of the first
  ``--sampled-tasks`` held-out tasks: the same shares, and how many groups have unequal scores
  (GRPO's signal);
- ``--phase demo``: ``python -m longcat_plugins demo --recipe code_agent --steps S`` as a user
  runs it (fresh interpreter, real Ray and trainer; the warm start cached): its wall time, the
  held-out line it prints, and per step the score's mean/min/max and the advantages' max/min
  (GRPO's advantages are all 0 unless some group's rewards differ).

    .venv/bin/python bench/bench_code_warm_start.py --phase build|greedy|sampled|demo [--epochs N]

Each phase updates its own key of ``bench/results/code_agent_warm_start.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes

OUT = Path(__file__).resolve().parent / "results" / "code_agent_warm_start.json"


LINE = re.compile(r"held-out solved: (\d+\.\d)% -> (\d+\.\d)%; hidden tests passed: (\d+\.\d)% -> (\d+\.\d)%")
STEP_KEYS = (
    "critic/score/mean",
    "critic/score/min",
    "critic/score/max",
    "critic/advantages/max",
    "critic/advantages/min",
)


def run_demo(steps: int, cache: Path | None) -> dict:
    """The code-agent demo on the (cached) warm start, as a user runs it."""
    from longcat_plugins.runtime.launch import read_metrics

    with tempfile.TemporaryDirectory(prefix="longcat-code-demo-") as work:
        run = Path(work) / "run"
        command = [sys.executable, "-m", "longcat_plugins", "demo", "--recipe", "code_agent"]
        command += ["--steps", str(steps), "--out", str(run), *(["--cache-dir", str(cache)] if cache else [])]
        start = time.monotonic()
        proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wall = time.monotonic() - start
        if proc.returncode != 0:
            raise SystemExit(f"the demo failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        lines = read_metrics(run / "metrics.jsonl")
    match = LINE.search(proc.stdout)
    if match is None:
        raise SystemExit(f"the demo printed no held-out line:\n{proc.stdout[-3000:]}")
    per_step = [
        {"step": s["step"], **{k: round(float(s[k]), 4) for k in STEP_KEYS if k in s}}
        for s in lines
        if "critic/score/mean" in s
    ]
    return {
        "steps": steps,
        "wall_s": round(wall, 1),
        "held_out_line": match.group(0),
        "held_out_solved": [float(match.group(1)) / 100, float(match.group(2)) / 100],
        "held_out_score": [float(match.group(3)) / 100, float(match.group(4)) / 100],
        "per_step": per_step,
        "load_1min": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=("build", "greedy", "sampled", "demo"), required=True)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--epochs", type=int, default=None, help="SFT epochs (default: the plan's)")
    parser.add_argument("--n", type=int, default=4, help="sampled episodes per task")
    parser.add_argument("--sampled-tasks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps of the demo phase")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    import pandas as pd

    from longcat_plugins.learning.code_probe import probe
    from longcat_plugins.learning.code_warmstart import CodeWarmStartPlan, code_warm_start_paths, ensure_code_warm_start

    plan = CodeWarmStartPlan(size=args.size)
    if args.epochs is not None:
        plan = CodeWarmStartPlan(size=args.size, sft_epochs=args.epochs)
    cached = code_warm_start_paths(args.cache_dir, plan).exists()
    start = time.monotonic()
    warm = ensure_code_warm_start(args.cache_dir, plan)
    build_s = time.monotonic() - start
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    if result.get("plan") != asdict(plan):
        result = {"plan": asdict(plan)}  # another plan: the old figures do not describe this model
    kept = earlier(args.out, append="provenance" in result or len(result) > 1)  # each phase adds its record
    origin = provenance(seeds=[plan.seed])
    start = time.monotonic()
    if args.phase == "build":
        if not cached or "build_s" not in result:  # a cached build keeps the time of the real one
            result["build_s"] = round(build_s, 1)
        sft = pd.read_parquet(warm.sft)
        result["sft_rows"] = len(sft)
    elif args.phase == "greedy":
        greedy = probe(warm.model, warm.val)
        result["greedy"] = {**greedy, "probe_s": round(time.monotonic() - start, 1)}
    elif args.phase == "demo":
        result["demo"] = run_demo(args.steps, args.cache_dir)
    else:
        subset = warm.root / f"probe-val-{args.sampled_tasks}.parquet"
        if not subset.exists():
            pd.read_parquet(warm.val).head(args.sampled_tasks).to_parquet(subset)
        sampled = probe(warm.model, subset, n=args.n, do_sample=True)
        groups = [sampled["scores"][k : k + args.n] for k in range(0, len(sampled["scores"]), args.n)]
        sampled["unequal_groups"] = sum(len(set(g)) > 1 for g in groups)
        result["sampled"] = {**sampled, "n": args.n, "probe_s": round(time.monotonic() - start, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamp(result, origin, kept), indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "plan"}, indent=1)[:3000])


if __name__ == "__main__":
    main()
