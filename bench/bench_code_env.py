"""Benchmark of the code-sandbox environment; writes bench/results/code_env.json.

- ``sandbox``: one batch of hidden tests (function-call test cases against a generated repository)
  run process-per-case (a fresh sandboxed interpreter per case) and batched (one warm sandboxed
  interpreter, a fork per case: :mod:`longcat_plugins.rewards.sandbox.warm`), both at the
  strongest isolation level here; executions/s of each, and the batched run's overhead per case
  over running the same cases bare (in this process, no sandbox, no fork). Medians of ``--reps``
  repetitions. ``levels`` repeats the batched/process-per-case pair at every available level.
  The ``stdio_*`` keys do the same for the code reward's stdin/stdout cases: one Python submission
  through ``Sandbox.run`` with ``python_stdio_mode`` per_case vs warm (whole submissions: run
  directory, uid and sweep included), overhead over the program run bare in this process
  (``--stdio-only`` re-measures just these keys into an existing ``--out``).
- ``episodes``: golden episodes (read, edit, shell running the public test, submit, hidden tests)
  driven by ``concurrency`` threads over a pool of that many workspaces; episodes/s and the p99
  latency of a tool call (the shell call included).
- ``provisioning``: time until an episode has its workspace, from a ready pool slot vs provisioned
  from scratch (lease a uid, make the directories, copy the repo, and tear it down after).
- ``leak``: after every episode of the run (plus ``--leak-episodes`` more through one pool of 8),
  processes of the pools' uids, directories left under the work root, and mounts, all expected 0.
- ``leak_long``: ``--leak-only N`` runs N more golden episodes through one pool of 8 and adds them
  to this section of ``--out`` (so a long check runs as several invocations): per invocation, and
  summed, stray processes of the pool's uids, directories left under its work root, mounts
  added, uids whose lock is still held, entries of those uids in /tmp, /var/tmp and /dev/shm.
  It exits non-zero on any leak.

    PYTHONPATH=. python bench/bench_code_env.py [--cases 20] [--episodes 64] [--concurrency 1 8 32]
    PYTHONPATH=. python bench/bench_code_env.py --stdio-only
    PYTHONPATH=. python bench/bench_code_env.py --leak-only 2500   # repeat until leak_long has 10,000
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes

from longcat_plugins.environments.code_env.episode import CodeEnvSettings, CodeEpisode
from longcat_plugins.environments.code_env.pool import WorkspacePool, copy_owned
from longcat_plugins.environments.code_env.tasks import load_task, make_task, write_task, write_tasks
from longcat_plugins.rewards.sandbox import Limits, Sandbox, available_levels, parse_test_cases
from longcat_plugins.rewards.sandbox.isolation import lock_uid
from longcat_plugins.rewards.sandbox.runner import live_pids_of_uid
from longcat_plugins.rewards.sandbox.testcases import TestSuite
from longcat_plugins.rewards.sandbox.warm import CodeCase, run_per_process, run_warm

LIMITS = Limits(cpu_s=2, wall_s=5, memory_mb=256)


def work_root() -> str:
    base = "/run" if os.geteuid() == 0 and os.path.isdir("/run") else None
    root = tempfile.mkdtemp(prefix="lccode-bench-", dir=base)
    os.chmod(root, 0o711)
    return root


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


def bench_cases(n: int, tmp: Path) -> tuple[Path, list[CodeCase], str]:
    """A repository with the golden fix applied and ``n`` hidden tests that all pass."""
    task = make_task(11, "bug", distractors=2, depth=1, hidden=n)
    write_task(task, tmp / task.task_id)
    for rel, text in task.golden.items():
        (tmp / task.task_id / "repo" / rel).write_text(text)
    return tmp / task.task_id / "repo", [CodeCase(t["name"], t["code"]) for t in task.hidden], task.meta["module"]


def bare_s(repo: Path, cases: list[CodeCase]) -> float:
    """The same cases run in this process: no sandbox, no fork (the floor the overhead is measured from)."""
    sys.path.insert(0, str(repo))
    try:
        start = time.perf_counter()
        for case in cases:
            exec(compile(case.code, case.name, "exec"), {"__name__": "__bare__"})  # noqa: S102 - our own tests
        return time.perf_counter() - start
    finally:
        sys.path.remove(str(repo))


async def sandbox_pair(level: str, repo: Path, cases: list[CodeCase], module: str, reps: int) -> dict[str, Any]:
    root = work_root()
    sb = Sandbox(level, LIMITS, work_root=root)
    uid, fd = await sb.lease_uid()
    ws, io = os.path.join(root, "ws"), os.path.join(root, "io")
    copy_owned(str(repo), ws, uid)
    os.mkdir(io, 0o700)
    per, warm = [], []
    try:
        for _ in range(reps):
            t = time.perf_counter()
            res = await run_per_process(sb, cases, ws, io, uid, LIMITS)
            per.append(time.perf_counter() - t)
            assert all(r.passed for r in res), res
            t = time.perf_counter()
            res, _ = await run_warm(sb, cases, ws, io, uid, LIMITS, (module,))
            warm.append(time.perf_counter() - t)
            assert all(r.passed for r in res), res
    finally:
        await sb.release_uid(uid, fd)
        shutil.rmtree(root, ignore_errors=True)
    n = len(cases)
    return {
        "isolation": sb.level.value,
        "cases": n,
        "process_per_case_s": statistics.median(per),
        "batched_s": statistics.median(warm),
        "process_per_case_exec_per_s": n / statistics.median(per),
        "batched_exec_per_s": n / statistics.median(warm),
    }


def bench_sandbox(n: int, reps: int, tmp: Path) -> dict[str, Any]:
    repo, cases, module = bench_cases(n, tmp)
    bare = statistics.median(bare_s(repo, cases) for _ in range(reps))
    levels = {
        lv.value: asyncio.run(sandbox_pair(lv.value, repo, cases, module, reps))
        for lv, why in available_levels().items()
        if why is None
    }
    best = next(iter(levels.values()))  # the strongest available level (available_levels is strongest first)
    return {
        **bench_stdio(n, reps),
        "process_per_case_exec_per_s": best["process_per_case_exec_per_s"],
        "batched_exec_per_s": best["batched_exec_per_s"],
        "overhead_ms_per_case": (best["batched_s"] - bare) / n * 1e3,
        "isolation": best["isolation"],
        "speedup": best["batched_exec_per_s"] / best["process_per_case_exec_per_s"],
        "cases": n,
        "bare_s": bare,
        "reps": reps,
        "levels": levels,
    }


#: the stdin/stdout submission of the stdio measurement: reads a few numbers, prints a small answer
STDIO_PROGRAM = "import sys\nnums = list(map(int, sys.stdin.read().split()))\nprint(sum(nums), max(nums))\n"


def stdio_suite(n: int) -> TestSuite:
    """``n`` stdin/stdout cases (the shape of a competitive-programming submission's tests)."""
    ins = [" ".join(str((k * 7 + j) % 101 - 50) for j in range(1, 9)) + "\n" for k in range(n)]
    outs = [f"{sum(map(int, i.split()))} {max(map(int, i.split()))}\n" for i in ins]
    return parse_test_cases({"inputs": ins, "outputs": outs})


def bare_stdio_s(suite: TestSuite) -> float:
    """The same program run on every case in this process, stdin/stdout swapped for strings (the floor)."""
    code = compile(STDIO_PROGRAM, "solution.py", "exec")
    real = sys.stdin, sys.stdout
    start = time.perf_counter()
    try:
        for case in suite.cases:
            sys.stdin, sys.stdout = io.StringIO(case.stdin), io.StringIO()
            exec(code, {"__name__": "__main__"})  # noqa: S102 - our own program
    finally:
        sys.stdin, sys.stdout = real
    return time.perf_counter() - start


async def stdio_pair(level: str, suite: TestSuite, reps: int) -> dict[str, Any]:
    """The code reward's path (``Sandbox.run``) with ``python_stdio_mode`` per_case vs warm."""
    root = work_root()
    modes = {m: Sandbox(level, LIMITS, work_root=root, python_stdio_mode=m) for m in ("per_case", "warm")}
    times: dict[str, list[float]] = {m: [] for m in modes}
    try:
        for _ in range(reps):
            for mode, sb in modes.items():
                t = time.perf_counter()
                rep = await sb.run("python", STDIO_PROGRAM, suite)
                times[mode].append(time.perf_counter() - t)
                assert rep.all_passed, (mode, rep)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n = len(suite.cases)
    per, warm = statistics.median(times["per_case"]), statistics.median(times["warm"])
    return {
        "isolation": modes["warm"].level.value,
        "cases": n,
        "process_per_case_s": per,
        "batched_s": warm,
        "process_per_case_exec_per_s": n / per,
        "batched_exec_per_s": n / warm,
    }


def bench_stdio(n: int, reps: int) -> dict[str, Any]:
    """The stdin/stdout keys of the ``sandbox`` section (a whole submission: run dir, uid, sweep included)."""
    suite = stdio_suite(n)
    bare = statistics.median(bare_stdio_s(suite) for _ in range(reps))
    levels = {
        lv.value: asyncio.run(stdio_pair(lv.value, suite, reps))
        for lv, why in available_levels().items()
        if why is None
    }
    best = next(iter(levels.values()))
    return {
        "stdio_process_per_case_exec_per_s": best["process_per_case_exec_per_s"],
        "stdio_batched_exec_per_s": best["batched_exec_per_s"],
        "stdio_overhead_ms_per_case": (best["batched_s"] - bare) / n * 1e3,
        "stdio_speedup": best["batched_exec_per_s"] / best["process_per_case_exec_per_s"],
        "stdio_isolation": best["isolation"],
        "stdio_cases": n,
        "stdio_bare_s": bare,
        "stdio_levels": levels,
    }


def run_episodes(pool: WorkspacePool, task_dirs: list[Path], n: int, concurrency: int) -> dict[str, Any]:
    settings = CodeEnvSettings(isolation=pool.sandbox.level.value)
    tool_ms: list[float] = []
    scores: list[float] = []
    tasks = {d: load_task(d) for d in task_dirs}

    def one(k: int) -> None:
        d = task_dirs[k % len(task_dirs)]
        ep = CodeEpisode(tasks[d], pool, settings, pool.acquire(str(d)))
        try:
            for name, args in ep.golden_chain():
                ep.call_tool(name, args)
            scores.append(ep.evaluate().score)
        finally:
            tool_ms.extend(ep.tool_ms)
            ep.close()

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(one, range(n)))
    dt = time.perf_counter() - start
    assert scores == [1.0] * n, scores
    return {
        "concurrency": concurrency,
        "episodes": n,
        "episodes_per_s": n / dt,
        "tool_p99_ms": p99(tool_ms),
        "tool_median_ms": statistics.median(tool_ms),
        "tool_calls": len(tool_ms),
    }


