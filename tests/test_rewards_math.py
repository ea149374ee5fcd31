"""R1 math reward: extraction, an equivalence table over the cases real answers have, and
adversarial inputs that must come back within the hard limit (invalid or wrong, never a hang)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

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
        (r"\boxed{\{1, \{2\}\}} then \boxed{\{1, \{2\}\}}", r"\{1, \{2\}\}"),  # the same box twice
        (r"\boxed{\{1, \{2\}\}} then \boxed{x^{2}+\frac{a}{b}}", None),  # two different boxes: a hedge
        ("The final answer is $42$.", "42"),
        ("Answer: 3/4", "3/4"),
        (r"\boxed 5", "5"),
        ("42", "42"),  # a response that is only the answer
        ("$\\frac{1}{2}$", "\\frac{1}{2}"),
        ("**Final Answer:** 12", "12"),
        ("**Answer**: 12", "12"),
        ("no numbers here", None),
        ("", None),
        # never an answer the model did not clearly give (issue 13.1): no last-number fallback
        ("we get 5 apples and then 7", None),
        ("Let $x = 5$. Then $y$ is what we want.", None),
        (r"\boxed{\frac{\frac{1}{x}}{\boxed{1}", None),  # an inner box inside an unclosed one
        (r"\boxed{" * 2857 + "1", None),
        (r"\boxed{3} and finally \boxed{4", None),  # the last box is unclosed
        (r"\boxed{3}} stray brace", "3"),
        (r"<think> so \boxed{1}", None),  # cut off while thinking
        (r"<think>maybe \boxed{1}</think> so \boxed{2}", "2"),
        (r"<think>\boxed{1}</think> I am not sure", None),
        ("The answer is \\boxed{", None),
        ("The final answer is $5$ or $6$.", "5 or 6"),  # a hedge, not its last part
        # issue 32: GSM8K's ####, a final line that is only the answer, several boxes, retractions
        ("Each box holds 12, so 3 boxes hold 36.\n#### 36", "36"),
        ("So the total is\n#### 2,450", "2,450"),
        ("Half of 18 is 9.\n\n9", "9"),
        ("Summing the terms:\n\n$\\frac{7}{12}$", "\\frac{7}{12}"),
        ("Hence\n\\[ \\frac{3}{8} \\]", "\\frac{3}{8}"),
        ("Hence\n$$\n2\\sqrt{3}\n$$", "2\\sqrt{3}"),
        ("The difference is\n**\u221211**", "-11"),
        ("we get 4 and 5\nthen 9 more", None),  # a final line of prose is no answer
        ("candidates\n4 or 5", None),
        (r"\boxed{8} or perhaps \boxed{9}", None),
        (r"\boxed{} \boxed{9}", None),  # an empty box beside a full one
        (r"\boxed{}", None),
        (r"\boxed{8}. Wait, that is off by one: 9.", None),  # a retraction after the box
        (r"\boxed{8}. No, it should be 9.", None),
        (r"\boxed{8}. Actually the count is 9.", None),
        (r"\boxed{8}" + "\n#### 9", None),  # a different GSM8K answer after the box
        ("#### 8\n#### 9", None),  # two different GSM8K answers
        ("#### 8\nOops, it is 9.", None),
        ("#### 8\n#### 8", "8"),
        (r"\boxed{8}. Check: 2 \cdot 4 = 8, as required.", "8"),  # a check after the box is no retraction
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
    # issue 13.4: the imaginary unit, log bases, binomials, membership, sets vs lists, units...
    (r"e^{i\pi}", "-1"),
    ("i", r"\sqrt{-1}"),
    (r"2\sqrt{2} + i", r"\sqrt{8} + \sqrt{-1}"),
    (r"\log_2 8", "3"),
    (r"\log_{3} 81", "4"),
    (r"\lg 100", "2"),
    (r"\binom{5}{2}", "10"),
    (r"\tbinom{6}{3}", "20"),
    (r"\dbinom{4}{2}", r"\binom{4}{2}"),
    (r"x \in (0,\infty)", r"(0,\infty)"),
    (r"(0,\infty)", r"x \in (0, \infty)"),
    ("3, 5", r"\{5, 3\}"),
    (r"\{5, 3\}", "3, 5"),
    (r"2 \cdot 3", r"3 \times 2"),
    (r"2 \times 10^3", "2000"),
    (r"25\%", "0.25"),
    (r"45^\circ", r"\frac{\pi}{4}"),
    ("90 degrees", r"90^\circ"),
    (r"5\text{ cm}", "5"),
    (r"5 \text{ apples}", "5"),  # any plain noun after the value is a unit
    ("5!", "120"),  # a factorial
    (r"12 \text{ inches}", "12"),
    (r"\$5", "5"),
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", r"\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}"),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", "(1, 2)"),
    (r"1 \pm \sqrt{2}", r"1+\sqrt{2}, 1-\sqrt{2}"),
    (r"\pm 3", "3, -3"),
    (r"[2, \infty)", r"[2,+\infty)"),
    (r"x \geq 2", r"[2, \infty)"),
    ("x < 0", r"(-\infty, 0)"),
    ("1 < x < 2", "(1, 2)"),
    (r"\cos \frac{\pi}{4}", r"\frac{\sqrt{2}}{2}"),
    ("0 < x", r"(0, \infty)"),
    (r"x \in [1, 3)", r"1 \le x < 3"),
    (r"\sin 30^\circ", r"\frac12"),
    (r"\cos(60^{\circ})", "0.5"),
    (r"\varnothing", r"\{\}"),
    (r"x \in \mathbb{R}", r"(-\infty, \infty)"),
    ("1{,}000", "1000"),
    (r"3 \text{ or } 5", "3, 5"),
    ("3 and 5", r"\{3,5\}"),
    ("3+2i", "2i+3"),
    (r"\sqrt{-9}", "3i"),
    # issue 32: exact numbers are equal only exactly; decimals are the rationals they spell
    ("3000000", r"3 \times 10^6"),
    ("2^{40}", "1099511627776"),
    ("10^{-12}", r"\frac{1}{10^{12}}"),
    ("0.000001", "10^{-6}"),
    ("1.250", r"\frac54"),
    ("2.50", "2.5"),
    # a decimal against a value with no finite expansion: to the precision written
    (r"\sqrt{5}", "2.236"),  # the reference rounded to 4 significant digits
    (r"\frac{2}{7}", "0.286"),
    ("2.645751", r"\sqrt{7}"),  # a prediction at float precision
    (r"\pi", "3.1416"),
    # percent: one side marked is the number or its hundredth
    (r"12.5\%", "0.125"),
    (r"40\%", "40"),
    (r"75 \text{ percent}", "0.75"),
    # mixed numbers
    (r"5\frac{2}{3}", r"\frac{17}{3}"),
    (r"-2\frac{1}{3}", r"-\frac{7}{3}"),
    (r"1\tfrac{1}{8}", "1.125"),
    (r"(1\frac12, 2)", "(1.5, 2)"),
    ("3 1/4", "3.25"),  # GSM8K's plain-text mixed number
    # multiplier words
    (r"3.2 \text{ million}", "3200000"),
    ("5 thousand", "5000"),
    (r"2 \text{ billion}", r"2 \times 10^9"),
    ("6 dozen", "72"),
    ("9 hundred", "900"),
    (r"1.5 \text{ million dollars}", "1500000"),
    ("5 hundred thousand", "500000"),
    # Unicode minus, NFKC forms, Unicode math signs
    ("\u22123/4", "-0.75"),
    ("x\u00b2+1", "x^2+1"),
    ("\u00bd", "0.5"),
    ("2\u03c0", r"2\pi"),
    ("\uff13\uff17", "37"),  # full-width digits
    ("\u221a12", r"2\sqrt3"),
    # numerals with a base subscript
    ("110_2", "110_{2}"),
    ("2012_{3}", "2012_3"),
    ("17_{8}", "15_{10}"),
    ("101", "101_{2}"),  # the problem named the base: the same digits
    ("1111_2", "15"),
    # function notation on the left-hand side
    ("g^{-1}(x) = 2x+5", "2x+5"),
    ("3x-1", "f^{-1}(x)=3x-1"),
    ("f(x) = x^2 - 4", "x^2-4"),
    (r"y = \frac{x}{3}", r"f^{-1}(x) = \frac{x}{3}"),
    # repeating decimals
    (r"0.\overline{3}", r"\frac13"),
    (r"0.1\overline{6}", r"\frac16"),
    (r"1.\overline{27}", r"\frac{14}{11}"),
    (r"0.\overline{142857}", r"\frac17"),
    ("007", "7"),  # AIME's three digits
    ("1 250 000", "1250000"),  # thousands separated by spaces
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
    # issue 13.4 negatives: never a false positive in the new classes
    (r"\log_2 8", "16"),  # main read \log_2 8 as 16*log(_)
    (r"\log_2 8", "3.01"),
    ("i", "1"),
    ("2i", "-2i"),
    (r"e^{i\pi}", "1"),
    (r"\binom{5}{2}", "20"),
    ("3, 5", r"\{3, 5, 7\}"),
    (r"\{3, 5\}", "3, 6"),
    ("(1, 2)", r"\{1, 2\}"),  # a tuple is not a set
    (r"5 \text{ cm}", r"5\text{ m}"),  # both with units: the units must agree
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 5 \end{pmatrix}", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
    (r"\begin{pmatrix} 1 & 2 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 2 \\ 3 \end{pmatrix}"),
    (r"1 + \sqrt{2}", r"1 \pm \sqrt{2}"),  # one root of two
    (r"(2, \infty)", r"[2, \infty)"),
    (r"1 \le x < 2", "(1, 2)"),
    (r"x \in (0, 1)", r"(0, \infty)"),
    (r"25\%", "0.3"),
    ("[1, 2)", r"[1, \infty)"),  # main: equal (inf - 2 passed the numeric tolerance)
    ("1", r"\infty"),
    (r"-\infty", r"\infty"),
    ("0 < x", r"(-\infty, 0)"),
    ("4 m", "4"),  # a single letter after a number is a variable, not a unit
    (r"\sin 30", r"\frac12"),  # radians without the degree sign
    (r"\emptyset", r"\{0\}"),
    ("3 and 5", "3, 6"),
    ("-i", "i"),
    ("2,3", "23"),
    # issue 32 near misses: no tolerance between exact numbers, anywhere
    ("5000001", "5000000"),
    ("3^{40}+1", "3^{40}"),
    ("10^{-12}", "0"),
    ("(7, 2000000)", "(7, 2000001)"),
    ("[10^{-8}, 1]", "[0, 1]"),
    ("x^3 + 2000000", "x^3 + 2000001"),
    ("1.0000001", "1"),
    (r"\frac{1000000}{1000001}", "1"),
    (r"\sqrt{5}", "2.2"),  # a reference with 2 significant digits is exact
    ("2.24", r"\sqrt5"),  # a coarse decimal prediction of an exact answer
    (r"\frac27", "0.29"),
    ("3.14", r"\pi"),
    (r"\sqrt{5}", "2.237"),  # not the rounding of sqrt 5
    ("0.3333", r"\frac13"),
    (r"0.3\%", r"30\%"),  # both marked: the numbers must agree
    (r"5\%", r"0.05\%"),
    (r"40\%", "4"),
    (r"12.5\%", "0.0125"),
    ("0.5 percent", r"50\%"),  # the word marks a percent as the sign does
    (r"5\frac{2}{3}", r"\frac{10}{3}"),  # main read it as the product
    (r"-2\frac13", r"-\frac{5}{3}"),  # the sign belongs to the whole mixed number
    (r"1\frac18", r"\frac18"),
    ("3 1/4", "3/4"),  # main: the product 3 * 1/4
    (r"3.2 \text{ million}", "3.2"),
    ("5 thousand", "5"),
    ("4 dozen", "4"),
    ("5 hundred thousand", "500"),  # every multiplier word counts, not only the first
    (r"2 \text{ billion}", r"2 \text{ million}"),
    ("\u22123", "3"),
    ("x\u00b2", "x2"),  # a superscript is a power, not a digit
    ("110_2", "110_3"),
    ("6", "110_2"),  # the value in base 10 is not the numeral asked for
    ("102_2", "11_2"),  # digits not valid in base 2
    (r"f(x) = \frac{x+1}{2}", r"f^{-1}(x) = \frac{x+1}{2}"),  # the function is not its inverse
    ("g^{-1}(x) = 2x-5", "2x+5"),
    ("x = 3", "y = 3"),
    (r"0.\overline{3}", "0.3"),
    (r"0.\overline{3}", "0.33"),
    (r"0.\overline{16}", r"\frac16"),
    ("070", "7"),
    ("1 250 001", "1250000"),  # main: 1 * 250 * 1
    ("2 000", "0"),  # main: the product 2 * 000
    # a question mark, a factorial, a hedge or a negation written as a unit: never the bare value
    ("42?", "42"),
    ("?42", "42"),
    (r"42\text{?}", "42"),
    ("42!", "42"),
    (r"42 \text{ I think}", "42"),
    (r"42\text{ is wrong}", "42"),
    (r"42 \mbox{ not}", "42"),
    (r"42 \text{ approximately}", "42"),
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
    "9" + "\u2079" * 30,  # a 30-digit power in Unicode superscripts
    r"0.\overline{" + "9" * 1500 + "}",  # a repeating block past MAX_EXACT_DIGITS
    r"\sqrt{2} \cdot 10^{10^{7}} + 1",  # exact evaluation of a huge irrational
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


# ---- issue 13.1-13.2: no credit for an answer the model did not clearly give; linear extraction

HOSTILE_RESPONSES = {
    "nested unclosed boxes": r"\boxed{\frac{\frac{1}{x}}{\boxed{" * 1000 + "1",
    "2857 open boxes then 1": r"\boxed{" * 2857 + "1",
    "last box unclosed": r"\boxed{1} so finally \boxed{1",
    "20k open braces": r"\boxed{" + "{" * 20000 + "1",
    "20k bare boxes": r"\boxed " * 2857 + "1",
    "20k closing braces": r"\boxed{1" + "}" * 20000,
}


@pytest.mark.parametrize("name", list(HOSTILE_RESPONSES))
def test_malformed_final_answer_is_never_credited(name: str) -> None:
    response = HOSTILE_RESPONSES[name]
    start = time.monotonic()
    res = compute_score("math", response, "1")
    assert time.monotonic() - start < 2.0
    if name == "20k closing braces":  # one well-formed box, stray braces after it: a real answer
        assert res["score"] == 1.0
    else:
        assert res["score"] == 0.0 and res[VALID_KEY] == 1.0, (name, res)


@pytest.mark.parametrize("name", list(HOSTILE_RESPONSES))
def test_extraction_is_linear(name: str) -> None:
    def best_of_3(text: str) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            extract_answer(text)
            times.append(time.perf_counter() - start)
        return min(times)

    response = HOSTILE_RESPONSES[name]
    small = best_of_3(response)
    large = best_of_3(response * 10)  # a quadratic scan (main: 3-4 s at 20k chars) would take minutes
    assert small < 0.1, f"{len(response)} chars took {small:.3f}s"
    assert large < max(50 * small, 1.0), f"10x input took {large:.3f}s ({large / max(small, 1e-9):.0f}x)"


# ---- issue 32: extraction conventions and what a policy could game


def test_the_bench_set_is_graded_as_labelled() -> None:
    """bench/math_equivalence_set.py: 200 items, each class with positives and near misses, all right."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    try:
        from math_equivalence_set import ITEMS
    finally:
        sys.path.pop(0)
    assert len(ITEMS) == 200
    for cls in {item.cls for item in ITEMS}:
        labels = {item.equal for item in ITEMS if item.cls == cls}
        assert labels == {True, False}, f"class {cls} needs positives and negatives"
    wrong = []
    for item in ITEMS:
        if item.kind == "pair":
            got = verify(item.text, item.gold, FAST)[0] == "equal"
        else:
            got = compute_score("math", item.text, item.gold)["score"] == 1.0
        if got != item.equal:
            wrong.append(item)
    assert not wrong, wrong


