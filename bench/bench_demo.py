"""How long does ``longcat-plugins demo`` take, start-up included, and what does it print?

Runs ``python -m longcat_plugins demo`` (the default: arithmetic on the warm start, 12 GRPO
steps) as a user would, in a fresh interpreter, and times it end to end (``wall_s``). The warm
start is built first, in this process, if the asset cache (``$LONGCAT_CACHE`` or
``--cache-dir``) lacks it, and timed apart (``warm_start_s``: near 0 when it was cached), so
``wall_s`` is the demo with the warm start cached. Also records the held-out line the demo
ends with and the 1-minute load average after it (the machine may be shared).

    .venv/bin/python bench/bench_demo.py [--cache-dir DIR] [--out bench/results/demo.json]
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
from pathlib import Path

LINE = re.compile(r"held-out accuracy: (\d+\.\d)% -> (\d+\.\d)%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, default=None, help="asset cache (default: $LONGCAT_CACHE)")
    parser.add_argument("--out", default="bench/results/demo.json")
    args = parser.parse_args()

    from longcat_plugins.runtime.warmstart import ensure_warm_start

    cache = ["--cache-dir", str(args.cache_dir)] if args.cache_dir is not None else []
    start = time.monotonic()
    assets = ensure_warm_start(args.cache_dir)
    warm_start_s = time.monotonic() - start
    with tempfile.TemporaryDirectory(prefix="longcat-demo-bench-") as work:
        command = [sys.executable, "-m", "longcat_plugins", "demo", "--out", str(Path(work) / "run"), *cache]
        start = time.monotonic()
        proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"the demo failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    match = LINE.search(proc.stdout)
    if match is None:
        raise SystemExit(f"the demo printed no held-out line:\n{proc.stdout[-3000:]}")
    result = {
        "command": "python -m longcat_plugins demo",
        "warm_start": assets.root.name,
        "wall_s": round(wall, 1),
        "warm_start_s": round(warm_start_s, 1),
        "heldout_before": float(match.group(1)),
        "heldout_after": float(match.group(2)),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
