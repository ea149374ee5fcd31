"""Fusion benchmark: our streaming engine against mergekit on the same checkpoints.

    .venv/bin/python bench/bench_fusion.py [--work /tmp/fusion-bench] [--mergekit /tmp/mk/bin/mergekit-yaml]

- inputs: a random Llama (bf16, ~330 MB, sharded in 4 files) and 3 experts = base + noise,
  built locally;
- disk: sequential read bandwidth of those files with O_DIRECT (page cache bypassed),
  16 MiB reads, median of 3 passes, cross-checked with ``dd iflag=direct``;
- every merge runs in a fresh process with its inputs evicted from the page cache first
  (``posix_fadvise(DONTNEED)`` on our own files: no root needed), so it really reads the disk;
  wall time and peak RSS (``wait4``'s ``ru_maxrss``) of that process; an interpreter that
  only imported the same modules is reported as each side's floor;
- agreement where the methods coincide: task arithmetic and TIES element by element (same
  arithmetic in float32, written as bf16); DARE statistically (different random streams:
  fraction of elements dropped in every expert, regression slope of the merged delta on
  the task-arithmetic delta, relative residual norm);
- throughput = bytes read / wall time of the merge itself, as a fraction of the disk figure.

mergekit (LGPL) runs from a separate virtual environment as its own CLI; nothing of it is
imported here. Results: bench/results/fusion.json. Machines are noisy: compare ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import mmap
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WEIGHTS = [0.5, 0.3, 0.2]


# -- inputs --------------------------------------------------------------------------------------


def build_inputs(work: Path, hidden: int, layers: int, vocab: int, n_experts: int) -> dict[str, Any]:
    """A random Llama base (bf16, sharded) and experts = base + 0.002·noise with the same layout."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    base = work / "base"
    if not (base / "config.json").exists():
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=int(hidden * 2.75),
            num_hidden_layers=layers,
            num_attention_heads=hidden // 64,
            num_key_value_heads=hidden // 64,
            tie_word_embeddings=False,
        )
        torch.manual_seed(0)
        LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(base, max_shard_size="100MB")
    index = json.loads((base / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    experts = []
    for i in range(n_experts):
        out = work / f"expert{i}"
        experts.append(out)
        if (out / "config.json").exists():
            continue
        out.mkdir(parents=True, exist_ok=True)
        gen = torch.Generator().manual_seed(100 + i)
        for file in files:
            with safe_open(str(base / file), "pt") as f:
                tensors = {
                    n: (f.get_tensor(n).float() + 0.002 * torch.randn(f.get_slice(n).get_shape(), generator=gen)).to(
                        torch.bfloat16
                    )
                    for n in f.keys()  # noqa: SIM118 - safe_open has keys(), not iteration
                }
            save_file(tensors, out / file, metadata={"format": "pt"})
        shutil.copy(base / "model.safetensors.index.json", out)
        shutil.copy(base / "config.json", out)
    size = sum(p.stat().st_size for p in base.glob("*.safetensors"))
    return {"base": base, "experts": experts, "bytes_per_checkpoint": size, "shards": len(files)}


def input_files(inputs: dict[str, Any]) -> list[Path]:
    return [p for d in [inputs["base"], *inputs["experts"]] for p in sorted(d.glob("*.safetensors"))]


def evict(files: list[Path]) -> None:
    """Drop our own files from the page cache (clean pages; no privileges needed)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# -- disk bandwidth -----------------------------------------------------------------------------


def direct_read_mib_s(files: list[Path], chunk: int = 16 << 20) -> float:
    """Sequential O_DIRECT reads (page-aligned buffer) of every file: MiB/s."""
    buf = mmap.mmap(-1, chunk)
    total = 0
    start = time.perf_counter()
    for path in files:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            offset = 0
            while True:
                n = os.preadv(fd, [buf], offset)
                offset += n
                if n < chunk:
                    break
            total += offset
        finally:
            os.close(fd)
    return total / (time.perf_counter() - start) / 2**20


def dd_mib_s(path: Path) -> float | None:
    proc = subprocess.run(
        ["dd", f"if={path}", "of=/dev/null", "bs=16M", "iflag=direct"], capture_output=True, text=True
    )
    for line in proc.stderr.splitlines():
        if "copied" in line:
            size = int(line.split()[0])
            seconds = float(line.split(",")[-2].split()[0])
            return size / seconds / 2**20
    return None


def disk_bandwidth(files: list[Path]) -> dict[str, Any]:
    passes = [direct_read_mib_s(files) for _ in range(3)]
    largest = max(files, key=lambda p: p.stat().st_size)
    return {
        "method": "O_DIRECT sequential reads of all input shards, 16 MiB page-aligned buffer; median of 3 passes",
        "mib_s": statistics.median(passes),
        "passes_mib_s": passes,
        "dd_iflag_direct_mib_s": dd_mib_s(largest),
        "bytes": sum(p.stat().st_size for p in files),
    }


# -- runs ---------------------------------------------------------------------------------------


def measure(command: list[str]) -> dict[str, Any]:
    """Run ``command`` under a tiny wrapper that ``wait4``s it: wall time, peak RSS (MiB) of that
    process alone, and its stdout."""
    wrapper = (
        "import json, os, subprocess, sys, time\n"
        "t = time.perf_counter(); p = subprocess.Popen(sys.argv[1:])\n"
        "_, status, ru = os.wait4(p.pid, 0)\n"
        "print(json.dumps({'rc': os.waitstatus_to_exitcode(status), 'wall_s': time.perf_counter() - t,"
        " 'peak_rss_mib': ru.ru_maxrss / 1024}), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", wrapper, *command], capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    stats = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {"rc": proc.returncode}
    if proc.returncode != 0 or stats["rc"] != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return {**stats, "stdout": proc.stdout}


OURS_RUNNER = """
import json, sys
from longcat_plugins.builtins import fusion
from longcat_plugins.host import Host
from longcat_plugins.fusion import fuse
spec = json.loads(sys.argv[1])
host = Host(); host.add_plugin(fusion, "longcat.fusion", builtin=True)
if spec.get("idle"):
    import torch, safetensors  # the floor: what the interpreter holds before any tensor
    print(json.dumps({}))
    raise SystemExit
report = fuse(spec["base"], [tuple(e) for e in spec["experts"]], spec["output"], method=spec["method"],
              params=spec["params"], seed=0, host=host, prefetch=spec.get("prefetch", False))
print(json.dumps({"seconds": report.seconds, "bytes_read": report.bytes_read,
                  "norm_pass_seconds": report.norm_pass_seconds,
                  "experts": [e.fractions for e in report.experts]}))
"""


def run_ours(inputs: dict[str, Any], out: Path, method: str, params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    evict(input_files(inputs))
    spec = {
        "base": str(inputs["base"]),
        "experts": [[str(p), w] for p, w in zip(inputs["experts"], WEIGHTS, strict=True)],
        "output": str(out),
        "method": method,
        "params": params,
        **extra,
    }
    result = measure([sys.executable, "-c", OURS_RUNNER, json.dumps(spec)])
    inner = json.loads(result.pop("stdout").strip().splitlines()[-1])
    return {**result, **inner}


def run_mergekit(
    mergekit: str, inputs: dict[str, Any], out: Path, method: str, density: float | None
) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    models = []
    for path, weight in zip(inputs["experts"], WEIGHTS, strict=True):
        parameters: dict[str, Any] = {"weight": weight}
        if density is not None:
            parameters["density"] = density
        models.append({"model": str(path), "parameters": parameters})
    config = {
        "merge_method": method,
        "base_model": str(inputs["base"]),
        "models": models,
        "dtype": "float32",  # compute in float32, like ours
        "out_dtype": "bfloat16",
    }
    cfg = out.parent / f"mergekit-{method}.yaml"
    cfg.write_text(json.dumps(config))  # JSON is YAML
    evict(input_files(inputs))
    result = measure([mergekit, str(cfg), str(out), "--no-copy-tokenizer", "--random-seed", "0", "--quiet"])
    result.pop("stdout")
    bytes_read = inputs["bytes_per_checkpoint"] * (len(inputs["experts"]) + 1)
    return {**result, "bytes_read": bytes_read}


# -- agreement ----------------------------------------------------------------------------------


def _tensors(path: Path) -> dict[str, Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        return {n: path / f for n, f in json.loads(index.read_text())["weight_map"].items()}
    return {n: f for f in path.glob("*.safetensors") for n in _keys(f)}


def _keys(file: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(file), "pt") as f:
        return list(f.keys())


def _get(file: Path, name: str) -> Any:
    from safetensors import safe_open

    with safe_open(str(file), "pt") as f:
        return f.get_tensor(name).float()


def elementwise_agreement(a: Path, b: Path) -> dict[str, Any]:
    """Bit-identical fraction and largest difference between two bf16 checkpoints, tensor by tensor."""
    ta, tb = _tensors(a), _tensors(b)
    assert ta.keys() == tb.keys(), sorted(set(ta) ^ set(tb))[:5]
    equal = total = 0
    max_abs = diff_sq = 0.0
    for name in ta:
        x, y = _get(ta[name], name), _get(tb[name], name)
        equal += int((x == y).sum())
        total += x.numel()
        diff = (x - y).abs()
        max_abs = max(max_abs, float(diff.max()))
        diff_sq += float((diff.double() ** 2).sum())
    return {
        "elements": total,
        "bit_identical_fraction": equal / total,
        "max_abs_diff": max_abs,
        "rms_diff": math.sqrt(diff_sq / total),
    }


def dare_statistics(base: Path, merged: Path, arithmetic: Path, p: float, n_experts: int) -> dict[str, Any]:
    """Statistics of a DARE merge m against task arithmetic t (same weights): the fraction of
    elements left at the base (≈ p^N), slope of (m−b) on (t−b) (1 = unbiased) and the relative
    residual ‖m−t‖/‖t−b‖."""
    tb, tm, tt = _tensors(base), _tensors(merged), _tensors(arithmetic)
    at_base = total = 0
    dot = tt_sq = res_sq = 0.0
    for name in tb:
        b, m, t = _get(tb[name], name), _get(tm[name], name), _get(tt[name], name)
        at_base += int((m == b).sum())
        total += b.numel()
        dm, dt = (m - b).double(), (t - b).double()
        dot += float((dm * dt).sum())
        tt_sq += float((dt * dt).sum())
        res_sq += float(((dm - dt) ** 2).sum())
    return {
        "fraction_left_at_base": at_base / total,
        "expected_fraction_all_dropped": p**n_experts,
        "slope_on_task_arithmetic": dot / tt_sq,
        "relative_residual": math.sqrt(res_sq / tt_sq),
    }


def ties_differences_at_tied_threshold(inputs: dict[str, Any], a: Path, b: Path, density: float) -> dict[str, int]:
    """Where two TIES outputs differ, is some expert's |δ| exactly at its top-k threshold? Then
    the two implementations only chose different members of a tie (bf16 deltas are quantised,
    so equal magnitudes are common) and neither is wrong."""
    import torch

    ta, tb, base = _tensors(a), _tensors(b), _tensors(inputs["base"])
    experts = [_tensors(p) for p in inputs["experts"]]
    differing = explained = 0
    for name in ta:
        x, y = _get(ta[name], name), _get(tb[name], name)
        where = (x != y).view(-1)
        if not bool(where.any()):
            continue
        differing += int(where.sum())
        b = _get(base[name], name).view(-1)
        at_threshold = torch.zeros_like(where)
        for tensors in experts:
            magnitude = (_get(tensors[name], name).view(-1) - b).abs()
            k = max(1, int(density * magnitude.numel()))
            threshold = torch.kthvalue(magnitude, magnitude.numel() - k + 1).values
            at_threshold |= magnitude == threshold
        explained += int((where & at_threshold).sum())
    return {"differing_elements": differing, "with_an_expert_at_its_threshold": explained}


def _keep_best(table: dict[str, Any], label: str, run: dict[str, Any], time_key: str) -> None:
    """Keep the fastest run's figures, and the highest peak RSS seen."""
    previous = table.get(label)
    if previous is None:
        table[label] = run
        return
    peak = max(previous["peak_rss_mib"], run["peak_rss_mib"])
    if run[time_key] < previous[time_key]:
        table[label] = run
    table[label]["peak_rss_mib"] = peak


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/longcat-fusion-bench"))
    parser.add_argument("--mergekit", default="/tmp/mk/bin/mergekit-yaml", help="mergekit-yaml of a separate venv")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "fusion.json")
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration (best time, worst RSS kept)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    inputs = build_inputs(args.work, args.hidden, args.layers, args.vocab, len(WEIGHTS))
    files = input_files(inputs)
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "inputs": {
            "model": f"random Llama, hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}, bf16",
            "bytes_per_checkpoint": inputs["bytes_per_checkpoint"],
            "shards": inputs["shards"],
            "experts": len(WEIGHTS),
            "weights": WEIGHTS,
            "build_s": time.perf_counter() - t0,
        },
    }
    print(f"inputs: {inputs['bytes_per_checkpoint'] / 2**20:.0f} MiB per checkpoint", flush=True)
    results["disk"] = disk = disk_bandwidth(files)
    print(f"disk: {disk['mib_s']:.0f} MiB/s (O_DIRECT), dd {disk['dd_iflag_direct_mib_s']}", flush=True)

    idle = measure([sys.executable, "-c", OURS_RUNNER, json.dumps({"idle": True})])
    results["floor_peak_rss_mib"] = idle["peak_rss_mib"]
    out = args.work / "out"
    out.mkdir(exist_ok=True)
    mk_path = shutil.which(args.mergekit) or (args.mergekit if Path(args.mergekit).exists() else None)
    # label: (our method, our params, engine options, mergekit method, mergekit density)
    pairs: dict[str, tuple[str, dict[str, Any], dict[str, Any], str | None, float | None]] = {
        "task_arithmetic": ("task_arithmetic", {}, {}, "task_arithmetic", None),
        "task_arithmetic_prefetch": ("task_arithmetic", {}, {"prefetch": True}, None, None),
        "ties": ("ties", {"density": 0.5}, {}, "ties", 0.5),
        "dare_linear": ("longcat", {"normalize": "none", "drop_rate": 0.5, "erase": False}, {}, "dare_linear", 0.5),
        "longcat_default": ("longcat", {}, {}, None, None),
    }
    ours: dict[str, Any] = {}
    mk: dict[str, Any] = {}
    for _ in range(args.repeat):  # interleaved, so a busy spell on a shared machine hits both sides
        for label, (method, params, extra, mk_method, density) in pairs.items():
            r = run_ours(inputs, out / f"ours-{label}", method, params, **extra)
            _keep_best(ours, label, {"method": method, "params": params, **extra, **r}, "seconds")
            if mk_path is not None and mk_method is not None:
                r = run_mergekit(mk_path, inputs, out / f"mergekit-{label}", mk_method, density)
                _keep_best(mk, label, {"method": mk_method, "density": density, **r}, "wall_s")
    for label, r in ours.items():
        r["throughput_mib_s"] = r["bytes_read"] / r["seconds"] / 2**20
        r["fraction_of_disk"] = r["throughput_mib_s"] / disk["mib_s"]
        print(
            f"ours {label}: {r['seconds']:.1f} s merge ({r['wall_s']:.1f} s process), peak RSS {r['peak_rss_mib']:.0f} "
            f"MiB, {r['throughput_mib_s']:.0f} MiB/s = {r['fraction_of_disk']:.2f} of disk",
            flush=True,
        )
    results["ours"] = ours
    if mk_path is None:
        results["mergekit"] = {"skipped": f"{args.mergekit} not found (install: python3 -m venv /tmp/mk && "
                               "/tmp/mk/bin/pip install -c constraints-cpu.txt mergekit)"}  # fmt: skip
    else:
        version = subprocess.run(
            [
                str(Path(mk_path).parent / "python"),
                "-c",
                "import importlib.metadata as m; print(m.version('mergekit'))",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
        mk_idle = measure([str(Path(mk_path).parent / "python"), "-c", "import mergekit.scripts.run_yaml"])
        for label, r in mk.items():
            r["throughput_mib_s"] = r["bytes_read"] / r["wall_s"] / 2**20
            r["fraction_of_disk"] = r["throughput_mib_s"] / disk["mib_s"]
            print(f"mergekit {label}: {r['wall_s']:.1f} s process, peak RSS {r['peak_rss_mib']:.0f} MiB", flush=True)
        results["mergekit"] = {"version": version, "floor_peak_rss_mib": mk_idle["peak_rss_mib"], **mk}
        results["agreement"] = {
            "task_arithmetic": elementwise_agreement(out / "ours-task_arithmetic", out / "mergekit-task_arithmetic"),
            "ties": {
                **elementwise_agreement(out / "ours-ties", out / "mergekit-ties"),
                "differences_at_a_tied_threshold": ties_differences_at_tied_threshold(
                    inputs, out / "ours-ties", out / "mergekit-ties", 0.5
                ),
            },
            "dare_linear": {
                "note": "different random streams: compared by statistics; mergekit rescales to match each "
                "task vector's L1 norm, ours by 1/(1-p) (the DARE paper's rescale)",
                "ours": dare_statistics(
                    inputs["base"], out / "ours-dare_linear", out / "ours-task_arithmetic", 0.5, len(WEIGHTS)
                ),
                "mergekit": dare_statistics(
                    inputs["base"], out / "mergekit-dare_linear", out / "mergekit-task_arithmetic", 0.5, len(WEIGHTS)
                ),
            },
        }
        print(json.dumps(results["agreement"], indent=2), flush=True)
    results["total_s"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
