"""``longcat-plugins fuse CONFIG.yaml``: progress over tensors and bytes, then a summary table.

Exit codes: 0 done, 2 bad input (config, checkpoints, mismatches, existing output: nothing
written), 130 interrupted by Ctrl-C, 143 terminated by SIGTERM (either way the partial output
is removed and nothing is written). Heavy imports wait until the command runs, so
``longcat-plugins --help`` stays fast.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from longcat_plugins.console import console, err_console, esc, progress_bar

if TYPE_CHECKING:
    from longcat_plugins.fusion.engine import FusionReport


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is, so the engine's clean-up runs as for Ctrl-C
    (a ``BaseException``, so no ``except Exception`` in a plugin can swallow it)."""


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.command("fuse")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "--overwrite", is_flag=True, help="replace an existing output directory (only once the new one is complete)"
)
@click.option("-o", "--output", help="write to this directory instead of the config's output")
@click.option("--dry-run", is_flag=True, help="check the config and every checkpoint, then stop; writes nothing")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="also write the summary as JSON here")
@click.option(
    "--prefetch/--no-prefetch",
    default=True,
    show_default=True,
    help="ask the kernel to read each next chunk while this one is merged",
)
def fuse(
    config: str, overwrite: bool, output: str | None, dry_run: bool, report_path: str | None, prefetch: bool
) -> None:
    """Merge domain-expert checkpoints into one, as the fuse YAML CONFIG says (base, experts with
    weights, method and params, output, seed). See docs/fusion.md."""
    from rich.progress import DownloadColumn, TransferSpeedColumn

    from longcat_plugins.config import ConfigError
    from longcat_plugins.fusion.errors import FusionError
    from longcat_plugins.fusion.spec import load_config, run_config

    progress = progress_bar(
        DownloadColumn(binary_units=True), TransferSpeedColumn(), "{task.fields[tensors]}", on=console
    )
    tasks: dict[str, int] = {}

    def on_progress(event: object) -> None:
        from longcat_plugins.fusion.engine import ProgressEvent

        assert isinstance(event, ProgressEvent)
        if event.phase not in tasks:
            label = "norms (pass 1)" if event.phase == "norms" else "merge"
            tasks[event.phase] = progress.add_task(label, total=event.bytes_total, tensors="")
        progress.update(
            tasks[event.phase],
            completed=event.bytes_done,
            tensors=f"{event.tensors_done}/{event.tensors_total} tensors",
        )

    try:
        with _sigterm_raises():
            cfg = load_config(config)
            with progress:
                report = run_config(
                    cfg,
                    source=config,
                    output=output,
                    overwrite=overwrite,
                    progress=on_progress,
                    dry_run=dry_run,
                    prefetch=prefetch,
                )
    except (ConfigError, FusionError) as exc:
        err_console.print(str(exc), style="red", markup=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted: the partial output was removed, nothing was written", style="red")
        sys.exit(128 + signal.SIGINT)
    except Terminated:
        err_console.print("terminated: the partial output was removed, nothing was written", style="red")
        sys.exit(128 + signal.SIGTERM)
    if dry_run:
        console.print(
            f"[green]{esc(config)}: OK[/] (method {esc(report.method)}, {len(report.experts)} experts); nothing written"
        )
        return
    print_report(report)
    if report_path:
        Path(report_path).write_text(json.dumps(report.to_json(), indent=2) + "\n")


def print_report(report: FusionReport) -> None:
    """The per-expert summary table and the totals."""
    keys = sorted({k for e in report.experts for k in e.fractions})
    table = Table(title=f"fused with {esc(report.method)} -> {esc(report.output)}", title_justify="left")
    for col in ("expert", "weight", "‖θ−θ_base‖"):
        table.add_column(col, justify="right" if col != "expert" else "left")
    for key in keys:
        table.add_column(f"{esc(key)} %", justify="right")
    for e in report.experts:
        table.add_row(
            esc(e.name), f"{e.weight:g}", f"{e.delta_norm:.4g}", *(f"{100 * e.fractions.get(k, 0.0):.2f}" for k in keys)
        )
    console.print(table)
    settings = ", ".join(f"{k}={v}" for k, v in report.settings.items()) or "defaults"
    rate = report.bytes_read / report.seconds / 2**20 if report.seconds else 0.0
    console.print(
        f"params: {esc(settings)}; seed {report.seed}\n"
        f"{report.tensors_merged} tensors merged, {report.tensors_copied} copied; "
        f"read {report.bytes_read / 2**20:.1f} MiB, wrote {report.bytes_written / 2**20:.1f} MiB "
        f"in {report.seconds:.1f} s ({rate:.0f} MiB/s read"
        + (f"; norm pass {report.norm_pass_seconds:.1f} s" if report.norm_pass_seconds else "")
        + ")"
    )
    for warning in report.warnings:
        err_console.print(f"warning: {warning}", style="yellow", markup=False)
