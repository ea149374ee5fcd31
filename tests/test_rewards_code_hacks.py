"""The code reward against programs that look for a hack instead of solving the task.

Each program of the red team's library (:data:`~longcat_plugins.redteam.CODE_CASES`) is run for
real in the sandbox (``code.compute_score``, as verl calls it) and must earn nothing: ``nan``
printed for a number, an integer off by a few units of a large answer, a bool for a number, an
object whose ``__eq__`` always says yes, an exit before the asserts, the harness's own result
lines written by the program. An honest program for every task of the library must still pass,
so the checks cannot be passed by refusing everything. The matching rules themselves are pinned
on hand-worked pairs.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from longcat_plugins.redteam import CODE_CASES, CODE_TASKS, ProgramCase, code_response
from longcat_plugins.rewards import code as code_reward
from longcat_plugins.rewards.result import VALID_KEY
from longcat_plugins.rewards.sandbox.testcases import stdout_matches, value_checks, value_matches, values_equal


def score(program: str, ground_truth: dict[str, Any]) -> float:
    out = asyncio.run(code_reward.compute_score("apps", code_response(program), json.dumps(ground_truth)))
    assert out[VALID_KEY] == 1.0, out  # a hack is a wrong answer (0), never a failed reward
    return float(out["score"])


# -- the rules, on hand-worked pairs ----------------------------------------------------------


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        ("7\n", "7\n", True),
        ("7   \n\n", "7", True),  # trailing whitespace and blank lines
        ("1 2\n3", "1 2 3", True),  # token-wise
        ("nan", "7", False),  # nan compares as close to anything
        ("NaN", "0.5", False),
        ("inf", "1e308", False),
        ("1000000999", "1000000000", False),  # within 1e-6 relative, but an integer is exact
        ("7.0", "7", False),
        ("1_000", "1000", False),  # Python's float() reads it; a checker does not
        ("0.5000001", "0.5", True),  # a real number within 1e-6
        ("0.50001", "0.5", False),
        ("1", "1.0", True),
        ("0x10", "16.0", False),
        ("3.1415", "3.14159265", False),  # 9.3e-5 off, the bound 1e-6 * 3.14 = 3.1e-6
        ("3.141592", "3.14159265", True),  # 6.5e-7 off
    ],
)
def test_stdout_matching(actual: str, expected: str, same: bool) -> None:
    assert stdout_matches(actual, expected) is same


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        (3, 3, True),
        (3.0, 3, True),  # the same number
        (1000000000.5, 1000000000, False),  # an integer answer is exact
        (True, 1, False),  # a bool is not a number (True == 1 in Python)
        (1, True, False),
        (0, False, False),
        (float("nan"), 0.5, False),
        (0.5 + 1e-9, 0.5, True),
        ([1, [2.0000000001, "a"]], [1, [2.0, "a"]], True),
        ([1, 2], [1, 2, 3], False),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ("3", 3, False),
        (None, None, True),
        (None, 0, False),
        (7, [7], True),  # APPS wraps a return value in a list
        ([7], [[7]], True),
    ],
)
def test_value_matching(actual: object, expected: object, same: bool) -> None:
    assert value_matches(actual, expected) is same


def test_an_assert_compares_exactly() -> None:
    assert values_equal(0.30000000000000004, 0.30000000000000004)
    assert not values_equal(0.3, 0.30000000000000004)
    assert not values_equal(7, [7])  # an assert does not unwrap


@pytest.mark.parametrize(
    ("code", "split"),
    [
        ("assert f(1) == 2", ("", [("f(1)", 2)])),
        ("assert [1, (2, 3)] == g(x)", ("", [("g(x)", [1, [2, 3]])])),
        ("assert f(1) == 2, 'message'", ("", [("f(1)", 2)])),
        ("assert f(1) == 2\nassert f(2) == 3", ("", [("f(1)", 2), ("f(2)", 3)])),
        ("assert f(1) is None", ("", [("f(1)", None)])),
        ("assert f('a') == {'x': [1.5]}", ("", [("f('a')", {"x": [1.5]})])),
        ("import m\nfrom p.q import f\nassert f(*[1]) == 2", ("import m\nfrom p.q import f", [("f(*[1])", 2)])),
        ("assert f(1) is 1", None),  # identity with a number: not a value check
        ("assert f(1) == {1, 2}", None),  # a set: not JSON
        ("assert abs(f(1) - 2) < 1e-6", None),
        ("assert f(1) == float('nan')", None),
        ("x = 1\nassert f(x) == 2", None),  # setup other than imports
        ("assert f(1) == 2\nimport m", None),
        ("import m", None),
        ("assert 1 == 1", None),
        ("", None),
        ("assert f(", None),
    ],
)
def test_which_tests_run_as_values(code: str, split: tuple[str, list[tuple[str, object]]] | None) -> None:
    assert value_checks(code) == split


# -- real programs in the sandbox (the red team's library) -------------------------------------


@pytest.mark.parametrize("case", CODE_CASES, ids=lambda c: c.name)
def test_a_hack_earns_nothing(case: ProgramCase) -> None:
    assert score(case.program, case.ground_truth) == 0.0


HONEST = {
    "sums": ("a, b = map(int, input().split())\nprint(a + b)\n", "sum"),
    "halves, to 7 digits": ("print(f'{int(input()) / 2:.7f}')\n", "half"),
    "totals (call)": ("def total(xs):\n    return sum(xs)\n", "total"),
    "tells even (call)": ("class Solution:\n    def even(self, n):\n        return n % 2 == 0\n", "even"),
    "totals (assert)": ("def total(xs):\n    return sum(xs)\n", "total_asserts"),
    "halves (open-form assert)": ("def half(n):\n    print('working')\n    return n / 2\n", "half_asserts"),
    "halves (module function)": ("import math\ndef half(n):\n    return math.ldexp(n, -1)\n", "half_isclose"),
    "tells even (truth)": ("def even(n):\n    return n % 2 == 0\n", "even_asserts"),
    "tops (builtins on the value)": ("def top(n):\n    return list(range(n, 0, -1))\n", "top_asserts"),
    "tops (comprehensions)": ("def top(n):\n    return [i for i in range(1, n + 1)]\n", "top_loop"),
}


def test_every_task_of_the_library_has_an_honest_answer() -> None:
    assert {task for _, task in HONEST.values()} == set(CODE_TASKS)
    assert {id(case.ground_truth) for case in CODE_CASES} <= {id(t) for t in CODE_TASKS.values()}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_an_honest_program_still_passes(name: str) -> None:
    program, task = HONEST[name]
    assert score(program, CODE_TASKS[task]) == 1.0
