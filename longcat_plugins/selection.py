"""Which plugins and components are enabled: allow-list, block-list, autoload.

Rules come from the ``longcat:`` YAML section and from environment variables, in the spirit
of pytest's ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` and ``-p no:name``:

- ``LONGCAT_PLUGINS_ENABLE=a,b``   allow-list; when set it replaces ``longcat.enable``
- ``LONGCAT_PLUGINS_DISABLE=c``    block-list; added to ``longcat.disable``
- ``LONGCAT_PLUGINS_DISABLE_AUTOLOAD=1``  load only built-ins and third-party plugins named
  in the allow-list
- ``LONGCAT_PLUGINS_CONFIG``       the validated ``longcat:`` section as JSON; set by the Hydra
  callback in the driver so every Ray worker applies the same selection

A pattern matches a plugin by its entry-point name or distribution name, or a component by
``family:name``; shell-style wildcards are allowed (``algorithm:*``).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

ENV_ENABLE = "LONGCAT_PLUGINS_ENABLE"
ENV_DISABLE = "LONGCAT_PLUGINS_DISABLE"
ENV_DISABLE_AUTOLOAD = "LONGCAT_PLUGINS_DISABLE_AUTOLOAD"
ENV_CONFIG = "LONGCAT_PLUGINS_CONFIG"

_TRUE = {"1", "true", "yes", "on"}


def normalize_dist(name: str) -> str:
    """PEP 503 normalisation, so ``Longcat_Example`` and ``longcat-example`` match."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _split(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


@dataclass(frozen=True)
class Rule:
    """One enable/disable pattern and where it came from (for error messages)."""

    pattern: str
    source: str

    @property
    def is_component(self) -> bool:
        return ":" in self.pattern

    def matches_plugin(self, plugin: str, distribution: str) -> bool:
        if self.is_component:
            return False
        return fnmatch.fnmatchcase(plugin, self.pattern) or fnmatch.fnmatchcase(
            normalize_dist(distribution), normalize_dist(self.pattern)
        )

    def matches_component(self, ref: str) -> bool:
        return self.is_component and fnmatch.fnmatchcase(ref, self.pattern)


@dataclass(frozen=True)
class Selection:
    """The effective enable/disable rules for one process."""

    enable: tuple[Rule, ...] = ()
    disable: tuple[Rule, ...] = ()
    autoload: bool = True
    settings: Mapping[str, Mapping[str, Mapping[str, object]]] = field(default_factory=dict)

    @classmethod
    def from_section(cls, section: Mapping[str, object], where: str = "longcat") -> Selection:
        """Rules from an already validated ``longcat:`` section (see :mod:`longcat_plugins.config`)."""
        enable = tuple(Rule(str(p), f"{where}.enable[{i}]") for i, p in enumerate(section.get("enable") or ()))
        disable = tuple(Rule(str(p), f"{where}.disable[{i}]") for i, p in enumerate(section.get("disable") or ()))
        settings = section.get("settings") or {}
        return cls(enable, disable, bool(section.get("autoload", True)), settings)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Selection:
        """The selection a process starts with: the forwarded config section, then env overrides."""
        env = os.environ if environ is None else environ
        base = cls()
        raw = env.get(ENV_CONFIG)
        if raw:
            base = cls.from_section(json.loads(raw), where=f"{ENV_CONFIG}:longcat")
        return base.with_env_overrides(env)

    def with_env_overrides(self, environ: Mapping[str, str] | None = None) -> Selection:
        env = os.environ if environ is None else environ
        enable, disable, autoload = self.enable, self.disable, self.autoload
        if env.get(ENV_ENABLE, "").strip():
            enable = tuple(Rule(p, ENV_ENABLE) for p in _split(env[ENV_ENABLE]))
        if env.get(ENV_DISABLE, "").strip():
            disable = disable + tuple(Rule(p, ENV_DISABLE) for p in _split(env[ENV_DISABLE]))
        if env.get(ENV_DISABLE_AUTOLOAD, "").strip().lower() in _TRUE:
            autoload = False
        return Selection(enable, disable, autoload, self.settings)

    # -- decisions -------------------------------------------------------------------------

    def plugin_disabled_by(self, plugin: str, distribution: str, builtin: bool) -> str | None:
        """Why the plugin must not even be imported, or ``None`` if it should be loaded."""
        for rule in self.disable:
            if rule.matches_plugin(plugin, distribution):
                return f"disabled by {rule.source} ({rule.pattern!r})"
        named = any(rule.matches_plugin(plugin, distribution) for rule in self.enable)
        if not builtin and not self.autoload and not named:
            return f"autoload is off ({ENV_DISABLE_AUTOLOAD} or longcat.autoload) and it is not in the allow-list"
        if self.enable and not named and not any(rule.is_component for rule in self.enable):
            return "not in the allow-list (" + ", ".join(sorted({r.source for r in self.enable})) + ")"
        return None

    def component_disabled_by(self, ref: str, plugin: str, distribution: str) -> str | None:
        """Why a component of a loaded plugin is disabled, or ``None`` if it is enabled."""
        for rule in self.disable:
            if rule.matches_component(ref):
                return f"disabled by {rule.source} ({rule.pattern!r})"
        if not self.enable:
            return None
        for rule in self.enable:
            if rule.matches_component(ref) or rule.matches_plugin(plugin, distribution):
                return None
        return "not in the allow-list (" + ", ".join(sorted({r.source for r in self.enable})) + ")"

    def to_env_section(self) -> dict[str, object]:
        """The JSON-able ``longcat:`` section that reproduces this selection in another process."""
        return {
            "enable": [r.pattern for r in self.enable],
            "disable": [r.pattern for r in self.disable],
            "autoload": self.autoload,
            "settings": {f: {n: dict(v) for n, v in comps.items()} for f, comps in self.settings.items()},
        }
