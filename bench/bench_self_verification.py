"""Self-verification (A6) on the learning bench: the warm-started arithmetic task, with and without
the verification phase, through the ``longcat_data`` trainer.

    .venv/bin/python bench/bench_self_verification.py [--modes baseline,selfverify] [--seeds 0,1,2]
        [--steps 30] [--window 3] [--min-delta 0.02] [--verdicts 0.5] [--max-steps 3]
        [--out bench/results/self_verification.json] [--append]

Both modes run the warm-started demo's recipe (exact-match reward ``arithmetic_exact`` scored
through the ``selfverify`` reward, 16 prompts x 8 samples a step, greedy held-out validation
before, every ``--test-freq`` steps and after) on the ``longcat_data`` trainer; only
``selfverify.enable`` differs. The phase uses the real plateau detector (``--window`` steps,
``--min-delta``), ``--tasks`` verification prompts a step of 8 samples each, at most
``--max-steps`` steps a phase. The verification prompt and verdicts are the warm start's
(:data:`~longcat_plugins.learning.arithmetic_warmstart.VERIFY_PROMPT`: ``<problem> <candidate> Right?``,
answered ``The answer is 1.`` (correct) or ``The answer is 0.`` (incorrect); anything else
scores -1); prompts may be 40 tokens (the longest verification prompt is 34).

``--verdicts S`` (> 0) starts both modes from the warm start whose SFT data also taught the
verification task on a share S of the training questions (``ensure_warm_start(verdicts=S)``);
0 is the plain warm start, which almost never writes a verdict.

Per run: ``acc_before`` / ``acc_after`` (verl's held-out greedy exact match), ``phases``,
``phase_steps``, ``verify_accuracy`` (share of right verdicts over all verification samples),
``verify_unparseable``, the first and last phase step's verification accuracy, and per step the
main-task batch accuracy, phase flag, verification accuracy, share of clear verdicts saying
"correct" (``says_correct``) and held-out accuracy where validated. Writes ``{"runs": [...]}``
and, per run, the warm start's greedy verdict probe (``warm``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from options import choice_list, seed_list
from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes
from training_run import seeded_run, train_or_raise, validated_steps

from longcat_plugins.atomic import write_json_atomic

S = "+longcat.settings.scheduler.longcat_data"
MODES = ("baseline", "selfverify")
#: data.max_prompt_length: the warm start's longest verification prompt is 34 tokens
PROMPT_TOKENS = 40


def run(mode: str, seed: int, args: argparse.Namespace, assets, work: Path) -> dict:
    from longcat_plugins.learning.arithmetic_warmstart import VERDICT_CORRECT, VERDICT_INCORRECT, VERIFY_PROMPT
    from longcat_plugins.learning.demos import prepare_demo
    from longcat_plugins.runtime.launch import resolve_config, val_accuracy

    steps, window, min_delta = args.steps, args.window, args.min_delta
    demo = prepare_demo("arithmetic", assets, steps, init="warm")
    overrides = [
        o
        for o in demo.overrides
        if not o.startswith(("reward.custom_reward_function.name=", "trainer.test_freq=", "trainer.save_freq="))
    ]
    verify = [
        f"{S}.selfverify.enable=true",
        f"{S}.selfverify.window={window}",
        f"{S}.selfverify.min_delta={min_delta}",
        f"{S}.selfverify.tasks={args.tasks}",
        f"{S}.selfverify.max_steps={args.max_steps}",
        f"{S}.selfverify.prompt='{VERIFY_PROMPT}'",
        f"{S}.selfverify.correct='{VERDICT_CORRECT}'",
        f"{S}.selfverify.incorrect='{VERDICT_INCORRECT}'",
    ]
    result = train_or_raise(
        resolve_config(demo.config),
        [
            *overrides,
            "reward.custom_reward_function.name=selfverify",
            "+longcat.settings.reward.selfverify.main=arithmetic_exact",
            *seeded_run(seed, args.test_freq or steps),
            f"data.max_prompt_length={PROMPT_TOKENS}",
            "trainer.save_freq=-1",
            "trainer.v1.trainer_mode=longcat_data",
            *(verify if mode == "selfverify" else [f"{S}.selfverify.enable=false"]),
        ],
        work / f"{mode}-seed{seed}",
        f"{mode}/seed {seed}",
    )
    accs, trained = validated_steps(result, steps, f"{mode}/seed {seed}", "longcat/data/trained_groups")
    phase = [r for r in trained if r.get("longcat/selfverify/phase") == 1.0]
    samples = sum(r.get("longcat/selfverify/verify_samples", 0.0) for r in phase)
    right = sum(
        r.get("longcat/selfverify/verify_accuracy", 0.0) * r.get("longcat/selfverify/verify_samples", 0.0)
        for r in phase
    )
    verify_steps = [r["longcat/selfverify/verify_accuracy"] for r in phase if "longcat/selfverify/verify_accuracy" in r]
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
        "verdicts": args.verdicts,
        "prompt_tokens": PROMPT_TOKENS,
        "max_steps": args.max_steps if mode == "selfverify" else None,
        "acc_before": accs[0],
        "acc_after": accs[-1],
        "phases": int(max((r.get("longcat/selfverify/phases", 0.0) for r in trained), default=0)),
        "phase_steps": len(phase),
        "verify_samples": int(samples),
        "verify_accuracy": round(right / samples, 4) if samples else None,
        "verify_unparseable": round(unparse / samples, 4) if samples else None,
        "verify_first": verify_steps[0] if verify_steps else None,
        "verify_last": verify_steps[-1] if verify_steps else None,
        "warm": {
            k: v
            for k, v in json.loads((assets.root / "warm.json").read_text()).items()
            if k.startswith(("val", "verdict"))
        },
        "curve": [
            {
                "step": r["step"],
                "main_accuracy": r.get("longcat/selfverify/main_accuracy", r.get("longcat/data/batch_accuracy")),
                "phase": r.get("longcat/selfverify/phase", 0.0),
                "verify_accuracy": r.get("longcat/selfverify/verify_accuracy"),
                "says_correct": r.get("longcat/selfverify/verify_says_correct"),
                "heldout": val_accuracy(r),
            }
            for r in trained
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", type=choice_list(MODES), default=",".join(MODES))
    parser.add_argument("--seeds", type=seed_list, default="0")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--min-delta", type=float, default=0.02)
    parser.add_argument("--tasks", type=int, default=4, help="verification prompts a phase step (pairs)")
    parser.add_argument("--max-steps", type=int, default=3, help="steps a phase lasts at most")
    parser.add_argument("--verdicts", type=float, default=0.5, help="share of training questions SFT also judges")
    parser.add_argument("--test-freq", type=int, default=5, help="held-out validation every N steps (0: at the end)")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--out", default="bench/results/self_verification.json")
    parser.add_argument("--append", action="store_true", help="add to the runs already in --out")
    args = parser.parse_args()
    modes = args.modes
    from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start

    assets = ensure_warm_start(size=args.size, verdicts=args.verdicts)
    out = Path(args.out)
    origin = provenance(seeds=args.seeds)
    kept = earlier(out, args.append)
    runs = json.loads(out.read_text())["runs"] if args.append and out.exists() else []
    work = Path(tempfile.mkdtemp(prefix="longcat-selfverify-"))
    for mode in modes:
        for seed in args.seeds:
            r = run(mode, seed, args, assets, work)
            same = ("mode", "seed", "window", "min_delta", "steps", "verdicts", "max_steps")
            runs = [x for x in runs if any(x.get(k) != r[k] for k in same)] + [r]
            print(
                f"{mode:>10} seed {seed}: held-out {100 * r['acc_before']:.1f}% -> {100 * r['acc_after']:.1f}%, "
                f"{r['phases']} phase(s), {r['phase_steps']} phase step(s), verification accuracy {r['verify_accuracy']} "
                f"(first step {r['verify_first']}, last {r['verify_last']})",
                flush=True,
            )
            write_json_atomic(out, stamp({"runs": runs}, origin, kept), indent=2)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
