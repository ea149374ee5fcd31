"""Replica-granular versioning: one weights version per replica, updates rolled across them (S1).

Engines such as vLLM and SGLang hold one weights version per replica and swap it in place, so
multi-version generation (several live versions, SPEC S1) has to live at the granularity of
replicas instead of instances. :class:`ReplicaRoller` decides, from events alone (a version is
published, a request starts or finishes, a replica finished loading), which replica loads the
newest weights when, which replicas take new requests, and which in-flight requests must be
aborted. It is pure (no Ray, no clock), so its invariants are tested over many random
schedules; the verl load balancer and checkpoint manager execute its decisions.

The rules, for staleness bound ``s`` and the newest published version ``latest``:

* **Window.** A replica whose version left the window (``not is_fresh(latest, version, s)``)
  has its in-flight requests aborted (their prompts are re-issued elsewhere) and loads at once:
  nothing it could still finish would be trained. No other request is ever aborted, so work
  inside the window is never recomputed.
* **Drain, then load.** A replica behind ``latest`` keeps serving its in-flight requests on its
  version and loads only once it has none (then it loads ``latest``, whatever that is by then).
* **Routing.** New requests go only to *accepting* replicas: not loading, version inside the
  window, and on the newest version among such replicas (so once one replica holds ``latest``,
  the older ones get nothing new and drain).
* **Rolling.** A load never takes the last replica that could generate inside the window while
  others load: when every idle replica behind ``latest`` would load and no other replica would
  be left generating, the newest of them is kept back and serves until another has loaded.
  When every replica is busy on the same old version (nothing drains by itself under a steady
  load), the least-loaded one is designated to drain: it takes no new requests, so it finishes,
  loads, and the others follow. Generation never stops while a replica holds a version in the
  window.

Why at least two replicas and ``s >= 1`` (checked by the trainer before Ray starts): during a
roll the newest version is loading on one replica while another serves the previous version;
that needs a second replica, and the previous version must still be inside the window
(``s >= 1``). With more replicas than ``s + 1`` several replicas share a version; the versions
alive at once never exceed ``s + 1`` (the window), whatever the replica count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from longcat_plugins.schedulers.core.queue import is_fresh

#: fewest replicas the rolling update needs (one loads while another serves)
MIN_REPLICAS = 2
#: smallest staleness bound the rolling update needs (the serving replica's version is one behind)
MIN_STALENESS = 1


@dataclass
class ReplicaState:
    """One replica: the single version it holds, its in-flight requests, and what it is doing."""

    version: int
    inflight: set[str] = field(default_factory=set)
    #: the version being loaded, or None while the replica serves
    loading: int | None = None
    #: designated to drain towards the newest version (takes no new requests)
    draining: bool = False


@dataclass(frozen=True)
class Actions:
    """What to execute after an event: abort these requests (per replica), then load ``version``
    into ``load``. ``aborted`` replicas are always in ``load``."""

    version: int
    load: tuple[str, ...] = ()
    aborted: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.load or self.aborted)


class ReplicaRoller:
    """The decision state of replica-granular versioning (see the module docstring)."""

    def __init__(self, replicas: Iterable[str], staleness: int, version: int = 0) -> None:
        if not isinstance(staleness, int) or staleness < 0:
            raise ValueError(f"staleness must be an integer >= 0, got {staleness!r}")
        self.staleness = staleness
        self.latest = version
        self.replicas: dict[str, ReplicaState] = {name: ReplicaState(version) for name in replicas}
        self.counters = {"loads": 0, "aborted_requests": 0, "kept_back": 0, "designated": 0, "started": 0}

    # -- queries ---------------------------------------------------------------------------------

    def fresh(self, version: int) -> bool:
        return is_fresh(self.latest, version, self.staleness)

    def generating(self) -> list[str]:
        """Replicas able to generate inside the window (not loading, version fresh)."""
        return sorted(n for n, r in self.replicas.items() if r.loading is None and self.fresh(r.version))

    def accepting(self) -> list[str]:
        """Replicas that may take a new request: generating, on the newest such version, not draining."""
        able = self.generating()
        if not able:
            return []
        top = max(self.replicas[n].version for n in able)
        return [n for n in able if self.replicas[n].version == top and not self.replicas[n].draining]

    def holding(self, version: int) -> list[str]:
        """Replicas that can continue a request of ``version`` (a migration target): serving that
        very version (not loading) and the version inside the window."""
        if not self.fresh(version):
            return []
        return sorted(n for n, r in self.replicas.items() if r.loading is None and r.version == version)

    def versions_alive(self) -> set[int]:
        """Versions held by replicas that are not loading."""
        return {r.version for r in self.replicas.values() if r.loading is None}

    def version_of(self, replica: str) -> int:
        return self.replicas[replica].version

    # -- events ----------------------------------------------------------------------------------

    def publish(self, version: int) -> Actions:
        """A new version is published (the trainer's weight sync)."""
        if version <= self.latest:
            raise ValueError(f"published version {version} must be newer than the latest {self.latest}")
        self.latest = version
        return self._decide()

    def start(self, replica: str, request_id: str, version: int | None = None) -> int:
        """``request_id`` was routed to ``replica``; returns the version it will be generated by.
        ``version``: a migrated request continuing on that version, which the replica must hold
        (:meth:`holding`; a draining replica qualifies, it only takes no *new* requests)."""
        if version is not None:
            if replica not in self.holding(version):
                raise ValueError(
                    f"replica {replica!r} cannot continue version {version} (holding: {self.holding(version)})"
                )
        elif replica not in self.accepting():
            raise ValueError(f"replica {replica!r} is not accepting requests (accepting: {self.accepting()})")
        state = self.replicas[replica]
        if request_id in state.inflight:
            raise ValueError(f"request {request_id!r} is already in flight on {replica!r}")
        state.inflight.add(request_id)
        self.counters["started"] += 1
        return state.version

    def finish(self, replica: str, request_id: str) -> Actions:
        """``request_id`` finished on ``replica`` (a request aborted earlier is ignored)."""
        state = self.replicas.get(replica)
        if state is None or request_id not in state.inflight:
            return Actions(self.latest)
        state.inflight.discard(request_id)
        return self._decide()

    def loaded(self, replica: str, version: int) -> Actions:
        """``replica`` finished loading ``version``: the version it was told to load or a newer
        published one (a load executed after the next publish takes the newest weights)."""
        state = self.replicas[replica]
        if state.loading is None or not state.loading <= version <= self.latest:
            raise ValueError(
                f"replica {replica!r} was loading {state.loading}; it cannot have loaded {version} "
                f"(latest published: {self.latest})"
            )
        if state.inflight:
            raise AssertionError(f"replica {replica!r} loaded with requests in flight: {sorted(state.inflight)}")
        state.version, state.loading, state.draining = version, None, False
        return self._decide()

    def add(self, replica: str, version: int) -> Actions:
        """A replica joins holding ``version``."""
        if replica in self.replicas:
            raise ValueError(f"replica {replica!r} is already known")
        self.replicas[replica] = ReplicaState(version)
        return self._decide()

    def remove(self, replica: str) -> tuple[tuple[str, ...], Actions]:
        """A replica leaves (or died): its in-flight requests, to be re-issued, and what follows."""
        state = self.replicas.pop(replica)
        return tuple(sorted(state.inflight)), self._decide()

    # -- the decision ----------------------------------------------------------------------------

    def _decide(self) -> Actions:
        load: list[str] = []
        aborted: dict[str, tuple[str, ...]] = {}
        for name in sorted(self.replicas):
            state = self.replicas[name]
            if state.loading is None and state.version < self.latest and not self.fresh(state.version):
                if state.inflight:
                    aborted[name] = tuple(sorted(state.inflight))
                    self.counters["aborted_requests"] += len(state.inflight)
                    state.inflight.clear()
                load.append(name)
        idle = [
            n
            for n in sorted(self.replicas)
            if n not in load
            and self.replicas[n].loading is None
            and self.replicas[n].version < self.latest
            and not self.replicas[n].inflight
        ]
        if idle:
            staying = [n for n in self.generating() if n not in load and n not in idle]
            if not staying:
                # rolling: the newest idle replica keeps serving while the others load
                keep = max(idle, key=lambda n: (self.replicas[n].version, n))
                idle.remove(keep)
                self.counters["kept_back"] += 1
            load.extend(idle)
        for name in load:
            self.replicas[name].loading = self.latest
            self.replicas[name].draining = False
        self.counters["loads"] += len(load)
        self._designate()
        return Actions(self.latest, tuple(load), aborted)

    def _designate(self) -> None:
        """Under a steady load nothing drains by itself: if no replica is on or moving to the
        newest version, the least-loaded accepting one stops taking requests so it can."""
        if any(r.loading is not None or r.draining for r in self.replicas.values()):
            return
        able = self.generating()
        if not able or any(self.replicas[n].version != self.replicas[able[0]].version for n in able):
            return  # an older replica is draining already (or nothing can generate)
        if self.replicas[able[0]].version >= self.latest or len(able) < MIN_REPLICAS:
            return
        chosen = min(able, key=lambda n: (len(self.replicas[n].inflight), n))
        self.replicas[chosen].draining = True
        self.counters["designated"] += 1

    # -- observability ---------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """``dora/replica/*``: cumulative counters and the current state."""
        out = {f"dora/replica/{k}": float(v) for k, v in self.counters.items()}
        out["dora/replica/versions_alive"] = float(len(self.versions_alive()))
        out["dora/replica/loading"] = float(sum(r.loading is not None for r in self.replicas.values()))
        out["dora/replica/accepting"] = float(len(self.accepting()))
        out["dora/replica/latest"] = float(self.latest)
        for name, state in sorted(self.replicas.items()):
            out[f"dora/replica/version/{name}"] = float(state.version)
        return out


__all__ = ["Actions", "MIN_REPLICAS", "MIN_STALENESS", "ReplicaRoller", "ReplicaState"]
