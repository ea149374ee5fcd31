"""Benchmarks of the reward family; writes bench/results/rewards.json.

Math: accuracy and checks/s of our ``math`` verifier against ``math-verify`` (install it into the
venv for this bench only: ``pip install math-verify``) on one labelled pair set, plus the slowest
single check and adversarial inputs. Sandbox: test-case executions/s for a Python task with many
cases (one process per case vs one harness process for all call-based cases) and C++ compile
once vs recompile per case.

    PYTHONPATH=. python bench/bench_rewards.py [--python-cases 100] [--cpp-cases 30]

The math timeout defaults to ``MathRewardConfig``'s (what a user runs). The 200-item comparison
with math-verify per answer class is ``bench_math_equivalence.py``; this one keeps the short pair
list for the speed row and the adversarial inputs.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402  bench/provenance.py: the record every bench writes

PAIRS: list[tuple[str, str, bool]] = [
    ("a^2-b^2", "(a+b)(a-b)", True),
    (r"\frac{1}{2}", "0.5", True),
    (r"\dfrac{3}{4}", "0.75", True),
    (r"\frac{\sqrt{2}}{2}", r"\sqrt2/2", True),
    (r"\sqrt[3]{8}", "2", True),
    ("1,000", "1000", True),
    ("[1,2)", "[1, 2)", True),
    (r"(-\infty, 3] \cup (5, \infty)", r"(5,\infty)\cup(-\infty,3]", True),
    (r"\{2, 1\}", r"\{1,2\}", True),
    ("(1/2, 3)", "(0.5, 3)", True),
    ("x=3", "3", True),
    ("y = 2x + 1", "2x - y + 1 = 0", True),
    ("2, 1", "1, 2", True),
    (r"50\%", "0.5", True),
    (r"30^\circ", "30", True),
    (r"\text{Monday}", "monday", True),
    (r"2\pi", r"2 \cdot \pi", True),
    (r"\sin^2 x + \cos^2 x", "1", True),
    ("-1/3", r"-\frac{1}{3}", True),
    ("10", "10.0", True),
    (r"\frac{6}{8}", r"\frac34", True),
    (r"x^2+2x+1", r"(x+1)^2", True),
    (r"\sqrt{8}", r"2\sqrt{2}", True),
    ("a^2+b^2", "(a+b)(a-b)", False),
    (r"\frac{1}{3}", "0.33", False),
    ("[1,2]", "[1,2)", False),
    ("(2, 1)", "(1, 2)", False),
    (r"\{1,2,3\}", r"\{1,2\}", False),
    ("x = 4", "x = 3", False),
    ("1, 2", "1, 2, 3", False),
    (r"\text{Tuesday}", r"\text{Monday}", False),
    ("51%", "0.5", False),
    (r"\sqrt{3}", "1.7", False),
    ("-2", "2", False),
    (r"x^2+1", r"(x+1)^2", False),
    ("12", "13", False),
]
ADVERSARIAL = ["9^9^9^9", "2**2**2**2**2**2**2", "(" * 5000 + "1" + ")" * 5000, r"10^{10^{10^{10}}}", r"\frac{1}{"]


def bench_math(timeout_s: float) -> dict[str, Any]:
    from longcat_plugins.rewards.math import MathRewardConfig, verify

    cfg = MathRewardConfig(timeout_s=timeout_s, workers=1)
    verify("1", "1", cfg)  # start the pool outside the timing
    out: dict[str, Any] = {}
    times, correct = [], 0
    start = time.perf_counter()
    for pred, gold, want in PAIRS:
        t = time.perf_counter()
        verdict, _ = verify(pred, gold, cfg)
        times.append(time.perf_counter() - t)
        correct += (verdict == "equal") == want
    total = time.perf_counter() - start
    adv = []
    for pred in ADVERSARIAL:
        t = time.perf_counter()
        verdict, _ = verify(pred, "7", cfg)
        adv.append({"input": pred[:30], "verdict": verdict, "wall_s": round(time.perf_counter() - t, 3)})
    out["pairs"] = len(PAIRS)
    out["longcat"] = {
        "accuracy": correct / len(PAIRS),
        "checks_per_s": len(PAIRS) / total,
        "slowest_check_s": max(times),
        "adversarial": adv,
        "timeout_s": timeout_s,
    }
    try:
        from math_verify import parse
        from math_verify import verify as mv_verify
    except ImportError:
        out["math_verify"] = "not installed"
        return out
    times, correct = [], 0
    start = time.perf_counter()
    for pred, gold, want in PAIRS:
        t = time.perf_counter()
        try:
            ok = bool(mv_verify(parse(f"${gold}$"), parse(f"${pred}$")))
        except Exception:  # noqa: BLE001 - count as "not equal", as math-verify users do
            ok = False
        times.append(time.perf_counter() - t)
        correct += ok == want
    total = time.perf_counter() - start
    adv = []
    for pred in ADVERSARIAL:
        t = time.perf_counter()
        try:
            ok = bool(mv_verify(parse("$7$"), parse(f"${pred}$")))
            verdict = "equal" if ok else "different"
        except Exception as exc:  # noqa: BLE001
            verdict = f"error {type(exc).__name__}"
        adv.append({"input": pred[:30], "verdict": verdict, "wall_s": round(time.perf_counter() - t, 3)})
    out["math_verify"] = {
        "accuracy": correct / len(PAIRS),
        "checks_per_s": len(PAIRS) / total,
        "slowest_check_s": max(times),
        "adversarial": adv,
        "note": "math-verify's own timeout uses signal.alarm (main thread only)",
        "version": importlib.metadata.version("math-verify"),
    }
    return out


async def bench_sandbox(py_cases: int, cpp_cases: int) -> dict[str, Any]:
    from longcat_plugins.rewards.sandbox import Limits, Sandbox, parse_test_cases

    limits = Limits(cpu_s=2, wall_s=5, memory_mb=256)
    out: dict[str, Any] = {}
    stdin_suite = parse_test_cases(
        {"inputs": [f"{i}\n" for i in range(py_cases)], "outputs": [f"{2 * i}\n" for i in range(py_cases)]}
    )
    sb = Sandbox("auto", limits, python_stdio_mode="per_case")  # the warm harness: bench_code_env.py's stdio_*
    out["isolation"] = sb.level.value
    t = time.perf_counter()
    rep = await sb.run("python", "print(2 * int(input()))\n", stdin_suite)
    dt = time.perf_counter() - t
    assert rep.all_passed, rep
    out["python_stdin_process_per_case"] = {"cases": py_cases, "s": dt, "execs_per_s": py_cases / dt}

    call_suite = parse_test_cases(
        {"fn_name": "double", "inputs": [[i] for i in range(py_cases)], "outputs": [2 * i for i in range(py_cases)]}
    )
    for mode in ("batch", "per_case"):
        sbm = Sandbox("auto", limits, python_call_mode=mode)
        t = time.perf_counter()
        rep = await sbm.run("python", "def double(n):\n    return 2 * n\n", call_suite)
        dt = time.perf_counter() - t
        assert rep.all_passed, rep
        out[f"python_call_{mode}"] = {"cases": py_cases, "s": dt, "execs_per_s": py_cases / dt}

    cpp = '#include <cstdio>\nint main(){long n; scanf("%ld",&n); printf("%ld\\n", 2*n);}\n'
    suite = parse_test_cases(
        {"inputs": [f"{i}\n" for i in range(cpp_cases)], "outputs": [f"{2 * i}\n" for i in range(cpp_cases)]}
    )
    t = time.perf_counter()
    rep = await sb.run("cpp", cpp, suite)
    dt = time.perf_counter() - t
    assert rep.all_passed, rep
    out["cpp_compile_once"] = {"cases": cpp_cases, "s": dt, "execs_per_s": cpp_cases / dt}
    t = time.perf_counter()
    for case in suite.cases:
        one = parse_test_cases({"inputs": [case.stdin], "outputs": [case.expected]})
        assert (await sb.run("cpp", cpp, one)).all_passed
    dt = time.perf_counter() - t
    out["cpp_recompile_per_case"] = {"cases": cpp_cases, "s": dt, "execs_per_s": cpp_cases / dt}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python-cases", type=int, default=100)
    ap.add_argument("--cpp-cases", type=int, default=30)
    ap.add_argument("--math-timeout", type=float, default=None, help="default: MathRewardConfig().timeout_s")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "rewards.json"))
    args = ap.parse_args()
    if args.math_timeout is None:
        from longcat_plugins.rewards.math import MathRewardConfig

        args.math_timeout = MathRewardConfig().timeout_s
    result = {
        "provenance": provenance(seeds=[]),  # no random draws: fixed pairs and test cases
        "math": bench_math(args.math_timeout),
        "sandbox": asyncio.run(bench_sandbox(args.python_cases, args.cpp_cases)),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
