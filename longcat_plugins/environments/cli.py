"""``longcat-plugins envgen SPEC --count N --out DIR``: generate verified tool-use environments.

Exit codes: 0 done, 2 bad input (spec errors name the file and key; an existing non-empty DIR;
nothing written), 1 generation could not reach N verified environments (nothing written),
130 interrupted (nothing written).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from longcat_plugins.console import esc, progress_bar

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


#: GenConfig knob -> help (every knob is an option: --max-chain, --min-tools, ...)
GEN_HELP = {
    "min_chain": "shortest seed chain (tools)",
    "max_chain": "longest seed chain (tools); raise it for long workflows",
    "reuse_decay": "weight of a tool used u times more than the least used: decay**u",
    "expand_min": "fewest tools BFS expansion adds per chain",
    "expand_max": "most tools BFS expansion adds per chain",
    "min_tools": "tools an environment needs (fallback chains until then; verified)",
    "tau": "growth threshold: another seed chain while f(...) > tau",
    "size_ref": "K in the complexity c(E) = |V|(1 + density)/K",
    "max_attempts": "A: attempts to sample a valid chain",
    "max_seeds": "most seed chains per environment",
    "filler_per_entity": "unrelated records per entity in each database",
    "value_pool": "draw codes, emails, names, ... from a fixed pool of this many per kind (0: off)",
}


def _gen_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    from longcat_plugins.environments.genconfig import GenConfig

    for f in reversed(dataclasses.fields(GenConfig)):
        kind = float if f.type in ("float", float) else int
        fn = click.option(
            "--" + f.name.replace("_", "-"),
            f"gen_{f.name}",
            type=kind,
            default=f.default,
            show_default=True,
            help=GEN_HELP.get(f.name, f.name),
        )(fn)
    return fn


@click.command("envgen")
@click.argument("spec")
@click.option("-n", "--count", type=click.IntRange(min=1), default=100, show_default=True, help="environments")
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False), help="output directory")
@click.option("--seed", type=int, default=0, show_default=True, help="generation seed")
@click.option("--split", default="train", show_default=True, help="extra_info.split written to the parquet")
@_gen_options
def envgen(spec: str, count: int, out: str, seed: int, split: str, **knobs: Any) -> None:
    """Build COUNT verified environments from domain SPEC (a YAML/JSON spec file or a built-in name:
    retail, travel, food_delivery) into OUT, with a verl task parquet. The generation knobs
    (--max-chain ...) are GenConfig's. See docs/environments.md."""
    from rich.progress import MofNCompleteColumn, TimeRemainingColumn

    from longcat_plugins.environments.contract import SpecError
    from longcat_plugins.environments.envgen import OutputExistsError, check_output_dir, generate_environments
    from longcat_plugins.environments.genconfig import GenConfig
    from longcat_plugins.environments.generate import GenerationError
    from longcat_plugins.environments.spec import load_spec

    config = GenConfig(**{k.removeprefix("gen_"): v for k, v in knobs.items()})
    bad = config.problems()
    if bad:
        for msg in bad:
            name, _, why = msg.partition(": ")
            err_console.print(f"--{name.replace('_', '-')}: {why}", style="red", markup=False)
        sys.exit(2)
    try:
        domain = load_spec(spec)
        check_output_dir(Path(out))
    except (SpecError, OutputExistsError) as exc:
        err_console.print(str(exc), style="red", markup=False)
        sys.exit(2)
    progress = progress_bar(
        MofNCompleteColumn(),
        "[dim]{task.fields[rate]} env/s · {task.fields[attempts]} attempts · {task.fields[rejected]} rejected",
        on=console,
        after=[TimeRemainingColumn()],
    )
    try:
        with progress:
            bar = progress.add_task(f"{domain.domain}", total=count, rate="-", attempts=0, rejected=0)

            def on_progress(done: int, attempts: int, rejected: dict[str, int]) -> None:
                elapsed = progress.tasks[0].elapsed or 0.0
                rate = f"{done / elapsed:.1f}" if elapsed > 0 else "-"
                progress.update(bar, completed=done, rate=rate, attempts=attempts, rejected=sum(rejected.values()))

            report = generate_environments(
                domain, count, out, seed=seed, split=split, config=config, progress=on_progress
            )
    except OutputExistsError as exc:
        err_console.print(str(exc), style="red", markup=False)
        sys.exit(2)
    except GenerationError as exc:
        err_console.print(f"{exc}; nothing was written", style="red", markup=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err_console.print("interrupted: the partial output was removed, nothing was written", style="red")
        sys.exit(130)
    s = report.to_dict()
    table = Table(title=f"{esc(report.domain)} -> {esc(report.out)}", title_justify="left")
    for col in ("environments", "tasks", "attempts", "rejected", "tools/env (min/mean/max)", "env/s"):
        table.add_column(col, justify="right")
    tpe = s["tools_per_env"]
    table.add_row(
        str(s["environments"]),
        str(s["tasks"]),
        str(s["attempts"]),
        str(s["rejected_total"]),
        f"{tpe['min']}/{tpe['mean']}/{tpe['max']}",
        f"{s['envs_per_s']}",
    )
    console.print(table)
    if s["rejected"]:
        console.print("rejections: " + ", ".join(f"{k} {v}" for k, v in sorted(s["rejected"].items())), markup=False)
    console.print(f"tasks parquet: {report.out / 'tasks.parquet'}", markup=False, soft_wrap=True)  # copyable
