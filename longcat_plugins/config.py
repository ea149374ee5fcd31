"""The ``longcat:`` YAML section as a typed schema, and validation of whole configs.

One YAML holds stock verl keys and ours: recipes compose verl's own ``ppo_trainer`` config
(``hydra.searchpath: [pkg://verl.trainer.config]``) and add a ``longcat:`` section. Validation
reports *every* problem with its key path, and for unknown names the available choices; it
also checks the stock verl keys that select a component by name (``loss_mode``,
``adv_estimator``, ...), so a typo fails before Ray starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from longcat_plugins.components import Family
from longcat_plugins.schema import (  # noqa: F401 - re-exported: the public home of these names
    ConfigError,
    ConfigProblem,
    _close,
    build_settings,
    check_mapping,
    check_value,
)
from longcat_plugins.schema import select as _select

SECTION = "longcat"


@dataclass
class LongcatSection:
    """Schema of the ``longcat:`` section. Every key is optional."""

    #: allow-list of plugin names, distribution names or ``family:component`` refs (empty: all)
    enable: list[str] = field(default_factory=list)
    #: block-list, same forms as ``enable``
    disable: list[str] = field(default_factory=list)
    #: load third-party plugins found through entry points (built-ins always load)
    autoload: bool = True
    #: stop before training when a plugin is broken or two plugins clash
    strict: bool = True
    #: per-component settings: ``settings.<family>.<component>.<key>``, typed by the component's schema
    settings: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


# -- the longcat: section -------------------------------------------------------------------------


def to_plain(cfg: Any) -> Any:
    """DictConfig/ListConfig -> plain containers (interpolations resolved); plain data unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(cfg, DictConfig | ListConfig):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    return cfg


def validate_section(section: Any, host: Any = None, where: str = SECTION) -> list[ConfigProblem]:
    """Problems of a ``longcat:`` section: schema, enable/disable names, settings per component."""
    from longcat_plugins.host import Host
    from longcat_plugins.selection import Selection

    section = to_plain(section)
    if section is None:
        return []
    if not isinstance(section, Mapping):
        return [ConfigProblem(where, f"expected a mapping, got {type(section).__name__}")]
    problems = check_mapping(section, LongcatSection, where)
    bad = {p.path for p in problems}
    selected: Any = None  # the host this section selects, built only when a name is installed twice

    def well_typed(key: str) -> bool:  # names are checked wherever the schema let them through
        return not any(path == f"{where}.{key}" or path.startswith(f"{where}.{key}[") for path in bad)

    # names are checked against everything installed, whatever this process has enabled
    discovery = host if host is not None else Host(Selection()).load()
    plugin_names = sorted(discovery.plugins)
    dist_names = sorted({i.distribution for i in discovery.plugins.values() if i.distribution})
    refs = sorted(c.ref for c, _ in discovery.all_components())
    for key in ("enable", "disable"):
        if not well_typed(key):
            continue
        for i, pattern in enumerate(section.get(key) or ()):
            if not _pattern_known(pattern, plugin_names, dist_names, refs):
                kind = "component" if ":" in pattern else "plugin"
                choices = refs if ":" in pattern else plugin_names + [d for d in dist_names if d not in plugin_names]
                problems.append(
                    ConfigProblem(f"{where}.{key}[{i}]", f"unknown {kind} {pattern!r}" + _close(pattern, choices))
                )
    if not isinstance(section.get("settings") or {}, Mapping):
        return problems
    families = [f.value for f in Family]
    for fam, comps in (section.get("settings") or {}).items():
        if not isinstance(comps, Mapping | None):
            continue  # already reported by the schema check
        if fam not in families:
            problems.append(ConfigProblem(f"{where}.settings.{fam}", "unknown family" + _close(fam, families)))
            continue
        known: dict[str, list[Any]] = {}
        for c, _ in discovery.all_components():
            if c.family.value == fam:
                known.setdefault(c.name, []).append(c)
        for name, raw in (comps or {}).items():
            path = f"{where}.settings.{fam}.{name}"
            if not isinstance(raw, Mapping | None):
                continue
            if name not in known:
                problems.append(ConfigProblem(path, f"unknown {fam} component" + _close(name, list(known))))
                continue
            component = known[name][0]
            if len(known[name]) > 1:  # installed twice: the settings are for the one the selection keeps
                if selected is None:
                    selected = host if host is not None else host_for_section(selection_part(section, where))
                component = next((c for c in selected.components(fam) if c.name == name), None)
                if component is None:
                    continue  # disabled or still clashing: the clash itself is reported where it is found
            if component.kind == "policy_loss" and raw:
                problems.append(ConfigProblem(path, _LOSS_KNOBS_HOME.format(name=name)))
                continue
            if fam == "fusion" and raw:
                problems.append(ConfigProblem(path, _FUSION_PARAMS_HOME.format(name=name)))
                continue
            try:
                build_settings(component, raw or {}, path)
            except ConfigError as exc:
                problems += exc.problems
    return problems


