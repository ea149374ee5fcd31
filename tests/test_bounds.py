"""Field ranges declared with ``bounded`` and enforced by ``check_bounds``, alone and in the settings
that use them (the message names the field and the value, and the host turns it into a config problem)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import pytest

from longcat_plugins.bounds import Bounds, bounded, check_bounds, out_of_bounds
from longcat_plugins.environments.code_env._agent_loop import CodeAgentSettings
from longcat_plugins.environments.context import ContextSettings
from longcat_plugins.environments.curriculum import CurriculumConfig
from longcat_plugins.rewards.genrm import GenRMConfig
from longcat_plugins.rewards.math import MathRewardConfig
from longcat_plugins.rewards.sandbox.limits import Limits
from longcat_plugins.schedulers.sim.cluster import ClusterSpec


@dataclass(frozen=True)
class _Knobs:
    plain: int = 7
    count: int = bounded(1, ge=1)
    rate: float = bounded(0.5, gt=0, lt=1)
    share: float = bounded(0.0, ge=0, le=1)
    cap: float = bounded(10.0, le=10)

    def __post_init__(self) -> None:
        check_bounds(self, "Knobs.")


def test_defaults_stay_plain_values() -> None:
    """A bounded field's default is the number itself (on the class and on an instance)."""
    assert _Knobs.count == 1 and _Knobs.rate == 0.5
    assert _Knobs() == _Knobs(plain=7, count=1, rate=0.5, share=0.0, cap=10.0)
    assert [f.name for f in fields(_Knobs) if f.metadata] == ["count", "rate", "share", "cap"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": 0}, "Knobs.count must be >= 1, got 0"),
        ({"rate": 0.0}, "Knobs.rate must be in (0, 1), got 0.0"),
        ({"rate": 1.0}, "Knobs.rate must be in (0, 1), got 1.0"),
        ({"share": 1.5}, "Knobs.share must be in [0, 1], got 1.5"),
        ({"share": -0.1}, "Knobs.share must be in [0, 1], got -0.1"),
        ({"cap": 10.5}, "Knobs.cap must be <= 10, got 10.5"),
        ({"rate": math.nan}, "Knobs.rate must be in (0, 1), got nan"),
        ({"count": "3"}, "Knobs.count must be a number >= 1, got '3'"),
    ],
)
def test_out_of_range_names_field_range_and_value(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        _Knobs(**kwargs)
    assert str(info.value) == message


def test_edges_of_closed_ranges_are_admitted() -> None:
    knobs = _Knobs(plain=-5, count=1, rate=0.999, share=1.0, cap=10)
    assert (knobs.plain, knobs.count, knobs.share, knobs.cap) == (-5, 1, 1.0, 10)


@dataclass(frozen=True)
class _Wider(_Knobs):
    count: int = 5  # another default only: the base's range stays
    cap: float = bounded(20.0, le=20)  # a range of its own replaces the base's


def test_a_subclass_default_keeps_the_range_and_its_own_range_replaces_it() -> None:
    with pytest.raises(ValueError, match=r"^Knobs.count must be >= 1, got 0$"):
        _Wider(count=0)
    assert _Wider(cap=15.0).cap == 15.0
    with pytest.raises(ValueError, match=r"^Knobs.cap must be <= 20, got 21.0$"):
        _Wider(cap=21.0)
    with pytest.raises(ValueError, match=r"^max_turn_tokens must be >= 1, got 0$"):
        CodeAgentSettings(max_turn_tokens=0)  # its default 1024 overrides ToolAgentSettings' field


def test_two_bounds_on_one_side_are_refused() -> None:
    with pytest.raises(TypeError, match="at most one lower bound"):
        bounded(1, ge=0, gt=0)
    with pytest.raises(TypeError, match="at most one lower bound"):
        bounded(1, le=2, lt=2)


def test_describe_open_range() -> None:
    assert Bounds().describe() == "a number" and Bounds(gt=0).describe() == "> 0"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ContextSettings(discard_turns=-1), "discard_turns must be >= 0, got -1"),
        (lambda: ContextSettings(summary_max_tokens=0), "summary_max_tokens must be >= 1, got 0"),
        (lambda: MathRewardConfig(timeout_s=0), "timeout_s must be > 0, got 0"),
        (lambda: MathRewardConfig(max_answer_chars=0), "max_answer_chars must be >= 1, got 0"),
        (lambda: GenRMConfig(concurrency=0), "genrm: concurrency must be >= 1, got 0"),
        (lambda: Limits(nofile=0), "Limits.nofile must be > 0, got 0"),
        (lambda: ClusterSpec(step_per_ktoken_s=-1.0), "ClusterSpec.step_per_ktoken_s must be >= 0, got -1.0"),
        (lambda: CurriculumConfig(decay=1.0), "decay must be in (0, 1), got 1.0"),
    ],
)
def test_settings_check_their_declared_ranges(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        build()
    assert str(info.value) == message


def test_out_of_bounds_lists_every_field_outside_its_range() -> None:
    """For checks that report all problems at once (``GenConfig.problems`` feeds the envgen CLI)."""
    knobs = object.__new__(_Knobs)  # unchecked: out_of_bounds alone
    for name, value in {"plain": -1, "count": 0, "rate": 0.5, "share": 2.0, "cap": "x"}.items():
        object.__setattr__(knobs, name, value)
    assert out_of_bounds(knobs) == [("count", ">= 1", 0), ("share", "in [0, 1]", 2.0), ("cap", "a number <= 10", "x")]
