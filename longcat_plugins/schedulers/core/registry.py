"""The core's named policies (eviction, balancing, admission) come from the plugin host.

Every enabled ``DoraEvictionPolicy`` / ``DoraBalancer`` / ``DoraAdmission`` component, built-in and
third-party alike, is put into the core's registry dicts (``EVICTION_POLICIES``, ``BALANCERS``,
``ADMISSIONS``) the first
time its name is looked up, in whatever process looks it up (the ``dora`` trainer's sampler,
the load balancer's Ray actor, a Python ``DoraController``, the simulator), from that process's
host: the same components the verl bridge reports (``longcat-plugins doctor``) and brings in
line after a re-selection (``Bridge.sync``). Not at import: plugin modules import these modules
themselves, and building the host then would meet the plugin half-imported. Names registered
directly (``register_eviction_policy``) count too.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def _host_components(kind: str) -> dict[str, Any]:
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


class Registry(Generic[T]):
    """One family of named core policies: its dict (``entries``), filled from the host's
    components of ``kind`` on lookup and by :meth:`register`; ``what`` names it in errors."""

    def __init__(self, kind: str, what: str) -> None:
        self.kind, self.what = kind, what
        self.entries: dict[str, T] = {}

    def names(self) -> list[str]:
        """Every registered name, built-in and third-party, sorted."""
        return registered_names(self.kind, self.entries)

    def get(self, name: str) -> T:
        """The policy registered as ``name``; an unknown name is an error listing the choices."""
        return lookup(self.kind, self.entries, name, self.what)

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register ``fn`` as ``name``; a second registration of a name is an error."""

        def decorate(fn: T) -> T:
            if name in self.entries:
                raise ValueError(f"{self.what} {name!r} is already registered ({self.entries[name]!r})")
            self.entries[name] = fn
            return fn

        return decorate
