"""``longcat-plugins``: list, doctor, validate (and, as the families land, demo, train, fuse)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from longcat_plugins import __version__
from longcat_plugins.host import Host, set_host
from longcat_plugins.selection import Selection

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="longcat-plugins")
def main() -> None:
    """longcat-plugins: the LongCat-Flash-Thinking RL system as verl plugins."""


def _host_from(config: str | None, overrides: tuple[str, ...]) -> Host:
    """The host for this process's environment, or for a recipe's ``longcat:`` section."""
    if config is None:
        return Host(Selection.from_env()).load()
    from longcat_plugins.config import SECTION, compose, host_for_section, to_plain

    cfg = to_plain(compose(config, overrides))
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
            status += f"[/] [dim]({info.reason.splitlines()[0]})"
        plugins.add_row(info.name, info.distribution, info.version, status, str(len(info.components)))
    console.print(plugins)
    comps = Table(title="components", title_justify="left")
    for col in ("component", "kind", "plugin", "enabled", "summary"):
        comps.add_column(col, overflow="fold")
    for comp, why in sorted(host.all_components(), key=lambda x: x[0].ref):
        enabled = "[green]yes" if why is None else f"[yellow]no[/] [dim]({why})"
        comps.add_row(comp.ref, comp.kind, comp.plugin, enabled, comp.summary)
    if comps.row_count:
        console.print(comps)
    else:
        console.print("[dim]no components yet[/]")
    for problem in host.problems:
        err_console.print(f"[red]problem:[/] {problem}")


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
        err_console.print(f"[red]FAIL[/] {problem}")
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
            err_console.print(f"[red]FAIL[/] {comp.ref} (plugin {comp.plugin!r}): {detail}")
        table.add_row(comp.ref, comp.plugin, comp.verl_entry, ("[green]OK[/] " if ok else "[red]FAIL[/] ") + detail)
    console.print(table if table.row_count else "[dim]no enabled components[/]")
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
def validate(config: str, overrides: tuple[str, ...]) -> None:
    """Compose CONFIG (a recipe YAML, with Hydra OVERRIDES) and check the longcat: section and
    every stock verl key that names a component. Exits 2 on problems."""
    from longcat_plugins.config import ConfigError, compose, validate_config

    try:
        cfg = compose(config, overrides)
    except Exception as exc:  # noqa: BLE001 - hydra's errors already say what is wrong
        err_console.print(f"[red]cannot compose {config}:[/] {exc}")
        sys.exit(2)
    problems, host = validate_config(cfg)
    if problems:
        err_console.print(f"[red]{ConfigError(problems, source=config)}[/]")
        sys.exit(2)
    enabled = ", ".join(c.ref for c in host.components()) or "none"
    console.print(f"[green]{config}: OK[/] (enabled components: {enabled})")


if __name__ == "__main__":  # pragma: no cover
    main()
