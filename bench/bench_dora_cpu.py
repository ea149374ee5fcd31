"""DORA against verl's synchronous v1 trainer, for real, on this machine's CPU (or its GPU).

    .venv/bin/python bench/bench_dora_cpu.py [--device cpu|cuda] [--steps 8] [--seeds 0,1] [--only sync dora_1 ...]
        [--long-tokens 384] [--out bench/results]

Each run is stock ``python -m verl.trainer.main_ppo`` (the tiny local Llama, GRPO, 4 prompts x
n=4 = 16 trained samples per step) on a long-tailed workload: every 4th prompt may generate
``--long-tokens`` tokens, the others ``--short-tokens`` (``longcat_plugins.schedulers.workload``;
a random tiny model almost never stops early, so the budget is the length). Runs:

- ``sync``: verl's v1 ``sync`` trainer (``configs/cpu_demo.yaml``), one colocated ``hf``
  replica: each step waits for its longest response.
- ``dora_1`` / ``dora_2``: ``trainer.v1.trainer_mode=dora`` (``configs/dora_cpu.yaml``) with one
  or two standalone multi-version ``hf`` replicas, staleness bound 1, no admission control.
- ``dora_1_window`` / ``dora_1_length``: ``dora_1`` with admission ``version_window`` /
  ``length_aware`` (window 1: new requests are held while the trainer updates the newest version).
- ``dora_2_length``: ``dora_2`` with the length-aware admission: the same hardware as ``sync``
  (one device, one host) with a second generation engine beside the first.
- ``dora_1_window_w1`` / ``dora_2_window_w1``: the window runs with one batch in flight beyond
  the one being trained (``num_warmup_batches`` 1, the recipes' default; every other dora run
  keeps 2, which with staleness 1 leaves a third batch that is stale by the time its turn comes
  whenever generation keeps up).
- ``dora_1_replay``: ``dora_1`` with the replay of stale finished groups (``reuse_ratio`` 0.25:
  one replayed group per batch of 4), the first report's answer to discarded long groups.

All processes share the same CPU cores whatever the logical device count, so the ``dora_1*``
runs are the like-for-like comparison with ``sync`` (one generation engine each); ``dora_2`` adds
a second engine on the same cores. Reported per run and seed: wall time per trained sample and
per trained response token over the training loop (sum of verl's ``timing_s/step`` without the
first step, which absorbs warm-up) and for the whole process, ``tokens_per_s`` (trained response
tokens per loop second, steps 2+), the trained length distribution (``trained_len_mean``,
``trained_len_p90``, ``trained_len_max``, every trained response of every step: DORA's from its
``dora/trained_len`` trace, sync's from the workload's per-sample trace, since the sync trainer
trains exactly what it generates), ``censored_share`` (requests stopped because their version
left the window, over requests started) with the censored lengths, trainer wait, staleness. The
summary gives, per run, the per-token speed-up and the mean trained length over ``sync`` of the
same seed (mean and spread over seeds).

``--device cuda`` trains on the GPU (``trainer.device=cuda``; the rollout stays the ``hf``
engine, vLLM is not used); every record carries its ``"device"``. A run replaces only the
record it re-runs (same run, seed, device and ``--tag``): the others already in ``dora_cpu.json``
are kept (a run planned but cut off too), and a new ``sync`` moves its group's earlier records to
``<tag>_prev_session`` (:func:`merge_records`), so a lent GPU session that re-runs ``sync`` with
what else fits adds to the file without comparing across sessions.
Every run polls verl's v1 replay buffer every ``--poll-interval`` seconds (50 ms, the CPU
runtime's; verl's own 2 s rounds each step's generation wait of a tiny model up to 2 s, which is
what the GPU records before ``poll_interval_s`` measured). ``--only`` runs in the order given. Each run's start-up is broken down into phases
(``"startup"``, from when verl's milestone lines arrived; ``timed.log`` in each run folder).
``--task-runner``, ``--agent-loops`` and ``--hf-servers`` choose where verl's TaskRunner runs,
when the sync trainer starts its agent-loop workers and when the hf replicas' servers start
(each record's ``startup`` says what the run did), for the start-up A/Bs ``taskrunner_cpu``,
``agent_loops_cpu`` and ``hf_servers_cpu``.
``--overlap N`` starts the runs N at a time (``bench/overlap.py``): each is held before its first
step (the start gate of ``schedulers/start_gate.py``, which the bench names as the run's
agent-loop manager) until every run of its batch is up and the runs before it have ended, so
the start-ups (about two minutes a run on the lent H100, against 20-60 s of steps) are spent side
by side, no two runs train at once and no run trains while another starts up. The time a run
was held is left out of its start-up and process time (``startup.gate_wait_s``), and its record
says which runs were alive (idle at their gates) beside it and when it started, was up, was let
train and ended (``overlap``). A run that fails is reported and the others go on; the bench then
exits non-zero, naming every failure.
Results: ``<out>/<name>.json`` (with its provenance) and ``<out>/<name>.png``; ``--name`` defaults to
``dora_cpu`` (a separate study, like the start-up A/B ``dora_startup_cpu``, names its own).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from longcat_plugins.learning.assets import ensure_assets
from longcat_plugins.runtime.fast_start import ENV_PRELOAD
from longcat_plugins.runtime.fixes import CPU_POLL_INTERVAL, ENV_POLL
from longcat_plugins.runtime.in_driver import CHOICES, ENV_TASK_RUNNER, STARTED
from longcat_plugins.runtime.launch import configs_dir, run_training
from longcat_plugins.runtime.servers_ahead import CHOICES as HF_SERVERS_CHOICES
from longcat_plugins.runtime.servers_ahead import ENV_HF_SERVERS
from longcat_plugins.runtime.servers_ahead import STARTED as HF_SERVERS_STARTED
from longcat_plugins.schedulers.agent_loops_ahead import CHOICES as AGENT_LOOPS_CHOICES
from longcat_plugins.schedulers.agent_loops_ahead import ENV_AGENT_LOOPS
from longcat_plugins.schedulers.agent_loops_ahead import SPAWNED as AGENT_LOOPS_SPAWNED
from longcat_plugins.schedulers.agent_loops_ahead import STARTED as AGENT_LOOPS_STARTED
from longcat_plugins.schedulers.workload import AGENT_NAME, ENV_TRACE, write_skewed_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overlap import gate_env, in_batches  # noqa: E402
from provenance import earlier, provenance, stamp  # noqa: E402
from training_run import seed_overrides  # noqa: E402

SAMPLES_PER_STEP = 16  # data.train_batch_size 4 x rollout.n 4 in grpo_arithmetic


DORA_KEY = "longcat.settings.scheduler.dora"


def runs(long_tokens: int) -> dict[str, tuple[str, list[str]]]:
    common = [
        f"data.max_response_length={long_tokens}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={configs_dir() / 'agent_loops' / 'skewed.yaml'}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
    ]
    dora = [*common, "trainer.v1.separate_async.num_warmup_batches=2", f"{DORA_KEY}.staleness=1"]
    one = [*dora, "actor_rollout_ref.rollout.n_gpus_per_node=1", "ray_kwargs.ray_init.num_gpus=2"]

    def admit(kind: str) -> list[str]:  # admission control, window 1
        return [f"+{DORA_KEY}.admission={kind}", f"+{DORA_KEY}.admission_window=1"]

    # one batch in flight beyond the one being trained (the recipes' own num_warmup_batches): with
    # staleness 1 no finished group can outlive its window waiting in line (the other runs keep 2)
    in_flight_1 = "trainer.v1.separate_async.num_warmup_batches=1"
    return {
        "sync": ("cpu_demo", common),
        "dora_1": ("dora_cpu", one),
        "dora_1_window": ("dora_cpu", [*one, *admit("version_window")]),
        "dora_1_length": ("dora_cpu", [*one, *admit("length_aware")]),
        "dora_1_replay": ("dora_cpu", [*one, f"+{DORA_KEY}.reuse_ratio=0.25"]),
        # verl's serial setup order: the standalone replicas start after the trainer's engines, the
        # agent-loop workers after trainer.init() (verl's own manager class)
        "dora_1_serial": (
            "dora_cpu",
            [
                *one,
                f"+{DORA_KEY}.prestart_replicas=false",
                "actor_rollout_ref.rollout.agent.agent_loop_manager_class=null",
            ],
        ),
        "dora_2": ("dora_cpu", dora),
        "dora_1_window_w1": ("dora_cpu", [*one, *admit("version_window"), in_flight_1]),
        "dora_2_window_w1": ("dora_cpu", [*dora, *admit("version_window"), in_flight_1]),
        # two standalone engines (the GPU host's rollout is the hf engine on its CPU cores, which one
        # engine leaves idle)
        "dora_2_window": ("dora_cpu", [*dora, *admit("version_window")]),
        "dora_2_length": ("dora_cpu", [*dora, *admit("length_aware")]),
    }


AGENT_LOOP_MANAGER = "actor_rollout_ref.rollout.agent.agent_loop_manager_class"


def gated_overrides(config: str, extra: list[str]) -> list[str]:
    """``extra`` with the run's agent-loop manager replaced by its start-gated twin
    (``schedulers/start_gate.py``): the manager the run's overrides name, else its recipe's, else
    verl's. A manager with no gated twin stops the bench, naming it."""
    from omegaconf import OmegaConf

    from longcat_plugins.schedulers.start_gate import GATED

    named = [o for o in extra if o.lstrip("+").split("=", 1)[0] == AGENT_LOOP_MANAGER]
    if named:
        value: str | None = named[-1].split("=", 1)[1]
    else:
        value = OmegaConf.select(OmegaConf.load(configs_dir() / f"{config}.yaml"), AGENT_LOOP_MANAGER)
    value = None if value in (None, "", "null") else value
    if value not in GATED:
        raise SystemExit(f"--overlap: {config} runs the agent-loop manager {value}, which has no start-gated twin")
    # ``++``: set whether or not the recipe has the key (verl's own config does not)
    return [o for o in extra if o not in named] + [f"++{AGENT_LOOP_MANAGER}={GATED[value]}"]


