"""The seam a data strategy plugs into: :class:`PlanningStrategy`, run by the step planner.

The planner (:class:`~longcat_plugins.data.planner.DataPlanner`) is the one place that decides
what is generated, under every trainer that plans its prompts: the ``longcat_data`` sync
trainer asks it once per step for the whole batch, the ``dora`` streaming trainer asks it for
each chunk of freed capacity (inside the version bound). A strategy sees the same calls under
both, so a third party writes it once and it runs wherever the planner runs:

- :meth:`PlanningStrategy.order`: which candidate prompts come first (after the built-in
  curriculum); the planner starts them in this order until the step's capacity is full;
- :meth:`PlanningStrategy.shape`: each planned row (rollouts, response budget), last;
- :meth:`PlanningStrategy.observe`: the trained groups (rewards, lengths), for its own state;
- :meth:`PlanningStrategy.state_dict`: saved beside the trainer's checkpoint, read on resume.

Strategies are :class:`~longcat_plugins.components.DataStrategy` components, registered through
the ``register_schedulers`` hook and selected by name in
``longcat.settings.scheduler.longcat_data.strategies``; their settings are
``...longcat_data.strategy_settings.<name>`` (a mapping handed to the constructor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

# what a strategy is shown and returns (the planner builds and reads them)


@dataclass(frozen=True)
class Candidate:
    """One prompt drawn from the dataloader: its task id, domain, capability stage, historical pass rate."""

    task: str
    domain: str = ""
    stage: str | None = None
    historical: float | None = None


@dataclass(frozen=True)
class RowPlan:
    """One prompt row to submit: candidate ``row`` as group ``group`` of its task, ``rollouts`` samples."""

    row: int
    task: str
    domain: str
    group: int
    rollouts: int
    max_tokens: int | None

    @property
    def group_id(self) -> str:
        """The ``longcat_group`` id: the task and the copy (A5)."""
        return f"{self.task}#{self.group}"


@dataclass(frozen=True)
class GroupResult:
    """A trained group: its task, copy, rewards and generated lengths."""

    task: str
    group: int
    rewards: list[float | None]
    lengths: list[int]
    replayed: bool = False


KIND = "data_strategy"
#: the trainers whose planner runs strategies
PLANNING_TRAINERS = frozenset({"longcat_data", "dora"})


class PlanningStrategy:
    """Base class of a data strategy: every hook defaults to "no change".

    Attributes:
        name: the component name it was selected by (set by the planner).
        trainers: the trainer modes it can run under; selecting it under another exits 2.
    """

    trainers: ClassVar[frozenset[str]] = PLANNING_TRAINERS
    name: str = ""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)

    def order(self, candidates: Sequence[Candidate], rates: Sequence[float], order: list[int]) -> list[int]:
        """Candidate indices in the order to start them (a subset drops the others this time).
        ``rates``: each candidate's running pass rate."""
        return order

    def shape(self, row: RowPlan) -> RowPlan:
        """The planned row as it is submitted (e.g. ``dataclasses.replace(row, max_tokens=...)``)."""
        return row

    def observe(self, groups: Sequence[GroupResult]) -> dict[str, float]:
        """The trained groups of a step; returns metrics (logged as ``longcat/data/<name>/*``)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state, written with the trainer's checkpoint."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


def _registered() -> dict[str, Any]:
    """The enabled ``DataStrategy`` components of this process's host, by name."""
    from longcat_plugins.host import get_host

    return {c.name: c for c in get_host().components(kind=KIND)}


def strategy_names() -> list[str]:
    """Every enabled data strategy's name (built-in and third-party), sorted."""
    return sorted(_registered())


def load_strategy(name: str, settings: Mapping[str, Any], where: str) -> PlanningStrategy:
    """The strategy ``name`` built with ``settings``; ``where`` (its key path) names bad input."""
    comps = _registered()
    comp = comps.get(name)
    if comp is None:
        raise ValueError(f"{where}: unknown data strategy {name!r}; registered: {sorted(comps) or 'none'}")
    cls = comp.target
    if not (isinstance(cls, type) and issubclass(cls, PlanningStrategy)):
        raise TypeError(
            f"{where}: data strategy {name!r} from plugin {comp.plugin!r}: {cls!r} is not a PlanningStrategy subclass"
        )
    strategy = cls(settings)
    strategy.name = name
    return strategy


def problems_for(names: Sequence[str], trainer: str, where: str) -> list[str]:
    """Unknown names and strategies that cannot run under ``trainer``, each naming its key."""
    from longcat_plugins.components import ComponentImportError

    comps = _registered()
    out = []
    for i, name in enumerate(names):
        comp = comps.get(name)
        if comp is None:
            out.append(f"{where}[{i}]: unknown data strategy {name!r}; registered: {sorted(comps) or 'none'}")
            continue
        try:
            cls = comp.target
        except ComponentImportError as exc:
            out.append(f"{where}[{i}]: data strategy {name!r} from plugin {comp.plugin!r} failed to import: {exc}")
            continue
        allowed = getattr(cls, "trainers", PLANNING_TRAINERS)
        if trainer not in allowed:
            out.append(
                f"{where}[{i}]: data strategy {name!r} cannot run under trainer {trainer!r} (it runs under "
                f"{sorted(allowed)})"
            )
    return out


__all__ = ["KIND", "PLANNING_TRAINERS", "PlanningStrategy", "load_strategy", "problems_for", "strategy_names"]
