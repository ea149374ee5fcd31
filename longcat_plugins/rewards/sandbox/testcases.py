"""verl's code ground-truth formats as a list of test cases.

Both verl backends (``utils/reward_score/prime_code`` and ``sandbox_fusion``) take a JSON
object (or its string) ``{"inputs": [...], "outputs": [...]}``: stdin/stdout cases, or, with
``"fn_name"``, call-based cases whose inputs are argument lists (prime_code) or JSON lines
(sandbox_fusion) and whose outputs are return values (APPS often wraps them in a list).
sandbox_fusion's ``"assert_case"`` (code appended to the program) is accepted too.
"""

from __future__ import annotations

import ast
import json
import math
import re
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


def _literal(node: ast.expr) -> tuple[bool, Any]:
    """(True, value) when ``node`` is a literal that JSON carries (tuples become lists)."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None
    try:
        return True, json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):  # a set, bytes, complex, a non-string key, nan: not JSON
        return False, None


def _value_check(statement: ast.stmt) -> tuple[str, Any] | None:
    """``(expression, expected)`` of ``assert <expr> == <literal>`` (either side; ``is`` for
    ``None``, ``True`` or ``False``), else ``None``."""
    if not isinstance(statement, ast.Assert):
        return None
    test = statement.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, pair = test.ops[0], (test.left, test.comparators[0])
    for expr, other in (pair, pair[::-1]):
        is_literal, expected = _literal(other)
        if not is_literal or _literal(expr)[0]:
            continue
        if isinstance(op, ast.Eq) or (isinstance(op, ast.Is) and any(expected is c for c in (None, True, False))):
            return ast.unparse(expr), expected
    return None


def value_checks(code: str) -> tuple[str, list[tuple[str, Any]]] | None:
    """``(setup, [(expression, expected), ...])`` when a Python test is import statements (the
    setup) followed only by ``assert <expr> == <literal>`` statements (either side; ``is``
    ``None/True/False`` too), else ``None``. Such a test runs as its expressions' values,
    compared outside the sandbox, so the expectations never enter it: a program cannot read
    them, and neither an object whose ``__eq__`` always says yes, nor a harness function patched
    at import, nor an exit before the asserts earns anything."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    body = list(tree.body)
    setup: list[ast.stmt] = []
    while body and isinstance(body[0], ast.Import | ast.ImportFrom):
        setup.append(body.pop(0))
    checks = [_value_check(statement) for statement in body]
    if not checks or any(check is None for check in checks):
        return None
    return ast.unparse(ast.Module(body=setup, type_ignores=[])), [c for c in checks if c is not None]


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


#: a plain decimal literal: what a checker reads as a real number (no ``nan``, ``inf``, ``1_0``,
#: hex, or the other spellings Python's ``float`` also takes)
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
#: an integer literal: compared exactly, as a token (a checker's tolerance is for real numbers)
_INTEGER = re.compile(r"[+-]?\d+")


def _close(actual: float, expected: float, rel: float) -> bool:
    return math.isfinite(actual) and math.isfinite(expected) and abs(actual - expected) <= rel * max(1.0, abs(expected))


def _token_equal(a: str, b: str, rel: float = 1e-6) -> bool:
    """Token-wise equality; an expected real number (a decimal literal that is not an integer)
    also takes any decimal literal within ``rel`` of it. Integers compare exactly (an answer
    off by a few units of a large count is wrong), and ``nan`` or ``inf`` never stands for a
    number (``nan`` would compare as close to anything)."""
    ta, tb = a.split(), b.split()
    if len(ta) != len(tb):
        return False
    for x, y in zip(ta, tb, strict=True):
        if x == y:
            continue
        real = _DECIMAL.fullmatch(y) is not None and _INTEGER.fullmatch(y) is None
        if not (real and _DECIMAL.fullmatch(x) and _close(float(x), float(y), rel)):
            return False
    return True


def stdout_matches(actual: str, expected: str) -> bool:
    """Line-wise equality ignoring trailing whitespace; then token-wise, real numbers within a
    relative 1e-6 (:func:`_token_equal`)."""
    if _norm_lines(actual) == _norm_lines(expected):
        return True
    return _token_equal(actual, expected)


def values_equal(actual: Any, expected: Any, rel: float = 0.0) -> bool:
    """Structural equality of JSON values: a bool is not a number (``True == 1`` in Python), an
    expected real takes a number within ``rel`` (never ``nan``), an expected integer an equal
    number, lists and objects compare element by element."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, float) and isinstance(actual, int | float):
        return actual == expected or _close(float(actual), expected, rel)
    if isinstance(expected, int) and isinstance(actual, int | float):
        return actual == expected
    if isinstance(expected, list) and isinstance(actual, list):
        return len(actual) == len(expected) and all(
            values_equal(x, y, rel) for x, y in zip(actual, expected, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return actual.keys() == expected.keys() and all(values_equal(actual[k], v, rel) for k, v in expected.items())
    return type(actual) is type(expected) and actual == expected


def value_matches(actual: Any, expected: Any, rel: float = 1e-6) -> bool:
    """Call-based comparison (:func:`_value_equal`): equal to the expectation, or to the single
    element of a wrapped one (APPS wraps return values in a list)."""
    if values_equal(actual, expected, rel):
        return True
    return isinstance(expected, list) and len(expected) == 1 and values_equal(actual, expected[0], rel)
