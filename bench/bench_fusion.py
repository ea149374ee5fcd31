"""Fusion benchmark: our streaming engine against mergekit on the same checkpoints (issue 18's recipe).

    .venv/bin/python bench/bench_fusion.py [--methods task_arithmetic,ties] [--repeat 2] [--append]
        [--mergekit /work/mk-venv/bin/mergekit-yaml] [--work /work/cache-cli/fusion-bench]

- inputs, built here once and kept in ``--work``: ``LlamaConfig(vocab_size=32000, hidden_size=1024,
  intermediate_size=2816, num_hidden_layers=16, num_attention_heads=16)``, ``torch.manual_seed(0)``,
  bf16, ``save_pretrained(max_shard_size="200MB")`` (271M parameters, 542 MB); experts =
  base + 0.01·N(0,1) drawn with seeds 1, 2, 3, same shards: 2.17 GB read per merge;
- read floor: sequential O_DIRECT reads of every input shard (page cache bypassed), 16 MiB
  page-aligned buffer, best of 3 passes;
- every merge runs in a fresh process with its inputs evicted from the page cache first
  (``posix_fadvise(DONTNEED)``; ``fincore`` confirms no page is resident), ours and mergekit
  alternately per method and repetition; wall time and peak RSS (``wait4``'s ``ru_maxrss``) of
  that process; mergekit with ``dtype: float32`` (ours computes in float32) and with its default;
- fraction of the read floor = read_floor_s / wall_s;
- agreement with mergekit's float32 output: element-wise where the methods are deterministic
  (bit-identical fraction, largest and RMS difference); DARE statistically (different random
  streams: slope of the merged delta on task arithmetic's, relative residual).

mergekit (LGPL) runs from a separate virtual environment as its own CLI; nothing of it is
imported here, and it is no dependency of the package or its tests:
``python3 -m venv /work/mk-venv && /work/mk-venv/bin/pip install -c constraints-cpu.txt mergekit``.
Results: bench/results/fusion.json (+ fusion.png). Machines are noisy: compare ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import mmap
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes

REPO = Path(__file__).resolve().parents[1]

WEIGHTS = [0.5, 0.3, 0.2]


# -- inputs --------------------------------------------------------------------------------------


def build_inputs(work: Path, layers: int = 16) -> dict[str, Any]:
    """The recipe's base (random Llama, bf16, 200 MB shards) and experts = base + 0.01·N(0,1), seeds 1-3."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    base = work / "base"
    if not (base / "config.json").exists():
        config = LlamaConfig(
            vocab_size=32000,
            hidden_size=1024,
            intermediate_size=2816,
            num_hidden_layers=layers,
            num_attention_heads=16,
        )
        torch.manual_seed(0)
        LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(base, max_shard_size="200MB")
    files = sorted(set(json.loads((base / "model.safetensors.index.json").read_text())["weight_map"].values()))
    experts = []
    for seed in (1, 2, 3):
        out = work / f"expert{seed}"
        experts.append(out)
        if (out / "config.json").exists():
            continue
        out.mkdir(parents=True, exist_ok=True)
        gen = torch.Generator().manual_seed(seed)
        for file in files:
            with safe_open(str(base / file), "pt") as f:
                metadata = f.metadata()
                tensors = {}
                for name in f.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                    t = f.get_tensor(name)
                    tensors[name] = (t.float() + 0.01 * torch.randn(t.shape, generator=gen)).to(t.dtype)
            save_file(tensors, out / file, metadata=metadata)
        shutil.copy(base / "model.safetensors.index.json", out)
        shutil.copy(base / "config.json", out)
    size = sum(p.stat().st_size for p in base.glob("*.safetensors"))
    return {"base": base, "experts": experts, "bytes_per_checkpoint": size, "shards": len(files)}


def input_files(inputs: dict[str, Any]) -> list[Path]:
    return [p for d in [inputs["base"], *inputs["experts"]] for p in sorted(d.glob("*.safetensors"))]