def provisioning(task_dir: Path, n: int) -> dict[str, Any]:
    """Ready-slot acquire vs provisioning from scratch (and tearing down), in ms."""
    root = work_root()
    sb = Sandbox("auto", LIMITS, work_root=root)
    pool = WorkspacePool(sb, size=2)
    pooled, scratch = [], []
    try:
        pool.prewarm([str(task_dir)])
        for _ in range(n):
            t = time.perf_counter()
            slot = pool.acquire(str(task_dir))
            pooled.append((time.perf_counter() - t) * 1e3)
            pool.release(slot)
            time.sleep(0.02)  # the background reset finishes between episodes, as it does under rollout
        for _ in range(n):
            t = time.perf_counter()
            fresh = WorkspacePool(sb, size=1)  # everything a pool-less episode does itself
            slot = fresh.acquire(str(task_dir))
            fresh.release(slot)
            fresh.close()
            scratch.append((time.perf_counter() - t) * 1e3)
    finally:
        pool.close()
        shutil.rmtree(root, ignore_errors=True)
    return {
        "with_pool_median_ms": statistics.median(pooled),
        "with_pool_p99_ms": p99(pooled),
        "without_pool_median_ms": statistics.median(scratch),
        "without_pool_p99_ms": p99(scratch),
        "n": n,
    }