GSM8K_SOLUTION = "Natalia sold 48 clips in April and half as many in May.\n48 / 2 = 24\n48 + 24 = 72\n#### 72"


def test_gsm8k_references_and_answers() -> None:
    assert compute_score("gsm8k", "She sold 72 clips.\n#### 72", "72")["score"] == 1.0
    assert compute_score("gsm8k", r"so \boxed{72}", GSM8K_SOLUTION)["score"] == 1.0  # a worked reference
    assert compute_score("gsm8k", "#### 71", GSM8K_SOLUTION)["score"] == 0.0
    assert compute_score("gsm8k", "#### 1,250", "1250")["score"] == 1.0
    assert compute_score("gsm8k", "#### 2.5 million", "2500000")["score"] == 1.0


def assert_no_answer_for_six(response: str) -> None:
    """``response`` boxes 6 but does not clearly answer it: scored 0 against the reference 6, and valid."""
    res = compute_score("math", response, "6")
    assert res["score"] == 0.0 and res[VALID_KEY] == 1.0


@pytest.mark.parametrize("gold", ["5", "6"])
def test_a_retracted_box_is_no_answer(gold: str) -> None:
    """Decision (docs/rewards.md): "\\boxed{5} ... wait, it is 6" credits neither 5 nor 6."""
    res = compute_score("math", r"The count is \boxed{5}. Wait, I missed one: it is 6.", gold)
    assert res["score"] == 0.0 and res[VALID_KEY] == 1.0


