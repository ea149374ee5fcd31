"""Assert tests cut in two (``rewards/sandbox/split_asserts.py``) and judged by the harness's
judge process (``rewards/sandbox/harness.py``), which never runs the program.

The cuts are pinned on hand-written tests (what runs in the program's process must never hold an
expectation); the value transport on hand-worked values; honest programs of many shapes must
still pass in the real sandbox, and the shapes that cannot be cut are refused, never credited.
(Hostile programs: ``redteam.CODE_CASES``, run by ``test_rewards_code_hacks.py``.)
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
from fractions import Fraction
from typing import Any, NamedTuple

import pytest

from longcat_plugins.rewards.result import ERROR_KEY, VALID_KEY
from longcat_plugins.rewards.sandbox.harness import plain, unplain
from longcat_plugins.rewards.sandbox.runner import Sandbox
from longcat_plugins.rewards.sandbox.split_asserts import Unsplittable, program_names, split_test, split_value
from longcat_plugins.rewards.sandbox.testcases import parse_test_cases

PROGRAM = "import math\ndef f(x):\n    pass\nclass Stack:\n    pass\nclass Solution:\n    pass\n"


def cut(code: str) -> tuple[list[str], list[str]]:
    """(what the program's process runs, what the judge checks) of ``code``."""
    split = split_test(code, program_names(PROGRAM))
    child = [step.get("probe") or step["run"] for step in split.child]
    return child, [step["check"] for step in split.judge if "check" in step]


@pytest.mark.parametrize(
    ("code", "child", "checks"),
    [
        ("assert abs(f(3) - 1.5) < 1e-9", ["f(3)"], ["abs(__lc_probe_0 - 1.5) < 1e-09"]),
        # the program imported math; the test's math is the judge's own
        ("assert math.isclose(f(3), 1.5)", ["f(3)"], ["math.isclose(__lc_probe_0, 1.5)"]),
        ("assert f('ab').startswith('a')", ["f('ab')"], ["__lc_probe_0.startswith('a')"]),
        ("assert Solution().solve(2)[0] == 3", ["Solution().solve(2)"], ["__lc_probe_0[0] == 3"]),
        ("s = Stack()\ns.push(1)\nassert s.pop() == 1", ["s = Stack()", "s.push(1)", "s.pop()"], ["__lc_probe_0 == 1"]),
        # a test's value the program needs is shared; one it does not (the expectation) is not
        ("xs = [3, 1]\nwant = [1, 3]\nassert f(xs) == want", ["xs = [3, 1]", "f(xs)"], ["__lc_probe_0 == want"]),
        ("assert all(x > 0 for x in f(3))", ["f(3)"], ["all((x > 0 for x in __lc_probe_0))"]),
        (
            "assert all(f(x) == 2 * x for x in range(3) if x)",
            ["[(f(x),) for x in range(3) if x]"],
            [
                "all((__lc_row[0] == 2 * x for x, __lc_row in zip([x for x in range(3) if x], __lc_probe_0, strict=True)))"
            ],
        ),
        ("assert f(1) and not f(2)", ["f(1)", "f(2)"], ["__lc_probe_0 and (not __lc_probe_1)"]),
    ],
)
def test_cuts(code: str, child: list[str], checks: list[str]) -> None:
    assert cut(code) == (child, checks)


def test_the_expectation_stays_out_of_the_programs_process() -> None:
    split = split_test("want = 98765\nassert f(2) + 1 == want\nassert f(3) == 12345", program_names(PROGRAM))
    assert "98765" not in json.dumps(split.child) and "12345" not in json.dumps(split.child)
    assert "12345" in json.dumps(split.judge)


def test_a_builtin_the_program_redefines_is_still_the_builtin() -> None:
    child, checks = cut_with("def abs(x):\n    return 0\ndef half(n):\n    pass\n", "assert abs(half(3) - 1.5) < 1e-9")
    assert child == ["half(3)"] and checks == ["abs(__lc_probe_0 - 1.5) < 1e-09"]


def cut_with(program: str, code: str) -> tuple[list[str], list[str]]:
    split = split_test(code, program_names(program))
    return [s.get("probe") or s["run"] for s in split.child], [s["check"] for s in split.judge if "check" in s]


def test_a_literal_assert_gives_the_judges_value() -> None:
    split = split_value("import math", "len(f(3))", program_names(PROGRAM))
    assert [s.get("probe") for s in split.child] == ["f(3)"]
    assert split.judge[-1]["value"] == "len(__lc_probe_0)"


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("for i in range(3):\n    assert f(i) == i", "a For statement"),
        ("def check(c):\n    assert c(1) == 1\ncheck(f)", "a FunctionDef statement"),
        ("assert (lambda y: f(y))(2) == 1", "variable of a comprehension or a lambda"),
        ("s = Stack()\nassert s.__eq__(2)", "dunder attribute"),
        ("assert all(g(x) for x in f(3))", "both the loop and its element"),
        ("assert [f(x, y) for x in range(2) for y in range(2)]", "more than one loop"),
        ("x = 1", "asserts nothing"),
        ("assert f(", "does not parse"),
    ],
)
def test_shapes_that_cannot_be_cut_say_why(code: str, why: str) -> None:
    with pytest.raises(Unsplittable, match=why):
        split_test(code, program_names(PROGRAM + "def g(x):\n    pass\n"))


