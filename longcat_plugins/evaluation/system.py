"""Which of the system's components acted in a run, read from verl's per-step metrics.

A recipe that enables a component proves nothing about the run: a strategy can be switched on
and never change a decision. :func:`components_active` names the components of the paper's
system (``configs/longcat.yaml``) whose own metrics show that they acted in ``steps`` (the
run's metrics records), each by evidence that is absent or zero when the component is off or
idle: the bench (``bench/bench_system.py``) records it per run, and the system's end-to-end
test requires every one. The tool variant (``configs/longcat_tool.yaml``) adds what only it has
(:data:`TOOL_EVIDENCE`, named in :data:`TOOL_SYSTEM`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Steps = Sequence[Mapping[str, Any]]


def _seen(key: str) -> Callable[[Steps], bool]:
    """The metric was logged in some step."""
    return lambda steps: any(key in s for s in steps)


def _prefix(prefix: str) -> Callable[[Steps], bool]:
    """Some metric under ``prefix`` was logged."""
    return lambda steps: any(k.startswith(prefix) for s in steps for k in s)


def _value(step: Mapping[str, Any], key: str) -> float:
    """The metric in one step; absent or null: 0."""
    return float(step.get(key, 0.0) or 0.0)


def _positive(key: str) -> Callable[[Steps], bool]:
    """The metric was above zero in some step."""
    return lambda steps: any(_value(s, key) > 0.0 for s in steps)


def _spread(high: str, low: str) -> Callable[[Steps], bool]:
    """In some step ``high`` exceeded ``low`` (e.g. prompts got different rollout counts)."""
    return lambda steps: any(high in s and low in s and float(s[high]) > float(s[low]) for s in steps)


def _at_least(key: str, value: float) -> Callable[[Steps], bool]:
    return lambda steps: any(_value(s, key) >= value for s in steps)


def _routes(n: int) -> Callable[[Steps], bool]:
    """At least ``n`` rewards scored samples over the run (``longcat/reward/scored/<name>``)."""
    prefix = "longcat/reward/scored/"

    def check(steps: Steps) -> bool:
        names = {k[len(prefix) :] for s in steps for k, v in s.items() if k.startswith(prefix) and float(v) > 0}
        return len(names) >= n

    return check


def _verified(steps: Steps) -> bool:
    """Some step trained verification samples, or judged them all right (online filtering drops
    such all-correct groups: no signal is left, and the phase ends as learned). A constant
    verdict is right on half of the pairs a phase shows, never on all of them."""
    sv = "longcat/selfverify/"
    return any(
        _value(s, sv + "verify_samples") > 0.0
        or (_value(s, sv + "verify_filtered") > 0.0 and _value(s, sv + "verify_accuracy") == 1.0)
        for s in steps
    )


#: component -> what in the run's metrics shows it acted
EVIDENCE: dict[str, tuple[str, Callable[[Steps], bool]]] = {
    "dora": ("a replica held two weights versions at once", _at_least("dora/versions_held/max", 2.0)),
    "triplet_clip": ("its clip fractions were logged", _prefix("actor/longcat/triplet/")),
    "truncated_is": ("truncated IS weights were computed", _seen("actor/longcat/is_truncated_frac")),
    "longcat_grpo": (
        "oversampled groups were normalised apart",
        _at_least("longcat/data/plan/groups_per_task/max", 2.0),
    ),
    "online_filter": ("groups without signal were dropped", _positive("dora/filtered_groups")),
    "replay": ("the replay buffer was consulted", _seen("dora/replay/buffered")),
    "budget": (
        "prompts got different rollout counts",
        _spread("longcat/data/plan/rollouts_per_task/max", "longcat/data/plan/rollouts_per_task/min"),
    ),
    "oversampling": ("a prompt was split into groups", _at_least("longcat/data/plan/groups_per_task/max", 2.0)),
    "curriculum": ("the curriculum advanced a level", _positive("longcat/data/curriculum/advanced")),
    "selfverify": ("verification prompts were trained, or all judged right", _verified),
    "reward_router": ("samples were scored by two routed rewards", _routes(2)),
}


def _together(*checks: Callable[[Steps], bool]) -> Callable[[Steps], bool]:
    """Every check holds in one and the same step."""
    return lambda steps: any(all(check([s]) for check in checks) for s in steps)


#: what only the tool variant has: its episodes scored by their rubric through the reward manager
#: (the ``tool_rubric`` route), and verification samples trained (or all judged right) in a step
#: whose episodes were rubric-scored (the truth the verdicts are paid against is that rubric score)
TOOL_EVIDENCE: dict[str, tuple[str, Callable[[Steps], bool]]] = {
    "tool_rubric": (
        "tool episodes were scored by their rubric through the router",
        _positive("longcat/reward/scored/tool_rubric"),
    ),
    "selfverify_tool": (
        "verification samples were trained, or all judged right, beside rubric-scored episodes",
        _together(_verified, _positive("longcat/reward/scored/tool_rubric")),
    ),
}
#: the components of the tool variant, in order
TOOL_SYSTEM = (*EVIDENCE, *TOOL_EVIDENCE)
_ALL = {**EVIDENCE, **TOOL_EVIDENCE}


def components_active(steps: Steps, components: Sequence[str] | None = None) -> list[str]:
    """The components (of ``components``, default all of :data:`EVIDENCE`) that acted, in order."""
    names = list(EVIDENCE) if components is None else list(components)
    unknown = sorted(set(names) - set(_ALL))
    if unknown:
        raise ValueError(f"no evidence defined for component(s) {unknown}; known: {list(_ALL)}")
    return [name for name in names if _ALL[name][1](steps)]


__all__ = ["EVIDENCE", "TOOL_EVIDENCE", "TOOL_SYSTEM", "components_active"]
