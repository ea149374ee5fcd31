"""Red-team every built-in reward a library fits (issue 32 item 5) and record what was credited.

Writes bench/results/redteam.json: ``{"provenance": {...}, "rewards": {NAME: {"cases", "credited",
"raised", "max_s", "credited_cases"}}}``, the same summary ``longcat-plugins redteam --all --json``
prints, with the provenance record. ``max_s`` is the slowest single case (wall time, this machine,
one process: the math reward's first case includes starting its worker pool). A credited case is
a finding, not a bench failure: the script records it and exits 0.

    PYTHONPATH=. python bench/bench_redteam.py
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import REPO, provenance  # noqa: E402

from longcat_plugins import redteam as rt  # noqa: E402
from longcat_plugins.host import Host, set_host  # noqa: E402
from longcat_plugins.selection import Selection  # noqa: E402


def main() -> None:
    warnings.filterwarnings("ignore", module=r"verl(\.|$)")
    host = Host(Selection.from_env()).load()
    set_host(host)
    setup = rt.EnvSetup()
    reports = [rt.redteam(host, name, setup) for name in rt.builtin_names(host)]
    out = {
        "provenance": {
            **provenance(seeds=[setup.seed]),
            "environment_setup": {"domain": setup.domain, "envs": setup.envs, "max_tasks": setup.max_tasks},
        },
        "rewards": rt.to_json(reports),
    }
    path = REPO / "bench" / "results" / "redteam.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    for name, s in out["rewards"].items():
        print(f"{name}: {s['cases']} cases, {s['credited']} credited, max {s['max_s']:.3f} s {s['credited_cases']}")


if __name__ == "__main__":
    main()