def evict(files: list[Path]) -> int | None:
    """Drop our own files from the page cache (clean pages; no privileges needed); returns the
    bytes still resident according to ``fincore`` (None where fincore is missing)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if shutil.which("fincore") is None:
        return None
    proc = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, files)], capture_output=True, text=True
    )
    return sum(int(x) for x in proc.stdout.split()) if proc.returncode == 0 else None


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


#: the working directory of every child process: ``python -c`` puts its cwd first on sys.path,
#: ahead of PYTHONPATH, so a run started from a checkout would import that checkout's package
#: whatever ``--reference-src`` says (the earlier "before" profiles and reference runs did)
NEUTRAL_CWD = Path(os.sep)


def measure(command: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``command`` under a tiny wrapper that ``wait4``s it: wall time, CPU time (user + system:
    on a machine shared with other jobs the wall depends on their load, the CPU time much less),
    peak RSS (MiB) of that process alone, and its stdout."""
    wrapper = (
        "import json, os, subprocess, sys, time\n"
        "t = time.perf_counter(); p = subprocess.Popen(sys.argv[1:])\n"
        "_, status, ru = os.wait4(p.pid, 0)\n"
        "print(json.dumps({'rc': os.waitstatus_to_exitcode(status), 'wall_s': time.perf_counter() - t,"
        " 'cpu_s': ru.ru_utime + ru.ru_stime, 'peak_rss_mib': ru.ru_maxrss / 1024}), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, *command], capture_output=True, text=True, env=env, cwd=NEUTRAL_CWD
    )
    lines = proc.stderr.strip().splitlines()
    stats = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {"rc": proc.returncode}
    if proc.returncode != 0 or stats["rc"] != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return {**stats, "stdout": proc.stdout}


OURS_RUNNER = """
import json, sys
from longcat_plugins.fusion import fuse
spec = json.loads(sys.argv[1])
if spec.get("idle"):
    import torch, longcat_plugins.fusion.engine  # the floor: what the interpreter holds before any tensor
    print(json.dumps({}))
    raise SystemExit
report = fuse(spec["base"], [tuple(e) for e in spec["experts"]], spec["output"], method=spec["method"],
              params=spec["params"], seed=0)
import longcat_plugins
print(json.dumps({"package": longcat_plugins.__file__, "merge_s": report.seconds, "norm_pass_s": report.norm_pass_seconds,
                  "bytes_read": report.bytes_read}))
"""

PROFILE_RUNNER = """
import cProfile, json, pstats, sys, time
t0 = time.perf_counter()
spec = json.loads(sys.argv[1])
import torch
from longcat_plugins.fusion import fuse
from longcat_plugins.fusion.engine import resolve_method
resolve_method(spec["method"], spec["params"])  # the host's plugin discovery, once per process
if spec["profile"]:  # one op thread, as each of the engine's two workers runs: the per-function times are its work
    torch.set_num_threads(1)
ready = time.perf_counter() - t0
profiler = cProfile.Profile()
if spec["profile"]:
    profiler.enable()
t1 = time.perf_counter()
report = fuse(spec["base"], [tuple(e) for e in spec["experts"]], spec["output"], method=spec["method"],
              params=spec["params"], seed=0, workers=spec["workers"])
engine = time.perf_counter() - t1
profiler.disable()
rows = []
if spec["profile"]:
    for (path, line, func), (cc, nc, tt, ct, _) in pstats.Stats(profiler).stats.items():
        rows.append({"function": f"{path.rsplit('/', 1)[-1]}:{line}({func})", "calls": nc, "tottime_s": tt,
                     "cumtime_s": ct})
print(json.dumps({"imports_and_host_s": ready, "engine_s": engine, "norm_pass_s": report.norm_pass_seconds,
                  "functions": rows}))
"""

