"""The pluggy host: discovery, enable/disable, clash detection, introspection.

Built-in plugins and third-party ones are found the same way: entry points of the group
``longcat_plugins`` (ours are declared in our own pyproject). A plugin that fails to import,
misspells a hook, raises from a hook or returns something that is not a component of the
hook's family is recorded as *broken* with its distribution and traceback; the others keep
working. Two enabled components with one name in one family are a *clash*: neither is used,
and the problem names both distributions.
"""

from __future__ import annotations

import importlib.metadata
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import pluggy

from longcat_plugins import hookspecs
from longcat_plugins.components import COMPONENT_TYPES, Component, Family
from longcat_plugins.schema import build_settings
from longcat_plugins.selection import Selection, normalize_dist

ENTRY_POINT_GROUP = "longcat_plugins"
OUR_DISTRIBUTION = "longcat-plugins"

#: hook name -> the family its components must belong to
HOOK_FAMILIES: dict[str, Family] = {
    "register_algorithms": Family.ALGORITHM,
    "register_schedulers": Family.SCHEDULER,
    "register_rewards": Family.REWARD,
    "register_environments": Family.ENVIRONMENT,
    "register_fusion_methods": Family.FUSION,
}

PluginStatus = Literal["active", "disabled", "broken"]


@dataclass
class Problem:
    """Something wrong with a plugin or component; ``doctor`` exits non-zero on any."""

    plugin: str
    distribution: str
    message: str
    detail: str = ""

    def __str__(self) -> str:
        who = f"plugin {self.plugin!r}" + (f" (distribution {self.distribution})" if self.distribution else "")
        return f"{who}: {self.message}"


@dataclass
class PluginInfo:
    name: str
    distribution: str
    version: str
    module: str
    builtin: bool
    status: PluginStatus = "active"
    reason: str = ""
    components: list[Component] = field(default_factory=list)
    #: component ref -> why it is not used (disabled or clashing)
    inactive: dict[str, str] = field(default_factory=dict)


class UnknownComponentError(LookupError):
    """A name that no enabled component of the family has; the message lists the choices."""


