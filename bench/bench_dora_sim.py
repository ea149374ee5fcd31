"""DORA in the discrete-event simulator against synchronous, one-step-off and partial rollout,
under the cost model of ``longcat_plugins.schedulers.sim`` (context-dependent decode, a KV budget
per device with admission control and preemption/recompute, prefill, memory for every held
weight version, the report's hold-back of new requests on the old version).

    .venv/bin/python bench/bench_dora_sim.py [--quick] [--steps 10] [--out bench/results]

Every DORA run drives the real ``DoraController`` (``longcat_plugins.schedulers.core``).

Experiments
- ``modes``: the report-like setting (64 devices, 16 of them trainers / the elastic group,
  64 groups × 8 samples per step, math / code / agent long tail, cap 8 then 4, KV for 4 × 64K
  tokens, DORA holding new groups back while the old version trains): sync, one_step_off,
  partial, dora and dora_elastic at staleness 1 and 2.
- ``admission``: length censoring: DORA at staleness 1 and 2 with no hold-back and each
  admission policy (``none``, ``version_window``, ``length_aware``; window = staleness), with the modes'
  hold-back (``hold_back_0``) and with replay of stale finished groups, beside sync and partial
  rollout: trained tokens/s and mean trained response length over sync's.
- ``calibration``: the request load ratio of dora_elastic (staleness 1) against the hold-back
  limit (batches of new groups allowed on the old version while it trains; none: no rule).
- ``sensitivity``: KV budget (1 / 2 / 4 / 8 × 64K tokens) for every baseline and DORA; memory per
  extra weight version (0 / 64K / 128K / 192K KV tokens) for the DORA modes (the single-version
  baselines hold one version, so it cannot change them); staleness 1 / 2 / 4 for partial and
  DORA.

Throughput counts trained samples (and their prompt + response tokens) per simulated second
after ``--warmup`` steps; device utilisation is the time-averaged fraction of devices decoding,
prefilling or training; request load ratio follows the report's footnote (capacity 4 requests
per device). Results: ``<out>/dora_sim.json`` and ``<out>/dora_sim.png`` (``--only-admission``: only
the ``admission`` experiment, into ``<out>/dora_sim_admission.json``) (``--docs-img`` copies
the figure to ``docs/img/dora-sim.png``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import provenance, stamp  # bench/provenance.py: the record every bench writes

from longcat_plugins.schedulers.core import DoraConfig
from longcat_plugins.schedulers.sim import ClusterSpec, SimResult, long_tail_workload, simulate

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

RATIOS = {"math": 0.4, "code": 0.3, "agent": 0.3}
#: the report's rule, read strictly: no new group starts on a version while the trainer updates it
HOLD_BACK = 0.0
#: the issue's contract: result key -> (simulator mode, staleness)
#: admission policies compared against length censoring (``admission`` section)
ADMISSIONS = ("none", "version_window", "length_aware")
#: replay of stale finished groups (D2) in the ``admission`` section
REPLAY = 0.25
MODES = {
    "sync": ("sync", 0),
    "one_step_off": ("one_step_off", 1),
    "partial": ("partial", 1),
    "dora_s1": ("dora", 1),
    "dora_s2": ("dora", 2),
    "dora_elastic_s1": ("dora_elastic", 1),
    "dora_elastic_s2": ("dora_elastic", 2),
}


def dora_config(
    staleness: int,
    batch_size: int,
    group_size: int,
    filtering: bool = True,
    hold_back: float | None = HOLD_BACK,
    admission: str = "none",
    reuse_ratio: float = 0.0,
) -> DoraConfig:
    return DoraConfig(
        admission=admission,
        admission_window=max(1, staleness),  # the strict rule: a new group starts only with its whole window ahead
        reuse_ratio=reuse_ratio,
        staleness=staleness,
        batch_size=batch_size,
        group_size=group_size,
        domain_ratios=RATIOS,
        domain_tolerance=0.1,
        domain_oversampling={"agent": 2.0},
        filter_all_correct=filtering,
        filter_all_wrong=filtering,
        old_version_start_limit=hold_back,
    )


def record(result: SimResult, wall_s: float) -> dict[str, Any]:
    """The contract's four figures, then what explains them."""
    total = sum(result.staleness.values())
    return {
        "samples_per_s": result.throughput,
        "tokens_per_s": result.throughput * result.trained_tokens_mean,
        "request_load_ratio": result.request_load_ratio,
        "device_util": result.device_utilisation,
        "staleness_mean": sum(k * v for k, v in result.staleness.items()) / total if total else 0.0,
        "mixed_version_samples": result.mixed_version_samples,
        "wasted_token_fraction": result.wasted_token_fraction,
        "recomputed_token_fraction": result.recomputed_token_fraction,
        "preemptions_per_sample": result.preemptions_per_sample,
        "versions_held_mean": result.versions_held_mean,
        "trained_tokens_mean": result.trained_tokens_mean,
        "trained_response_tokens_mean": result.trained_response_tokens_mean,
        "trained_response_tokens_p90": result.trained_response_tokens_p90,
        "aborted_request_share": (
            result.controller.get("dora/aborted_requests", 0.0) / result.controller["dora/issued_requests"]
            if result.controller.get("dora/issued_requests")
            else 0.0
        ),
        "trained_tokens_p99": result.trained_tokens_p99,
        "step_seconds_median": sorted(result.step_seconds)[len(result.step_seconds) // 2],
        "trained_samples": result.trained_samples,
        "window_s": result.window_s,
        "sim_wall_s": wall_s,
    }


def run(mode: str, staleness: int, cluster: ClusterSpec, batch: tuple[int, int], steps: int, warmup: int,
        seed: int = 0, hold_back: float | None = HOLD_BACK, admission: str = "none",
        reuse_ratio: float = 0.0) -> dict[str, Any]:  # fmt: skip
    workload = long_tail_workload(seed=seed, prompts=4096)
    config = dora_config(staleness, *batch, hold_back=hold_back, admission=admission, reuse_ratio=reuse_ratio)
    started = time.perf_counter()
    result = simulate(mode, workload, cluster, config, steps=steps, warmup_steps=warmup, seed=seed)
    out = record(result, time.perf_counter() - started)
    print(
        f"{mode:13s} s={staleness} hold_back={hold_back} admission={admission} reuse={reuse_ratio} kv={cluster.kv_capacity_tokens} ver={cluster.version_kv_tokens}: "
        f"{out['samples_per_s']:.3f} samples/s load {out['request_load_ratio']:.2f} util {out['device_util']:.2f} "
        f"({out['sim_wall_s']:.1f} s)",
        flush=True,
    )
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = report["modes"]
    sync = modes["sync"]
    names = list(modes)
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    ax = axes[0]
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [modes[n]["samples_per_s"] / sync["samples_per_s"] for n in names], 0.4,
           label="trained samples/s")  # fmt: skip
    ax.bar([x + 0.2 for x in xs], [modes[n]["tokens_per_s"] / sync["tokens_per_s"] for n in names], 0.4,
           label="trained tokens/s")  # fmt: skip
    ax.axhline(3.0, color="grey", ls=":", lw=1, label="goal 3×")
    ax.set_xticks(list(xs), names, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("speed-up over sync")
    ax.legend(fontsize=7)
    ax.set_title("honest cost model, report-like setting", fontsize=10)
    ax = axes[1]
    ax.bar([x - 0.2 for x in xs], [modes[n]["device_util"] for n in names], 0.4, label="device utilisation")
    ax.bar([x + 0.2 for x in xs], [modes[n]["request_load_ratio"] for n in names], 0.4, label="request load ratio")
    ax.axhline(0.63, color="grey", ls=":", lw=1, label="report: load ratio 63%")
    ax.set_xticks(list(xs), names, rotation=25, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    ax.set_title("utilisation and request load ratio", fontsize=10)
    ax = axes[2]
    kv = [p for p in report["sensitivity"] if p["parameter"] == "kv_capacity_tokens"]
    for mode in sorted({p["mode"] for p in kv}):
        pts = sorted((p["value"] / 65536, p["speedup_vs_sync"]) for p in kv if p["mode"] == mode)
        ax.plot([a for a, _ in pts], [b for _, b in pts], "o-", label=mode)
    ax.set_xlabel("KV budget per device (× 64K tokens)")
    ax.set_ylabel("samples/s over sync at the same budget")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("sensitivity to the KV budget", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smaller cluster and batch, fewer steps (smoke run)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--docs-img", action="store_true", help="also copy the PNG to docs/img/dora-sim.png")
    parser.add_argument(
        "--only-admission",
        action="store_true",
        help="run only what the admission section needs (sync, partial, dora at staleness 1 and 2 and the admission "
        "runs) and write it to dora_sim_admission.json, leaving dora_sim.json as it is",
    )
    args = parser.parse_args()
    origin = provenance(seeds=[0])  # long_tail_workload(seed=0) and the simulator's seed

    if args.quick:
        cluster, batch, steps = ClusterSpec(devices=16, train_devices=4), (16, 8), 4
    else:
        cluster, batch, steps = ClusterSpec(devices=64, train_devices=16), (64, 8), args.steps
    warmup = min(args.warmup, steps - 1)
    go = dict(batch=batch, steps=steps, warmup=warmup)

    keys = ("sync", "partial", "dora_s1", "dora_s2") if args.only_admission else tuple(MODES)
    modes = {key: run(mode, s, cluster, **go) for key, (mode, s) in MODES.items() if key in keys}

    # length censoring: admission policies (no other hold-back) and replay against partial rollout
    admission: dict[str, dict[str, Any]] = {"sync": modes["sync"], "partial": modes["partial"]}
    for s in (1, 2):
        for name in ADMISSIONS:
            admission[f"dora_s{s}_{name}"] = run("dora", s, cluster, hold_back=None, admission=name, **go)
        admission[f"dora_s{s}_hold_back_0"] = modes[f"dora_s{s}"]  # old_version_start_limit 0, the default above
        admission[f"dora_s{s}_replay"] = run("dora", s, cluster, hold_back=None, reuse_ratio=REPLAY, **go)
    sync_len = modes["sync"]["trained_response_tokens_mean"]
    admission_summary = {
        key: {
            "token_speedup_vs_sync": res["tokens_per_s"] / modes["sync"]["tokens_per_s"],
            "sample_speedup_vs_sync": res["samples_per_s"] / modes["sync"]["samples_per_s"],
            "trained_len_vs_sync": res["trained_response_tokens_mean"] / sync_len if sync_len else None,
            "trained_response_tokens_mean": res["trained_response_tokens_mean"],
            "trained_response_tokens_p90": res["trained_response_tokens_p90"],
            "aborted_request_share": res["aborted_request_share"],
        }
        for key, res in admission.items()
    }
    for key, row in admission_summary.items():
        print(
            f"{key:28s} tokens/s x{row['token_speedup_vs_sync']:.2f}  samples/s x{row['sample_speedup_vs_sync']:.2f}  "
            f"trained length x{row['trained_len_vs_sync']:.3f}  aborted {row['aborted_request_share']:.3f}",
            flush=True,
        )

    section = {
        "note": "dora runs without old_version_start_limit, admission_window = staleness; replay: reuse_ratio "
        f"{REPLAY}; hold_back_0 is the modes' dora (old_version_start_limit 0); trained length: response tokens",
        "runs": admission,
        "summary_vs_sync": admission_summary,
    }
    if args.only_admission:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        target = out / "dora_sim_admission.json"
        command = f"bench/bench_dora_sim.py --only-admission{' --quick' if args.quick else ''} --steps {steps}"
        report = {"provenance": provenance(seeds=[0]), "command": command, "steps": steps, "admission": section}
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=2))
        os.replace(tmp, target)
        print(f"wrote {target}")
        return

    calibration = []
    for hold_back in (None, 1.0, 0.5, HOLD_BACK):
        res = (
            modes["dora_elastic_s1"]
            if hold_back == HOLD_BACK
            else run("dora_elastic", 1, cluster, hold_back=hold_back, **go)
        )
        calibration.append({"old_version_start_limit": hold_back} | res)

    sensitivity: list[dict[str, Any]] = []

    def point(parameter: str, value: float, key: str, res: dict[str, Any], sync: dict[str, Any]) -> None:
        sensitivity.append({
            "parameter": parameter, "value": value, "mode": key,
            "speedup_vs_sync": res["samples_per_s"] / sync["samples_per_s"],
            "token_speedup_vs_sync": res["tokens_per_s"] / sync["tokens_per_s"],
        } | res)  # fmt: skip

    base_kv = cluster.kv_capacity_tokens
    for factor in (1, 2, 4, 8):
        kv = factor * 65536
        cl = dataclasses.replace(cluster, kv_capacity_tokens=kv)
        results = {}
        for key in ("sync", "one_step_off", "partial", "dora_elastic_s1"):
            mode, s = MODES[key]
            results[key] = modes[key] if kv == base_kv else run(mode, s, cl, **go)
        for key, res in results.items():
            point("kv_capacity_tokens", kv, key, res, results["sync"])
    for version_kv in (0, 65536, 131072, 196608):
        cl = dataclasses.replace(cluster, version_kv_tokens=version_kv)
        for key in ("dora_s1", "dora_elastic_s1"):
            mode, s = MODES[key]
            res = modes[key] if version_kv == cluster.version_kv_tokens else run(mode, s, cl, **go)
            point("version_kv_tokens", version_kv, key, res, modes["sync"])
    for s in (1, 2, 4):
        for mode in ("partial", "dora_elastic"):
            key = f"{mode}_s{s}" if mode != "partial" else "partial"
            res = modes[key] if key in modes and MODES[key][1] == s else run(mode, s, cluster, **go)
            point("staleness", s, f"{mode}_s{s}", res, modes["sync"])

    report = {
        "provenance": provenance(seeds=[0]),
        "command": "bench/bench_dora_sim.py" + (" --quick" if args.quick else "") + f" --steps {steps}",
        "cost_model": {
            "cluster": dataclasses.asdict(cluster),
            "workload": "long_tail_workload(seed=0, prompts=4096): math 0.4 / code 0.3 / agent 0.3",
            "batch": {"groups": batch[0], "group_size": batch[1]},
            "steps": steps,
            "warmup_steps": warmup,
            "caps": {"before_rebalance": 8, "after_rebalance": 4, "load_ratio_capacity": 4},
            "old_version_start_limit": HOLD_BACK,
            "calibrated": ["old_version_start_limit"],
        },
        "modes": modes,
        "admission": section,
        "calibration": calibration,
        "sensitivity": sensitivity,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        json_tmp, png_tmp = Path(tmp) / "dora_sim.json", Path(tmp) / "dora_sim.png"
        json_tmp.write_text(json.dumps(stamp(report, origin), indent=2))
        plot(report, png_tmp)
        os.replace(json_tmp, out / "dora_sim.json")
        os.replace(png_tmp, out / "dora_sim.png")
    if args.docs_img:
        shutil.copyfile(out / "dora_sim.png", REPO / "docs" / "img" / "dora-sim.png")
    print(f"wrote {out / 'dora_sim.json'} and {out / 'dora_sim.png'}")


if __name__ == "__main__":
    main()