@pytest.mark.parametrize(
    "response",
    [
        r"The answer is not \boxed{6}; it is 5.",
        r"It isn't $\boxed{6}$, it is 5.",
        r"The total cannot be \boxed{6}.",
        r"This is no longer \boxed{6}.",
        r"x is not equal to \boxed{6}.",
        r"It is definitely not \(\boxed{6}\).",  # the box opens an inline math span
        r"It cannot be \[\boxed{6}\]",
    ],
)
def test_a_negated_box_is_no_answer(response: str) -> None:
    """A box the text negates states what the answer is not (found by ``redteam``)."""
    assert_no_answer_for_six(response)


@pytest.mark.parametrize(
    "response",
    [
        r"\boxed{6} is false.",
        r"\boxed{6} is not the answer.",
        r"\boxed{6} would be wrong.",
        r"\boxed{6}. Hmm, this isn't right; it should be 5.",
        "\\boxed{6}\nJust kidding, 5.",
    ],
)
def test_a_box_the_text_disowns_is_no_answer(response: str) -> None:
    """A box the text after it calls wrong is not an answer the model stood by (found by probing)."""
    assert extract_answer(response) is None
    assert_no_answer_for_six(response)


@pytest.mark.parametrize(
    "response",
    [
        r"\boxed{6}. Check: 2 \cdot 3 = 6, which is right.",
        r"\boxed{6}. The claim that 5 works is not true.",
        r"\boxed{6}, which is the correct answer.",
        r"So \(\boxed{6}\).",
        r"Not hard: \(\boxed{6}\)",
    ],
)
def test_a_box_the_text_stands_by_is_the_answer(response: str) -> None:
    assert compute_score("math", response, "6")["score"] == 1.0


