"""``longcat-plugins plot``: the curves of one or more runs, from verl's own metric files.

A run directory holds ``metrics.jsonl``, one ``{"step": N, "data": {...}}`` line per logged step
(verl's ``file`` logger, which ``longcat-plugins train``/``demo`` always enable). Panels: the
training reward, validation accuracy, pass@k, response length, then every other ``longcat/``
metric; one line per run (and per data source / k), so runs compare side by side.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from longcat_plugins.evaluation.verl_metrics import PREFIX

#: at most this many ``longcat/`` panels beyond the fixed ones (the rest are listed, not drawn)
MAX_EXTRA_PANELS = 12

_STYLES = ("-", "--", ":", "-.")
_ACC = re.compile(r"^val-core/(?P<src>.+)/acc/mean@\d+$")
_PASS = re.compile(rf"^{re.escape(PREFIX)}/(?P<src>.+)/pass@(?P<k>\d+)$")


class PlotError(ValueError):
    """A run directory cannot be plotted; the message names it."""


@dataclass(frozen=True)
class Run:
    label: str
    steps: list[dict[str, Any]]


def load_runs(run_dirs: list[Path]) -> list[Run]:
    """Each run's metric records; :class:`PlotError` naming the first directory without any."""
    from longcat_plugins.runtime.launch import read_metrics

    runs = []
    for run_dir in run_dirs:
        metrics = run_dir / "metrics.jsonl"
        if not run_dir.is_dir():
            raise PlotError(f"RUN_DIR {str(run_dir)!r} is not a directory")
        if not metrics.is_file():
            raise PlotError(
                f"RUN_DIR {str(run_dir)!r} has no metrics.jsonl (verl's file logger output: "
                "run with trainer.logger including 'file', as longcat-plugins train/demo do)"
            )
        try:
            steps = read_metrics(metrics)
        except (ValueError, KeyError) as exc:
            raise PlotError(f"RUN_DIR {str(run_dir)!r}: {metrics} is not verl's file-logger JSONL ({exc})") from None
        if not steps:
            raise PlotError(f"RUN_DIR {str(run_dir)!r}: {metrics} is empty (the run logged no step)")
        runs.append(Run(run_dir.resolve().name, steps))
    labels = [r.label for r in runs]
    if len(set(labels)) < len(labels):  # same basename in different places: use the full paths
        runs = [Run(str(d.resolve()), r.steps) for d, r in zip(run_dirs, runs, strict=True)]
    return runs


def _series(run: Run, key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for s in run.steps:
        v = s.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            xs.append(int(s["step"]))
            ys.append(float(v))
    return xs, ys


def panels_for(runs: list[Run]) -> dict[str, list[tuple[str, Callable[[str], bool]]]]:
    """Panel title -> [(legend suffix, key predicate)]; only panels with data in some run."""
    keys = sorted({k for r in runs for s in r.steps for k in s if k != "step"})
    out: dict[str, list[tuple[str, Callable[[str], bool]]]] = {}

    def add(title: str, key: str, suffix: str = "") -> None:
        out.setdefault(title, []).append((suffix, lambda k, key=key: k == key))

    for key in keys:
        if key == "critic/score/mean":
            add("reward (critic/score/mean)", key)
    for key in keys:
        if m := _ACC.match(key):
            add("validation accuracy (val-core/*/acc)", key, m["src"])
    for key in sorted(keys, key=lambda k: (k.rsplit("@", 1)[0], int(k.rsplit("@", 1)[-1]) if _PASS.match(k) else 0)):
        if m := _PASS.match(key):
            add("pass@k (longcat/val)", key, f"{m['src']} pass@{m['k']}")
    for key in keys:
        if key == "response_length/mean":
            add("response length (response_length/mean)", key)
    extra = [k for k in keys if k.startswith("longcat/") and not k.startswith(PREFIX + "/")]
    for key in extra[:MAX_EXTRA_PANELS]:
        add(key, key)
    return out


def plot_runs(runs: list[Run], output: Path) -> list[str]:
    """Draw the panels into ``output`` (PNG); returns their titles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = panels_for(runs)
    if not panels:
        raise PlotError("none of the runs has reward, accuracy, pass@k, response-length or longcat/ metrics")
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.6 * rows), squeeze=False)
    for ax, (title, lines) in zip(axes.flat, panels.items(), strict=False):
        for run_index, run in enumerate(runs):  # one colour per run, one line style per series
            series = 0
            for suffix, match in lines:
                for key in sorted({k for s in run.steps for k in s if match(k)}):
                    xs, ys = _series(run, key)
                    if xs:
                        label = run.label + (f" {suffix}" if suffix else "")
                        style = _STYLES[series % len(_STYLES)]
                        marker = "o" if len(xs) < 30 else None
                        ax.plot(xs, ys, style, color=f"C{run_index % 10}", marker=marker, markersize=3, label=label)
                        series += 1
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp.png")
    try:  # whole image or nothing
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, output)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return list(panels)