def selection_part(section: Mapping[str, Any] | None, where: str = SECTION) -> dict[str, Any]:
    """The keys of ``section`` that choose plugins (``enable``, ``disable``, ``autoload``), where
    they are well typed: a config whose settings are wrong still selects what it says."""
    if not isinstance(section, Mapping):
        return {}
    part = {k: section[k] for k in ("enable", "disable", "autoload") if k in section}
    bad = {p.path.split("[")[0] for p in check_mapping(part, LongcatSection, where)}
    return {k: v for k, v in part.items() if f"{where}.{k}" not in bad}


#: policy-loss knobs have one home, verl's own actor config, because that is what verl hands the loss
_LOSS_KNOBS_HOME = (
    "policy-loss knobs are not read from longcat.settings: set them under "
    "actor_rollout_ref.actor.policy_loss (with policy_loss._target_ naming the loss's PolicyLossConfig "
    "subclass, and policy_loss.loss_mode: {name}); the loss reads them from config.policy_loss"
)
#: fusion parameters have one home too, the fuse spec's ``params``: no training run reads them
_FUSION_PARAMS_HOME = (
    "fusion methods are not configured from longcat.settings (nothing reads it): give {name}'s parameters "
    "under params in the fuse spec (method: {name}), as longcat-plugins fuse SPEC reads them"
)


def _pattern_known(pattern: str, plugins: list[str], dists: list[str], refs: list[str]) -> bool:
    import fnmatch

    from longcat_plugins.selection import normalize_dist

    if ":" in pattern:
        return any(fnmatch.fnmatchcase(r, pattern) for r in refs)
    return any(fnmatch.fnmatchcase(p, pattern) for p in plugins) or any(
        fnmatch.fnmatchcase(normalize_dist(d), normalize_dist(pattern)) for d in dists
    )


# -- whole configs -----------------------------------------------------------------------------


#: component kind -> (when the stock key applies, the key) for names chosen by path+name pairs
_PATH_SELECTED = {
    "reward_function": ("reward.custom_reward_function", "pkg://longcat_plugins.reward_functions"),
    "sampler": ("trainer.v1.sampler.custom_sampler", "pkg://longcat_plugins.samplers"),
}


def validate_verl_selections(cfg: Mapping[str, Any], host: Any, settings_ok: bool = True) -> list[ConfigProblem]:
    """Stock verl keys that name a component must name a stock one or an enabled one of ours.

    A selected component's own recipe checks read ``longcat.settings``; with ``settings_ok``
    false (the section has problems, already reported) a check that trips over a malformed
    setting adds nothing rather than a traceback."""
    import importlib

    from longcat_plugins.verl_bridge import TARGETS, bridge

    problems = []
    for kind, target in TARGETS.items():
        key = target.selected_by
        value = _select(cfg, key)
        if not isinstance(value, str) or not value:
            continue
        if kind == "reward_manager" and _select(cfg, "reward.reward_manager.source") not in (None, "register"):
            continue
        if kind == "trainer" and _select(cfg, "trainer.use_v1") is False:
            continue
        module = importlib.import_module(target.module)
        stock = bridge.stock_names(kind, module) + list(target.setting_values)
        ours = [c.name for c in host.components(kind=kind)]
        if kind == "agent_loop":
            stock += _agent_loop_file_names(cfg)
        if value in ours:
            component = next(c for c in host.components(kind=kind) if c.name == value)
            problems.extend(_component_config_problems(component, cfg, settings_ok))
            continue
        if value in stock:
            continue
        problems.append(ConfigProblem(key, _unknown_name(kind, value, stock + ours, host)))
    for kind, (node_path, pkg) in _PATH_SELECTED.items():
        node = _select(cfg, node_path)
        if isinstance(node, Mapping) and node.get("path") == pkg and node.get("name"):
            ours = [c.name for c in host.components(kind=kind)]
            if node["name"] not in ours:
                problems.append(ConfigProblem(f"{node_path}.name", _unknown_name(kind, node["name"], ours, host)))
            else:
                component = next(c for c in host.components(kind=kind) if c.name == node["name"])
                problems.extend(_component_config_problems(component, cfg, settings_ok))
    for component in host.components(kind="val_metric"):  # active in every recipe, not selected by a key
        problems.extend(_component_config_problems(component, cfg, settings_ok))
    from longcat_plugins.algorithms.masking import config_problems

    problems += [ConfigProblem(key, message) for key, message in config_problems(cfg)]
    return problems


