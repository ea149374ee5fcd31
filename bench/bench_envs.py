"""Environment benchmarks: envgen throughput, and how many live episodes one process sustains.

    .venv/bin/python bench/bench_envs.py [--sizes 1000,8000,32000] [--envs 200] [--out bench/results/envs.json]
        [--specs retail,travel,food_delivery,examples/env_clinic/clinic.yaml] [--max-chain 6]

``--specs`` takes built-in domain names or spec file paths (any domain); ``--max-chain`` (and the
other GenConfig knobs' defaults) apply to every spec.

Audit (``--audit N``, writes ``bench/results/env_audit.json`` by default): N environments of each
spec (the first N indices of one generator seed: a sample, not every environment envgen could
write) are generated and verified in memory; reported per spec: how many were built and verified,
rejections by reason, required outputs that are empty or met by a content-free answer ("Sure:
done"), records of the seed data that break a declared cross-record rule (and how many records
are in a rule's state), chain lengths, tasks of 7+ tools that call a rule's tool, and the reward
audit of issue 32, over the verified environments (what envgen writes) and, under
``before_verify``, over every generated one:

- ``guessable_credited``: tasks on which an id-guessing agent (:mod:`~longcat_plugins.environments.hacks`:
  skipped lookups, padded ids, ids echoed by a provoked error, ``-0003`` ids) earned a database item
  on an id the episode never revealed;
- ``unrevealed_golden``: tasks whose golden chain uses an id nothing revealed before the call
  (an agent that may only use revealed ids cannot solve them);
- ``signoff_met_outputs``: required outputs a content-free sign-off (``verify.SIGNOFFS``) meets,
  with no call or after the golden chain;
- ``seed_require_violations``: seed records in a rule's state whose ref argument names a record
  that breaks the transition's ``require:`` (checked by direct table lookups).

Concurrency: N episodes (tasks drawn round-robin from ``--envs`` generated environments, loaded from
disk; every second episode at noise level 2) are all created up front and kept alive; then their
golden chains are interleaved one tool step at a time, either round-robin or as N asyncio tasks
that yield after every step. Reported per N: tool steps/s, p50/p99 latency of one ``call_tool``,
process RSS (and its growth per live episode), and the fraction of episodes that pass their rubric
(transient failures are retried, as an agent would). Single process, single thread.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil
from provenance import provenance  # bench/provenance.py: the record every bench writes

from longcat_plugins.environments.domain import DBView, rule_violations
from longcat_plugins.environments.envgen import generate_environments
from longcat_plugins.environments.generate import EnvironmentGenerator, GenConfig, GenerationError
from longcat_plugins.environments.hacks import guess_credited
from longcat_plugins.environments.noise import NoiseConfig
from longcat_plugins.environments.rubric import evaluate, renderings
from longcat_plugins.environments.runtime import load_environment
from longcat_plugins.environments.spec import load_spec
from longcat_plugins.environments.verify import revealed_only_replay, signoff_met, verify_environment

PROC = psutil.Process()


def rss() -> int:
    gc.collect()
    return PROC.memory_info().rss


SHIPPED = ("retail", "travel", "food_delivery")


def bench_envgen(count: int, work: Path, specs: list[str], config: GenConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in specs:
        spec = load_spec(name)
        domain = spec.domain
        gen = EnvironmentGenerator(spec, seed=0, config=config)
        t0 = time.perf_counter()
        for i in range(count):
            try:
                gen.generate(i)
            except GenerationError:
                pass
        raw = count / (time.perf_counter() - t0)
        report = generate_environments(spec, count, work / f"envgen_{domain}", seed=0, config=config)
        out[domain] = {
            "tools_in_domain": len(spec.tools),
            "generate_only_envs_per_s": round(raw, 1),
            "verified_written_envs_per_s": round(report.envs_per_s, 1),
            "rejected": report.rejected,
            "tasks": report.tasks,
            "tools_per_env": report.to_dict()["tools_per_env"],
        }
        print(domain, out[domain], flush=True)
    return out


def make_episodes(pool: list[tuple[Any, str]], n: int) -> list[Any]:
    noisy = NoiseConfig.at_level(2)
    eps = []
    for i in range(n):
        env, task_id = pool[i % len(pool)]
        eps.append(env.new_episode(task_id, seed=i, noise=noisy if i % 2 else None))
    return eps


def _step(ep: Any, chain: list, pos: list[int], i: int, lat: list[int]) -> bool:
    """One tool call of episode i; False when its chain is done."""
    if pos[i] >= len(chain):
        return False
    name, args = chain[pos[i]]
    t0 = time.perf_counter_ns()
    r = ep.call_tool(name, args)
    lat.append(time.perf_counter_ns() - t0)
    if r.ok or not r.transient:
        pos[i] += 1
    return True


def run_round_robin(eps: list[Any]) -> tuple[list[int], float]:
    chains = [ep.golden_chain() for ep in eps]
    pos = [0] * len(eps)
    lat: list[int] = []
    live = list(range(len(eps)))
    t0 = time.perf_counter()
    while live:
        live = [i for i in live if _step(eps[i], chains[i], pos, i, lat)]
    return lat, time.perf_counter() - t0


def run_asyncio(eps: list[Any]) -> tuple[list[int], float]:
    lat: list[int] = []

    async def one(ep: Any) -> None:
        for name, args in ep.golden_chain():
            while True:
                t0 = time.perf_counter_ns()
                r = ep.call_tool(name, args)
                lat.append(time.perf_counter_ns() - t0)
                await asyncio.sleep(0)  # let every other live episode take a step
                if r.ok or not r.transient:
                    break

    async def main() -> None:
        await asyncio.gather(*(one(ep) for ep in eps))

    t0 = time.perf_counter()
    asyncio.run(main())
    return lat, time.perf_counter() - t0


def pct(xs: list[int], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] / 1e3


def bench_concurrency(
    sizes: list[int], n_envs: int, work: Path, mode: str, specs: list[str], config: GenConfig
) -> list[dict[str, Any]]:
    root = work / "pool"
    for i, name in enumerate(specs):
        generate_environments(name, n_envs // len(specs) or 1, root / f"spec{i}", seed=1, config=config)
    pool = []
    for d in sorted(root.glob("*/envs/*")):
        env = load_environment(d)
        pool += [(env, t.task_id) for t in env.tasks]
    base = rss()
    rows = []
    for n in sizes:
        gc.collect()
        before = rss()
        t0 = time.perf_counter()
        eps = make_episodes(pool, n)
        create_s = time.perf_counter() - t0
        after_create = rss()
        lat, wall = (run_round_robin if mode == "round_robin" else run_asyncio)(eps)
        after_run = rss()
        t1 = time.perf_counter()
        passed = sum(ep.evaluate(ep.golden_answer()).success for ep in eps)
        evaluate_us = (time.perf_counter() - t1) / n * 1e6
        row = {
            "mode": mode,
            "live_episodes": n,
            "tool_steps": len(lat),
            "wall_s": round(wall, 3),
            "steps_per_s": round(len(lat) / wall, 1),
            "p50_step_us": round(pct(lat, 0.50), 1),
            "p99_step_us": round(pct(lat, 0.99), 1),
            "mean_step_us": round(statistics.fmean(lat) / 1e3, 1),
            "episode_create_us": round(create_s / n * 1e6, 2),
            "evaluate_us": round(evaluate_us, 2),
            "rss_mib_after_run": round(after_run / 2**20, 1),
            "rss_mib_baseline": round(base / 2**20, 1),
            "episode_bytes_created": round((after_create - before) / n),
            "episode_bytes_after_run": round((after_run - before) / n),
            "passed_fraction": round(passed / n, 4),
        }
        print(row, flush=True)
        rows.append(row)
        del eps
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for mode in sorted({r["mode"] for r in rows}):
        rs = [r for r in rows if r["mode"] == mode]
        ns = [r["live_episodes"] for r in rs]
        axes[0].plot(ns, [r["steps_per_s"] for r in rs], "o-", label=mode)
        axes[1].plot(ns, [r["p99_step_us"] for r in rs], "o-", label=f"{mode} p99")
        axes[1].plot(ns, [r["p50_step_us"] for r in rs], "x--", label=f"{mode} p50")
        axes[2].plot(ns, [r["rss_mib_after_run"] for r in rs], "o-", label=mode)
    for ax, title in zip(axes, ("tool steps/s", "step latency (µs)", "process RSS (MiB)"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("live episodes")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def require_violations(spec: Any, tables: dict[str, dict[str, dict[str, Any]]]) -> int:
    """Seed records in a rule's state whose ref argument names a record breaking a ``require:`` of
    the transition(s) leading there (none of them holds), by direct lookups in ``tables``."""
    bad = 0
    for rule in spec.rules():
        tools = [spec.tools[n] for n in rule.tool.split("|") if spec.tools[n].require]
        if not tools:
            continue
        for rec in tables[rule.entity].values():
            if rec.get(rule.field) != rule.to:
                continue
            bad += not any(
                all(
                    (tables[t.ref_args[a]].get(rec.get(a)) or {}).get(f) in allowed
                    for a, conds in t.require.items()
                    for f, allowed in conds.items()
                    if "." not in f
                )
                for t in tools
            )
    return bad


HACK_KEYS = ("guessable_credited", "unrevealed_golden", "signoff_met_outputs", "seed_require_violations")


def reward_audit(env: Any) -> dict[str, int]:
    """The four issue-32 counts of one environment (see the module doc)."""
    row = dict.fromkeys(HACK_KEYS, 0)
    row["seed_require_violations"] = require_violations(env.spec, env.base.tables)
    for task in env.tasks:
        row["guessable_credited"] += bool(guess_credited(env, task))
        unrevealed, _ = revealed_only_replay(env, task)
        row["unrevealed_golden"] += bool(unrevealed)
        row["signoff_met_outputs"] += len({m.split(":")[0] for m in signoff_met(env, task)})
    return row


def audit(specs: list[str], count: int, config: GenConfig, seed: int) -> dict[str, Any]:
    """Generate and verify ``count`` environments of each spec; count vacuous rubrics and rule
    violations (see the module doc)."""
    out: dict[str, Any] = {}
    for name in specs:
        spec = load_spec(name)
        gen = EnvironmentGenerator(spec, seed=seed, config=config)
        t0 = time.perf_counter()
        row: dict[str, Any] = {
            "spec": name,
            "generated": 0,
            "generation_failed": 0,
            "verified": 0,
            "rejected": {},
            "tasks": 0,
            "output_items": 0,
            "empty_outputs": 0,
            "vacuous_outputs": 0,
            "seed_rule_violations": 0,
            "records_under_rules": 0,
            "chain_lengths": {},
            "rule_tool_chains_7plus": 0,
            **dict.fromkeys(HACK_KEYS, 0),
            "before_verify": dict.fromkeys(HACK_KEYS, 0),
        }
        rule_tools = {r.tool for r in spec.rules()}
        for i in range(count):
            try:
                env = gen.generate(i)
            except GenerationError:
                row["generation_failed"] += 1
                continue
            row["generated"] += 1
            verdict = verify_environment(env, min_tools=config.min_tools)
            row["verified"] += verdict.ok
            counts = reward_audit(env)
            for k, v in counts.items():
                row["before_verify"][k] += v
                row[k] += v if verdict.ok else 0
            for k, v in verdict.reasons.items():
                row["rejected"][k] = row["rejected"].get(k, 0) + v
            row["seed_rule_violations"] += len(rule_violations(spec, env.base.tables))
            for r in spec.rules():
                row["records_under_rules"] += sum(
                    rec.get(r.field) == r.to for rec in env.base.tables[r.entity].values()
                )
            empty = DBView(env.base)
            for task in env.tasks:
                row["tasks"] += 1
                n = str(len(task.chain))
                row["chain_lengths"][n] = row["chain_lengths"].get(n, 0) + 1
                row["rule_tool_chains_7plus"] += len(task.chain) >= 7 and bool(rule_tools & set(task.chain))
                for item in task.rubric:
                    if item["kind"] != "output":
                        continue
                    row["output_items"] += 1
                    row["empty_outputs"] += not renderings(item["value"])
                    row["vacuous_outputs"] += evaluate(empty, [item], "Sure: done").success
        row["chain_lengths"] = dict(sorted(row["chain_lengths"].items(), key=lambda kv: int(kv[0])))
        row["max_chain_seen"] = max(map(int, row["chain_lengths"]), default=0)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        print(spec.domain, row, flush=True)
        out[spec.domain] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--specs", default=",".join(SHIPPED), help="built-in domain names or spec paths")
    ap.add_argument("--max-chain", type=int, default=GenConfig().max_chain)
    ap.add_argument("--audit", type=int, default=0, help="audit N environments per spec (only the audit runs)")
    ap.add_argument("--seed", type=int, default=0, help="generation seed of the audit")
    ap.add_argument("--sizes", default="1000,8000,32000")
    ap.add_argument("--envs", type=int, default=60, help="environments in the episode pool")
    ap.add_argument("--envgen-count", type=int, default=200)
    ap.add_argument("--modes", default="round_robin,asyncio")
    ap.add_argument("--out", default=None, help="default bench/results/envs.json (env_audit.json with --audit)")
    args = ap.parse_args()
    specs = [x for x in args.specs.split(",") if x]
    config = GenConfig(max_chain=args.max_chain)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    results = Path(__file__).parent / "results"
    if args.audit:
        t0 = time.perf_counter()
        result = {
            "command": "bench/bench_envs.py --audit "
            f"{args.audit} --specs {args.specs} --max-chain {args.max_chain} --seed {args.seed}",
            "provenance": provenance(seeds={"generator_seed": args.seed, "episode_seed": 0}),
            "sample": f"the first {args.audit} environment indices of generator seed {args.seed} per spec "
            "(a sample of what envgen writes; the counts are exact on it)",
            "machine": machine,
            "config": asdict(config),
            "environments_per_spec": args.audit,
            "audit": audit(specs, args.audit, config, args.seed),
            "total_s": round(time.perf_counter() - t0, 1),
        }
        out = Path(args.out or results / "env_audit.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
        print(json.dumps(result, indent=2))
        return
    sizes = [int(x) for x in args.sizes.split(",")]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        envgen = bench_envgen(args.envgen_count, work, specs, config)
        rows = []
        for mode in args.modes.split(","):
            rows += bench_concurrency(sizes, args.envs, work / mode, mode, specs, config)
    result = {
        "machine": machine,
        "specs": specs,
        "envgen": envgen,
        "concurrency": rows,
        "total_s": round(time.perf_counter() - t0, 1),
    }
    out = Path(args.out or results / "envs.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    plot(rows, out.with_suffix(".png"))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
