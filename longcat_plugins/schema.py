"""Typed checking of plain config data against dataclass schemas, and the error that carries
every problem with its key path.

The bottom of the config stack: the host (component settings), the CPU preflight, the fusion
and environment specs and :mod:`longcat_plugins.config` all build on it, and it imports none
of them, so no import circle runs through configuration.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from longcat_plugins.components import Component


@dataclass(frozen=True)
class ConfigProblem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ConfigError(ValueError):
    """All problems of one config, each with its key path."""

    def __init__(self, problems: Sequence[ConfigProblem], source: str = "config") -> None:
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in {source}:\n{lines}")


# -- typed checking of plain data against dataclass schemas ------------------------------------


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _close(name: str, choices: Sequence[str]) -> str:
    near = difflib.get_close_matches(name, list(choices), n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    listing = ", ".join(sorted(choices)) if choices else "<none>"
    return f"{hint}; choices: {listing}"


def check_value(value: Any, tp: Any, path: str) -> list[ConfigProblem]:
    """Problems of ``value`` against annotation ``tp`` (dataclasses, containers, unions, literals)."""
    if tp is Any or tp is object:
        return []
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return []
        for arm in args:
            if arm is type(None):
                continue
            if not check_value(value, arm, path):
                return []
        return [ConfigProblem(path, f"expected {_type_name(tp)}, got {type(value).__name__} {value!r}")]
    if origin is typing.Literal:
        if value in args:
            return []
        return [ConfigProblem(path, f"expected one of {', '.join(map(repr, args))}, got {value!r}")]
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            return [ConfigProblem(path, f"expected a mapping ({tp.__name__}), got {type(value).__name__}")]
        return check_mapping(value, tp, path)
    if origin in (list, Sequence, tuple) or tp in (list, tuple):
        if not isinstance(value, list | tuple):
            return [ConfigProblem(path, f"expected a list, got {type(value).__name__} {value!r}")]
        item_tp = args[0] if args else Any
        return [p for i, item in enumerate(value) for p in check_value(item, item_tp, f"{path}[{i}]")]
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            return [ConfigProblem(path, f"expected a mapping, got {type(value).__name__} {value!r}")]
        key_tp, val_tp = args if args else (Any, Any)
        problems = []
        for k, v in value.items():
            problems += check_value(k, key_tp, f"{path}.{k}")
            problems += check_value(v, val_tp, f"{path}.{k}")
        return problems
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(tp, type):
        ok = isinstance(value, tp)
    else:
        ok = True
    return [] if ok else [ConfigProblem(path, f"expected {_type_name(tp)}, got {type(value).__name__} {value!r}")]


def check_mapping(data: Mapping[str, Any], schema: type, path: str) -> list[ConfigProblem]:
    """Unknown keys (with choices) and wrongly typed values of ``data`` against a dataclass."""
    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    problems = []
    for key, value in data.items():
        if key not in fields:
            problems.append(ConfigProblem(f"{path}.{key}", "unknown key" + _close(str(key), list(fields))))
            continue
        problems += check_value(value, hints[key], f"{path}.{key}")
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in data:
            problems.append(ConfigProblem(f"{path}.{name}", "required key is missing"))
    return problems


def build_settings(component: Component, raw: Mapping[str, Any], where: str) -> Any:
    """The component's config dataclass filled from ``raw``; :class:`ConfigError` if it does not fit."""
    if component.config is None:
        if raw:
            raise ConfigError([ConfigProblem(where, f"{component.ref} takes no settings")])
        return None
    problems = check_mapping(raw, component.config, where)
    if problems:
        raise ConfigError(problems)
    try:
        return component.config(**dict(raw))
    except (TypeError, ValueError) as exc:  # __post_init__ validation of the schema itself
        raise ConfigError([ConfigProblem(where, str(exc))]) from exc


def select(cfg: Mapping[str, Any], dotted: str) -> Any:
    """``cfg[a][b][c]`` for ``"a.b.c"`` in plain nested mappings; ``None`` where a key is missing."""
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node
