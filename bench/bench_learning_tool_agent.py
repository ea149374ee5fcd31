"""Learning benchmark of the tool agent: GRPO from the tool-use warm start raises held-out rubric success.

Builds (once, cached) the tool-use warm start (:mod:`longcat_plugins.learning.tool_warmstart`),
then per seed runs ``longcat-plugins demo --recipe tool_agent``'s exact configuration
(``tool_agent_cpu.yaml`` + the warm start's overrides) through verl's trainer for ``--steps``
GRPO steps. Held-out success is verl's own greedy validation on the held-out environments
(``val-core/longcat_env/retail/acc/mean@1``: the rubric's all-items-met rate), before the first
step and after the last. With ``--probe`` (the default) the trained policy is exported at the
last step and played by :func:`longcat_plugins.learning.tool_probe.probe` on the same held-out
tasks, greedy, so its shares (well-formed call, golden tool, its arguments, ...) can be set
against the warm start's (``bench/results/tool_warm_starts.json``): what RL changed.
Writes ``bench/results/learning_tool_agent.json``::

    {"runs": [{"seed", "steps", "wall_s", "success_before", "success_after", "curve": [...],
               "probe_after": {...}}], ...}

    PYTHONPATH=. python bench/bench_learning_tool_agent.py [--seeds 0 1 2] [--steps 20] [--append] \
        [--plan tiny:2000:400:te:rv4:vp200] [--lr 3e-4] [--test-freq 10] [--override KEY=VALUE ...]

``--append`` keeps the runs already in ``--out`` (a seed measured again on the same warm start and
settings replaces its run), so a long bench can run one seed per invocation. ``--plan`` is a
``bench_tool_warm_starts`` candidate (default: the demo's warm start), ``--lr`` the actor's learning
rate (default: the demo's), ``--test-freq`` validates every N steps as well (the curve's
``held_out`` points), ``--override`` adds verl overrides after the demo's (say
``data.train_batch_size=16``); each run records its own ``warm_start``, ``lr`` and ``settings``
(every override that is not a path), so runs of different settings can share a file. ``--train-rows N`` trains on the warm start's
first N training tasks only, every step (a diagnostic: does RL raise the reward on tasks it sees
again and again, whatever it does held out); ``--train-file PATH`` trains on those task rows instead,
every step (``bench_tool_selection_gain.py``'s selected and unselected subsets). ``--untie``
trains an untied copy of the warm start (the output layer a copy of the input embedding: the same
function at step 0), so RL's output-side gradient no longer moves the embedding the copy reads.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes

OUT = Path(__file__).resolve().parent / "results" / "learning_tool_agent.json"
#: per-step training metrics kept in the curve (the loop's reward info, averaged over the batch)
CURVE_KEYS = {
    "reward": "critic/score/mean",
    "success": "reward_extra_info/env_success/mean",
    "tool_calls": "reward_extra_info/env_tool_calls/mean",
    "step_s": "timing_s/step",
    "update_s": "timing_s/update_actor",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--work", type=Path, default=None, help="run directories (default: a temp dir)")
    parser.add_argument("--append", action="store_true", help="keep the runs of other seeds already in --out")
    parser.add_argument("--no-probe", dest="probe", action="store_false", help="skip probing the trained policy")
    parser.add_argument("--plan", default=None, help="a bench_tool_warm_starts candidate (default: the demo's)")
    parser.add_argument("--lr", type=float, default=None, help="the actor's learning rate (default: the demo's)")
    parser.add_argument("--test-freq", type=int, default=None, help="validate every N steps too (default: last only)")
    parser.add_argument("--override", action="append", default=[], help="a verl override added after the demo's")
    parser.add_argument("--untie", action="store_true", help="train an untied copy of the warm start's embeddings")
    parser.add_argument("--train-rows", type=int, default=0, help="train on the first N training tasks only")
    parser.add_argument("--train-file", type=Path, default=None, help="train on these task rows instead, every step")
    args = parser.parse_args()
    if args.train_rows and args.train_file:
        raise SystemExit("--train-rows and --train-file: give one")
    if args.train_file is not None and not args.train_file.is_file():
        raise SystemExit(f"--train-file {args.train_file}: no such file")

    origin, kept = provenance(seeds=list(args.seeds)), earlier(args.out, args.append)
    previous: list[dict[str, Any]] = []
    if args.append and args.out.exists():  # checked before any training, so a mismatch wastes no run
        old = json.loads(args.out.read_text())
        previous = old["runs"]
        for run in previous:  # runs written before each run named its warm start, rate and settings: the file's
            lrs = [
                o.split("=", 1)[1]
                for o in old["config"]["overrides"]
                if o.startswith("actor_rollout_ref.actor.optim.lr=")
            ]
            run.setdefault("lr", float(lrs[0]) if lrs else None)
            run.setdefault("warm_start", {k: v for k, v in old["warm_start"].items() if k != "build_s_this_run"})
            if "settings" not in run:  # the file's settings, at the run's own rate
                lr_key = "actor_rollout_ref.actor.optim.lr="
                own = [o for o in _settings(old["config"]["overrides"]) if not o.startswith(lr_key)]
                run["settings"] = [*own, f"{lr_key}{run['lr']:g}"] if run["lr"] is not None else own

    from longcat_plugins.learning.assets import default_cache_dir
    from longcat_plugins.learning.demos import tool_warm_demo
    from longcat_plugins.learning.tool_warmstart import demo_plan, ensure_tool_warm_start
    from longcat_plugins.runtime.launch import resolve_config, run_training

    cache = args.cache_dir or default_cache_dir()
    plan = demo_plan("tiny")
    if args.plan:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_tool_warm_starts import parse_candidate

        plan = parse_candidate(args.plan)
    t0 = time.perf_counter()
    warm = ensure_tool_warm_start(cache, plan)
    build_s = time.perf_counter() - t0
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-toolwarm-"))
    model = _untied_copy(warm.model) if args.untie else warm.model
    train = args.train_file or warm.train
    if args.train_rows:
        import pandas as pd

        work.mkdir(parents=True, exist_ok=True)
        train = work / f"train-first-{args.train_rows}.parquet"
        pd.read_parquet(warm.train).head(args.train_rows).to_parquet(train)
    runs: list[dict[str, Any]] = []
    for seed in args.seeds:
        demo = tool_warm_demo(warm, args.steps)
        # no checkpoints; held-out validation before the first step and after the last (and every --test-freq)
        overrides = [o for o in demo.overrides if not o.startswith(("trainer.save_freq=", "trainer.test_freq="))]
        overrides += [
            f"data.seed={seed}",
            f"actor_rollout_ref.rollout.seed={seed}",
            f"trainer.test_freq={args.test_freq or args.steps}",
        ]
        # the untied copy and the first --train-rows tasks in place of the warm start's own
        paths = {"actor_rollout_ref.model.path=": model, "data.train_files=": train}
        overrides = [next((f"{k}{v}" for k, v in paths.items() if o.startswith(k)), o) for o in overrides]
        if args.lr is not None:
            overrides = [o for o in overrides if not o.startswith("actor_rollout_ref.actor.optim.lr=")]
            overrides.append(f"actor_rollout_ref.actor.optim.lr={args.lr:g}")
        if args.train_rows or args.train_file:  # the same few tasks every step, for as many steps as asked
            overrides.append(f"trainer.total_epochs={args.steps}")
        overrides += args.override
        lr = next(float(o.split("=", 1)[1]) for o in overrides if o.startswith("actor_rollout_ref.actor.optim.lr="))
        # the trained policy as an HF checkpoint at the last step only (for the probe), else none
        save = [f"trainer.save_freq={args.steps}", "actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]"]
        overrides += save if args.probe else ["trainer.save_freq=-1"]
        start = time.perf_counter()
        result = run_training(resolve_config(demo.config), overrides, work / f"seed{seed}")
        wall = time.perf_counter() - start
        if result.returncode != 0:
            raise SystemExit(f"seed {seed}: training failed (exit {result.returncode}); log: {result.log}")
        held_out = _held_out_curve(result.steps)
        if len(held_out) < 2:
            raise SystemExit(f"seed {seed}: no held-out validation before and after training in {result.metrics}")
        curve = [
            {"step": s["step"], **{k: s[v] for k, v in CURVE_KEYS.items() if v in s}}
            for s in result.steps
            if CURVE_KEYS["reward"] in s
        ]
        run = {
            "seed": seed,
            "steps": result.last_step,
            "wall_s": round(wall, 1),
            "success_before": held_out[0]["success"],
            "success_after": held_out[-1]["success"],
            "curve": curve,
            "held_out": held_out,
            "lr": lr,
            "settings": _settings(overrides)
            + (["untied_copy"] if args.untie else [])
            + ([f"train_rows={args.train_rows}"] if args.train_rows else [])
            + ([f"train_file={args.train_file.name}"] if args.train_file else []),
            "warm_start": json.loads((warm.root / "warmstart.json").read_text()),
        }
        if args.probe:
            run["probe_after"] = _probe_trained(result.checkpoints, warm.val)
        runs.append(run)
        print(
            f"seed {seed}: held-out success {run['success_before']:.1%} -> {run['success_after']:.1%} in {wall:.0f}s",
            flush=True,
        )
    same = {_key(r) for r in runs}
    runs = [r for r in previous if _key(r) not in same] + runs
    meta = json.loads((warm.root / "warmstart.json").read_text())
    out = {
        "runs": runs,
        "warm_start": {**meta, "build_s_this_run": round(build_s, 1), "held_out_tasks": _rows(warm.val)},
        "config": {
            "recipe": "tool_agent_cpu",
            "init": "warm",
            "steps": args.steps,
            # the demo's overrides that are not paths (so the settings are on record)
            "overrides": _settings(overrides) if args.seeds else [],
        },
        "machine": {"cpus": _cpus(), "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamp(out, origin, kept), indent=1))
    print(f"wrote {args.out}")


def _untied_copy(model_dir: Path) -> Path:
    """``model_dir`` with its output layer untied from the input embedding (a copy of it), built
    once beside it and renamed into place when complete."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = model_dir.with_name(model_dir.name + "-untied")
    if out.is_dir():
        return out
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if not model.config.tie_word_embeddings:
        raise SystemExit(f"--untie: {model_dir} is already untied")
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(tmp)
    tmp.rename(out)
    return out


