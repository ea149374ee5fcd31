"""Domain-parallel RL, then fusion, then general RL: LongCat-Flash-Thinking's recipe, end to end.

    python examples/domain_parallel/run.py --workdir outputs/domain_parallel

1. an SFT checkpoint (here: the tiny local Llama, saved in bfloat16 like every expert verl exports);
2. one verl GRPO run per domain from that checkpoint (here: additions only, subtractions only);
3. each run's last FSDP checkpoint converted to Hugging Face format with verl's own
   ``python -m verl.model_merger merge --backend fsdp``;
4. the experts fused with ``longcat-plugins fuse`` (``configs/fusion_example.yaml``, paths
   rewritten to the work directory);
5. a general GRPO run (both operators) that starts from the fused model.

Every stage is a separate process, exactly as a user would run it. On a GPU box pass
``--recipe gpu_grpo`` and real datasets/model; this script's defaults fit a laptop CPU.
A summary of every stage (paths, seconds, per-step metrics) is written to ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from longcat_plugins.evaluation.target import merge_actor_checkpoint
from longcat_plugins.learning.assets import build_dataset, ensure_assets
from longcat_plugins.runtime.launch import RunResult, resolve_config, run_training

REPO = Path(__file__).resolve().parents[2]
DOMAINS = {"addition": "+", "subtraction": "-"}


def log(message: str) -> None:
    print(f"[domain_parallel] {message}", flush=True)


def make_sft(workdir: Path) -> Path:
    """The shared starting point, in bfloat16 (verl.model_merger exports bfloat16, and fusion
    needs the base and the experts in the same dtype)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sft = workdir / "sft"
    if (sft / "config.json").exists():
        return sft
    tiny = ensure_assets(workdir / "assets", size="tiny")
    model = AutoModelForCausalLM.from_pretrained(tiny.model, dtype=torch.bfloat16)
    model.save_pretrained(sft)
    AutoTokenizer.from_pretrained(tiny.model).save_pretrained(sft)
    return sft


def make_data(workdir: Path, n_train: int) -> dict[str, Path]:
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    files = {}
    for i, (domain, ops) in enumerate({**DOMAINS, "general": "+-"}.items()):
        files[domain] = data / f"{domain}.parquet"
        build_dataset(files[domain], n_train, seed=10 + i, split="train", ops=ops)
    files["val"] = data / "val.parquet"
    build_dataset(files["val"], 8, seed=99, split="test", ops="+-")
    return files


def train(
    recipe: str, name: str, model: Path, train_file: Path, val_file: Path, steps: int, workdir: Path, extra: list[str]
) -> RunResult:
    run_dir = workdir / "runs" / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    overrides = [
        f"data.train_files={train_file}",
        f"data.val_files={val_file}",
        f"actor_rollout_ref.model.path={model}",
        f"trainer.total_training_steps={steps}",
        f"trainer.save_freq={steps}",
        f"trainer.experiment_name={name}",
        *extra,
    ]
    result = run_training(resolve_config(recipe), overrides, run_dir)
    if result.returncode != 0:
        tail = result.log.read_text()[-4000:]
        raise SystemExit(f"verl run {name!r} failed (exit {result.returncode}); log {result.log}:\n{tail}")
    return result


def export_hf(result: RunResult, steps: int, target: Path) -> Path:
    """verl saves FSDP shards; its own model merger turns the actor into a HF checkpoint."""
    actor = result.checkpoints / f"global_step_{steps}" / "actor"
    if target.exists():
        shutil.rmtree(target)
    try:
        return merge_actor_checkpoint(actor, target)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from exc


def fuse_experts(workdir: Path, sft: Path, experts: dict[str, Path], template: Path) -> tuple[Path, dict[str, Any]]:
    """Write the fuse YAML (the template's method, params, weights and seed; our paths) and run the CLI."""
    spec = yaml.safe_load(template.read_text())
    weights = {e.get("name"): e.get("weight", 1.0) for e in spec["experts"]}
    spec["base"] = str(sft)
    spec["experts"] = [{"path": str(p), "weight": weights.get(d, 1.0), "name": d} for d, p in experts.items()]
    spec["output"] = str(workdir / "fused")
    config = workdir / "fuse.yaml"
    config.write_text(yaml.safe_dump(spec, sort_keys=False))
    report = workdir / "fusion_report.json"
    command = [sys.executable, "-m", "longcat_plugins", "fuse", str(config), "--overwrite", "--report", str(report)]
    proc = subprocess.run(command, capture_output=True, text=True)
    print(proc.stdout, end="")
    if proc.returncode != 0:
        raise SystemExit(f"longcat-plugins fuse failed:\n{proc.stderr}")
    return Path(spec["output"]), json.loads(report.read_text())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("outputs/domain_parallel"))
    parser.add_argument("--recipe", default="cpu_demo", help="verl recipe for every run (ours or a YAML path)")
    parser.add_argument("--domain-steps", type=int, default=2, help="GRPO steps of each domain run")
    parser.add_argument("--general-steps", type=int, default=1, help="GRPO steps of the general run after fusion")
    parser.add_argument("--n-train", type=int, default=64, help="prompts per domain dataset")
    parser.add_argument("--fuse-config", type=Path, default=REPO / "configs" / "fusion_example.yaml")
    parser.add_argument("--trainer", choices=["v1", "legacy"], default="legacy")
    args = parser.parse_args(argv)

    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    ray_tmp = Path(tempfile.mkdtemp(prefix="lcray", dir="/tmp"))  # Ray's socket paths must stay short
    extra = [
        f"trainer.use_v1={'true' if args.trainer == 'v1' else 'false'}",
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
    ]
    timings: dict[str, float] = {}
    summary: dict[str, Any] = {"workdir": str(workdir), "timings_s": timings}
    try:
        t0 = time.perf_counter()
        sft = make_sft(workdir)
        data = make_data(workdir, args.n_train)
        timings["assets"] = time.perf_counter() - t0
        experts: dict[str, Path] = {}
        runs: dict[str, Any] = {}
        for domain in DOMAINS:
            log(f"RL on the {domain} domain from {sft}")
            t0 = time.perf_counter()
            result = train(args.recipe, domain, sft, data[domain], data["val"], args.domain_steps, workdir, extra)
            timings[f"train_{domain}"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            experts[domain] = export_hf(result, args.domain_steps, workdir / "experts" / domain)
            timings[f"export_{domain}"] = time.perf_counter() - t0
            runs[domain] = {"steps": result.steps, "log": str(result.log), "expert": str(experts[domain])}
        log(f"fusing {', '.join(experts)}")
        t0 = time.perf_counter()
        fused, report = fuse_experts(workdir, sft, experts, args.fuse_config)
        timings["fuse"] = time.perf_counter() - t0
        log(f"general RL from the fused model {fused}")
        t0 = time.perf_counter()
        general = train(args.recipe, "general", fused, data["general"], data["val"], args.general_steps, workdir, extra)
        timings["train_general"] = time.perf_counter() - t0
        runs["general"] = {"steps": general.steps, "log": str(general.log), "model": str(fused)}
        summary.update({"sft": str(sft), "fused": str(fused), "fusion": report, "runs": runs})
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    log(f"done: {workdir / 'summary.json'} ({', '.join(f'{k} {v:.0f}s' for k, v in timings.items())})")
    return summary


if __name__ == "__main__":
    main()