def mounts() -> int:
    return len(Path("/proc/self/mountinfo").read_text().splitlines())


def sandbox_tmp_entries(uids: set[int]) -> int:
    """Entries in the shared temp directories owned by a sandbox uid (only level ``uid`` could make any)."""
    count = 0
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            try:
                count += os.lstat(os.path.join(d, name)).st_uid in uids
            except OSError:
                pass
    return count


def uids_still_locked(uids: set[int]) -> list[int]:
    """Uids of ours whose lock some process still holds (a pool that did not give its uid back)."""
    held = []
    for u in sorted(uids):
        fd = lock_uid(u)
        if fd is None:
            held.append(u)
        else:
            os.close(fd)
    return held


def leak_run(task_dirs: list[Path], episodes: int, max_s: float = math.inf) -> dict[str, Any]:
    """``episodes`` golden episodes through one pool of 8 (concurrency 8), then everything that could leak;
    fewer when ``max_s`` seconds have passed (checked between chunks of 250)."""
    n_mounts = mounts()
    root = work_root()
    pool = WorkspacePool(Sandbox("auto", LIMITS, work_root=root, max_concurrent=8), size=8)
    start = time.perf_counter()
    done = 0
    try:
        while done < episodes and time.perf_counter() - start < max_s:  # in chunks, so progress shows
            k = min(250, episodes - done)
            run_episodes(pool, task_dirs, k, 8)
            done += k
            print(f"leak run: {done} episodes, {time.perf_counter() - start:.0f} s", flush=True)
    finally:
        pool.close()
    seconds = time.perf_counter() - start
    uids = set(pool.uids_seen)
    out = {
        "episodes": done,
        "seconds": seconds,
        "episodes_per_s": done / seconds,
        "isolation": pool.sandbox.level.value,
        "uids_used": len(uids),
        "stray_processes": sum(len(live_pids_of_uid(u)) for u in uids),
        "leftover_dirs": len(os.listdir(root)),
        "mounts_added": mounts() - n_mounts,
        "uids_still_locked": len(uids_still_locked(uids)),
        "tmp_entries_of_sandbox_uids": sandbox_tmp_entries(uids),
    }
    shutil.rmtree(root, ignore_errors=True)
    return out


