"""Which tool-use warm start gives RL something to learn? For each candidate plan (model size,
SFT updates, training environments), build it with
:func:`longcat_plugins.learning.tool_warmstart.ensure_tool_warm_start` (verl's SFT trainer, cached)
and play the held-out tasks in-process (:func:`longcat_plugins.learning.tool_probe.probe`):

- greedy, every held-out task once: the shares of episodes whose first turn is a well-formed
  hermes call, to the golden first tool, with its arguments; that made every golden call;
  that finished with an answer; that met the rubric (``success``, the RL reward's ``acc``);
- sampled (temperature 1, ``--n`` episodes for each of the first ``--sampled-tasks`` tasks): the
  same shares, and how many tasks have a mixed group (some but not all episodes succeed: GRPO signal).

    .venv/bin/python bench/bench_tool_warm_starts.py --candidates tiny:400:400 [--append]

A candidate is ``size:sft_steps:train_envs[:sp][:te][:rvN][:vpN][:hdN][:scF][:sdN]`` (``sp``: ``space_tokens``; ``te``:
``tie_embeddings``; ``rvN``: ``revalued=N``; ``vpN``: ``value_pool=N``, one-token values; ``hdN``:
``hidden_size=N``; ``scF``: ``shortcuts=F``, stop-early twins, e.g. ``sc1`` or ``sc0.5``; ``sdN``: ``seed=N``, the
generator's, the tokenizer's, the base model's and the SFT run's);
the other plan values are ``WarmStartPlan``'s defaults. The candidate ``lane`` is the vLLM lane's
plan, ``tool_warmstart.LANE_PLAN`` (its build time, on a fresh ``--cache-dir``, is what the lane adds
once per cache)::

    .venv-vllm/bin/python bench/bench_tool_warm_starts.py --candidates lane \
        --cache-dir $(mktemp -d) --out bench/results/tool_warm_start_lane.json
``build_s`` is the time of the (cached) build: near 0 when the candidate was already built.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes

if TYPE_CHECKING:
    from longcat_plugins.learning.tool_warmstart import WarmStartPlan

OUT = Path(__file__).resolve().parent / "results" / "tool_warm_starts.json"


#: candidate flags that carry an integer: ``rvN``, ``vpN``, ``hdN``, ``sdN``
NUMBER_FLAGS = ("rv", "vp", "hd", "sd")


def parse_candidate(spec: str) -> WarmStartPlan:
    """The plan a ``size:sft_steps:train_envs[:sp][:te][:rvN][:vpN][:hdN][:scF][:sdN]`` candidate (or ``lane``) names."""
    from longcat_plugins.learning.tool_warmstart import LANE_PLAN, WarmStartPlan

    if spec == "lane":
        return LANE_PLAN
    size, steps, envs, *flags = spec.split(":")
    unknown = [
        f
        for f in flags
        if f not in ("sp", "te")
        and not (f[:2] in NUMBER_FLAGS and f[2:].isdigit())
        and not (f[:2] == "sc" and f[2:].replace(".", "", 1).isdigit())
    ]
    if unknown:
        raise SystemExit(
            f"--candidates: unknown flag(s) {unknown} in {spec!r} (known: sp, te, rvN, vpN, hdN, scF, sdN)"
        )
    numbers = {f[:2]: int(f[2:]) for f in flags if f[:2] in NUMBER_FLAGS}
    shortcuts = [float(f[2:]) for f in flags if f[:2] == "sc"]
    return WarmStartPlan(
        size=size,
        sft_steps=int(steps),
        train_envs=int(envs),
        space_tokens="sp" in flags,
        revalued=numbers.get("rv", 0),
        value_pool=numbers.get("vp", 0),
        tie_embeddings="te" in flags,
        hidden_size=numbers.get("hd", 0),
        shortcuts=shortcuts[0] if shortcuts else 0.0,
        seed=numbers.get("sd", 0),
    )


def measure(plan: WarmStartPlan, n: int, sampled_tasks: int, cache: Path | None) -> dict:
    import pandas as pd

    from longcat_plugins.learning.tool_probe import probe
    from longcat_plugins.learning.tool_warmstart import ensure_tool_warm_start

    start = time.monotonic()
    warm = ensure_tool_warm_start(cache, plan)
    build_s = time.monotonic() - start
    start = time.monotonic()
    greedy = probe(warm.model, warm.val)
    subset = warm.root / f"probe-val-{sampled_tasks}.parquet"
    if not subset.exists():
        pd.read_parquet(warm.val).head(sampled_tasks).to_parquet(subset)
    sampled = probe(warm.model, subset, n=n, do_sample=True)
    mixed = sum(0 < c < n for c in sampled["successes_per_task"])
    return {
        "plan": asdict(plan),
        "sft_rows": json.loads((warm.root / "warmstart.json").read_text())["sft_rows"],
        "build_s": round(build_s, 1),
        "probe_s": round(time.monotonic() - start, 1),
        "greedy": greedy,
        "sampled": {**sampled, "n": n, "mixed_groups": mixed},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--candidates",
        default="tiny:400:400",
        help="comma-separated size:sft_steps:train_envs[:sp][:te][:rvN][:vpN][:hdN][:scF][:sdN], or lane",
    )
    parser.add_argument("--n", type=int, default=4, help="sampled episodes per task")
    parser.add_argument("--sampled-tasks", type=int, default=10)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--append", action="store_true", help="add to the candidates already in --out")
    args = parser.parse_args()
    origin, kept = provenance(seeds=[0]), earlier(args.out, args.append)
    results = json.loads(args.out.read_text())["candidates"] if args.append and args.out.exists() else []
    for spec in args.candidates.split(","):
        row = measure(parse_candidate(spec), args.n, args.sampled_tasks, args.cache_dir)
        print(json.dumps({k: row[k] for k in ("plan", "build_s", "probe_s")}), flush=True)
        print(" greedy ", {k: row["greedy"][k] for k in row["greedy"] if k != "successes_per_task"}, flush=True)
        print(" sampled", {k: row["sampled"][k] for k in row["sampled"]}, flush=True)
        results.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamp({"candidates": results}, origin, kept), indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