#: steps of the merge, each the inclusive (cumulative) time of the profiled functions matching a pattern
PROFILE_STEPS = {
    "pass 1: global norms (read, convert, subtract, norm)": r"^engine\.py:\d+\(_tensor_sq_norms\)$",
    "merge: read + convert to float32": r"^engine\.py:\d+\(read_float\)$",
    "merge: the method (all of it)": r"^methods\.py:\d+\((longcat|task_arithmetic|ties|dare_linear|dare_ties|breadcrumbs|sce)\)$",
    "method: top-k trim (ties)": r"^methods\.py:\d+\(_trim\)$",
    "method: rank band (breadcrumbs, sce)": r"^methods\.py:\d+\(_rank_band\)$",
    "method: radix select": r"^methods\.py:\d+\(_select\)$",
    "method: seeded permutations (torch.randperm)": r"^~:0\(<built-in method (torch\.)?randperm[ >]",
    "method: variance across experts (sce)": r"^methods\.py:\d+\(_population_var\)$",
    "method: disjoint merge": r"^methods\.py:\d+\(_disjoint_merge\)$",
    "method: seeded keep-mask draws (torch.rand)": r"^~:0\(<built-in method (torch\.)?rand[ >]",
    "method: sign erase": r"^methods\.py:\d+\(_erase_minority\)$",
    "merge: convert to bf16 (Tensor.to)": r"^~:0\(<method 'to' of 'torch\._C\.TensorBase' objects>\)$",
    "merge: write (pwrite)": r"^writer\.py:\d+\(write_range\)$",
    "reads: os.preadv (both passes)": r"^~:0\(<built-in method posix\.preadv>\)$",
}


def _python_wall(code: str, repeat: int) -> float:
    """Median wall of ``python -c code`` over ``repeat`` fresh interpreters (warm page cache)."""
    walls = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd=NEUTRAL_CWD)
        walls.append(time.perf_counter() - t)
    return statistics.median(walls)


def profile(inputs: dict[str, Any], out: Path, labels: list[str], repeat: int = 5) -> dict[str, Any]:
    """Where the time of ``labels`` goes: interpreter start and imports (fresh interpreters,
    medians), the engine's wall with its default two workers (cold cache), and a cProfile of
    the engine with one worker and one op thread, as each of the two workers runs (cold cache;
    every op on the calling thread, so the per-function times add up to the engine's serial CPU
    + I/O wait; with the default two op threads a busy machine's OpenMP waits would dominate)."""
    result: dict[str, Any] = {
        "startup": {
            "python_pass_s": _python_wall("pass", repeat),
            "import_torch_s": _python_wall("import torch", repeat),
            "import_fusion_engine_s": _python_wall(
                "import torch, longcat_plugins.fusion.engine, longcat_plugins.fusion.methods", repeat
            ),
            "repeat": repeat,
        },
        "methods": {},
    }
    for label in labels:
        method, params, _, _, weights = CASES[label]
        spec = {
            "base": str(inputs["base"]),
            "experts": [[str(p), w] for p, w in zip(inputs["experts"], weights, strict=True)],
            "output": str(out / f"profile-{label}"),
            "method": method,
            "params": params,
        }
        entry: dict[str, Any] = {}
        for workers, profiled in ((2, False), (1, True)):
            shutil.rmtree(spec["output"], ignore_errors=True)
            evict(input_files(inputs))
            run = measure(
                [sys.executable, "-c", PROFILE_RUNNER, json.dumps({**spec, "workers": workers, "profile": profiled})]
            )
            inner = json.loads(run.pop("stdout").strip().splitlines()[-1])
            rows = sorted(inner.pop("functions"), key=lambda r: -r["tottime_s"])
            record = {"wall_s": run["wall_s"], "cpu_s": run.get("cpu_s"), "max_rss_mb": run["peak_rss_mib"], **inner}
            if profiled:
                record["top_tottime"] = rows[:25]
                record["steps_cumtime_s"] = {
                    step: sum(r["cumtime_s"] for r in rows if re.search(pattern, r["function"]))
                    for step, pattern in PROFILE_STEPS.items()
                }
            entry[f"workers_{workers}" + ("_cprofile" if profiled else "")] = record
            print(
                f"profile {label} workers={workers}: wall {run['wall_s']:.2f} s, engine {inner['engine_s']:.2f} s",
                flush=True,
            )
        result["methods"][label] = entry
        shutil.rmtree(spec["output"], ignore_errors=True)
    return result


