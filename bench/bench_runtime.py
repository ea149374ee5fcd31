"""Embedded CPU runtime benchmark: demo step time and process-tree memory (v1 vs legacy
trainer), and hf rollout generation throughput with 1 vs 8 concurrent requests.

    .venv/bin/python bench/bench_runtime.py [--steps 6] [--out bench/results/runtime.json]

Timings are taken side by side in one run; report ratios, these machines are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil
from provenance import provenance  # bench/provenance.py: the record every bench writes
from training_run import demo_data, train_or_raise


def tree_rss(root: psutil.Process) -> int:
    """Resident memory of a process and all its descendants (Ray's GCS, raylet and workers)."""
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def bench_trainer(use_v1: bool, steps: int, assets, work: Path) -> dict:
    from longcat_plugins.runtime.launch import resolve_config

    peak = {"rss": 0}
    stop = threading.Event()

    def sample() -> None:
        me = psutil.Process()
        while not stop.is_set():
            for child in me.children():
                peak["rss"] = max(peak["rss"], tree_rss(child))
            time.sleep(0.25)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    start = time.time()
    try:
        result = train_or_raise(
            resolve_config("cpu_demo"),
            [*demo_data(assets, steps), f"trainer.use_v1={str(use_v1).lower()}"],
            work / ("v1" if use_v1 else "legacy"),
            "training",
        )
    finally:
        wall = time.time() - start
        stop.set()
        watcher.join()
    step_times = [s["timing_s/step"] for s in result.steps]
    warm = step_times[1:]  # the first step pays for lazy initialisation
    return {
        "trainer": "v1" if use_v1 else "legacy",
        "steps": len(step_times),
        "first_step_s": step_times[0],
        "step_s_after_warmup_median": statistics.median(warm),
        "step_s_after_warmup": warm,
        "wall_s_total": wall,
        "startup_s": wall - sum(step_times),
        "peak_tree_rss_gib": peak["rss"] / 2**30,
    }


def bench_rollout(assets, concurrency: int, rounds: int, max_tokens: int) -> dict:
    from transformers import AutoTokenizer

    from longcat_plugins.runtime.hf_rollout import HFServer

    server = HFServer(
        {"prompt_length": 64, "response_length": max_tokens, "seed": 0}, {"local_path": str(assets.model)}
    )
    tok = AutoTokenizer.from_pretrained(assets.model)
    prompt = list(
        tok.apply_chat_template(
            [{"role": "user", "content": "What is 12+30?"}], add_generation_prompt=True, tokenize=True
        )["input_ids"]
    )
    params = {"temperature": 1.0, "max_tokens": max_tokens, "logprobs": True}
    server.eos_ids = set()  # generate exactly max_tokens so both settings do the same work per request

    async def run() -> float:
        start = time.perf_counter()
        for r in range(rounds):
            await asyncio.gather(*[server.generate(prompt, dict(params), f"{r}-{i}") for i in range(concurrency)])
        return time.perf_counter() - start

    elapsed = asyncio.run(run())
    tokens = rounds * concurrency * max_tokens
    return {"concurrency": concurrency, "tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--out", default="bench/results/runtime.json")
    args = parser.parse_args()

    from longcat_plugins.learning.assets import ensure_assets

    origin = provenance(seeds=[0])
    work = Path(tempfile.mkdtemp(prefix="longcat-bench-"))
    assets = ensure_assets(work / "assets", size=args.size)
    rollout = [bench_rollout(assets, c, rounds=4, max_tokens=32) for c in (1, 8, 1, 8)]  # interleaved
    by_c = {c: max(r["tokens_per_s"] for r in rollout if r["concurrency"] == c) for c in (1, 8)}
    trainers = [bench_trainer(True, args.steps, assets, work), bench_trainer(False, args.steps, assets, work)]
    result = {
        "provenance": origin,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "ram_gib": psutil.virtual_memory().total / 2**30,
        },
        "model_size": args.size,
        "trainers": trainers,
        "v1_over_legacy_step_time": trainers[0]["step_s_after_warmup_median"]
        / trainers[1]["step_s_after_warmup_median"],
        "rollout": rollout,
        "rollout_speedup_8_vs_1": by_c[8] / by_c[1],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "rollout"}, indent=2))
    print(
        f"rollout tokens/s: 1 concurrent {by_c[1]:.0f}, 8 concurrent {by_c[8]:.0f} ({result['rollout_speedup_8_vs_1']:.2f}x)"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
