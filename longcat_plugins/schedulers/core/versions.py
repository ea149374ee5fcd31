"""Live policy versions on the generation instances and the pluggable eviction policy (S1).

Every generation instance holds the same set of *live* versions (at most ``staleness + 1`` with
the default policy). New groups start on the newest live version; a group keeps the version it
started with until its last sample finishes, so no sample mixes versions.

An eviction policy is a function ``(EvictionContext) -> iterable of versions to evict``, chosen
by name: ``DoraConfig.eviction`` in the Python controller, ``longcat.settings.scheduler.dora.eviction``
in verl's ``dora`` trainer. A plugin ships one as a
:class:`~longcat_plugins.components.DoraEvictionPolicy` from its ``register_schedulers`` hook;
every enabled one (the built-ins below included) enters :data:`EVICTION_POLICIES` on its first
lookup with :func:`eviction_policy`, in the process that asks (:mod:`.registry`), so look names
up with it, never by indexing the dict. :func:`register_eviction_policy` registers
one directly, for Python use of the core without the plugin host::

    from longcat_plugins.schedulers.core.versions import register_eviction_policy

    @register_eviction_policy("keep_two")
    def keep_two(ctx):
        return [v for v in ctx.live if v < ctx.latest - 1]

The newest version is never evicted (a policy that names it is an error). Evicting a version
that still has active work aborts that work: see
:meth:`~longcat_plugins.schedulers.core.controller.DoraController.publish_version`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from longcat_plugins.schedulers.core.queue import is_fresh
from longcat_plugins.schedulers.core.registry import Registry


@dataclass(frozen=True)
class EvictionContext:
    """What an eviction policy sees: in the controller, right after version ``latest`` was
    published; in verl's ``dora`` sampler, before a batch that trains version ``latest``."""

    live: tuple[int, ...]
    latest: int
    staleness: int
    #: per live version: requests in flight or waiting to be issued (controller), finished
    #: groups waiting for a batch (verl sampler)
    active: Mapping[int, int]


EvictionPolicy = Callable[[EvictionContext], Iterable[int]]
_REGISTRY: Registry[EvictionPolicy] = Registry("dora_eviction_policy", "eviction policy")
#: filled from the host's ``DoraEvictionPolicy`` components on lookup, kept in line by the verl bridge (and by
#: :func:`register_eviction_policy`); read it through :func:`eviction_policy`
EVICTION_POLICIES: dict[str, EvictionPolicy] = _REGISTRY.entries
#: every registered eviction policy, sorted; the policy registered as a name; the registering decorator
eviction_policy_names, eviction_policy, register_eviction_policy = _REGISTRY.names, _REGISTRY.get, _REGISTRY.register


def evicted_versions(name: str, ctx: EvictionContext) -> list[int]:
    """Run policy ``name`` on ``ctx``: the versions to evict, sorted, checked (the newest
    version and versions that are not live may not be named)."""
    evicted = sorted(set(eviction_policy(name)(ctx)))
    for v in evicted:
        if v == ctx.latest:
            raise ValueError(f"eviction policy {name!r} tried to evict the newest version {v}")
        if v not in ctx.live:
            raise ValueError(f"eviction policy {name!r} evicted {v}, which is not live {list(ctx.live)}")
    return evicted


def staleness_window(ctx: EvictionContext) -> list[int]:
    """Evict versions no sample of which could still be trained fresh (``v < latest - staleness``)."""
    return [v for v in ctx.live if not is_fresh(ctx.latest, v, ctx.staleness)]


def idle_or_stale(ctx: EvictionContext) -> list[int]:
    """``staleness_window`` plus every older version with no active work (frees memory early)."""
    return [
        v
        for v in ctx.live
        if v != ctx.latest and (not is_fresh(ctx.latest, v, ctx.staleness) or not ctx.active.get(v, 0))
    ]


class VersionSet:
    """The live versions, newest last."""

    def __init__(self, initial: int = 0, policy: str = "staleness_window") -> None:
        eviction_policy(policy)  # an unknown name fails here, listing the choices
        self.policy = policy
        self.live: list[int] = [initial]

    @property
    def latest(self) -> int:
        return self.live[-1]

    def __contains__(self, version: object) -> bool:
        return version in self.live

    def publish(self, version: int, staleness: int, active: Mapping[int, int]) -> list[int]:
        """Add ``version`` (must be newer than every live one) and return the evicted versions."""
        if version <= self.latest:
            raise ValueError(f"published version {version} must be newer than the latest live version {self.latest}")
        self.live.append(version)
        ctx = EvictionContext(tuple(self.live), version, staleness, dict(active))
        evicted = evicted_versions(self.policy, ctx)
        self.live = [v for v in self.live if v not in evicted]
        return evicted

    def state_dict(self) -> dict[str, object]:
        return {"policy": self.policy, "live": list(self.live)}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        self.policy = str(state["policy"])
        self.live = [int(v) for v in state["live"]]  # type: ignore[union-attr]
