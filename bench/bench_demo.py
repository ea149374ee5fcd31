"""How long does ``longcat-plugins demo`` take, start-up included, and what does it print?

Runs ``python -m longcat_plugins demo`` (the default: arithmetic on the warm start, 12 GRPO
steps) as a user would, in a fresh interpreter, and times it end to end (``wall_s``). The warm
start is built first, in this process, if the asset cache (``$LONGCAT_CACHE`` or
``--cache-dir``) lacks it, and timed apart (``warm_start_s``: near 0 when it was cached), so
``wall_s`` is the demo with the warm start cached. Also records the held-out line the demo
ends with and the 1-minute load average after it (the machine may be shared).

    .venv/bin/python bench/bench_demo.py [--cache-dir DIR] [--out bench/results/demo.json]
    .venv/bin/python bench/bench_demo.py --recipe tool_agent   # -> bench/results/demo_tool_agent.json

``--recipe tool_agent`` times ``demo --recipe tool_agent`` the same way (its warm start is the
tool-use one, ``tool_warmstart.DEMO_PLAN``; the line it reads is ``held-out success``), and
``--recipe longcat_tool`` the tool system recipe's default run (that warm start continued on
verdicts; -> ``bench/results/demo_longcat_tool.json``).
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

from provenance import provenance  # bench/provenance.py: the record every bench writes

#: the line both tool recipes' demos end with
TOOL_LINE = re.compile(r"held-out success: (\d+\.\d)% -> (\d+\.\d)%")
#: the line each recipe's demo ends with, and its default results file
LINES = {
    "arithmetic": (re.compile(r"held-out accuracy: (\d+\.\d)% -> (\d+\.\d)%"), "bench/results/demo.json"),
    "tool_agent": (TOOL_LINE, "bench/results/demo_tool_agent.json"),
    "longcat_tool": (TOOL_LINE, "bench/results/demo_longcat_tool.json"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, default=None, help="asset cache (default: $LONGCAT_CACHE)")
    parser.add_argument("--recipe", choices=sorted(LINES), default="arithmetic")
    parser.add_argument("--out", default=None, help="default: bench/results/demo.json (demo_<recipe>.json)")
    args = parser.parse_args()
    line, default_out = LINES[args.recipe]

    cache = ["--cache-dir", str(args.cache_dir)] if args.cache_dir is not None else []
    origin = provenance(seeds=[0])  # the demo's fixed seed
    start = time.monotonic()
    if args.recipe in ("tool_agent", "longcat_tool"):
        from longcat_plugins.learning.assets import ensure_assets
        from longcat_plugins.learning.tool_verdicts import ensure_verdict_warm_start
        from longcat_plugins.learning.tool_warmstart import demo_plan, ensure_tool_warm_start

        ensure_assets(args.cache_dir)
        assets = ensure_tool_warm_start(args.cache_dir, demo_plan("tiny"))
        if args.recipe == "longcat_tool":  # the system recipe's: the same, continued on verdicts
            assets = ensure_verdict_warm_start(assets)
    else:
        from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start

        assets = ensure_warm_start(args.cache_dir)
    warm_start_s = time.monotonic() - start
    with tempfile.TemporaryDirectory(prefix="longcat-demo-bench-") as work:
        command = [sys.executable, "-m", "longcat_plugins", "demo", "--recipe", args.recipe]
        command += ["--out", str(Path(work) / "run"), *cache]
        start = time.monotonic()
        proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"the demo failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    match = line.search(proc.stdout)
    if match is None:
        raise SystemExit(f"the demo printed no held-out line:\n{proc.stdout[-3000:]}")
    result = {
        "provenance": origin,
        "command": f"python -m longcat_plugins demo --recipe {args.recipe}",
        "warm_start": assets.root.name,
        "wall_s": round(wall, 1),
        "warm_start_s": round(warm_start_s, 1),
        "heldout_before": float(match.group(1)),
        "heldout_after": float(match.group(2)),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    out = Path(args.out or default_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