LEAK_KEYS = ("stray_processes", "leftover_dirs", "mounts_added", "uids_still_locked", "tmp_entries_of_sandbox_uids")


def long_leak(args: argparse.Namespace, tmp: Path) -> None:
    """``--leak-only``: one more slice of the long leak check, added to ``leak_long`` of ``--out``."""
    write_tasks(tmp / "set", args.tasks, seed=5, distractors=2, depth=1, hidden=6)
    task_dirs = sorted((tmp / "set" / "tasks").iterdir())
    run = leak_run(task_dirs, args.leak_only, args.leak_max_s)
    print(json.dumps(run), flush=True)
    out = Path(args.out)
    origin = provenance(seeds=[5])  # the task set's seed
    result = json.loads(out.read_text())
    prev = result.get("leak_long", {"invocations": []})
    runs = [*prev["invocations"], {**run, "command": " ".join(["python", *sys.argv])}]
    result["leak_long"] = {
        "episodes": sum(r["episodes"] for r in runs),
        **{k: sum(r[k] for r in runs) for k in LEAK_KEYS},
        "seconds_per_episode": sum(r["seconds"] for r in runs) / sum(r["episodes"] for r in runs),
        "invocations": runs,
    }
    out.write_text(json.dumps(stamp(result, origin, earlier(out)), indent=2) + "\n")
    bad = {k: run[k] for k in LEAK_KEYS if run[k]}
    if bad:
        raise SystemExit(f"leak check failed after {run['episodes']} episodes: {bad}")