#: label -> (our method, our params, mergekit method, mergekit parameters per model, weights)
CASES: dict[str, tuple[str, dict[str, Any], str | None, dict[str, Any], list[float]]] = {
    "task_arithmetic": ("task_arithmetic", {}, "task_arithmetic", {}, WEIGHTS),
    "ties": ("ties", {"density": 0.5}, "ties", {"density": 0.5}, WEIGHTS),
    "dare_linear": ("dare_linear", {"density": 0.5}, "dare_linear", {"density": 0.5}, WEIGHTS),
    "dare_ties": ("dare_ties", {"density": 0.5}, "dare_ties", {"density": 0.5}, WEIGHTS),
    "breadcrumbs": (
        "breadcrumbs",
        {"density": 0.9, "gamma": 0.01},
        "breadcrumbs",
        {"density": 0.9, "gamma": 0.01},
        WEIGHTS,
    ),
    # mergekit's sce takes no per-model weight: unit weights on both sides
    "sce": ("sce", {"select_topk": 0.5}, "sce", {}, [1.0, 1.0, 1.0]),
    "longcat": ("longcat", {}, None, {}, WEIGHTS),
}
MERGEKIT_GLOBAL = {"sce": {"select_topk": 0.5}}
#: (tool, dtype) of the runs, as summarised and plotted; ``ours_reference`` is ``--reference-src``'s code
SERIES = [("ours", "float32"), ("ours_reference", "float32"), ("mergekit", "float32"), ("mergekit", "default")]


def run_ours(inputs: dict[str, Any], out: Path, label: str, reference: Path | None = None) -> dict[str, Any]:
    """Our engine in a fresh process from a cold page cache; with ``reference``, the package
    found there (an earlier commit's ``longcat_plugins``, put first on PYTHONPATH) instead."""
    method, params, _, _, weights = CASES[label]
    shutil.rmtree(out, ignore_errors=True)
    resident = evict(input_files(inputs))
    spec = {
        "base": str(inputs["base"]),
        "experts": [[str(p), w] for p, w in zip(inputs["experts"], weights, strict=True)],
        "output": str(out),
        "method": method,
        "params": params,
    }
    env = None
    if reference is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(reference), os.environ.get("PYTHONPATH", "")])}
    result = measure([sys.executable, "-c", OURS_RUNNER, json.dumps(spec)], env=env)
    inner = json.loads(result.pop("stdout").strip().splitlines()[-1])
    tool = "ours" if reference is None else "ours_reference"
    return {"tool": tool, "method": label, "dtype": "float32", "params": params, "resident_before_bytes": resident,
            "wall_s": result["wall_s"], "cpu_s": result.get("cpu_s"), "max_rss_mb": result["peak_rss_mib"],
            "load_avg_1min": os.getloadavg()[0], **inner}  # fmt: skip


def run_mergekit(mergekit: str, inputs: dict[str, Any], out: Path, label: str, dtype: str) -> dict[str, Any]:
    _, _, method, per_model, weights = CASES[label]
    shutil.rmtree(out, ignore_errors=True)
    models = []
    for path, weight in zip(inputs["experts"], weights, strict=True):
        parameters = dict(per_model) if method == "sce" else {"weight": weight, **per_model}
        models.append({"model": str(path), "parameters": parameters})
    config: dict[str, Any] = {"merge_method": method, "base_model": str(inputs["base"]), "models": models}
    if method in MERGEKIT_GLOBAL:
        config["parameters"] = MERGEKIT_GLOBAL[method]
    if dtype == "float32":
        config |= {"dtype": "float32", "out_dtype": "bfloat16"}  # compute in float32, like ours
    cfg = out.parent / f"mergekit-{label}-{dtype}.yaml"
    cfg.write_text(json.dumps(config))  # JSON is YAML
    resident = evict(input_files(inputs))
    result = measure([mergekit, str(cfg), str(out), "--no-copy-tokenizer", "--random-seed", "0", "--quiet"])
    return {"tool": "mergekit", "method": label, "dtype": dtype, "config": config, "resident_before_bytes": resident,
            "wall_s": result["wall_s"], "cpu_s": result.get("cpu_s"), "max_rss_mb": result["peak_rss_mib"]}  # fmt: skip


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


