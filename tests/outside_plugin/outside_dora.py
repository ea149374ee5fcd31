"""An outside plugin with DORA policies, written from docs/schedulers.md: an eviction policy, a
load-balancer strategy and an admission policy, selected in ``longcat.settings.scheduler.dora``.
Each appends one JSON line per decision to ``$OUTSIDE_DORA_MARKER`` (if set), so a test can see it
ran where verl's ``dora`` trainer runs (the sampler in the trainer process, the balancer and the
admission policy in the load balancer's Ray actor)."""

from __future__ import annotations

import json
import os

from longcat_plugins import DoraAdmission, DoraBalancer, DoraEvictionPolicy, hookimpl
from longcat_plugins.schedulers.core.admission import AdmissionContext
from longcat_plugins.schedulers.core.balancer import BalanceContext, greedy
from longcat_plugins.schedulers.core.types import Migration
from longcat_plugins.schedulers.core.versions import EvictionContext


def _mark(record: dict) -> None:
    path = os.environ.get("OUTSIDE_DORA_MARKER")
    if path:
        with open(path, "a") as sink:
            sink.write(json.dumps({"pid": os.getpid(), **record}) + "\n")


def marked_window(ctx: EvictionContext) -> list[int]:
    """The staleness window, each decision recorded."""
    evicted = [v for v in ctx.live if ctx.latest - v > ctx.staleness]
    _mark({"kind": "eviction", "latest": ctx.latest, "live": list(ctx.live), "evicted": evicted})
    return evicted


def freshest_only(ctx: EvictionContext) -> list[int]:
    """Keep only the newest version's groups."""
    return [v for v in ctx.live if v != ctx.latest]


def marked_greedy(ctx: BalanceContext) -> list[Migration]:
    """The core's greedy balancer, each plan recorded."""
    plan = greedy(ctx)
    _mark({"kind": "balancer", "loads": {k: len(v) for k, v in ctx.loads.items()}, "moves": len(plan)})
    return plan


def marked_admission(ctx: AdmissionContext) -> bool:
    """Hold new requests while the newest version is being superseded, each decision recorded."""
    admitted = not ctx.training
    _mark({"kind": "admission", "version": ctx.version, "batches_left": ctx.batches_left, "admitted": admitted})
    return admitted


@hookimpl
def register_schedulers() -> list:
    return [
        DoraEvictionPolicy("marked_window", marked_window),
        DoraEvictionPolicy("freshest_only", freshest_only),
        DoraBalancer("marked_greedy", marked_greedy),
        DoraAdmission("marked_admission", marked_admission),
    ]