@pytest.mark.parametrize(
    "response", [r"Is the answer \boxed{6}?", r"Could it be $\boxed{6}$ ?", r"The answer: (\boxed{6})?"]
)
def test_a_questioned_box_is_no_answer(response: str) -> None:
    """A box the text asks about is not an answer the model gave (found by probing the reward)."""
    assert_no_answer_for_six(response)


@pytest.mark.parametrize(
    "response",
    [r"Note: \boxed{6}", r"It is not hard: the answer is \boxed{6}.", r"Knot count: \boxed{6}", r"\boxed{6}"],
)
def test_a_box_near_a_negation_word_is_still_the_answer(response: str) -> None:
    assert compute_score("math", response, "6")["score"] == 1.0


@pytest.mark.parametrize(
    "response",
    [r"\boxed{5} \boxed{6}", r"\boxed{6} \boxed{5}", r"\boxed{}", r"\boxed{} \boxed{6}", r"\boxed{6"],
)
def test_several_or_empty_boxes_are_never_credited(response: str) -> None:
    assert compute_score("math", response, "6")["score"] == 0.0


def test_the_same_answer_boxed_twice_is_credited() -> None:
    assert compute_score("math", r"\boxed{6}, so the answer is \boxed{ 6 }.", "6")["score"] == 1.0
    assert compute_score("math", r"Why? The answer is \boxed{6}. Is that all? Yes.", "6")["score"] == 1.0