def agreement(inputs: dict[str, Any], out: Path, label: str) -> dict[str, Any]:
    ours, theirs = out / f"ours-{label}", out / f"mergekit-{label}-float32"
    if label in ("dare_linear", "dare_ties"):
        arithmetic_ours, arithmetic_theirs = out / "ours-task_arithmetic", out / "mergekit-task_arithmetic-float32"
        if not (arithmetic_ours.exists() and arithmetic_theirs.exists()):
            return {"skipped": "needs the task_arithmetic outputs of both tools (run it in the same invocation)"}
        return {
            "note": "different random streams: compared by statistics against each tool's task arithmetic",
            "ours": dare_statistics(inputs["base"], ours, arithmetic_ours, 0.5, len(WEIGHTS)),
            "mergekit": dare_statistics(inputs["base"], theirs, arithmetic_theirs, 0.5, len(WEIGHTS)),
        }
    result = elementwise_agreement(ours, theirs)
    if label == "ties":
        result["differences_at_a_tied_threshold"] = ties_differences_at_tied_threshold(inputs, ours, theirs, 0.5)
    return result


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [m for m in CASES if any(r["method"] == m for r in results["runs"])]
    series = [s for s in SERIES if any((r["tool"], r["dtype"]) == s for r in results["runs"])]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, unit in ((axes[0], "wall_s", "wall time (s)"), (axes[1], "max_rss_mb", "peak RSS (MiB)")):
        for k, (tool, dtype) in enumerate(series):
            values = [
                statistics.median(
                    [r[key] for r in results["runs"] if (r["tool"], r["dtype"], r["method"]) == (tool, dtype, m)]
                    or [float("nan")]
                )
                for m in labels
            ]
            width = 0.8 / len(series)
            ax.bar([i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))], values, width,
                   label=f"{tool} ({dtype})")  # fmt: skip
        if key == "wall_s":
            ax.axhline(results["read_floor_s"], color="k", ls="--", lw=1, label="read floor (O_DIRECT)")
        ax.set_xticks(range(len(labels)), labels, rotation=20)
        ax.set_ylabel(unit)
        ax.legend(fontsize=8)
    fig.suptitle("fusion, 271M-param Llama bf16, base + 3 experts, cold page cache (median per method)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for m in CASES:
        for tool, dtype in SERIES:
            runs = [r for r in results["runs"] if (r["tool"], r["dtype"], r["method"]) == (tool, dtype, m)]
            if runs:
                walls = [r["wall_s"] for r in runs]
                wall = statistics.median(walls)
                cpus = [r["cpu_s"] for r in runs if r.get("cpu_s") is not None]
                table.setdefault(m, {})[f"{tool}_{dtype}"] = {
                    "median_wall_s": wall,
                    "median_cpu_s": statistics.median(cpus) if cpus else None,
                    "min_wall_s": min(walls),
                    "max_wall_s": max(walls),
                    "max_rss_mb": max(r["max_rss_mb"] for r in runs),
                    "fraction_of_read_floor": results["read_floor_s"] / wall,
                    "times_read_floor": wall / results["read_floor_s"],
                    "runs": len(runs),
                }
    return table


def write_profile(args: argparse.Namespace, inputs: dict[str, Any], files: list[Path], methods: list[str]) -> None:
    """``--profile``: the read floor and :func:`profile` of ``methods``, stored under ``--profile-tag``."""
    disk = disk_bandwidth(files)
    package = subprocess.run(  # the code the runners import (PYTHONPATH may point at another checkout)
        [sys.executable, "-c", "import longcat_plugins, pathlib; print(pathlib.Path(longcat_plugins.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=NEUTRAL_CWD,
    ).stdout.strip()
    commit = subprocess.run(["git", "-C", package, "describe", "--always", "--dirty"], capture_output=True, text=True)
    out = args.work / "out"
    out.mkdir(exist_ok=True)
    entry = {
        "commit": commit.stdout.strip(),
        "package": package,
        "read_floor_s": disk["bytes"] / (max(disk["passes_mib_s"]) * 2**20),
        **profile(inputs, out, methods),
    }
    results = json.loads(args.profile_out.read_text()) if args.profile_out.exists() else {}
    results.setdefault("machine", {"cpus": os.cpu_count(), "python": platform.python_version()})
    results["how"] = (
        "bench/bench_fusion.py --profile --methods ... --profile-tag TAG; inputs as fusion.json's; start-up: median "
        "of fresh interpreters; engine: wall of fuse() from a cold page cache with its default 2 workers, then "
        "again with 1 worker and 1 op thread under cProfile (every op on the calling thread: per-function times are "
        "serial CPU + I/O wait; steps are inclusive times of the matching functions)"
    )
    results.setdefault("profiles", {})[args.profile_tag] = entry
    args.profile_out.parent.mkdir(parents=True, exist_ok=True)
    record = provenance(seeds=[0, 1, 2, 3])  # base, experts 1-3
    args.profile_out.write_text(json.dumps(stamp(results, record, earlier(args.profile_out)), indent=2) + "\n")
    print(f"wrote {args.profile_out} [{args.profile_tag}]")


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/longcat-fusion-bench"), help="inputs are kept here")
    parser.add_argument(
        "--mergekit", default="/work/mk-venv/bin/mergekit-yaml", help="mergekit-yaml of a separate venv"
    )
    parser.add_argument("--methods", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}")
    parser.add_argument("--mergekit-dtypes", default="float32,default")
    parser.add_argument("--tools", default="ours,mergekit", help="which side(s) to run: ours, mergekit or both")
    parser.add_argument("--layers", type=int, default=16, help="16 is the recipe; fewer for a quick check")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "fusion.json")
    parser.add_argument("--repeat", type=int, default=1, help="repetitions, ours and mergekit alternately")
    parser.add_argument("--append", action="store_true", help="add runs to an existing --out (split long benches)")
    parser.add_argument(
        "--replace",
        action="store_true",
        help="with --append: first drop the existing runs (both tools) of the --methods re-run, e.g. after a code change",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of the comparison: profile --methods (start-up, engine wall, cProfile) into --profile-out",
    )
    parser.add_argument(
        "--reference-src",
        type=Path,
        help="a directory holding an earlier commit's longcat_plugins (git archive COMMIT longcat_plugins | tar -x -C "
        "DIR): its engine runs too, as tool ours_reference, alternately with ours, and the outputs are compared bit "
        "for bit",
    )
    parser.add_argument("--reference-commit", default=None, help="the commit --reference-src was exported from")
    parser.add_argument("--profile-out", type=Path, default=REPO / "bench" / "results" / "fusion_profile.json")
    parser.add_argument("--profile-tag", default="current", help="key of this profile in --profile-out (e.g. before)")
    args = parser.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    if not args.tools or set(args.tools.split(",")) - {"ours", "mergekit"}:
        parser.error(f"--tools: expected ours, mergekit or both, got {args.tools!r}")
    unknown = sorted(set(methods) - set(CASES))
    if unknown:
        parser.error(f"--methods: unknown {unknown}; choose from {list(CASES)}")

    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    inputs = build_inputs(args.work, args.layers)
    files = input_files(inputs)
    if args.profile:
        write_profile(args, inputs, files, methods)
        return
    previous = json.loads(args.out.read_text()) if args.append and args.out.exists() else None
    origin, kept = provenance(seeds=[0, 1, 2, 3]), earlier(args.out, args.append)  # base, experts 1-3
    tools = [t for t in args.tools.split(",") if t]
    dtypes = [d for d in args.mergekit_dtypes.split(",") if d]
    rerun = {("ours", "float32")} if "ours" in tools else set()
    rerun |= {("mergekit", d) for d in dtypes} if "mergekit" in tools else set()
    if previous is not None and args.replace:  # drop the runs of exactly the (method, tool, dtype) re-run now
        previous["runs"] = [
            r for r in previous["runs"] if not (r.get("method") in methods and (r["tool"], r["dtype"]) in rerun)
        ]
        for method in methods:
            if ("ours", "float32") in rerun or ("mergekit", "float32") in rerun:  # its outputs are made anew
                before = previous.get("agreement", {}).pop(method, None)
                if before is not None:  # kept, labelled: still ours' agreement where reference_agreement is 1.0
                    previous.setdefault("agreement_from_earlier_runs", {})[method] = before
            previous.get("summary", {}).pop(method, None)
    results: dict[str, Any] = previous or {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "inputs": {
            "model": f"random Llama (vocab 32000, hidden 1024, intermediate 2816, {args.layers} layers, 16 heads), "
            "bf16, 200MB shards; experts = base + 0.01*N(0,1), seeds 1-3",
            "bytes_per_checkpoint": inputs["bytes_per_checkpoint"],
            "bytes_read_per_merge": inputs["bytes_per_checkpoint"] * 4,
            "shards": inputs["shards"],
            "weights": WEIGHTS,
        },
        "runs": [],
        "agreement": {},
    }
    print(f"inputs: {inputs['bytes_per_checkpoint'] / 2**20:.0f} MiB per checkpoint", flush=True)
    disk = disk_bandwidth(files)
    floor = disk["bytes"] / (max(disk["passes_mib_s"]) * 2**20)
    results.setdefault("read_floor_passes", []).append({**disk, "read_floor_s": floor})
    results["read_floor_s"] = min(x["read_floor_s"] for x in results["read_floor_passes"])
    print(f"read floor: {floor:.2f} s ({max(disk['passes_mib_s']):.0f} MiB/s O_DIRECT)", flush=True)
    if "floor_peak_rss_mib" not in results:
        results["floor_peak_rss_mib"] = measure([sys.executable, "-c", OURS_RUNNER, json.dumps({"idle": True})])[
            "peak_rss_mib"
        ]

    out = args.work / "out"
    out.mkdir(exist_ok=True)
    mk_path = shutil.which(args.mergekit) or (args.mergekit if Path(args.mergekit).exists() else None)
    if mk_path is None:
        print(f"mergekit not found at {args.mergekit}: ours only", flush=True)
    elif "mergekit_version" not in results:
        results["mergekit_version"] = subprocess.run(
            [
                str(Path(mk_path).parent / "python"),
                "-c",
                "import importlib.metadata as m; print(m.version('mergekit'))",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()

    def save() -> None:  # after every run: a long bench cut short keeps what it measured
        results["summary"] = summarise(results)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(stamp(results, origin, kept), indent=2) + "\n")

    for rep in range(args.repeat):
        for label in methods:
            if "ours" in tools:
                for reference in [None, args.reference_src] if args.reference_src else [None]:
                    name = "ours" if reference is None else "ours_reference"
                    r = run_ours(inputs, out / f"{name}-{label}", label, reference)
                    results["runs"].append({**r, "repetition": rep, "date_utc": _utc_now()})
                    save()
                    print(f"{name} {label}: {r['wall_s']:.1f} s, {r['max_rss_mb']:.0f} MiB", flush=True)
            if mk_path is None or CASES[label][2] is None or "mergekit" not in tools:
                continue
            for dtype in dtypes:
                try:
                    r = run_mergekit(mk_path, inputs, out / f"mergekit-{label}-{dtype}", label, dtype)
                except SystemExit as exc:  # a failing mergekit run is recorded; the others go on
                    results.setdefault("errors", []).append(
                        {"method": label, "dtype": dtype, "error": str(exc)[-2000:]}
                    )
                    save()
                    continue
                results["runs"].append({**r, "repetition": rep, "date_utc": _utc_now()})
                save()
                print(f"mergekit {label} ({dtype}): {r['wall_s']:.1f} s, {r['max_rss_mb']:.0f} MiB", flush=True)
    if args.reference_src:  # the same inputs, seed and settings: every output bit should be the same
        for label in methods:
            if (out / f"ours-{label}").exists() and (out / f"ours_reference-{label}").exists():
                results.setdefault("reference_agreement", {})[label] = elementwise_agreement(
                    out / f"ours-{label}", out / f"ours_reference-{label}"
                )
                print(label, "vs reference:", json.dumps(results["reference_agreement"][label]), flush=True)
    if mk_path is not None:  # the methods run here whose two outputs are on disk (DARE needs task arithmetic's too)
        for label in methods:
            made_anew = ("ours", "float32") in rerun or ("mergekit", "float32") in rerun
            if label in results["agreement"] and not made_anew:  # kept: neither output was made anew
                continue
            if (out / f"ours-{label}").exists() and (out / f"mergekit-{label}-float32").exists():
                results["agreement"][label] = agreement(inputs, out, label)
                print(label, json.dumps(results["agreement"][label]), flush=True)
    results["total_s"] = results.get("total_s", 0.0) + time.perf_counter() - t0
    if args.reference_src:  # beside the provenance (which save() replaces with this run's record)
        results["reference"] = {"src": str(args.reference_src), "commit": args.reference_commit}
    save()
    plot(results, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