#: start-up milestones, each the first output line matching: the driver's own imports and config
#: (verl prints its Ray arguments just before ``ray.init``), Ray up, the TaskRunner actor's first
#: line (its process and imports), verl's worker-group creation, the actor/ref engines built,
#: and ``trainer.init()`` done (rollout replicas, reward loop, checkpoint engine)
MILESTONES = {
    "driver_ready": re.compile(r"ray init kwargs:"),
    "ray_up": re.compile(r"Started a local Ray instance"),
    "task_runner_up": re.compile(
        r"\(TaskRunner\w* pid=|" + re.escape(STARTED).replace(re.escape("{name}"), r"TaskRunner\w*")
    ),
    "worker_group_create": re.compile(r"create worker group"),
    "engines_ready": re.compile(r"actor and ref model engine initialized"),
    "ready_to_fit": re.compile(r"ready to fit"),
}


def startup_phases(timed: list[tuple[float, str]], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the time before training goes, from when each milestone's line reached the bench.

    ``startup_s`` runs from the launch to the start of step 1 (the ``step:1`` line's arrival
    less verl's ``timing_s/step`` of step 1); ``first_step_extra_s`` is how much longer step 1
    took than the median later step (lazily spawned agent-loop workers, first kernels and
    compilation). Ray forwards worker output with a delay of up to ~0.5 s.
    """
    seen: dict[str, float] = {}
    step1_line = None
    for t, line in timed:
        for name, pattern in MILESTONES.items():
            if name not in seen and pattern.search(line):
                seen[name] = t
        if step1_line is None and STEP1.search(line):
            step1_line = t
    step_s = [s["timing_s/step"] for s in steps]
    out: dict[str, Any] = {"milestones_s": {k: round(v, 3) for k, v in sorted(seen.items(), key=lambda kv: kv[1])}}
    if step1_line is not None and step_s:
        start = step1_line - step_s[0]
        out["startup_s"] = round(start, 3)
        out["first_step_s"] = round(step_s[0], 3)
        out["first_step_extra_s"] = round(step_s[0] - statistics.median(step_s[1:]), 3) if len(step_s) > 1 else None
        marks = [("launch", 0.0), *sorted(seen.items(), key=lambda kv: kv[1]), ("first_step_start", start)]
        out["phases_s"] = {f"{a}->{b}": round(tb - ta, 3) for (a, ta), (b, tb) in zip(marks, marks[1:], strict=False)}
    waited = next((float(m.group(1)) for _, line in timed if (m := GATE_OPENED.search(line))), None)
    if waited is not None and "startup_s" in out:  # held for its turn (--overlap): not start-up
        out["gate_wait_s"] = round(waited, 3)
        out["startup_s_with_gate"] = out["startup_s"]
        out["startup_s"] = round(out["startup_s"] - waited, 3)
        last = list(out["phases_s"])[-1]
        out["phases_s"][last] = round(out["phases_s"][last] - waited, 3)
    if steps:  # the dora trainer's own account of its start-up order (absent under sync)
        for key in PRESTART_METRICS:
            if f"dora/startup/{key}" in steps[0]:
                out[key] = steps[0][f"dora/startup/{key}"]
    return out


#: step 1's metrics that say which start-up order a dora run took (schedulers/prestart.py)
PRESTART_METRICS = ("replicas_prestarted", "replicas_create_s", "agent_loops_prestarted")


STEP1 = re.compile(r"\bstep:1 - ")
#: the line ``schedulers/start_gate.py`` prints when a held run may train
GATE_OPENED = re.compile(r"longcat start gate: open after ([0-9.]+) s")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def length_stats(lengths: list[int]) -> dict[str, float | int | None]:
    if not lengths:
        return {"trained_len_mean": None, "trained_len_p90": None, "trained_len_max": None, "trained_len_n": 0}
    values = np.asarray(lengths, dtype=np.float64)
    return {
        "trained_len_mean": float(values.mean()),
        "trained_len_p90": float(np.percentile(values, 90)),
        "trained_len_max": float(values.max()),
        "trained_len_n": len(lengths),
    }


def summarise(
    name: str, steps: list[dict[str, Any]], process_s: float, trained: list[int], generated: list[int]
) -> dict[str, Any]:
    step_s = [s["timing_s/step"] for s in steps]
    samples = SAMPLES_PER_STEP * len(steps)
    tokens = [s["response_length/mean"] * SAMPLES_PER_STEP for s in steps]
    after = sum(step_s[1:])
    out: dict[str, Any] = {
        "run": name,
        "steps": len(steps),
        "trained_samples": samples,
        "loop_s": sum(step_s),
        "s_per_sample": sum(step_s) / samples,
        "s_per_sample_after_first": after / (SAMPLES_PER_STEP * (len(steps) - 1)) if len(steps) > 1 else None,
        "trained_response_tokens": sum(tokens),
        "ms_per_trained_token_after_first": 1000 * after / sum(tokens[1:]) if len(steps) > 1 else None,
        "tokens_per_s": sum(tokens[1:]) / after if len(steps) > 1 and after > 0 else None,
        "samples_per_s": SAMPLES_PER_STEP * (len(steps) - 1) / after if len(steps) > 1 and after > 0 else None,
        "process_s": process_s,
        "process_s_per_sample": process_s / samples,
        "step_s_median": statistics.median(step_s),
        "gen_wait_s_mean": statistics.mean(s.get("timing_s/gen", 0.0) for s in steps),
        # each step's wait: with verl's 2 s poll they come in whole polls (poll_interval_s)
        "gen_wait_s": [round(s.get("timing_s/gen", 0.0), 3) for s in steps],
        "response_length_mean": statistics.mean(s["response_length/mean"] for s in steps),
        "reward_mean": statistics.mean(s["critic/score/mean"] for s in steps),
        **length_stats(trained),
        "generated_len_mean": float(np.mean(generated)) if generated else None,
        "generated_samples": len(generated),
    }
    if "dora/staleness/mean" in steps[0]:
        started = sum(s.get("dora/lb/started_requests", 0.0) for s in steps)
        aborted = sum(s.get("dora/lb/stale_aborted", 0.0) for s in steps)
        measured = sum(s.get("dora/lb/censored_measured", 0.0) for s in steps)
        out["staleness_mean"] = statistics.mean(s["dora/staleness/mean"] for s in steps)
        out["versions_in_batch_max"] = max(s["dora/versions_in_batch"] for s in steps)
        out["request_load_ratio_mean"] = statistics.mean(s["dora/request_load_ratio"] for s in steps)
        out["started_requests"] = started
        out["stale_aborted"] = aborted
        out["censored_share"] = aborted / started if started else 0.0
        out["censored_len_mean"] = (
            sum(s.get("dora/lb/censored_tokens", 0.0) for s in steps) / measured if measured else None
        )
        out["held_requests"] = sum(s.get("dora/lb/held_requests", 0.0) for s in steps)
        out["evicted_stale_groups"] = sum(s.get("dora/evicted_stale_groups", 0.0) for s in steps)
        out["replayed_groups"] = sum(s.get("dora/replay/replayed", 0.0) for s in steps)
    else:
        out["censored_share"] = 0.0  # sync stops no request
    return out


#: the tag an earlier invocation's records move to when a new ``sync`` replaces their baseline
PREVIOUS = "_prev_session"
#: a moved session's tag: the group's own tag, then ``_prev_session`` and how many sessions back
OLDER = re.compile(rf"(?P<base>.*){PREVIOUS}(?:_(?P<n>\d+))?")


def _key(r: dict[str, Any]) -> tuple[str, str, str, int]:
    return (r.get("device", "cpu"), r.get("tag", ""), r["run"], r["seed"])


def merge_records(earlier: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results file's records after this invocation wrote ``new``: each new record replaces
    the earlier one of its (device, tag, run, seed); an earlier record it does not replace is
    kept (a run planned but cut off loses nothing). When ``new`` holds the ``sync`` of a
    (device, tag, seed), the earlier records of that group (their sync and the runs re-run now
    included) move to the tag ``<tag>_prev_session``, and the sessions before it one further back
    (``<tag>_prev_session_2``, ``_3``, ...), so every ratio stays against the sync of its own
    invocation and every earlier session stays whole."""
    replaced = {_key(r) for r in new}
    rebased = {
        (r.get("device", "cpu"), r.get("tag", ""), r["seed"]) for r in new if r["run"] == "sync" + r.get("tag", "")
    }
    kept: list[dict[str, Any]] = []
    moved: list[dict[str, Any]] = []
    for r in earlier:
        if "seed" not in r:
            continue
        group = (r.get("device", "cpu"), r.get("tag", ""), r["seed"])
        if group in rebased:  # every earlier record of the group, its sync and what was re-run too
            tag = r.get("tag", "")
            moved.append(r | {"run": r["run"][: len(r["run"]) - len(tag)] + tag + PREVIOUS, "tag": tag + PREVIOUS})
        elif _key(r) not in replaced:
            kept.append(r)
    for k, r in enumerate(kept):  # the sessions already moved back go one further
        tag = r.get("tag", "")
        m = OLDER.fullmatch(tag)
        if m and (r.get("device", "cpu"), m["base"], r["seed"]) in rebased:
            older = f"{m['base']}{PREVIOUS}_{int(m['n'] or 1) + 1}"
            kept[k] = r | {"run": r["run"][: len(r["run"]) - len(tag)] + older, "tag": older}
    return kept + moved + new


def compare(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per run: tokens/s and mean trained length over sync of the same seed and device, mean
    and spread (population std, min, max) over seeds."""
    base = {(r["device"], r["seed"], r.get("tag", "")): r for r in results if r["run"] == "sync" + r.get("tag", "")}
    table: dict[str, dict[str, list[float]]] = {}
    for r in results:
        ref = base.get((r["device"], r["seed"], r.get("tag", "")))
        if ref is None or r["tokens_per_s"] is None or not ref["tokens_per_s"] or not ref["trained_len_mean"]:
            continue
        row = table.setdefault(f"{r['run']} ({r['device']})", {"token_speedup": [], "len_ratio": [], "seeds": []})
        row["token_speedup"].append(r["tokens_per_s"] / ref["tokens_per_s"])
        row["len_ratio"].append((r["trained_len_mean"] or 0.0) / ref["trained_len_mean"])
        row["seeds"].append(r["seed"])
    out = {}
    for name, row in table.items():
        out[name] = {"seeds": row["seeds"]}
        for key in ("token_speedup", "len_ratio"):
            values = np.asarray(row[key], dtype=np.float64)
            out[name][key] = {
                "mean": float(values.mean()),
                "std": float(values.std()),
                "min": float(values.min()),
                "max": float(values.max()),
                "per_seed": [float(v) for v in values],
            }
    return out


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key, label in (
        (left, "token_speedup", "trained tokens/s over sync"),
        (right, "len_ratio", "mean trained length / sync's"),
    ):
        means = [summary[n][key]["mean"] for n in names]
        spread = [[m - summary[n][key]["min"] for n, m in zip(names, means, strict=True)],
                  [summary[n][key]["max"] - m for n, m in zip(names, means, strict=True)]]  # fmt: skip
        ax.bar(names, means, yerr=spread, capsize=3, color="#4c72b0" if key == "token_speedup" else "#dd8452")
        ax.axhline(1.0, color="grey", lw=1, ls=":")
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=30, labelsize=7)
    fig.suptitle("DORA vs verl sync, long-tailed responses (steps 2+; bars: mean over seeds, min-max)", fontsize=9)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--long-tokens", type=int, default=384)
    parser.add_argument("--short-tokens", type=int, default=8)
    parser.add_argument("--long-every", type=int, default=4)
    parser.add_argument("--seeds", default="0", help="comma-separated run seeds (data order, sampling)")
    parser.add_argument("--only", nargs="*", help=f"run only these ({', '.join(runs(384))})")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--name", default="dora_cpu", help="results file stem in --out (<name>.json, <name>.png): a separate study"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="trainer.device of every run")
    parser.add_argument(
        "--work", type=Path, default=None, help="where the run folders go (each keeps train.log and timed.log)"
    )
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra Hydra overrides for every run (recorded)"
    )
    parser.add_argument("--tag", default="", help="suffix of every run's name in the results (an A/B variant)")
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=CPU_POLL_INTERVAL,
        help="seconds between the v1 replay buffer's polls, every run and device (LONGCAT_V1_POLL_INTERVAL; "
        "verl's own is 2.0, which quantises a tiny model's generation wait into 2 s steps)",
    )
    parser.add_argument(
        "--preload",
        default="",
        help="LONGCAT_RAY_PRELOAD of every run: modules Ray's prestarted workers import ahead (1: verl's main_ppo)",
    )
    parser.add_argument(
        "--task-runner",
        choices=CHOICES,
        default="driver",
        help="LONGCAT_TASK_RUNNER of every run: verl's TaskRunner in the driver process (default) or its own actor",
    )
    parser.add_argument(
        "--agent-loops",
        choices=AGENT_LOOPS_CHOICES,
        default="ahead",
        help="LONGCAT_AGENT_LOOPS of every run: the agent-loop workers' processes start beside the trainer's "
        "engines and the sync trainer's manager beside its replica (default), or in verl's order, inside step 1",
    )
    parser.add_argument(
        "--hf-servers",
        choices=HF_SERVERS_CHOICES,
        default="ahead",
        help="LONGCAT_HF_SERVERS of every run: the hf replicas' server processes start beside the trainer's "
        "engines (default) or in verl's order, after them",
    )
    parser.add_argument(
        "--overlap",
        type=int,
        default=1,
        help="runs started at once: each batch of N starts up together, then its runs train one at a time, "
        "in order, each held before its first step until its turn (1: one after another, ungated)",
    )
    args = parser.parse_args()
    if args.overlap < 1:
        parser.error(f"--overlap: at least 1, got {args.overlap}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    known = runs(args.long_tokens)
    unknown = sorted(set(args.only or []) - set(known))
    if unknown:
        print(f"error: --only: unknown run(s) {unknown}; choices: {list(known)}", file=sys.stderr)
        raise SystemExit(2)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: --device cuda: torch sees no CUDA device on this machine", file=sys.stderr)
            raise SystemExit(2)

    work = Path(tempfile.mkdtemp(prefix="bench_dora_", dir=args.work))
    assets = ensure_assets(size="tiny")
    skewed = write_skewed_dataset(
        assets.train,
        work / "skewed.parquet",
        long_every=args.long_every,
        short_tokens=args.short_tokens,
        long_tokens=args.long_tokens,
    )
    order = list(dict.fromkeys(args.only)) if args.only else list(known)  # --only's order: what matters first
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{args.name}.json"
    kept = earlier(target)  # the other device's records are kept
    # every earlier record stays until this invocation re-runs it (merge_records: a lent GPU
    # session re-runs `sync` with whatever else fits; each ratio keeps a baseline of its own session)
    previous = [r for r in json.loads(target.read_text())["results"] if "seed" in r] if target.exists() else []
    origin = provenance(seeds=seeds)
    workload = {
        "long_every": args.long_every,
        "short_tokens": args.short_tokens,
        "long_tokens": args.long_tokens,
        "samples_per_step": SAMPLES_PER_STEP,
        "steps": args.steps,
    }
    results: list[dict[str, Any]] = []
    summary = compare(previous)

    def run_one(name: str, seed: int, gate: Path | None = None, on_start: Any = None) -> dict[str, Any]:
        """One run to its record; with ``gate``, held before its first step until the file exists."""
        config, extra = known[name]
        env = {
            ENV_PRELOAD: args.preload,
            ENV_POLL: str(args.poll_interval),
            ENV_TASK_RUNNER: args.task_runner,
            ENV_AGENT_LOOPS: args.agent_loops,
            ENV_HF_SERVERS: args.hf_servers,
        }
        if gate is not None:
            extra = gated_overrides(config, extra)
            env |= gate_env(gate)
        ray_tmp = tempfile.mkdtemp(prefix="lcray", dir="/tmp")
        run_dir = work / f"{name}_s{seed}"
        run_dir.mkdir(parents=True)
        dora_trace, workload_trace = run_dir / "dora_trace.jsonl", run_dir / "workload.jsonl"
        env |= {"LONGCAT_DORA_TRACE": str(dora_trace), ENV_TRACE: str(workload_trace)}
        start = time.perf_counter()
        timed: list[tuple[float, str]] = []
        with (run_dir / "timed.log").open("w", buffering=1) as timed_log:  # line by line: a cut run keeps its log

            def on_line(line: str) -> None:
                timed.append((time.perf_counter() - start, line.rstrip()))
                timed_log.write(f"{timed[-1][0]:9.3f} {timed[-1][1]}\n")

            result = run_training(
                configs_dir() / f"{config}.yaml",
                [
                    f"data.train_files={skewed}",
                    f"data.val_files={assets.val}",
                    f"actor_rollout_ref.model.path={assets.model}",
                    f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
                    f"trainer.total_training_steps={args.steps}",
                    f"trainer.device={args.device}",
                    *seed_overrides(seed),
                    *extra,
                    *args.set,
                ],
                run_dir,
                env=env,
                on_line=on_line,
                on_start=on_start,
            )
        elapsed = time.perf_counter() - start
        if result.returncode != 0 or len(result.steps) != args.steps:
            raise SystemExit(f"{name} (seed {seed}) failed (exit {result.returncode}); see {result.log}")
        generated = [int(r["len"]) for r in read_jsonl(workload_trace)]
        if name == "sync":  # verl's sync trainer trains exactly the samples it generated
            trained = generated
        else:
            trained = [n for r in read_jsonl(dora_trace) for n in r.get("trained_lengths", [])]
        if len(trained) != SAMPLES_PER_STEP * args.steps:
            raise SystemExit(
                f"{name} (seed {seed}): {len(trained)} trained lengths recorded for "
                f"{SAMPLES_PER_STEP * args.steps} trained samples; see {run_dir}"
            )
        startup = startup_phases(timed, result.steps) | {
            "ray_preload": args.preload,
            "task_runner": args.task_runner,
            # whether the trainer did create its agent-loop manager beside the replicas (sync)
            "agent_loops_ahead": any(AGENT_LOOPS_STARTED in line for _, line in timed),
            # whether the agent-loop workers' processes started beside the trainer's engines
            "agent_loop_processes_ahead": any(AGENT_LOOPS_SPAWNED in line for _, line in timed),
            # whether the hf replicas' server processes started beside the trainer's engines
            "hf_servers_ahead": any(HF_SERVERS_STARTED in line for _, line in timed),
        }
        if gate is not None and "gate_wait_s" not in startup:
            raise SystemExit(f"{name} (seed {seed}): no start-gate line in its output; see {run_dir / 'timed.log'}")
        held = startup.get("gate_wait_s", 0.0)  # waiting for its turn is not this run's time
        record = {"device": args.device, "seed": seed} | summarise(
            name, result.steps, elapsed - held, trained, generated
        )
        record["startup"] = startup
        record["poll_interval_s"] = args.poll_interval
        if args.tag or args.set:  # a variant: compared with the sync run of the same tag
            record |= {"run": name + args.tag, "tag": args.tag, "overrides": list(args.set)}
        return record

    def save(record: dict[str, Any]) -> dict[str, Any]:
        """Add ``record`` and rewrite the results file: a run cut short (a lent GPU's time runs
        out) keeps the ones before it."""
        results.append(record)
        print(json.dumps(record), flush=True)
        merged = merge_records(previous, results)
        summary = compare(merged)
        report = {"workload": workload, "cpu_count": os.cpu_count(), "summary_vs_sync": summary, "results": merged}
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(stamp(report, origin, kept), indent=2))
        os.replace(tmp, target)
        return summary

    plan = [(name, seed) for seed in seeds for name in order]
    failed: list[str] = []
    if args.overlap == 1:  # one after another, as verl runs them
        for name, seed in plan:
            summary = save(run_one(name, seed))
    else:  # a failed run is reported and the others, already up, go on training
        jobs = [
            (f"{name} (seed {seed})", lambda gate, on_start, n=name, s=seed: run_one(n, s, gate, on_start))
            for name, seed in plan
        ]
        for k, record, error, overlap in in_batches(jobs, args.overlap, work / "gates"):
            if error is not None:
                failed.append(f"{jobs[k][0]}: {error}")
                print(f"error: {failed[-1]}", file=sys.stderr, flush=True)
            else:
                summary = save(record | {"overlap": overlap})

    plot(summary, args.out / f"{args.name}.png")
    for name, row in summary.items():
        tok, length = row["token_speedup"], row["len_ratio"]
        print(
            f"{name:24s} tokens/s x{tok['mean']:.2f} (min {tok['min']:.2f}, max {tok['max']:.2f})  "
            f"trained length x{length['mean']:.2f} (min {length['min']:.2f}, max {length['max']:.2f})  seeds {row['seeds']}"
        )
    print(f"wrote {target} and {args.out / f'{args.name}.png'}")
    if failed:
        raise SystemExit(f"{len(failed)} of {len(plan)} runs failed:\n" + "\n".join(failed))


if __name__ == "__main__":
    main()
