"""Forward+backward time of our policy losses against the stock verl losses they build on.

    PYTHONPATH=. python bench/bench_losses.py [--batch 64] [--length 8192] [--reps 200] [--threads N] [--device cuda]

``triplet_clip`` is compared with ``vanilla`` and ``longcat_gspo`` with ``gspo``, each pair on the
same inputs and the same aggregation (seq-mean-token-sum-norm over G·T_max, resp.
seq-mean-token-mean over G), in two settings: without and with rollout-correction IS weights.
Calls are interleaved (every repetition runs every loss, in rotating order) so drift in machine
load hits all of them alike. Reported per setting: each loss's median (and quartiles), the ratio
of medians, and the median of per-repetition paired ratios (ours / stock measured back to back,
robust to load that drifts during the run). Writes ``bench/results/losses.json``; the goal is a
ratio <= 1.0. On a shared 2-core machine individual calls vary by ±15%: use many repetitions.
``--device cuda`` runs the same comparison on a GPU (each call timed between
``torch.cuda.synchronize()``s) and writes ``bench/results/losses_cuda.json`` unless ``--out`` says otherwise.

Next to the timings it records what one forward+backward call dispatches, per loss and setting
(``op_counts``), from ``torch.profiler``: ``dispatched_ops``, the aten operators the Python code
and the autograd engine call, views and no-op conversions left out and composite operators
counted by what they call (on a GPU each is a kernel launch: at 64 x 8192 tokens the launches,
not the bytes, set the time); ``host_reads``, the ``.item()`` and ``.tolist()`` calls (each a
device sync on a GPU). On ``--device cuda`` also ``cuda_kernels``, the kernels the profiler saw
(``cuda_launch_calls``: the ``cudaLaunchKernel`` calls it saw), and ``cuda_syncs``, the
synchronising calls ``torch.cuda.set_sync_debug_mode`` reports.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from provenance import provenance  # bench/provenance.py: the record every bench writes
from torch.profiler import ProfilerActivity, profile
from verl.trainer.ppo.core_algos import compute_policy_loss_gspo, compute_policy_loss_vanilla
from verl.workers.config.actor import ActorConfig, PolicyLossConfig

from longcat_plugins.algorithms.gspo import LongcatGSPOConfig, compute_longcat_gspo_loss
from longcat_plugins.algorithms.triplet_clip import TripletClipConfig, compute_triplet_clip_loss

GOAL = 1.0
#: seed of :func:`make_inputs`
SEED = 0
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


#: operators that only make views, allocate, or wrap a Python scalar: no kernel on any device
_NOT_KERNELS = frozenset(
    "aten::" + n
    for n in (
        "view as_strided unsqueeze squeeze expand expand_as reshape _reshape_alias _unsafe_view alias select slice "
        "narrow t permute transpose flatten detach detach_ lift_fresh resolve_conj resolve_neg empty empty_like "
        "empty_strided new_empty scalar_tensor result_type is_nonzero size stride numel dim to _to_copy copy_ fill_ "
        "zero_"
    ).split()
)


def _kernels(event: Any) -> int:
    """Kernel launches one profiled operator stands for: 1, or for a composite operator (one
    that calls other compute operators) the sum over those. Under a compute operator, allocation,
    CPU-only dtype promotion (``to``/``copy_``) and output initialisation (``fill_``) are not
    launches of their own; at the top, a dtype conversion or fill is one."""
    children = [c for c in event.cpu_children if c.name.startswith("aten::") and c.name not in _NOT_KERNELS]
    return sum(_kernels(c) for c in children) if children else 1


def _is_top(event: Any) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def count_ops(name: str, cfg: ActorConfig, d: dict[str, torch.Tensor], with_is: bool) -> dict[str, int]:
    """What one forward+backward call of ``name`` dispatches (see the module docstring)."""
    cuda = d["log_prob"].is_cuda
    time_once(name, cfg, d, with_is)  # warm: lazy imports and caches out of the count
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        time_once(name, cfg, d, with_is)
    ops = host_reads = 0
    for e in prof.events():
        if not e.name.startswith("aten::") or not _is_top(e):
            continue
        if e.name == "aten::item" or e.name == "aten::resolve_conj":  # .item(); .tolist() shows as resolve_conj
            host_reads += 1
        if e.name in ("aten::to", "aten::_to_copy", "aten::copy_", "aten::fill_", "aten::zero_"):
            real = e.name != "aten::to" or any(c.name == "aten::_to_copy" for c in e.cpu_children)
            ops += int(real)  # a top-level conversion or fill is a kernel; a no-op .to() is not
        elif e.name not in _NOT_KERNELS:
            ops += _kernels(e)
    out = {"dispatched_ops": ops, "host_reads": host_reads}
    if cuda:
        events = prof.events()
        out["cuda_kernels"] = sum(
            1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA and "Memcpy" not in e.name
        )
        out["cuda_launch_calls"] = sum(1 for e in events if "LaunchKernel" in e.name)  # the runtime API calls
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                time_once(name, cfg, d, with_is)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        # time_once's own two torch.cuda.synchronize() calls are not counted by the debug mode
        out["cuda_syncs"] = sum(1 for w in caught if "synchroniz" in str(w.message))
    return out


def run(batch: int, length: int, reps: int, warmup: int, device: str = "cpu") -> dict[str, Any]:
    d = make_inputs(batch, length, seed=SEED, device=device)
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
            "op_counts": {n: count_ops(n, cfgs[n], d, with_is) for n in names},
        }
        counts = results[setting]["op_counts"]
        results[setting]["op_ratios"] = {
            f"{ours}/{stock}": round(counts[ours]["dispatched_ops"] / counts[stock]["dispatched_ops"], 4)
            for ours, stock in PAIRS
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

    origin = provenance(seeds=[SEED])  # before the run: the code it imports, not what the tree holds later
    results = run(args.batch, args.length, args.reps, args.warmup, args.device)
    report = {
        "provenance": origin,
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
            for key in ("ratios", "paired_ratio_median", "op_ratios")
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
