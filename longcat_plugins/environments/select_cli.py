"""``longcat-plugins select-tool-tasks DATA.parquet -o OUT.parquet``: keep the tasks that need tools.

Exit codes: 0 done, 2 bad input (the message names the argument; nothing runs, nothing written),
1 a rollout failed (nothing written).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from longcat_plugins.console import esc, progress_bar

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


@click.command("select-tool-tasks")
@click.argument("data", metavar="DATA.parquet")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="parquet of the kept tasks")
@click.option("--model", required=True, help="the policy: a Hugging Face model directory")
@click.option("--tau1", type=float, default=0.0, show_default=True, help="keep when s_with - s_without > tau1")
@click.option("--tau2", type=float, default=0.0, show_default=True, help="... and s_with > tau2")
@click.option("--tau3", type=float, default=0.5, show_default=True, help="... and s_without < tau3")
@click.option(
    "--n", "n", type=click.IntRange(min=1), default=4, show_default=True, help="trajectories per task and path"
)
@click.option("--threshold", type=float, default=1.0, show_default=True, help="an episode reward >= this passes")
@click.option("--config", default="tool_agent_cpu", show_default=True, help="the recipe the rollout runs with")
@click.option("--work-dir", type=click.Path(file_okay=False), help="logs of both rollouts [default: a temp dir]")
@click.option(
    "--rollout",
    type=click.Choice(["hf", "vllm"]),
    default="hf",
    show_default=True,
    help="the rollout engine on the CPU runtime; vllm needs the vLLM lane (bash scripts/setup-cpu.sh --vllm)",
)
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
def select_tool_tasks_cmd(
    data: str,
    output: str,
    model: str,
    tau1: float,
    tau2: float,
    tau3: float,
    n: int,
    threshold: float,
    config: str,
    work_dir: str | None,
    rollout: str,
    overrides: tuple[str, ...],
) -> None:
    """Run every task with tools and without (two agent-loop paths, verl's rollout) and keep the
    ones where tools matter: v = s_with - s_without > tau1, s_with > tau2, s_without < tau3.
    Hydra OVERRIDES pass through to both rollouts."""
    from longcat_plugins.environments.tool_selection import SelectionError, Thresholds, select_tool_tasks
    from longcat_plugins.runtime.launch import resolve_config, rollout_overrides

    try:
        overrides = (*rollout_overrides(resolve_config(config), rollout), *overrides)
    except FileNotFoundError as exc:
        err_console.print(f"[red]--config: {esc(str(exc))}[/]")
        sys.exit(2)
    try:
        thresholds = Thresholds(tau1, tau2, tau3)
    except SelectionError as exc:
        err_console.print(f"[red]{esc(str(exc))}[/]")
        sys.exit(2)
    with progress_bar("{task.completed}/{task.total} stages", on=err_console) as progress:
        bar = progress.add_task("tool-necessity", total=2)

        def on_stage(stage: str, done: int, total: int) -> None:
            progress.update(bar, completed=done, description=stage)

        try:
            result = select_tool_tasks(
                Path(data),
                Path(output),
                model=Path(model),
                thresholds=thresholds,
                n=n,
                threshold=threshold,
                config=config,
                overrides=list(overrides),
                work_dir=Path(work_dir) if work_dir else None,
                on_stage=on_stage,
            )
        except SelectionError as exc:
            progress.stop()
            err_console.print(f"[red]{esc(str(exc))}[/]")
            sys.exit(2)
        except RuntimeError as exc:
            progress.stop()
            err_console.print(f"[red]select-tool-tasks failed:[/] {esc(str(exc))}; nothing written to {esc(output)}")
            sys.exit(1)
    kept = sum(result.kept)
    console.print(f"kept {kept} of {len(result.kept)} tasks (tau1={tau1}, tau2={tau2}, tau3={tau3}, n={n})")
    for i, (w, wo) in enumerate(zip(result.s_with, result.s_without, strict=True)):
        console.print(
            f"  row {i}: s_with={w:.3f} s_without={wo:.3f} v={w - wo:+.3f} {'kept' if result.kept[i] else '-'}"
        )
    console.print(f"wrote {output}", soft_wrap=True)
