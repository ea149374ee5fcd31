"""Does RL measurably improve a warm-started tiny model? Held-out greedy exact match before and
after GRPO on the warm-started arithmetic task, per objective and seed, on this CPU.

    .venv/bin/python bench/bench_learning.py [--seeds 0,1,2] [--steps 30] [--test-freq 5] [--target 0.6]
        [--objectives vanilla,triplet_clip,longcat_gspo,longcat_grpo] [--trainers sync]
        [--out bench/results/learning.json] [--append]

Every run starts from the same warm start (:func:`longcat_plugins.learning.arithmetic_warmstart.ensure_warm_start`,
seed 0) with the demo's recipe (``cpu_demo`` + the demo's warm-start overrides: exact-match
reward, 16 prompts x 8 samples, lr 1e-3, greedy validation) and the bench's own
:data:`SCHEDULE` (the learning rate decays on a cosine to 0 over the run; ``--schedule
constant`` keeps the demo's constant rate); the run's seed changes data order and sampling.
Each row records these ``settings``; ``--append`` refuses to mix rows measured on other
settings (exit 2). Accuracies are verl's own validation metric (``val-core/.../acc/mean@1``,
greedy, n=1) on the 64 held-out questions, before training (step 0) and after the last step.
``wall_s`` is the sum of verl's ``timing_s/step`` (training only: no start-up, no validation).

``pass_at_k`` is computed here, not by verl: after training, 8 samples per held-out question
at temperature 1 from the final checkpoint (plain transformers), scored with the exact-match
reward, and the unbiased estimator 1 - C(n-c, k) / C(n, k) averaged over questions.

Writes the JSON (exactly ``{"runs": [...]}``; every run carries its ``provenance``, ``bench/provenance.py``), ``learning_curves.json`` (accuracy per
validation step and wall-clock, and ``train``: per-step reward, PPO ratio statistics,
``rollout_corr/kl``, length-clip share and staleness, from ``bench/learning_diagnostics.py``,
per run) and a PNG of the curves with seed bands beside it.
Runs go one after another; the machine is shared, so compare within one file.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from math import comb
from pathlib import Path

from heldout_curve import time_to_target, validation_curve  # one definition for every learning bench
from learning_diagnostics import train_diagnostics
from options import choice_list, seed_list
from provenance import earlier, provenance, stamp, write_sidecar  # bench/provenance.py: the record every bench writes
from training_run import seeded_run, train_or_raise

#: objective -> overrides on the demo recipe
OBJECTIVES: dict[str, list[str]] = {
    "vanilla": [],
    "triplet_clip": ["+objective=triplet_clip"],
    "longcat_gspo": ["+objective=longcat_gspo"],
    "longcat_grpo": ["algorithm.adv_estimator=longcat_grpo"],
}
KS = (1, 2, 4, 8)
#: the bench's change to the demo recipe: the learning rate decays from the demo's 1e-3 on a
#: cosine to 0 at the last step, so the answer form is learned at the full rate in the first
#: steps and later steps cannot undo it (at a constant 1e-3, 20-step runs drifted back by up to
#: 9 points after step 10; see docs/learning.md)
SCHEDULE = [
    "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
    "actor_rollout_ref.actor.optim.min_lr_ratio=0.0",
]
#: ``--schedule``: the default, or the demo's constant rate (how the earlier files were measured)
SCHEDULES: dict[str, list[str]] = {"cosine": SCHEDULE, "constant": []}
#: trainer -> (recipe, overrides on it): verl's v1 ``sync`` trainer (the demo's ``cpu_demo``),
#: or ``dora`` (``dora_cpu``: standalone ``hf`` generator replicas, staleness 1; its batch is
#: ``parameter_sync_step`` x ``ppo_mini_batch_size`` = the demo's 16 prompts)
TRAINERS: dict[str, tuple[str, list[str]]] = {
    "sync": ("cpu_demo", []),
    "dora": ("dora_cpu", []),
}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al., 2021)."""
    if k > n:
        raise ValueError(f"k={k} is larger than the number of samples n={n}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def sampled_pass_at_k(model: Path, val: Path, n: int = 8, seed: int = 0) -> dict[str, float]:
    from longcat_plugins.learning.arithmetic_warmstart import sample_answers
    from longcat_plugins.rewards.arithmetic import exact_answer

    samples, answers = sample_answers(model, val, n=n, do_sample=True, seed=seed)
    counts = [sum(exact_answer(s) == a for s in group) for group, a in zip(samples, answers, strict=True)]
    return {str(k): sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in KS if k <= n}


def final_checkpoint(checkpoints: Path) -> Path | None:
    found = sorted(checkpoints.glob("global_step_*/actor/huggingface"), key=lambda p: int(p.parts[-3].split("_")[-1]))
    return found[-1] if found and any(found[-1].glob("*.safetensors")) else None


def greedy_shares(model: Path, val: Path) -> dict[str, float]:
    """Greedy held-out ``form`` / ``arith`` / ``exact`` shares (plain transformers, in-process)."""
    from longcat_plugins.learning.arithmetic_warmstart import answer_shares, sample_answers

    responses, answers = sample_answers(model, val)
    return answer_shares([r[0] for r in responses], answers)


def settings(steps: int, test_freq: int, extra: list[str], schedule: str = "cosine") -> dict:
    """What every row of one results file must share to be compared: the run length, the
    validation interval and the overrides the bench adds to the demo recipe."""
    return {"steps": steps, "test_freq": test_freq, "overrides": [*SCHEDULES[schedule], *extra]}


def check_append(runs: list[dict], wanted: dict, out: Path) -> None:
    """Refuse to add rows to ``out`` whose rows were measured on other settings (a table must
    compare like with like); the error names the file and both settings."""
    for row in runs:
        if row.get("settings") != wanted:
            raise ValueError(
                f"--append: {out} holds a {row.get('objective')}/{row.get('trainer')} seed {row.get('seed')} row "
                f"measured with settings {row.get('settings')}, not {wanted}; write to another --out"
            )


def run(
    objective: str,
    trainer: str,
    seed: int,
    steps: int,
    assets,
    work: Path,
    test_freq: int,
    extra: list[str],
    target: float | None,
    before: dict[str, float],
    schedule: str = "cosine",
) -> dict:
    from longcat_plugins.learning.demos import prepare_demo
    from longcat_plugins.runtime.launch import resolve_config

    if trainer not in TRAINERS:
        raise ValueError(f"--trainers: unknown {trainer!r}; choices: {', '.join(TRAINERS)}")
    demo = prepare_demo("arithmetic", assets, steps, init="warm")
    run_dir = work / f"{objective}-{trainer}-seed{seed}"
    result = train_or_raise(
        resolve_config(TRAINERS[trainer][0]),
        [
            *demo.overrides,
            *seeded_run(seed, test_freq),
            "actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]",
            *SCHEDULES[schedule],
            *TRAINERS[trainer][1],
            *OBJECTIVES[objective],
            *extra,
        ],
        run_dir,
        f"{objective}/{trainer}/seed {seed}",
    )
    curve = validation_curve(result.steps)
    wall = sum(float(record.get("timing_s/step", 0.0)) for record in result.steps)
    if len(curve) < 2:
        raise RuntimeError(f"{objective}/seed {seed}: fewer than two validations in {result.metrics}")
    checkpoint = final_checkpoint(result.checkpoints)
    if checkpoint is None:
        raise RuntimeError(f"{objective}/seed {seed}: no HF export under {result.checkpoints}")
    after = greedy_shares(checkpoint, assets.val)
    entry = {
        "objective": objective,
        "trainer": trainer,
        "seed": seed,
        "steps": result.last_step,
        "wall_s": round(wall, 2),
        "acc_before": curve[0]["acc"],
        "acc_after": curve[-1]["acc"],
        "pass_at_k": sampled_pass_at_k(checkpoint, assets.val, seed=seed),
        "target": target,
        "time_to_target_s": time_to_target(curve, target),
        "form_before": before["form"],
        "form_after": after["form"],
        "arith_before": before["arith"],
        "arith_after": after["arith"],
        "settings": settings(steps, test_freq, extra, schedule),
    }
    return {"run": entry, "curve": curve, "train": train_diagnostics(result.steps), "run_dir": str(run_dir)}


def plot(curves: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    groups: dict[str, list[dict]] = {}
    for c in curves:
        groups.setdefault(f"{c['objective']} ({c['trainer']})", []).append(c)
    for label, runs in groups.items():
        steps = [p["step"] for p in runs[0]["curve"]]
        accs = np.array([[p["acc"] for p in r["curve"]][: len(steps)] for r in runs if len(r["curve"]) >= len(steps)])
        walls = np.array(
            [[p["wall_s"] for p in r["curve"]][: len(steps)] for r in runs if len(r["curve"]) >= len(steps)]
        )
        mean = accs.mean(axis=0)
        (line,) = axes[0].plot(steps, mean, marker="o", label=f"{label}, {len(accs)} seed(s)")
        axes[1].plot(walls.mean(axis=0), mean, marker="o", color=line.get_color())
        if len(accs) > 1:
            axes[0].fill_between(steps, accs.min(axis=0), accs.max(axis=0), alpha=0.2, color=line.get_color())
            axes[1].fill_between(
                walls.mean(axis=0), accs.min(axis=0), accs.max(axis=0), alpha=0.2, color=line.get_color()
            )
    axes[0].set_xlabel("GRPO step")
    axes[1].set_xlabel("training wall-clock, s (sum of timing_s/step)")
    axes[0].set_ylabel("held-out greedy exact match")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("warm-started tiny Llama on a+b-c, 2 CPU cores (band: min-max over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=seed_list, default="0,1,2", help="comma-separated run seeds")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--test-freq", type=int, default=5)
    parser.add_argument(
        "--objectives",
        type=choice_list(OBJECTIVES),
        default=",".join(OBJECTIVES),
        help=f"subset of {','.join(OBJECTIVES)}",
    )
    parser.add_argument(
        "--trainers", type=choice_list(TRAINERS), default="sync", help=f"subset of {','.join(TRAINERS)}"
    )
    parser.add_argument("--target", type=float, default=0.6, help="held-out accuracy for time_to_target_s")
    parser.add_argument(
        "--schedule", choices=sorted(SCHEDULES), default="cosine", help="learning rate over the run (default: cosine)"
    )
    parser.add_argument("--override", action="append", default=[], help="extra Hydra override (repeatable)")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--out", default="bench/results/learning.json")
    parser.add_argument("--append", action="store_true", help="add to the runs already in --out")
    args = parser.parse_args()
    objectives, trainers, seeds = args.objectives, args.trainers, args.seeds

    out = Path(args.out)
    origin, kept = provenance(seeds=seeds), earlier(out, args.append)
    curves_path = out.with_name(out.stem + "_curves.json")
    runs = json.loads(out.read_text())["runs"] if args.append and out.exists() else []
    curves = json.loads(curves_path.read_text()) if args.append and curves_path.exists() else []
    try:
        check_append(runs, settings(args.steps, args.test_freq, args.override, args.schedule), out)
    except ValueError as error:
        parser.error(str(error))

    from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start

    assets = ensure_warm_start(size=args.size)
    work = Path(tempfile.mkdtemp(prefix="longcat-learning-"))
    before = greedy_shares(assets.model, assets.val)
    for objective in objectives:
        for trainer in trainers:
            for seed in seeds:
                got = run(
                    objective,
                    trainer,
                    seed,
                    args.steps,
                    assets,
                    work,
                    args.test_freq,
                    args.override,
                    args.target,
                    before,
                    args.schedule,
                )
                runs.append(got["run"] | {"provenance": provenance(seeds=[seed])})
                curves.append(
                    {
                        "objective": objective,
                        "trainer": trainer,
                        "seed": seed,
                        "curve": got["curve"],
                        "train": got["train"],
                    }
                )
                r = got["run"]
                print(
                    f"{objective:>13} {trainer} seed {seed}: held-out {100 * r['acc_before']:.1f}% -> "
                    f"{100 * r['acc_after']:.1f}% in {r['steps']} steps, {r['wall_s']:.0f}s; pass@8 {r['pass_at_k'].get('8')}; "
                    f"form {r['form_before']:.2f} -> {r['form_after']:.2f}, arith {r['arith_before']:.2f} -> "
                    f"{r['arith_after']:.2f}; time to target {r['time_to_target_s']}; run dir {got['run_dir']}",
                    flush=True,
                )
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(stamp({"runs": runs}, origin, kept), indent=2))
                curves_path.write_text(json.dumps(curves, indent=2))
                write_sidecar(curves_path, [*kept, origin] if kept else origin)  # a list file: record beside it
                plot(curves, out.with_suffix(".png"))
    print(f"wrote {out}, {curves_path} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
