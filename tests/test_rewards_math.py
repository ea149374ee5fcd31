"""R1 math reward: extraction, an equivalence table over the cases real answers have, and
adversarial inputs that must come back within the hard limit (invalid or wrong, never a hang)."""

from __future__ import annotations

import math
import time

import pytest

from longcat_plugins.rewards.math import MathRewardConfig, compute_score, verify
from longcat_plugins.rewards.math.extract import extract_answer
from longcat_plugins.rewards.result import ERROR_KEY, VALID_KEY

FAST = MathRewardConfig(timeout_s=2.0, workers=2)


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """Start the host and the worker pool once, so their start-up never counts as a check's time."""
    compute_score("math", r"\boxed{1}", "1")


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        (r"so the result is \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{\{1, \{2\}\}} then \boxed{x^{2}+\frac{a}{b}}", r"x^{2}+\frac{a}{b}"),
        ("The final answer is $42$.", "42"),
        ("Answer: 3/4", "3/4"),
        ("we get 5 apples and then 7", "7"),
        (r"\boxed 5", "5"),
        ("no numbers here", None),
        ("", None),
    ],
)
def test_extract_answer(response: str, answer: str | None) -> None:
    assert extract_answer(response) == answer


EQUIVALENT = [
    ("a^2-b^2", "(a+b)(a-b)"),  # symbolic
    (r"\frac{1}{2}", "0.5"),  # fraction vs decimal
    (r"\dfrac{3}{4}", "0.75"),
    ("2/4", r"\frac12"),
    (r"\frac{\sqrt{2}}{2}", r"\sqrt2/2"),
    (r"\sqrt[3]{8}", "2"),
    ("1,000", "1000"),  # thousands separator
    ("[1,2)", "[1, 2)"),  # interval
    (r"(-\infty, 3] \cup (5, \infty)", r"(5,\infty)\cup(-\infty,3]"),  # union of intervals
    (r"\{2, 1\}", r"\{1,2\}"),  # set, unordered
    ("(1, 2)", "(1,2)"),  # tuple / point
    ("(1/2, 3)", "(0.5, 3)"),
    ("x=3", "3"),  # equation vs value
    ("3", "x = 3"),
    ("y = 2x + 1", "2x - y + 1 = 0"),  # equivalent equations
    ("2, 1", "1, 2"),  # multiple answers, unordered
    (r"50\%", "0.5"),  # percentage
    ("50%", "50"),
    (r"30^\circ", "30"),  # degrees
    (r"30^{\circ}", r"\frac{\pi}{6}"),
    (r"\text{Monday}", "monday"),  # text answer
    (r"\text{(B)}", "(B)"),
    (r"2\pi", r"2 \cdot \pi"),
    (r"\sin^2 x + \cos^2 x", "1"),
    ("-1/3", r"-\frac{1}{3}"),
]

DIFFERENT = [
    ("a^2+b^2", "(a+b)(a-b)"),
    (r"\frac{1}{3}", "0.33"),
    ("[1,2]", "[1,2)"),  # closedness matters
    ("(1,2]", "[1,2)"),
    ("(2, 1)", "(1, 2)"),  # tuples are ordered
    (r"\{1,2,3\}", r"\{1,2\}"),
    ("x = 4", "x = 3"),
    ("1, 2", "1, 2, 3"),
    (r"\text{Tuesday}", r"\text{Monday}"),
    ("51%", "0.5"),
    (r"\sqrt{3}", "1.7"),
    ("-2", "2"),
]


@pytest.mark.parametrize(("pred", "gold"), EQUIVALENT)
def test_equivalent_pairs(pred: str, gold: str) -> None:
    assert verify(pred, gold, FAST) == ("equal", verify(pred, gold, FAST)[1])


@pytest.mark.parametrize(("pred", "gold"), DIFFERENT)
def test_non_equivalent_pairs(pred: str, gold: str) -> None:
    verdict, detail = verify(pred, gold, FAST)
    assert verdict == "different", detail


ADVERSARIAL = [
    "9^9^9^9",
    "2**2**2**2**2**2**2",
    "(" * 5000 + "1" + ")" * 5000,
    r"\frac{" * 300 + "1" + "}{2}" * 300,
    r"\frac{1}{",
    r"\sqrt[",
    "}}}{{{",
    r"\unknowncommand{3}",
    "__import__('os').system('touch /tmp/pwned')",
    "x" * 100000,
    r"10^{10^{10^{10}}}",
]


@pytest.mark.parametrize("pred", ADVERSARIAL, ids=lambda s: s[:20])
def test_adversarial_inputs_return_within_the_limit(pred: str) -> None:
    start = time.monotonic()
    result = compute_score("math", f"The final answer is {pred}", "7", timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert elapsed < 1.0 + 3.0, f"took {elapsed:.1f}s"  # limit + worker replacement
    if result[VALID_KEY] == 1.0:
        assert result["score"] == 0.0
    else:
        assert math.isnan(result["score"]) and result[ERROR_KEY]


def test_timeout_is_invalid_and_pool_recovers() -> None:
    res = compute_score("math", r"\boxed{9^{9^{9^{9}}}}", "7", timeout_s=1.0)
    assert res[VALID_KEY] == 0.0 and math.isnan(res["score"]) and "timeout" in res[ERROR_KEY]
    # the killed worker was replaced: the next check works
    assert compute_score("math", r"\boxed{7}", "7", timeout_s=1.0)["score"] == 1.0


def test_compute_score_shapes() -> None:
    ok = compute_score("math", r"... \boxed{\frac{6}{8}}", "3/4")
    assert ok == {"score": 1.0, "acc": 1.0, VALID_KEY: 1.0, ERROR_KEY: ""}
    wrong = compute_score("math", r"\boxed{5}", "3/4")
    assert wrong["score"] == 0.0 and wrong[VALID_KEY] == 1.0
    assert compute_score("math", "I do not know", "3")["score"] == 0.0
    assert compute_score("math", r"\boxed{2}", ["1", "2"])["score"] == 1.0  # any of several references
    empty = compute_score("math", r"\boxed{2}", "")
    assert empty[VALID_KEY] == 0.0 and "empty ground_truth" in empty[ERROR_KEY]
    assert compute_score("math", r"\boxed{2}", "2", correct_score=5.0)["score"] == 5.0


def test_unparsable_reference_is_invalid() -> None:
    res = compute_score("math", r"\boxed{2}", r"\frac{1}{")
    assert res[VALID_KEY] == 0.0 and "unparsable_reference" in res[ERROR_KEY]


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        MathRewardConfig(timeout_s=0)