def _component_config_problems(component: Any, cfg: Mapping[str, Any], settings_ok: bool = True) -> list[ConfigProblem]:
    """A selected component may check the rest of the recipe: ``target.check_config(cfg)``
    returns ``"key.path: what is wrong"`` strings (the ``dora`` trainer uses it)."""
    check = getattr(component.target, "check_config", None)
    if not callable(check):
        return []
    from omegaconf import OmegaConf

    try:
        found = list(check(OmegaConf.create(dict(cfg))))
    except (TypeError, ValueError, KeyError, AttributeError):
        if settings_ok:
            raise
        return []  # it read a setting the section check has already reported as malformed
    out = []
    for problem in found:
        path, _, message = str(problem).partition(": ")
        out.append(ConfigProblem(path, message or path))
    return out


def _agent_loop_file_names(cfg: Mapping[str, Any]) -> list[str]:
    """Agent loops declared in ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (verl
    registers them in each agent-loop worker); an unreadable file is verl's error to report."""
    path = _select(cfg, "actor_rollout_ref.rollout.agent.agent_loop_config_path")
    if not isinstance(path, str) or not path:
        return []
    try:
        from omegaconf import OmegaConf

        entries = OmegaConf.to_container(OmegaConf.load(path))
    except Exception:  # noqa: BLE001 - verl reports a missing or malformed file itself
        return []
    return (
        [e["name"] for e in entries if isinstance(e, Mapping) and isinstance(e.get("name"), str)]
        if isinstance(entries, list)
        else []
    )


def _unknown_name(kind: str, value: str, choices: list[str], host: Any) -> str:
    why = host.why_unavailable(value, kind=kind)
    if why:  # the name is right, the selection is what excludes it: no did-you-mean
        listing = ", ".join(sorted(choices)) if choices else "<none>"
        return f"unknown {kind} {value!r}{why}; choices: {listing}"
    return f"unknown {kind} {value!r}" + _close(value, choices)


def host_for_section(section: Mapping[str, Any] | None) -> Any:
    """A host with the selection of ``section`` plus this process's environment overrides."""
    from longcat_plugins.host import Host
    from longcat_plugins.selection import Selection

    selection = Selection.from_section(section or {}).with_env_overrides()
    return Host(selection).load()


def validate_config(
    cfg: Any, *, check_verl_names: bool = True, cpu_preflight: bool = False, check_contracts: bool = True
) -> tuple[list[ConfigProblem], Any]:
    """All problems of a composed config (the ``longcat:`` section, the stock keys naming our
    components, the selected components' contracts with verl (each called once on a synthetic
    batch, see :mod:`longcat_plugins.contracts`), and with ``cpu_preflight`` what cannot run on
    the CPU runtime), and the host the config selects."""

    plain = to_plain(cfg) or {}
    section = plain.get(SECTION)
    problems = validate_section(section)
    settings_ok = not problems
    if problems:  # still check the stock keys, against what the section's well-typed selection enables
        host = host_for_section(selection_part(section))
    else:
        host = host_for_section(section)
        if (section or {}).get("strict", True):
            problems += [ConfigProblem(f"{SECTION} (plugin {p.plugin})", p.message) for p in host.problems]
            if check_verl_names:  # what the bridge would refuse, as doctor reports it
                from longcat_plugins.verl_bridge import registration_problems

                problems += [
                    ConfigProblem(f"{SECTION} (plugin {c.plugin})", why) for c, why in registration_problems(host)
                ]
    if check_verl_names:
        problems += validate_verl_selections(plain, host, settings_ok)
    if check_verl_names and check_contracts and not problems:
        # the components the recipe selects, called once the way verl will (longcat_plugins.contracts)
        from longcat_plugins.contracts import config_problems

        problems += config_problems(host, plain)
    if cpu_preflight:
        from longcat_plugins.runtime.preflight import check_cpu_config

        problems += check_cpu_config(plain)
    return problems, host


def compose(config: str | Path, overrides: Sequence[str] = ()) -> Any:
    """Compose a recipe YAML (with its defaults, searchpath and overrides) the way Hydra's
    ``@hydra.main`` would, without running anything."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    path = Path(config).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {config}")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(path.parent), version_base=None):
        return hydra_compose(config_name=path.stem, overrides=list(overrides))