class Pair(NamedTuple):
    a: int
    b: int


class Liar(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


class Short(list):
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter([])

    def __len__(self) -> int:
        return 0


@pytest.mark.parametrize(
    ("value", "back"),
    [
        (-0.0, -0.0),
        (2**80, 2**80),
        ((1, [2, (3,)]), (1, [2, (3,)])),
        ({(1, 2): {"a": None}}, {(1, 2): {"a": None}}),
        ({1, 2}, {1, 2}),
        (frozenset({"x"}), frozenset({"x"})),
        (b"\x00\xff", b"\x00\xff"),
        (1 + 2j, 1 + 2j),
        (collections.deque([1, 2]), collections.deque([1, 2])),
        (range(1, 9, 2), range(1, 9, 2)),
        (Fraction(1, 3), Fraction(1, 3)),
        (collections.Counter("aab"), {"a": 2, "b": 1}),  # a dict subclass is its items
        (Pair(1, 2), (1, 2)),
        (Liar(5), 5),
        (Short([1, 2]), [1, 2]),  # read through list's own slots, not the overrides
    ],
)
def test_plain_values_cross_as_their_base_types(value: Any, back: Any) -> None:
    got = unplain(json.loads(json.dumps(plain(value))))
    assert type(got) is type(back) and got == back
    if isinstance(back, float):
        assert math.copysign(1.0, got) == math.copysign(1.0, back)


def test_iterators_are_read_and_anything_else_refused() -> None:
    assert list(unplain(json.loads(json.dumps(plain(x * x for x in range(3)))))) == [0, 1, 4]
    for value in (object(), print, math, type("C", (), {})()):
        with pytest.raises(TypeError, match="not plain data"):
            plain(value)
    for data in ({"$": "eval", "v": "1"}, {"$": "tuple", "v": [], "x": 1}, {"a": 1}):
        with pytest.raises(ValueError):
            unplain(data)


def run(program: str, asserts: list[str]) -> list[tuple[bool, str, str]]:
    """Each assert case of ``program`` in the real sandbox: (passed, status, detail)."""
    report = asyncio.run(Sandbox().run("python", program, parse_test_cases({"assert_case": asserts})))
    return [(c.passed, c.status, c.detail) for c in report.cases]


HONEST = """
import math
from collections import defaultdict, namedtuple
Point = namedtuple("Point", "x y")
class Stack:
    def __init__(self):
        self.items = []
    def push(self, x):
        self.items.append(x)
    def pop(self):
        return self.items.pop()
    @property
    def size(self):
        return len(self.items)
class Solution:
    def twice(self, x):
        return 2 * x
def counts(s):
    d = defaultdict(int)
    for ch in s:
        d[ch] += 1
    return d
def squares(n):
    for i in range(n):
        yield i * i
def root(x):
    return math.sqrt(x)
def point():
    return Point(1, 2)
"""


def test_honest_programs_of_many_shapes_pass() -> None:
    asserts = [
        "s = Stack()\ns.push(1)\ns.push(2)\nassert s.size == 2\nassert s.pop() == 2",
        "assert Solution().twice(4) == 8",
        "assert counts('aab') == {'a': 2, 'b': 1}",
        "assert list(squares(3)) == [0, 1, 4] and sum(squares(4)) == 14",
        "assert math.isclose(root(2) ** 2, 2)",
        "import math\nassert abs(root(9) - 3) < 1e-9",
        "assert point() == (1, 2)",
        "xs = [1, 4, 9]\nassert [root(x) for x in xs] == [1.0, 2.0, 3.0]",
        "assert all(root(x * x) == x for x in range(5) if x % 2)",
        "assert any(root(x) > 2 for x in [1, 16])",
    ]
    assert run(HONEST, asserts) == [(True, "passed", "")] * len(asserts)


def test_a_wrong_program_fails_and_an_uncut_shape_is_not_credited() -> None:
    got = run(
        "def f(x):\n    return x + 1\n",
        ["assert f(1) == 2", "assert f(2) < 3", "for i in range(3):\n    assert f(i) == i + 1"],
    )
    assert got[0][:2] == (True, "passed")
    assert got[1][:2] == (False, "runtime_error") and "AssertionError" in got[1][2]
    assert got[2][:2] == (False, "unsupported_test") and "not credited" in got[2][2]


def code_score(program: str, asserts: list[str]) -> dict[str, Any]:
    from longcat_plugins.redteam import code_response
    from longcat_plugins.rewards import code as code_reward

    truth = json.dumps({"assert_case": asserts})
    return asyncio.run(code_reward.compute_score("humaneval", code_response(program), truth))


def test_a_test_no_answer_could_pass_here_makes_the_sample_invalid_not_wrong() -> None:
    """The dataset's shape (HumanEval's ``check(candidate)``) is no verdict on the answer: the
    sample is invalid, naming the case and why, so it neither credits nor blames the policy."""
    out = code_score(
        "def f(x):\n    return x + 1\n",
        ["assert f(1) == 2", "def check(candidate):\n    assert candidate(1) == 2\ncheck(f)"],
    )
    assert out[VALID_KEY] == 0.0 and math.isnan(out["score"])
    assert "assert case 1 cannot be judged" in out[ERROR_KEY] and "FunctionDef" in out[ERROR_KEY]


def test_a_program_that_makes_a_test_uncuttable_is_wrong_not_invalid() -> None:
    """Which names are the program's depends on what it defines; a program that redefines a
    standard module's name so that the test can no longer be cut gets 0, not a pass out."""
    test = ["assert all(len(string.ascii_letters) > x for x in f(3))"]
    honest = code_score("def f(n):\n    return list(range(n))\n", test)
    assert honest[VALID_KEY] == 1.0 and honest["score"] == 1.0
    dodging = code_score("string = 'x'\ndef f(n):\n    return list(range(n))\n", test)
    assert dodging[VALID_KEY] == 1.0 and dodging["score"] == 0.0


def test_a_value_that_is_not_plain_data_fails() -> None:
    program = "class Box:\n    def __eq__(self, other):\n        return True\ndef f():\n    return Box()\n"
    (got,) = run(program, ["assert f() < 5 or f() > 5 or f() == 5"])
    assert got[:2] == (False, "runtime_error") and "not plain data" in got[2]
