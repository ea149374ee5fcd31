"""Dual-path tool-necessity selection (E7) on the tool-use warm start's held-out tasks.

    .venv/bin/python bench/bench_tool_selection.py --warm DIR [--tasks 8] [--n 4] [--seeds 0]
        [--out bench/results/tool_selection.json] [--append]

``DIR`` is a tool-use warm start (``longcat_plugins.learning.tool_warmstart``: ``model/`` and
``val.parquet``, the held-out generated retail tasks). The first ``--tasks`` tasks are run
``--n`` times with tools and ``--n`` times without (``select_tool_tasks``, both paths through
verl's validation rollout on the CPU runtime, sampling at temperature 1, seed ``rollout.seed``),
with the warm start's own prompt and turn budgets, and scored by the episode's rubric
(a pass is reward >= 1). Per run: s_with and s_without per task and on average, how many tasks
the default thresholds keep, and the wall time. Writes ``{"runs": [...]}``; ``--append`` adds
the new runs after the file's (a repeat of the same seed and model is a new sample, never a
replacement: the rollout is not bitwise reproducible across runs, and each record names its model).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from options import seed_list
from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes

from longcat_plugins.atomic import write_json_atomic

LOOP = "++longcat.settings.environment.longcat_tool_agent"
#: the warm start's budgets (``tool_warmstart.warm_overrides``): prompts and turns it was trained on
WARM = [
    "data.max_prompt_length=192",
    "data.max_response_length=384",
    f"{LOOP}.discard_turns=0",
    f"{LOOP}.discard_turns_growth=0",
    f"{LOOP}.max_turn_tokens=64",
    f"{LOOP}.max_turns=4",
]


def run(warm: Path, tasks: int, n: int, seed: int, work: Path, split: str = "val") -> dict:
    """Select among the first ``tasks`` rows of the warm start's ``split`` (``val``: held out;
    ``train``: what ``bench_tool_selection_gain.py`` trains on)."""
    import pandas as pd

    from longcat_plugins.environments.tool_selection import Thresholds, select_tool_tasks

    data = work / "tasks.parquet"
    pd.read_parquet(warm / f"{split}.parquet").head(tasks).to_parquet(data)
    th = Thresholds()
    ray_tmp = Path(tempfile.mkdtemp(prefix="lcts", dir="/tmp"))
    start = time.perf_counter()
    try:
        sel = select_tool_tasks(
            data,
            work / "kept.parquet",
            model=warm / "model",
            thresholds=th,
            n=n,
            overrides=[*WARM, f"actor_rollout_ref.rollout.seed={seed}", f"+ray_kwargs.ray_init._temp_dir={ray_tmp}"],
            work_dir=work / f"seed{seed}",
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return {
        "seed": seed,
        "model": str(warm / "model"),
        "tasks": tasks,
        "n": n,
        "tau1": th.tau1,
        "tau2": th.tau2,
        "tau3": th.tau3,
        "s_with_mean": round(sum(sel.s_with) / tasks, 4),
        "s_without_mean": round(sum(sel.s_without) / tasks, 4),
        "kept": int(sum(sel.kept)),
        "per_task": [
            {"row": i, "s_with": w, "s_without": wo, "kept": k}
            for i, (w, wo, k) in enumerate(zip(sel.s_with, sel.s_without, sel.kept, strict=True))
        ],
        "wall_s": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm", required=True, type=Path, help="a tool-use warm start directory")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--seeds", type=seed_list, default="0")
    parser.add_argument("--out", default="bench/results/tool_selection.json")
    parser.add_argument("--append", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    origin = provenance(seeds=args.seeds)
    kept = earlier(out, args.append)
    runs = json.loads(out.read_text())["runs"] if args.append and out.exists() else []
    for seed in args.seeds:
        work = Path(tempfile.mkdtemp(prefix="longcat-toolsel-"))
        r = run(args.warm, args.tasks, args.n, seed, work)
        shutil.rmtree(work, ignore_errors=True)
        runs = [*runs, r]
        print(
            f"seed {seed}: s_with {r['s_with_mean']:.3f}, s_without {r['s_without_mean']:.3f}, "
            f"kept {r['kept']}/{r['tasks']} ({r['wall_s']} s)",
            flush=True,
        )
        write_json_atomic(out, stamp({"runs": runs}, origin, kept), indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