class Host:
    """One plugin manager and what it discovered. Build it with :meth:`load`."""

    def __init__(self, selection: Selection | None = None) -> None:
        self.selection = selection or Selection()
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.problems: list[Problem] = []
        self._enabled: dict[tuple[Family, str], Component] = {}

    # -- discovery ---------------------------------------------------------------------------

    def load(self, entry_points: Iterable[importlib.metadata.EntryPoint] | None = None) -> Host:
        """Load the plugins of the entry-point group (or the given entry points) and resolve."""
        eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points is None else entry_points
        for ep in sorted(eps, key=lambda e: (not _is_builtin(e), e.name)):
            dist = ep.dist.name if ep.dist is not None else ""
            version = ep.dist.version if ep.dist is not None else ""
            self._add(ep.name, dist, version, ep.value, _is_builtin(ep), loader=ep.load)
        self._resolve()
        return self

    def add_plugin(
        self, plugin: Any, name: str, distribution: str = "", version: str = "", builtin: bool = False
    ) -> None:
        """Register a plugin object directly (tests, notebooks), then re-resolve components."""
        module = getattr(plugin, "__name__", type(plugin).__name__)
        self._add(name, distribution, version, module, builtin, loader=lambda: plugin)
        self._resolve()

    def _add(self, name: str, dist: str, version: str, module: str, builtin: bool, loader: Callable[[], Any]) -> None:
        if name in self.plugins:
            other = self.plugins[name]
            self.problems.append(
                Problem(name, dist, f"plugin name {name!r} is already used by distribution {other.distribution or '?'}")
            )
            return
        info = PluginInfo(name, dist, version, module, builtin)
        self.plugins[name] = info
        why = self.selection.plugin_disabled_by(name, dist, builtin)
        if why is not None:
            info.status, info.reason = "disabled", why
            return
        try:
            plugin = loader()
        except Exception as exc:  # noqa: BLE001 - a broken plugin; Ctrl-C and SystemExit still stop the run
            self._broken(info, f"failed to import {module}: {type(exc).__name__}: {exc}")
            return
        try:
            self.pm.register(plugin, name=name)
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            self._broken(info, f"invalid hook implementation: {exc}")
            return
        except ValueError as exc:  # the same object registered twice under two names
            self._broken(info, str(exc))
            return
        for hook_name, hookimpl in self._impls_of(name):
            family = HOOK_FAMILIES[hook_name]
            try:
                returned = hookimpl.function()
                components = _check_components(returned, family, hook_name)
            except Exception as exc:  # noqa: BLE001 - never KeyboardInterrupt/SystemExit: those stop the run
                if self.pm.is_registered(plugin):
                    self.pm.unregister(plugin)
                self._broken(info, f"hook {hook_name} failed: {type(exc).__name__}: {exc}")
                return
            info.components.extend(c.tagged(name, dist) for c in components)

    def _impls_of(self, plugin_name: str) -> list[tuple[str, pluggy.HookImpl]]:
        impls = []
        for hook_name in HOOK_FAMILIES:
            caller = getattr(self.pm.hook, hook_name)
            impls.extend((hook_name, i) for i in caller.get_hookimpls() if i.plugin_name == plugin_name)
        return impls

    def _broken(self, info: PluginInfo, message: str) -> None:
        info.status, info.reason, info.components = "broken", message, []
        self.problems.append(Problem(info.name, info.distribution, message, traceback.format_exc()))

    def _resolve(self) -> None:
        """Apply component-level selection and detect name clashes within a family."""
        claimed: dict[tuple[Family, str], list[Component]] = {}
        for info in self.plugins.values():
            info.inactive = {}
            if info.status != "active":
                continue
            for comp in info.components:
                why = self.selection.component_disabled_by(comp.ref, info.name, info.distribution)
                if why is not None:
                    info.inactive[comp.ref] = why
                    continue
                claimed.setdefault((comp.family, comp.name), []).append(comp)
        self.problems = [p for p in self.problems if not p.message.startswith("clash")]
        self._enabled = {}
        for key, comps in claimed.items():
            if len(comps) == 1:
                self._enabled[key] = comps[0]
                continue
            owners = " and ".join(f"{c.distribution or '?'} (plugin {c.plugin!r})" for c in comps)
            message = (
                f"clash: {key[0].value} component {key[1]!r} is provided by {owners}; neither is used. "
                f"Disable one, e.g. LONGCAT_PLUGINS_DISABLE={comps[-1].plugin} or longcat.disable: [{comps[-1].plugin}]"
            )
            for comp in comps:
                self.plugins[comp.plugin].inactive[comp.ref] = message
            self.problems.append(Problem(comps[-1].plugin, comps[-1].distribution, message))

    # -- introspection -----------------------------------------------------------------------

    def components(self, family: Family | str | None = None, kind: str | None = None) -> list[Component]:
        """Enabled components, optionally of one family and/or kind, sorted by family and name."""
        fam = Family(family) if family is not None else None
        found = [
            c for (f, _), c in self._enabled.items() if (fam is None or f is fam) and (kind is None or c.kind == kind)
        ]
        return sorted(found, key=lambda c: (c.family.value, c.name))

    def all_components(self) -> list[tuple[Component, str | None]]:
        """Every component of every loaded plugin with why it is inactive (``None`` if enabled)."""
        out = []
        for info in self.plugins.values():
            for comp in info.components:
                out.append((comp, info.inactive.get(comp.ref)))
        return out

    def get(self, family: Family | str, name: str, kind: str | None = None) -> Component:
        """The enabled component ``name`` of ``family``; a clear error with the choices otherwise."""
        fam = Family(family)
        comp = self._enabled.get((fam, name))
        if comp is not None and (kind is None or comp.kind == kind):
            return comp
        choices = [c.name for c in self.components(fam, kind)]
        label = kind or f"{fam.value} component"
        raise UnknownComponentError(
            f"unknown {label} {name!r}{self.why_unavailable(name, kind=kind, family=fam)}; "
            f"available: {', '.join(choices) if choices else '<none>'}"
        )

    def why_unavailable(self, name: str, kind: str | None = None, family: Family | None = None) -> str:
        """`` (why)`` when an installed component called ``name`` is not usable here: it is
        disabled, clashes, or its plugin is disabled (then the plugin is imported, without
        enabling it, to learn what it provides); ``""`` when nothing installed has that name."""

        def matches(comp: Component) -> bool:
            return (
                comp.name == name and (kind is None or comp.kind == kind) and (family is None or comp.family is family)
            )

        for comp, why in self.all_components():
            if matches(comp) and why:
                verb = "is not used: " if why.startswith("clash") else "is "
                return f" ({comp.ref} from plugin {comp.plugin!r} {verb}{why})"
        disabled = {n: i for n, i in self.plugins.items() if i.status == "disabled"}
        if disabled:
            everything = Host(Selection()).load(_entry_points_named(set(disabled)))
            for comp, _ in everything.all_components():
                if matches(comp):
                    return (
                        f" ({comp.ref} is provided by plugin {comp.plugin!r}, which is {disabled[comp.plugin].reason})"
                    )
        return ""

    def settings_for(self, family: Family | str, name: str) -> Any:
        """The component's settings: its config dataclass filled from ``longcat.settings``."""
        comp = self.get(family, name)
        raw = self.selection.settings.get(comp.family.value, {}).get(comp.name, {})
        return build_settings(comp, raw, where=f"longcat.settings.{comp.family.value}.{comp.name}")


