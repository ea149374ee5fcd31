"""verl's code ground-truth formats as a list of test cases.

Both verl backends (``utils/reward_score/prime_code`` and ``sandbox_fusion``) take a JSON
object (or its string) ``{"inputs": [...], "outputs": [...]}``: stdin/stdout cases, or, with
``"fn_name"``, call-based cases whose inputs are argument lists (prime_code) or JSON lines
(sandbox_fusion) and whose outputs are return values (APPS often wraps them in a list).
sandbox_fusion's ``"assert_case"`` (code appended to the program) is accepted too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from longcat_plugins.rewards.plain import plain


@dataclass(frozen=True)
class TestCase:
    """One case: ``stdin``/``expected`` text, or ``args``/``expected_value`` for call-based cases."""

    __test__ = False  # not a pytest class

    stdin: str = ""
    expected: str | None = None
    args: list[Any] | None = None
    expected_value: Any = None
    assert_code: str | None = None


@dataclass(frozen=True)
class TestSuite:
    __test__ = False

    cases: list[TestCase]
    fn_name: str | None = None


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return str(value)


def _args(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        lines = [ln for ln in value.split("\n") if ln.strip()]
        try:
            return [json.loads(ln) for ln in lines]
        except json.JSONDecodeError:
            return [value]
    return [value]


def parse_test_cases(ground_truth: Any, max_cases: int = 0) -> TestSuite:
    """Parse ``ground_truth``; ValueError saying what is missing when it is not a test-case spec."""
    spec = plain(ground_truth)
    if isinstance(spec, bytes):
        spec = spec.decode()
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ValueError(f"code ground_truth is not JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"code ground_truth must be an object with inputs/outputs, got {type(spec).__name__}")
    asserts = spec.get("assert_case")
    if isinstance(asserts, list) and asserts and "inputs" not in spec:
        cases = [TestCase(assert_code=str(a)) for a in asserts]
        return TestSuite(cases[:max_cases] if max_cases else cases)
    inputs, outputs = spec.get("inputs"), spec.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise ValueError("code ground_truth needs lists 'inputs' and 'outputs'")
    if len(inputs) != len(outputs):
        raise ValueError(f"code ground_truth has {len(inputs)} inputs but {len(outputs)} outputs")
    if not inputs:
        raise ValueError("code ground_truth has no test cases")
    fn_name = spec.get("fn_name")
    if fn_name:
        cases = [TestCase(args=_args(i), expected_value=o) for i, o in zip(inputs, outputs, strict=True)]
    else:
        cases = [TestCase(stdin=_text(i), expected=_text(o)) for i, o in zip(inputs, outputs, strict=True)]
    if max_cases:
        cases = cases[:max_cases]
    return TestSuite(cases, fn_name=str(fn_name) if fn_name else None)


def _norm_lines(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _token_equal(a: str, b: str, rel: float = 1e-6) -> bool:
    ta, tb = a.split(), b.split()
    if len(ta) != len(tb):
        return False
    for x, y in zip(ta, tb, strict=True):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if abs(fx - fy) > rel * max(1.0, abs(fy)):
            return False
    return True


def stdout_matches(actual: str, expected: str) -> bool:
    """Line-wise equality ignoring trailing whitespace; then token-wise with float tolerance."""
    if _norm_lines(actual) == _norm_lines(expected):
        return True
    return _token_equal(actual, expected)


def value_matches(actual: Any, expected: Any) -> bool:
    """Call-based comparison: equal, or equal to the single element of a wrapped expectation."""
    if actual == expected:
        return True
    if isinstance(expected, list) and len(expected) == 1 and actual == expected[0]:
        return True
    if isinstance(actual, float) and isinstance(expected, int | float):
        return abs(actual - expected) <= 1e-6 * max(1.0, abs(expected))
    return False
