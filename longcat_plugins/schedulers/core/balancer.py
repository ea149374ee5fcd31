"""Load balancing across generation instances (S3): threshold-triggered migration plans and the
two-phase per-instance request cap.

Load of an instance = its in-flight requests. A balancer strategy is a function
``(BalanceContext) -> list[Migration]``; returning an empty list means "no rebalance now". The
controller applies the plan to its bookkeeping and hands it to the caller, who moves the
requests (and their KV cache) between engines. A plugin ships one as a
:class:`~longcat_plugins.components.DoraBalancer` from its ``register_schedulers`` hook; every
enabled one (the built-ins below included) enters :data:`BALANCERS` on its first lookup, in the
process that asks (:mod:`.registry`); it is selected with ``DoraConfig.balancer`` (Python controller) or
``longcat.settings.scheduler.dora.balancer`` (verl's ``dora`` trainer) and looked up with
:func:`balancer`. :func:`register_balancer` registers one directly, for Python use of the core
without the plugin host::

    from longcat_plugins.schedulers.core.balancer import register_balancer

    @register_balancer("never")
    def never(ctx):
        return []

Two-phase cap (report §3.2): "in the initial rollout phase before the first load-balancing when
there are no long-tailed generation, we allow a higher number of requests per device (e.g., 8),
and subsequently limit the requests per device to an optimal level (e.g., 4)". The phase resets
at every published version (one training step).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from longcat_plugins.schedulers.core.registry import Registry
from longcat_plugins.schedulers.core.types import Migration


@dataclass(frozen=True)
class BalanceContext:
    """Per-instance in-flight request ids (oldest first), the cap that will hold after a
    rebalance, and the trigger threshold on the spread of load fractions."""

    loads: Mapping[str, tuple[str, ...]]
    cap: int
    threshold: float


Balancer = Callable[[BalanceContext], list[Migration]]
_REGISTRY: Registry[Balancer] = Registry("dora_balancer", "balancer")
#: filled from the host's ``DoraBalancer`` components on lookup, kept in line by the verl bridge (and by
#: :func:`register_balancer`); read it through :func:`balancer`
BALANCERS: dict[str, Balancer] = _REGISTRY.entries
#: every registered balancer, sorted; the strategy registered as a name; the registering decorator
balancer_names, balancer, register_balancer = _REGISTRY.names, _REGISTRY.get, _REGISTRY.register


def load_spread(loads: Mapping[str, tuple[str, ...]], cap: int) -> float:
    """max - min of ``len(load) / cap`` over instances (0 with fewer than two instances)."""
    if len(loads) < 2:
        return 0.0
    fractions = [min(len(v), cap) / cap for v in loads.values()]
    return max(fractions) - min(fractions)


def greedy(ctx: BalanceContext) -> list[Migration]:
    """Move newest requests from the most to the least loaded instance once the load spread reaches the threshold.

    When the spread of load fractions reaches the threshold, repeatedly move the newest request
    of the most loaded instance to the least loaded one until the counts differ by at most one
    and no instance holds more than ``cap`` while another has room."""
    if load_spread(ctx.loads, ctx.cap) < ctx.threshold:
        return []
    queues = {k: list(v) for k, v in ctx.loads.items()}
    moves: list[Migration] = []
    while True:
        order = sorted(queues, key=lambda k: (len(queues[k]), k))
        low, high = order[0], order[-1]
        if len(queues[high]) - len(queues[low]) <= 1 or len(queues[low]) >= ctx.cap:
            break
        request_id = queues[high].pop()
        queues[low].append(request_id)
        moves.append(Migration(request_id, high, low))
    return moves


def place_migrations(
    plan: list[Migration],
    loads: Mapping[str, int],
    holders: Callable[[Migration], Sequence[str]],
    cap: int,
) -> list[Migration]:
    """The moves of ``plan`` that can be executed, each to a replica able to continue the request
    on the version it started with: ``holders(move)`` names those replicas (every replica when
    all hold every live version; under replica-granular versioning only those serving the
    source's version). The plan's own target is kept when it holds the version and has room
    under ``cap``, else the least-loaded holder with room; a move with none is dropped (the
    request stays where it is). ``loads`` are in-flight counts, updated move by move."""
    counts = dict(loads)
    placed: list[Migration] = []
    moved: set[str] = set()
    for move in plan:
        if move.request_id in moved or move.source not in counts:
            continue
        roomy = [r for r in holders(move) if r != move.source and r in counts and counts[r] < cap]
        if not roomy:
            continue
        target = move.target if move.target in roomy else min(roomy, key=lambda r: (counts[r], r))
        counts[target] += 1
        counts[move.source] -= 1
        moved.add(move.request_id)
        placed.append(Migration(move.request_id, move.source, target))
    return placed


def no_balancing(ctx: BalanceContext) -> list[Migration]:
    """Never migrate; the cap then stays at ``cap_before_rebalance`` for the whole step."""
    return []


class TwoPhaseCap:
    """Per-instance cap: ``before`` until the first rebalance of a step, then ``after``."""

    def __init__(self, before: int, after: int) -> None:
        self.before = before
        self.after = after
        self.rebalanced = False

    @property
    def cap(self) -> int:
        return self.after if self.rebalanced else self.before

    def on_rebalance(self) -> None:
        self.rebalanced = True

    def on_new_step(self) -> None:
        self.rebalanced = False