def _entry_points_named(names: set[str]) -> list[importlib.metadata.EntryPoint]:
    return [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name in names]


def _is_builtin(ep: importlib.metadata.EntryPoint) -> bool:
    return ep.dist is not None and normalize_dist(ep.dist.name) == OUR_DISTRIBUTION


def _check_components(returned: Any, family: Family, hook_name: str) -> list[Component]:
    if returned is None:
        return []
    if isinstance(returned, Component | str | bytes) or not isinstance(returned, Sequence | set | frozenset):
        raise TypeError(f"{hook_name} must return a list of components, got {type(returned).__name__}")
    allowed = COMPONENT_TYPES[family]
    out = []
    for item in returned:
        if not isinstance(item, allowed):
            names = ", ".join(t.__name__ for t in allowed)
            raise TypeError(f"{hook_name} returned {item!r}; a {family.value} hook may return only {names}")
        out.append(item)
    return out


# -- the process-wide host -------------------------------------------------------------------

_lock = threading.RLock()
_host: Host | None = None
_building = False


_after_build: list[Callable[[Host], None]] = []


def on_host_built(callback: Callable[[Host], None]) -> None:
    """Call ``callback(host)`` whenever the process-wide host has just been built (the bridge
    uses it to register what was imported while plugins were loading)."""
    _after_build.append(callback)


def get_host() -> Host:
    """The process-wide host, built on first use from the environment's selection."""
    global _host, _building
    with _lock:
        if _host is None:
            if _building:
                raise RuntimeError("longcat host is still being built (a plugin asked for it while loading)")
            _building = True
            try:
                _host = Host(Selection.from_env()).load()
            finally:
                _building = False
            for callback in _after_build:
                callback(_host)
        return _host


def is_building() -> bool:
    return _building


def set_host(host: Host | None) -> Host | None:
    """Replace the process-wide host (``None`` rebuilds it lazily); returns the previous one."""
    global _host
    with _lock:
        previous, _host = _host, host
        return previous


def module_lookup(family: str, kind: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a module that verl loads by ``pkg://`` path and then asks
    for a component by attribute name (PEP 562)."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return get_host().get(family, name, kind=kind).target
        except UnknownComponentError as exc:
            raise AttributeError(str(exc)) from None

    def __dir__() -> list[str]:
        return [c.name for c in get_host().components(kind=kind)]

    return __getattr__, __dir__


def settings_for(
    family: Family | str, name: str, *, overrides: Mapping[str, Any] | None = None, fallback: type | None = None
) -> Any:
    """A component's settings, for the component itself to read at run time (in any verl process).

    Returns the component's ``config`` dataclass filled from ``longcat.settings.<family>.<name>``
    (validated: a bad value raises :class:`~longcat_plugins.config.ConfigError` naming its key
    path), then ``overrides`` applied for the keys the dataclass has (others are ignored, so
    verl's per-call kwargs such as ``reward_kwargs`` can be passed whole). ``None`` if the
    component has no ``config``. ``fallback``, a config dataclass, gives its defaults where the
    process-wide host does not know the component (it is disabled, or the code runs outside any
    configured host); without it that case raises :class:`UnknownComponentError`.

    Exported as ``longcat_plugins.settings_for``.
    """
    try:
        base = get_host().settings_for(family, name)
    except UnknownComponentError:
        if fallback is None:
            raise
        base = fallback()
    if base is None or not overrides:
        return base
    known = {k: v for k, v in overrides.items() if k in base.__dataclass_fields__}
    return replace(base, **known) if known else base


def settings_with_overrides(family: Family | str, name: str, config_cls: type, overrides: dict[str, Any]) -> Any:
    """:func:`settings_for` with ``config_cls`` as the fallback (kept for the built-in rewards)."""
    return settings_for(family, name, overrides=overrides, fallback=config_cls)