def test_a_hedged_final_answer_is_not_credited() -> None:
    assert compute_score("math", "The final answer is $5$ or $6$.", "6")["score"] == 0.0
    # one span with another number or a question mark after it: the line is graded as one
    assert compute_score("math", "The final answer is $6$ or 5.", "6")["score"] == 0.0
    assert compute_score("math", "The final answer is $6$?", "6")["score"] == 0.0
    assert compute_score("math", "The final answer is $6$.", "6")["score"] == 1.0
    assert compute_score("math", "The final answer is $6$ apples.", "6")["score"] == 1.0


def test_responses_past_the_size_limits_are_invalid_not_truncated() -> None:
    long = "x " * 250_000 + r"\boxed{1}"
    res = compute_score("math", long, "1")
    assert res[VALID_KEY] == 0.0 and "max_response_chars=400000" in res[ERROR_KEY]
    assert compute_score("math", long, "1", max_response_chars=600_000)["score"] == 1.0
    res = compute_score("math", r"\boxed{" + "1+" * 1500 + "1}", "3001")
    assert res[VALID_KEY] == 0.0 and "max_answer_chars=2000" in res[ERROR_KEY]


# ---- issue 13.0: workers that drop privileges must still be able to check everything

PRIVATE_SCRIPT = """
import json, sys
from longcat_plugins.rewards.math import MathRewardConfig, verify
import longcat_plugins, sympy
assert longcat_plugins.__file__.startswith(sys.argv[1]) and sympy.__file__.startswith(sys.argv[1])
pairs = json.loads(sys.argv[2])
cfg = MathRewardConfig(timeout_s=5.0, workers=1, drop_uid=65534)
print(json.dumps([verify(p, g, cfg) for p, g in pairs]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to uid 65534")
def test_checks_work_when_the_package_lives_in_a_private_directory(tmp_path: Path) -> None:
    """sympy and this package under a 0700 root-owned directory, as in a venv under /root."""
    private = tmp_path / "private"
    site = private / "site"
    site.mkdir(parents=True)
    private.chmod(0o700)
    import sympy

    import longcat_plugins

    (site / "sympy").symlink_to(Path(sympy.__file__).parent)
    (site / "longcat_plugins").symlink_to(Path(longcat_plugins.__file__).parent)
    pairs = [(p, g) for p, g in EQUIVALENT + DIFFERENT]
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-c", PRIVATE_SCRIPT, str(site), json.dumps(pairs)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdicts = json.loads(proc.stdout.strip().splitlines()[-1])
    errors = [
        (p, g, v)
        for (p, g), v in zip(pairs, verdicts, strict=True)
        if v[0] != ("equal" if (p, g) in EQUIVALENT else "different")
    ]
    assert not errors, errors


def test_pool_refuses_to_start_when_workers_fail_their_canaries() -> None:
    from longcat_plugins.rewards.math.pool import CheckPool, PoolStartError
    from longcat_plugins.rewards.result import RewardSetupError

    with pytest.raises(PoolStartError, match="canary") as info:
        CheckPool(size=1, memory_mb=20)  # too little address space to run a check
    assert isinstance(info.value, RewardSetupError)


# ---- issue 13.3: <= 2 s end to end, replacement included, inside a process that imported verl

VERL_SCRIPT = """
print("MAIN-IMPORTED", flush=True)  # no __main__ guard: the pool must not re-import this file
import json, time
import verl  # noqa: F401  (as inside verl's reward workers)
from longcat_plugins.rewards.math import compute_score
compute_score("math", r"\\boxed{1}", "1")  # pool start-up is not a check
out = []
for pred in [r"9^{9^{9^9}}", r"10^{10^{10}}!", r"10^{10^{10^{10}}}", r"\\frac{1}{2}"]:
    for _ in range(2):  # twice in a row: the second must not wait for a replacement
        t = time.monotonic()
        res = compute_score("math", rf"\\boxed{{{pred}}}", ["7", "1/2", "8"])
        out.append([pred, time.monotonic() - t, res["score"], res["longcat_reward_valid"]])