def stdio_only(args: argparse.Namespace) -> None:
    """``--stdio-only``: (re)measure the stdin/stdout keys of the ``sandbox`` section of ``--out``."""
    out = Path(args.out)
    origin = provenance(seeds=[])
    result = json.loads(out.read_text())
    result["sandbox"].update(bench_stdio(args.cases, args.reps))
    result["stdio_command"] = " ".join(["python", *sys.argv])
    out.write_text(json.dumps(stamp(result, origin, earlier(out)), indent=2) + "\n")
    print(json.dumps({k: v for k, v in result["sandbox"].items() if k.startswith("stdio_")}, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=20, help="hidden tests in the sandbox batch")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=64, help="episodes per concurrency level")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--provision", type=int, default=50)
    ap.add_argument("--leak-episodes", type=int, default=0, help="extra episodes (concurrency 8) for the leak check")
    ap.add_argument("--skip-sandbox", action="store_true", help="keep the sandbox section of an existing --out")
    ap.add_argument(
        "--leak-only", type=int, default=0, help="only the long leak check: this many episodes, added to leak_long"
    )
    ap.add_argument("--leak-max-s", type=float, default=math.inf, help="--leak-only stops after this long")
    ap.add_argument("--stdio-only", action="store_true", help="only the stdin/stdout sandbox keys, into --out")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "code_env.json"))
    args = ap.parse_args()

    if args.stdio_only:
        stdio_only(args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="lccode-bench-tasks-"))
    os.chmod(tmp, 0o755)
    if args.leak_only:
        try:
            long_leak(args, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    origin = provenance(seeds=[5])  # the task set's seed
    kept = earlier(Path(args.out), append=args.skip_sandbox)  # the sandbox section's run
    previous = json.loads(Path(args.out).read_text()) if args.skip_sandbox and Path(args.out).exists() else {}
    try:
        sandbox = previous["sandbox"] if args.skip_sandbox else bench_sandbox(args.cases, args.reps, tmp)
        write_tasks(tmp / "set", args.tasks, seed=5, distractors=2, depth=1, hidden=6)
        task_dirs = sorted((tmp / "set" / "tasks").iterdir())
        n_mounts = mounts()
        root = work_root()
        episodes, uids = [], set()
        total = 0
        for c in args.concurrency:
            pool = WorkspacePool(Sandbox("auto", LIMITS, work_root=root, max_concurrent=c), size=c)
            pool.prewarm([str(d) for d in task_dirs])
            episodes.append(run_episodes(pool, task_dirs, args.episodes, c))
            total += args.episodes
            pool.close()
            uids |= pool.uids_seen
            print(json.dumps(episodes[-1]), flush=True)
        if args.leak_episodes:  # many more episodes through one pool, for the leak check only
            pool = WorkspacePool(Sandbox("auto", LIMITS, work_root=root, max_concurrent=8), size=8)
            done = 0
            while done < args.leak_episodes:  # in chunks, so progress shows
                k = min(1000, args.leak_episodes - done)
                run_episodes(pool, task_dirs, k, 8)
                done += k
                print(f"leak run: {done} episodes", flush=True)
            total += done
            pool.close()
            uids |= pool.uids_seen
        leak = {
            "episodes": total,
            "stray_processes": sum(len(live_pids_of_uid(u)) for u in uids),
            "leftover_dirs": len(os.listdir(root)),
            "mounts_added": mounts() - n_mounts,
        }
        shutil.rmtree(root, ignore_errors=True)
        result = {
            "command": " ".join(["python", *sys.argv]),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "sandbox": sandbox,
            "episodes": episodes,
            "provisioning": provisioning(task_dirs[0], args.provision),
            "leak": leak,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(result, origin, kept), indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("sandbox", "provisioning", "leak")}, indent=2))


if __name__ == "__main__":
    main()
