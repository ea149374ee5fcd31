"""CLI start-up: wall time of ``longcat-plugins list`` and ``fuse --dry-run`` on a cold
interpreter, side by side with ``python -c pass``, hyperfine-style (warm-up runs, then
repeated runs of each command in turn, so load on a shared machine hits all of them alike).

    .venv/bin/python bench/bench_cli_start.py [--runs 15] [--out bench/results/cli_start.json]

Writes ``{"commands": {"list": {"median_s": ...}, "fuse_dry_run": {...}, "python_pass": {...}}}``
plus every sample, the load average and the modules each command imported that a start
should not need (verl, ray, torch).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from provenance import provenance  # bench/provenance.py: the record every bench writes
from safetensors.numpy import save_file

#: run in a fresh interpreter after the command: which heavy packages did it import?
PROBE = (
    "import runpy, sys\n"
    "sys.argv = ['longcat-plugins', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('longcat_plugins', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "print('HEAVY=' + ','.join(m for m in ('verl', 'ray', 'torch') if m in sys.modules), file=sys.stderr)\n"
)


def tiny_fusion_inputs(root: Path) -> Path:
    """A base and two experts (4 float32 tensors each) and their fuse YAML."""
    rng = np.random.default_rng(0)
    base = {f"layer{i}.weight": rng.standard_normal((64, 64), dtype=np.float32) for i in range(4)}
    dirs = []
    for name, tensors in [("base", base)] + [
        (f"expert{j}", {k: v + 0.01 * rng.standard_normal(v.shape, dtype=np.float32) for k, v in base.items()})
        for j in range(2)
    ]:
        path = root / name
        path.mkdir(parents=True)
        save_file(tensors, str(path / "model.safetensors"))
        (path / "config.json").write_text("{}")
        dirs.append(path)
    config = root / "fuse.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "base": str(dirs[0]),
                "experts": [{"path": str(d), "weight": 1.0} for d in dirs[1:]],
                "method": "longcat",
                "output": str(root / "fused"),
            }
        )
    )
    return config


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


def heavy_imports(args: list[str], env: dict[str, str]) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env)
    line = next((x for x in proc.stderr.splitlines() if x.startswith("HEAVY=")), "HEAVY=?")
    return [m for m in line.removeprefix("HEAVY=").split(",") if m]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cli_start.json")
    args = parser.parse_args()
    origin = provenance(seeds=[0])  # the tiny fusion inputs' generator

    env = {**os.environ, "COLUMNS": "200"}
    with tempfile.TemporaryDirectory(prefix="cli-start-") as tmp:
        fuse_yaml = tiny_fusion_inputs(Path(tmp))
        commands = {
            "list": ["list"],
            "fuse_dry_run": ["fuse", str(fuse_yaml), "--dry-run"],
            "python_pass": None,
        }
        argvs = {
            name: [sys.executable, "-c", "pass"] if cli is None else [sys.executable, "-m", "longcat_plugins", *cli]
            for name, cli in commands.items()
        }
        for _ in range(args.warmup):  # page cache and .pyc files, as for any user's second run
            for argv in argvs.values():
                timed(argv, env)
        samples: dict[str, list[float]] = {name: [] for name in argvs}
        load_before = os.getloadavg()
        for _ in range(args.runs):
            for name, argv in argvs.items():
                samples[name].append(timed(argv, env))
        load_after = os.getloadavg()
        imported = {name: heavy_imports(cli, env) for name, cli in commands.items() if cli is not None}

    result = {
        "provenance": origin,
        "commands": {
            name: {
                "median_s": statistics.median(xs),
                "mean_s": statistics.fmean(xs),
                "min_s": min(xs),
                "max_s": max(xs),
                "stdev_s": statistics.stdev(xs) if len(xs) > 1 else 0.0,
                "runs": len(xs),
                "samples_s": [round(x, 4) for x in xs],
                **({"heavy_imports": imported[name]} if name in imported else {}),
            }
            for name, xs in samples.items()
        },
        "argv": {name: argv[1:] for name, argv in argvs.items()},
        "goal_s": {"list": 2.0, "fuse_dry_run": 2.0},
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_1m_before_after": [load_before[0], load_after[0]],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, stats in result["commands"].items():
        print(f"{name:14s} median {stats['median_s']:.3f} s  (min {stats['min_s']:.3f}, max {stats['max_s']:.3f})")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