def _settings(overrides: list[str]) -> list[str]:
    """The overrides that are not paths (the settings a run is compared on)."""
    return [o for o in overrides if "/" not in o.split("=", 1)[1]]


def _key(run: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two runs the same measurement: seed, rate, warm start and settings (less the seed's own)."""
    settings = [o for o in run.get("settings", []) if "seed=" not in o]
    return (run["seed"], run.get("lr"), json.dumps(run.get("warm_start"), sort_keys=True), json.dumps(settings))


def _held_out_curve(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Held-out success at every validation: ``[{"step", "success"}]`` (step 0 is before training)."""
    from longcat_plugins.learning.tool_warmstart import HELD_OUT_METRIC

    return [{"step": s["step"], "success": float(s[HELD_OUT_METRIC])} for s in steps if HELD_OUT_METRIC in s]


def _probe_trained(checkpoints: Path, val: Path) -> dict[str, Any] | None:
    """The greedy probe's shares of the last exported policy (None when verl exported none)."""
    from longcat_plugins.learning.tool_probe import probe

    exported = sorted(checkpoints.glob("global_step_*/actor/huggingface"), key=lambda p: int(p.parts[-3][12:]))
    exported = [p for p in exported if any(p.glob("*.safetensors"))]
    if not exported:
        print(f"no HF export under {checkpoints}: probe skipped", flush=True)
        return None
    shares = probe(exported[-1], val)
    print(" probe after RL", {k: v for k, v in shares.items() if k != "successes_per_task"}, flush=True)
    return shares


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    main()
