"""Math reward (R1) bench: equivalence accuracy on a labelled set, and the end-to-end time limit.

Writes bench/results/math_equivalence.json:

- ``equivalence``: our ``verify`` and math-verify 0.9.0 on the same 40 labelled pairs of the
  classes of issue 13 item 4 (imaginary unit, log bases, binomials, ``x \\in`` intervals, lists
  vs sets, ``\\cdot``/``\\times``, percent, degrees, units, matrices, ``\\pm``, intervals with
  ``\\infty``), 12 of them negatives. math-verify is not a dependency: install it into the venv
  for this bench only (``pip install math-verify==0.9.0``); without it that column is skipped.
  These pairs are not in ``tests/test_rewards_math.py`` (the same classes, other values), but
  they were written by the engineer who made the fixes: a regression set, not a blind audit.
- ``hostile``: ``compute_score`` wall time per hostile answer, each twice in a row (the second
  must not wait for the killed worker's replacement), in a process that has imported verl.
- ``extraction``: wall time of ``extract_answer`` on 20k-character malformed responses.

    PYTHONPATH=. python bench/bench_math_equivalence.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

HELD_OUT: list[tuple[str, str, bool]] = [
    (r"e^{\pi i}", "-1", True),
    ("i^2", "-1", True),
    (r"\sqrt{-4}", "2i", True),
    ("(1+i)^2", "2i", True),
    (r"\log_5 125", "3", True),
    (r"\log_{2}\frac{1}{4}", "-2", True),
    (r"\log_{10} 1000", "3", True),
    (r"\binom{7}{3}", "35", True),
    (r"\dbinom{6}{2}", "15", True),
    (r"\tbinom{8}{1}", "8", True),
    (r"x \in [1, 3]", "[1,3]", True),
    (r"x\in(-\infty, 2)", r"(-\infty,2)", True),
    ("2, 7", r"\{7, 2\}", True),
    (r"\{-1, 4\}", "4, -1", True),
    (r"4 \cdot 5", "20", True),
    (r"3 \times 10^{2}", "300", True),
    (r"75\%", "0.75", True),
    (r"60^{\circ}", r"\frac{\pi}{3}", True),
    (r"8 \text{ meters}", "8", True),
    (r"\$12.50", "12.5", True),
    (r"\begin{bmatrix} 2 & 0 \\ 0 & 2 \end{bmatrix}", r"\begin{pmatrix} 2 & 0 \\ 0 & 2 \end{pmatrix}", True),
    (r"\begin{pmatrix} 3 \\ -1 \end{pmatrix}", "(3, -1)", True),
    (r"2 \pm \sqrt{3}", r"2+\sqrt{3}, 2-\sqrt{3}", True),
    (r"x = \pm 2", "2, -2", True),
    (r"(3, \infty)", "x > 3", True),
    (r"[0, +\infty)", r"[0, \infty)", True),
    (r"x \le 5", r"(-\infty, 5]", True),
    (r"\sqrt{2}\cdot\sqrt{3}", r"\sqrt{6}", True),
    (r"\log_2 16", "8", False),
    (r"\binom{7}{3}", "21", False),
    (r"e^{i\pi}", "1", False),
    ("3i", "3", False),
    (r"x \in [1, 3)", "[1,3]", False),
    ("2, 7", r"\{2, 7, 9\}", False),
    (r"(3, \infty)", r"x \geq 3", False),
    (r"\begin{pmatrix} 1 & 0 \\ 0 & 1 \end{pmatrix}", r"\begin{pmatrix} 1 & 0 \\ 1 & 0 \end{pmatrix}", False),
    (r"2 + \sqrt{3}", r"2 \pm \sqrt{3}", False),
    (r"75\%", "0.57", False),
    (r"8 \text{ meters}", r"8 \text{ feet}", False),
    ("(1, 2)", "[1, 2]", False),
]
HOSTILE = [r"9^{9^{9^9}}", r"10^{10^{10}}!", r"10^{10^{10^{10}}}", "2**2**2**2**2**2**2"]
MALFORMED = {
    "nested unclosed boxes": r"\boxed{\frac{\frac{1}{x}}{\boxed{" * 1000 + "1",
    "2857 open boxes then 1": r"\boxed{" * 2857 + "1",
    "20k open braces": r"\boxed{" + "{" * 20000 + "1",
}


def _score(rows: list[dict[str, Any]]) -> dict[str, Any]:
    right = sum(r["verdict"] == r["expected"] for r in rows)
    false_pos = sum(r["verdict"] and not r["expected"] for r in rows)
    return {
        "correct": right,
        "total": len(rows),
        "false_positives": false_pos,
        "wrong": [r for r in rows if r["verdict"] != r["expected"]],
    }


def bench_equivalence() -> dict[str, Any]:
    from longcat_plugins.rewards.math import MathRewardConfig, verify

    cfg = MathRewardConfig(workers=1)
    verify("1", "1", cfg)  # pool start-up is not a check
    rows, times = [], []
    for pred, gold, want in HELD_OUT:
        t = time.perf_counter()
        verdict, detail = verify(pred, gold, cfg)
        times.append(time.perf_counter() - t)
        rows.append({"pred": pred, "gold": gold, "expected": want, "verdict": verdict == "equal", "detail": detail})
    out: dict[str, Any] = {"longcat": {**_score(rows), "slowest_check_s": round(max(times), 3)}}
    try:
        import importlib.metadata

        from math_verify import parse
        from math_verify import verify as mv_verify

        version = importlib.metadata.version("math-verify")
    except ImportError:
        out["math_verify"] = "not installed (pip install math-verify==0.9.0)"
        return out
    rows = []
    for pred, gold, want in HELD_OUT:
        try:
            ok = bool(mv_verify(parse(f"${gold}$"), parse(f"${pred}$")))
        except Exception:  # noqa: BLE001 - counted as "not equal", as math-verify users do
            ok = False
        rows.append({"pred": pred, "gold": gold, "expected": want, "verdict": ok})
    out["math_verify"] = {"version": version, **_score(rows)}
    return out


def bench_hostile() -> dict[str, Any]:
    t = time.perf_counter()
    import verl  # noqa: F401  - as inside verl's reward workers

    import_s = time.perf_counter() - t
    from longcat_plugins.rewards.math import MathRewardConfig, compute_score

    t = time.perf_counter()
    compute_score("math", r"\boxed{1}", "1")
    start_s = time.perf_counter() - t
    rows = []
    for pred in HOSTILE:
        for attempt in (1, 2):
            t = time.perf_counter()
            res = compute_score("math", rf"\boxed{{{pred}}}", ["7", "8"])
            rows.append(
                {
                    "input": pred,
                    "attempt": attempt,
                    "wall_s": round(time.perf_counter() - t, 3),
                    "valid": res["longcat_reward_valid"],
                    "error": res["longcat_reward_error"][:80],
                }
            )
    t = time.perf_counter()
    after = compute_score("math", r"\boxed{\frac{6}{8}}", "0.75")["score"]
    return {
        "timeout_s": MathRewardConfig().timeout_s,
        "verl_import_s": round(import_s, 2),
        "pool_start_s": round(start_s, 2),
        "checks": rows,
        "max_wall_s": max(r["wall_s"] for r in rows),
        "next_check_score": after,
        "next_check_s": round(time.perf_counter() - t, 3),
    }


def bench_extraction() -> dict[str, Any]:
    from longcat_plugins.rewards.math.extract import extract_answer

    out = {}
    for name, text in MALFORMED.items():
        t = time.perf_counter()
        answer = extract_answer(text)
        out[name] = {"chars": len(text), "wall_s": round(time.perf_counter() - t, 4), "answer": answer}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "math_equivalence.json"))
    args = ap.parse_args()
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 1),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "equivalence": bench_equivalence(),
        "extraction": bench_extraction(),
        "hostile": bench_hostile(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
