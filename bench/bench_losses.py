"""Forward+backward time of our policy losses against the stock verl losses they build on.

    PYTHONPATH=. python bench/bench_losses.py [--batch 64] [--length 8192] [--reps 200] [--threads N] [--device cuda]

``triplet_clip`` is compared with ``vanilla`` and ``longcat_gspo`` with ``gspo``, each pair on the
same inputs and the same aggregation (seq-mean-token-sum-norm over G·T_max, resp.
seq-mean-token-mean over G), in two settings: without and with rollout-correction IS weights.
Calls are interleaved (every repetition runs every loss, in rotating order) so drift in machine
load hits all of them alike. Reported per setting: each loss's median (and quartiles), the ratio
of medians, and the median of per-repetition paired ratios (ours / stock measured back to back,
robust to load that drifts during the run). Writes ``bench/results/losses.json``; the goal is a
ratio <= 1.1. On a shared 2-core machine individual calls vary by ±15%: use many repetitions.
``--device cuda`` runs the same comparison on a GPU (each call timed between
``torch.cuda.synchronize()``s) and writes ``bench/results/losses_cuda.json`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from verl.trainer.ppo.core_algos import compute_policy_loss_gspo, compute_policy_loss_vanilla
from verl.workers.config.actor import ActorConfig, PolicyLossConfig

from longcat_plugins.algorithms.gspo import LongcatGSPOConfig, compute_longcat_gspo_loss
from longcat_plugins.algorithms.triplet_clip import TripletClipConfig, compute_triplet_clip_loss

GOAL = 1.1
RESULTS = Path(__file__).resolve().parent / "results" / "losses.json"


def make_inputs(batch: int, length: int, seed: int = 0, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Realistic shapes: ragged responses, sequence-constant advantages, small policy drift."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(batch, length, generator=g) * 4
    log_prob = old + torch.randn(batch, length, generator=g) * 0.2
    lengths = torch.randint(length // 4, length + 1, (batch,), generator=g)
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    adv = torch.randn(batch, 1, generator=g).expand(batch, length) * mask
    weights = torch.exp(torch.randn(batch, length, generator=g) * 0.3).clamp(max=2.0) * mask
    d = {"old": old, "log_prob": log_prob, "adv": adv, "mask": mask, "weights": weights}
    return {k: v.to(device) for k, v in d.items()}


def configs(batch: int, length: int) -> dict[str, ActorConfig]:
    def actor(policy_loss: PolicyLossConfig, **kw: Any) -> ActorConfig:
        info = {"global_batch_size": batch, "dp_size": 1, "loss_scale_factor": kw.get("loss_scale_factor")}
        return ActorConfig(
            strategy="fsdp",
            rollout_n=1,
            ppo_micro_batch_size_per_gpu=1,
            policy_loss=policy_loss,
            global_batch_info=info,
            **kw,
        )

    return {
        "triplet_clip": actor(
            TripletClipConfig(eps_neg_low=0.2, eps_pos_high=0.28, eps_neg_high=3.0), loss_scale_factor=length
        ),
        "vanilla": actor(
            PolicyLossConfig(),
            clip_ratio_low=0.2,
            clip_ratio_high=0.28,
            clip_ratio_c=3.0,
            loss_agg_mode="seq-mean-token-sum-norm",
            loss_scale_factor=length,
        ),
        "longcat_gspo": actor(LongcatGSPOConfig(), clip_ratio_low=3e-4, clip_ratio_high=4e-4),
        "gspo": actor(PolicyLossConfig(loss_mode="gspo"), clip_ratio_low=3e-4, clip_ratio_high=4e-4),
    }


LOSSES: dict[str, tuple[Callable[..., Any], str]] = {
    "triplet_clip": (compute_triplet_clip_loss, "seq-mean-token-sum-norm"),
    "vanilla": (compute_policy_loss_vanilla, "seq-mean-token-sum-norm"),
    "longcat_gspo": (compute_longcat_gspo_loss, "seq-mean-token-mean"),
    "gspo": (compute_policy_loss_gspo, "seq-mean-token-mean"),
}
PAIRS = [("triplet_clip", "vanilla"), ("longcat_gspo", "gspo")]


def time_once(name: str, cfg: ActorConfig, d: dict[str, torch.Tensor], with_is: bool) -> float:
    fn, agg = LOSSES[name]
    lp = d["log_prob"].detach().requires_grad_(True)
    cuda = lp.is_cuda
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    loss, _ = fn(d["old"], lp, d["adv"], d["mask"], agg, cfg, d["weights"] if with_is else None)
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def run(batch: int, length: int, reps: int, warmup: int, device: str = "cpu") -> dict[str, Any]:
    d = make_inputs(batch, length, device=device)
    cfgs = configs(batch, length)
    names = list(LOSSES)
    results: dict[str, Any] = {}
    for with_is in (False, True):
        samples: dict[str, list[float]] = {n: [] for n in names}
        for rep in range(warmup + reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                t = time_once(name, cfgs[name], d, with_is)
                if rep >= warmup:
                    samples[name].append(t)
        medians = {n: statistics.median(v) * 1e3 for n, v in samples.items()}
        setting = "with_is_weights" if with_is else "no_is_weights"
        results[setting] = {
            "median_ms": {n: round(m, 3) for n, m in medians.items()},
            "quartiles_ms": {
                n: [round(q * 1e3, 3) for q in statistics.quantiles(v, n=4)[::2]] for n, v in samples.items()
            },
            "ratios": {f"{ours}/{stock}": round(medians[ours] / medians[stock], 4) for ours, stock in PAIRS},
            "paired_ratio_median": {
                f"{ours}/{stock}": round(
                    statistics.median(a / b for a, b in zip(samples[ours], samples[stock], strict=True)), 4
                )
                for ours, stock in PAIRS
            },
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--out", type=Path, default=None, help="default: bench/results/losses.json (cpu), losses_cuda.json"
    )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device on this machine")
    out = args.out or (RESULTS if args.device == "cpu" else RESULTS.with_name("losses_cuda.json"))
    if args.threads:
        torch.set_num_threads(args.threads)

    results = run(args.batch, args.length, args.reps, args.warmup, args.device)
    report = {
        "what": "forward+backward of one policy-loss call, median over interleaved repetitions",
        "shape": [args.batch, args.length],
        "dtype": "float32",
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "reps": args.reps,
        "goal_ratio": GOAL,
        "results": results,
        "within_goal": {
            key: all(r <= GOAL for s in results.values() for r in s[key].values())
            for key in ("ratios", "paired_ratio_median")
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