print(json.dumps(out))
"""


def test_hostile_inputs_take_at_most_2s_in_a_process_that_imported_verl(tmp_path: Path) -> None:
    script = tmp_path / "caller.py"
    script.write_text(VERL_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("MAIN-IMPORTED") == 1, proc.stdout
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    slow = [r for r in rows if r[1] > 2.0]
    assert not slow, rows
    assert rows[-1][2] == 1.0  # 1/2 against references [7, 1/2, 8]: still checked after the kills


def test_a_killed_zygote_is_restarted_and_checks_go_on() -> None:
    import signal

    from longcat_plugins.rewards.math.pool import CheckPool

    pool = CheckPool(size=1)
    try:
        os.kill(pool._zygote.proc.pid, signal.SIGKILL)
        pool._zygote.proc.wait()
        assert pool.check("9^9^9^9", "7", 1.0)[0] == "timeout"
        start = time.monotonic()
        assert pool.check(r"\frac{2}{4}", "0.5", 1.0)[0] == "equal"
        assert time.monotonic() - start < 60  # a fresh zygote: python start-up and the canaries
        assert pool.replaced == 1
    finally:
        pool.close()


def test_worker_kill_without_a_pidfd_falls_back_to_the_pid() -> None:
    """Kernels before 5.3 have no pidfd: a timed-out worker must still die."""
    import socket
    from multiprocessing.connection import Connection

    from longcat_plugins.rewards.math.pool import _Worker

    proc = subprocess.Popen(["sleep", "60"])
    a, b = socket.socketpair()
    _Worker(proc.pid, -1, Connection(a.detach())).kill()
    assert proc.wait(timeout=5) == -9
    b.close()
