"""The core's named policies (eviction, balancing) come from the plugin host.

The verl bridge registers every enabled ``DoraEvictionPolicy`` / ``DoraBalancer`` component
(built-in and third-party alike) into the core's registry dicts the moment their module is
imported, in every process that imports verl. A process that uses the core without verl (the
simulator, a Python ``DoraController``) has no bridge: a name it asks for is then taken from
the process-wide host here, with the same components, so both paths see the same names.
Names registered directly (``register_eviction_policy``) count too.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from typing import Any, TypeVar

T = TypeVar("T")


def _host_components(kind: str) -> dict[str, Any]:
    if "longcat_plugins.verl_bridge" in sys.modules:
        return {}  # the bridge keeps the registry in line with the host (and with re-selections)
    from longcat_plugins.host import get_host

    return {c.name: c for c in get_host().components(kind=kind)}


def registered_names(kind: str, registry: MutableMapping[str, Any]) -> list[str]:
    """Every name of ``kind``: the registry's and the host's enabled components', sorted."""
    return sorted(set(registry) | set(_host_components(kind)))


def lookup(kind: str, registry: MutableMapping[str, T], name: str, what: str) -> T:
    """The ``what`` registered as ``name``; an unknown name is a ``ValueError`` listing the choices.
    A host component not yet in ``registry`` is imported (its import error names it) and added."""
    if name in registry:
        return registry[name]
    comp = _host_components(kind).get(name)
    if comp is None:
        raise ValueError(f"unknown {what} {name!r}; registered: {registered_names(kind, registry)}")
    target = comp.target
    if not callable(target):
        raise TypeError(f"{what} {name!r} from plugin {comp.plugin!r}: {target!r} is not callable")
    registry[name] = target
    return target
