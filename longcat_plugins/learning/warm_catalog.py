"""Every warm start the demos and the test suites start from, by name, so that one command
(``longcat-plugins warm-starts``) builds them ahead of whatever needs them.

Each one builds once into the asset cache (``$LONGCAT_CACHE`` or ``~/.cache/longcat-plugins``)
and is reused after, so building ahead changes no weight: it changes *when* the SFT runs. That
matters on a 2-core machine: built inside ``pytest -n 2``, the tool demo's 4000-update SFT
shares the cores with the other worker's tests, each side with two torch threads, and both run
far slower than they would one after the other. The README's test command builds the suites'
warm starts first, alone (:data:`FOR_TESTS`), and the suites' fixtures take them from here by
the same names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from longcat_plugins.learning.demos import SYSTEM_VERDICTS
from longcat_plugins.learning.warmstart import WarmStart


@dataclass(frozen=True)
class CatalogEntry:
    """One warm start: who starts from it, and how it is built (into ``cache``, or the default)."""

    used_by: str
    build: Callable[[Path | None], WarmStart]


def _arithmetic(size: str, verdicts: float = 0.0) -> Callable[[Path | None], WarmStart]:
    def build(cache: Path | None) -> WarmStart:
        from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start

        return ensure_warm_start(cache, size=size, verdicts=verdicts)

    return build


def _tool(lane: bool, verdicts: bool) -> Callable[[Path | None], WarmStart]:
    def build(cache: Path | None) -> WarmStart:
        from longcat_plugins.learning.tool_verdicts import ensure_verdict_warm_start
        from longcat_plugins.learning.tool_warmstart import LANE_PLAN, demo_plan, ensure_tool_warm_start

        warm = ensure_tool_warm_start(cache, LANE_PLAN if lane else demo_plan("tiny"))
        return ensure_verdict_warm_start(warm) if verdicts else warm

    return build


def _code(cache: Path | None) -> WarmStart:
    from longcat_plugins.learning.code_warmstart import CodeWarmStartPlan, ensure_code_warm_start

    return ensure_code_warm_start(cache, CodeWarmStartPlan(size="tiny"))


#: name -> entry; the order is the build order of ``warm-starts --all`` (cheap first)
CATALOG: dict[str, CatalogEntry] = {
    "arithmetic": CatalogEntry("demo (the default recipe, --init warm)", _arithmetic("tiny")),
    "arithmetic-verdicts": CatalogEntry("demo --recipe longcat", _arithmetic("tiny", SYSTEM_VERDICTS)),
    "lane-arithmetic": CatalogEntry("demo --rollout vllm; the vLLM lane's tests", _arithmetic("tiny32")),
    "lane-tool": CatalogEntry("the vLLM lane's tool-agent tests", _tool(lane=True, verdicts=False)),
    "lane-tool-verdicts": CatalogEntry(
        "tests/test_e2e_tool_system.py (the system recipe's smaller run)", _tool(lane=True, verdicts=True)
    ),
    "code": CatalogEntry("demo --recipe code_agent", _code),
    "tool": CatalogEntry("demo --recipe tool_agent", _tool(lane=False, verdicts=False)),
    "tool-verdicts": CatalogEntry(
        "demo --recipe longcat_tool; tests/test_e2e_tool_system.py", _tool(lane=False, verdicts=True)
    ),
}


#: the ones the test suites take from the default cache (their fixtures call :func:`warm_start`
#: with these names; ``warm-starts --for-tests`` builds them before the README's pytest)
FOR_TESTS = ("tool-verdicts", "lane-tool", "lane-tool-verdicts", "lane-arithmetic")


def check_names(names: list[str] | tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming every unknown name and the choices."""
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise ValueError(f"unknown warm start(s) {', '.join(map(repr, unknown))}; choices: {', '.join(CATALOG)}")


def warm_start(name: str, cache: Path | None = None) -> WarmStart:
    """Build (once) and return the warm start ``name`` of :data:`CATALOG`."""
    check_names([name])
    return CATALOG[name].build(cache)


__all__ = ["CATALOG", "FOR_TESTS", "CatalogEntry", "check_names", "warm_start"]
