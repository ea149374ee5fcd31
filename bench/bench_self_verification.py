"""Self-verification (A6) on the learning bench: the warm-started arithmetic task, with and without
the verification phase, through the ``longcat_data`` trainer.

    .venv/bin/python bench/bench_self_verification.py [--modes baseline,selfverify] [--seeds 0]
        [--steps 9] [--out bench/results/self_verification.json] [--append]

Both modes run the warm-started demo's recipe (exact-match reward ``arithmetic_exact`` scored
through the ``selfverify`` reward, 16 prompts x 8 samples a step, greedy held-out validation
before and after) on the ``longcat_data`` trainer; only ``selfverify.enable`` differs. The phase
uses the real plateau detector (``--window`` steps, ``--min-delta``), 4 verification prompts a
step of 8 samples each, at most 3 steps a phase. The recipe allows 32 prompt and 12 response
tokens, so the verification prompt is ``<problem> <candidate> Right?`` and the two verdicts are
in the answer form the warm start already writes: ``The answer is 1.`` (correct) and
``The answer is 0.`` (incorrect); anything else scores -1.

Per run: ``acc_before`` / ``acc_after`` (verl's held-out greedy exact match), ``phases``,
``phase_steps``, ``verify_accuracy`` (share of right verdicts over all verification samples),
``verify_unparseable``, and per step the main-task batch accuracy and phase flag.
Writes ``{"runs": [...]}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

S = "+longcat.settings.scheduler.longcat_data"
MODES = ("baseline", "selfverify")


def run(mode: str, seed: int, steps: int, window: int, min_delta: float, assets, work: Path) -> dict:
    from longcat_plugins.runtime.demos import prepare_demo
    from longcat_plugins.runtime.launch import resolve_config, run_training, val_accuracy

    demo = prepare_demo("arithmetic", assets, steps, init="warm")
    overrides = [o for o in demo.overrides if not o.startswith("reward.custom_reward_function.name=")]
    verify = [
        f"{S}.selfverify.enable=true",
        f"{S}.selfverify.window={window}",
        f"{S}.selfverify.min_delta={min_delta}",
        f"{S}.selfverify.tasks=4",
        f"{S}.selfverify.max_steps=3",
        f"{S}.selfverify.prompt='{{problem}} {{solution}} Right?'",
        f"{S}.selfverify.correct='The answer is 1.'",
        f"{S}.selfverify.incorrect='The answer is 0.'",
    ]
    ray_tmp = Path(tempfile.mkdtemp(prefix="lcsv", dir="/tmp"))
    try:
        result = run_training(
            resolve_config(demo.config),
            [
                *overrides,
                "reward.custom_reward_function.name=selfverify",
                "+longcat.settings.reward.selfverify.main=arithmetic_exact",
                "trainer.total_epochs=100",
                f"trainer.test_freq={steps}",
                "trainer.save_freq=-1",
                f"data.seed={seed}",
                f"actor_rollout_ref.actor.data_loader_seed={seed}",
                f"actor_rollout_ref.rollout.seed={seed}",
                "trainer.v1.trainer_mode=longcat_data",
                f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
                *(verify if mode == "selfverify" else [f"{S}.selfverify.enable=false"]),
            ],
            work / f"{mode}-seed{seed}",
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{mode}/seed {seed} failed; see {result.log}")
    records = sorted(result.steps, key=lambda s: s["step"])
    accs = [a for a in (val_accuracy(r) for r in records) if a is not None]
    trained = [r for r in records if "longcat/data/trained_groups" in r]
    if len(accs) < 2 or len(trained) != steps:
        raise RuntimeError(f"{mode}/seed {seed}: missing validations or data metrics in {result.metrics}")
    phase = [r for r in trained if r.get("longcat/selfverify/phase") == 1.0]
    samples = sum(r.get("longcat/selfverify/verify_samples", 0.0) for r in phase)
    right = sum(
        r.get("longcat/selfverify/verify_accuracy", 0.0) * r.get("longcat/selfverify/verify_samples", 0.0)
        for r in phase
    )
    unparse = sum(
        r.get("longcat/selfverify/verify_unparseable", 0.0) * r.get("longcat/selfverify/verify_samples", 0.0)
        for r in phase
    )
    return {
        "mode": mode,
        "seed": seed,
        "steps": len(trained),
        "window": window if mode == "selfverify" else None,
        "min_delta": min_delta if mode == "selfverify" else None,
        "acc_before": accs[0],
        "acc_after": accs[-1],
        "phases": int(max((r.get("longcat/selfverify/phases", 0.0) for r in trained), default=0)),
        "phase_steps": len(phase),
        "verify_samples": int(samples),
        "verify_accuracy": round(right / samples, 4) if samples else None,
        "verify_unparseable": round(unparse / samples, 4) if samples else None,
        "curve": [
            {
                "step": r["step"],
                "main_accuracy": r.get("longcat/selfverify/main_accuracy", r.get("longcat/data/batch_accuracy")),
                "phase": r.get("longcat/selfverify/phase", 0.0),
                "verify_accuracy": r.get("longcat/selfverify/verify_accuracy"),
            }
            for r in trained
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--steps", type=int, default=9)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--min-delta", type=float, default=0.02)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--out", default="bench/results/self_verification.json")
    parser.add_argument("--append", action="store_true", help="add to the runs already in --out")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES):
        parser.error(f"--modes: choices are {', '.join(MODES)}")
    from longcat_plugins.runtime.warmstart import ensure_warm_start

    assets = ensure_warm_start(size=args.size)
    out = Path(args.out)
    runs = json.loads(out.read_text())["runs"] if args.append and out.exists() else []
    work = Path(tempfile.mkdtemp(prefix="longcat-selfverify-"))
    for mode in modes:
        for seed in [int(s) for s in args.seeds.split(",") if s]:
            r = run(mode, seed, args.steps, args.window, args.min_delta, assets, work)
            same = ("mode", "seed", "window", "min_delta", "steps")
            runs = [x for x in runs if any(x.get(k) != r[k] for k in same)] + [r]
            print(
                f"{mode:>10} seed {seed}: held-out {100 * r['acc_before']:.1f}% -> {100 * r['acc_after']:.1f}%, "
                f"{r['phases']} phase(s), {r['phase_steps']} phase step(s), verification accuracy {r['verify_accuracy']}",
                flush=True,
            )
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(".json.tmp")
            tmp.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
            tmp.replace(out)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
