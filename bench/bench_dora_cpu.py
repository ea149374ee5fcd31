"""DORA against verl's synchronous v1 trainer, for real, on this machine's CPU (or its GPU).

    .venv/bin/python bench/bench_dora_cpu.py [--device cpu|cuda] [--steps 8] [--long-tokens 384] [--out bench/results]

Each run is stock ``python -m verl.trainer.main_ppo`` (the tiny local Llama, GRPO, 4 prompts x
n=4 = 16 trained samples per step) on a long-tailed workload: every 4th prompt may generate
``--long-tokens`` tokens, the others ``--short-tokens`` (``longcat_plugins.schedulers.workload``;
a random tiny model almost never stops early, so the budget is the length). Runs:

- ``sync``: verl's v1 ``sync`` trainer (``configs/cpu_demo.yaml``), one colocated ``hf``
  replica: each step waits for its longest response.
- ``dora_1`` / ``dora_2``: ``trainer.v1.trainer_mode=dora`` (``configs/dora_cpu.yaml``) with one
  or two standalone multi-version ``hf`` replicas, staleness bound 1.

All processes share the same CPU cores whatever the logical device count, so ``dora_1`` is the
like-for-like comparison with ``sync`` (one generation engine each); ``dora_2`` adds a second
engine on the same cores. Reported per run: wall time per trained sample over the training loop
(sum of verl's ``timing_s/step``, with and without the first step, which absorbs warm-up) and
for the whole process (start-up included), wall time per trained response token (DORA trains
a shorter mix: long responses that finish late fall out of the staleness window or past the
last step), trainer wait per step, response length, staleness.

``--device cuda`` trains on the GPU (``trainer.device=cuda``; the rollout stays the ``hf``
engine, vLLM is not used); every record carries its ``"device"``, and records of the other
device already in ``dora_cpu.json`` are kept (a re-run replaces only its own device's runs).
Results: ``<out>/dora_cpu.json`` and ``<out>/dora_cpu.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes

from longcat_plugins.runtime.assets import ensure_assets
from longcat_plugins.runtime.launch import configs_dir, run_training
from longcat_plugins.schedulers.workload import AGENT_NAME, write_skewed_dataset

SAMPLES_PER_STEP = 16  # data.train_batch_size 4 x rollout.n 4 in grpo_arithmetic


def runs(long_tokens: int) -> dict[str, tuple[str, list[str]]]:
    common = [
        f"data.max_response_length={long_tokens}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={configs_dir() / 'agent_loops' / 'skewed.yaml'}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
    ]
    dora = [*common, "trainer.v1.separate_async.num_warmup_batches=2", "longcat.settings.scheduler.dora.staleness=1"]
    return {
        "sync": ("cpu_demo", common),
        "dora_1": (
            "dora_cpu",
            [*dora, "actor_rollout_ref.rollout.n_gpus_per_node=1", "ray_kwargs.ray_init.num_gpus=2"],
        ),
        "dora_2": ("dora_cpu", dora),
    }


def summarise(name: str, steps: list[dict[str, Any]], process_s: float) -> dict[str, Any]:
    step_s = [s["timing_s/step"] for s in steps]
    trained = SAMPLES_PER_STEP * len(steps)
    tokens = [s["response_length/mean"] * SAMPLES_PER_STEP for s in steps]
    out: dict[str, Any] = {
        "run": name,
        "steps": len(steps),
        "trained_samples": trained,
        "loop_s": sum(step_s),
        "s_per_sample": sum(step_s) / trained,
        "s_per_sample_after_first": sum(step_s[1:]) / (SAMPLES_PER_STEP * (len(steps) - 1)) if len(steps) > 1 else None,
        "trained_response_tokens": sum(tokens),
        "ms_per_trained_token_after_first": 1000 * sum(step_s[1:]) / sum(tokens[1:]) if len(steps) > 1 else None,
        "process_s": process_s,
        "process_s_per_sample": process_s / trained,
        "step_s_median": statistics.median(step_s),
        "gen_wait_s_mean": statistics.mean(s.get("timing_s/gen", 0.0) for s in steps),
        "response_length_mean": statistics.mean(s["response_length/mean"] for s in steps),
        "reward_mean": statistics.mean(s["critic/score/mean"] for s in steps),
    }
    if "dora/staleness/mean" in steps[0]:
        out["staleness_mean"] = statistics.mean(s["dora/staleness/mean"] for s in steps)
        out["versions_in_batch_max"] = max(s["dora/versions_in_batch"] for s in steps)
        out["request_load_ratio_mean"] = statistics.mean(s["dora/request_load_ratio"] for s in steps)
    return out


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    names = [f"{r['run']} ({r['device']})" for r in results]
    left.bar(names, [r["s_per_sample_after_first"] or r["s_per_sample"] for r in results], color="#4c72b0")
    left.set_ylabel("wall s per trained sample")
    right.bar(names, [r["ms_per_trained_token_after_first"] or 0.0 for r in results], color="#dd8452")
    right.set_ylabel("wall ms per trained response token")
    fig.suptitle("verl sync vs DORA on this CPU, long-tailed responses (steps 2+)")
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--long-tokens", type=int, default=384)
    parser.add_argument("--short-tokens", type=int, default=8)
    parser.add_argument("--long-every", type=int, default=4)
    parser.add_argument("--only", nargs="*", help="run only these (sync, dora_1, dora_2)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="trainer.device of every run")
    args = parser.parse_args()
    origin = provenance(seeds=[])  # the bench sets no seed: the recipe's own
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: --device cuda: torch sees no CUDA device on this machine", file=sys.stderr)
            raise SystemExit(2)

    work = Path(tempfile.mkdtemp(prefix="bench_dora_"))
    assets = ensure_assets(size="tiny")
    skewed = write_skewed_dataset(
        assets.train,
        work / "skewed.parquet",
        long_every=args.long_every,
        short_tokens=args.short_tokens,
        long_tokens=args.long_tokens,
    )
    results = []
    for name, (config, extra) in runs(args.long_tokens).items():
        if args.only and name not in args.only:
            continue
        ray_tmp = tempfile.mkdtemp(prefix="lcray", dir="/tmp")
        start = time.perf_counter()
        result = run_training(
            configs_dir() / f"{config}.yaml",
            [
                f"data.train_files={skewed}",
                f"data.val_files={assets.val}",
                f"actor_rollout_ref.model.path={assets.model}",
                f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
                f"trainer.total_training_steps={args.steps}",
                f"trainer.device={args.device}",
                *extra,
            ],
            work / name,
        )
        elapsed = time.perf_counter() - start
        if result.returncode != 0 or len(result.steps) != args.steps:
            raise SystemExit(f"{name} failed (exit {result.returncode}); see {result.log}")
        results.append({"device": args.device} | summarise(name, result.steps, elapsed))
        print(json.dumps(results[-1]))

    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "dora_cpu.json"
    kept = earlier(target)  # the other device's records are kept below
    if target.exists():  # keep the other device's records
        results = [
            r for r in json.loads(target.read_text())["results"] if r.get("device", "cpu") != args.device
        ] + results
    report = {
        "workload": {
            "long_every": args.long_every,
            "short_tokens": args.short_tokens,
            "long_tokens": args.long_tokens,
            "samples_per_step": SAMPLES_PER_STEP,
            "steps": args.steps,
        },
        "cpu_count": os.cpu_count(),
        "results": results,
    }
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(stamp(report, origin, kept), indent=2))
    os.replace(tmp, target)
    plot(results, args.out / "dora_cpu.png")
    print(f"wrote {target} and {args.out / 'dora_cpu.png'}")


if __name__ == "__main__":
    main()
