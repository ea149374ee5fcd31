"""200 labelled (answer, reference) items for the math reward, by class, for bench_math_equivalence.py.

Written for issue 32 from the answer conventions of MATH (LaTeX, ``\\boxed``, mixed numbers,
base subscripts, ``f^{-1}(x)``, repeating decimals, intervals), GSM8K (integers, ``#### N``,
dollars, multiplier words), OlympiadBench (rounded numeric answers, tuples, intervals), AIME
(three-digit integers) and AMC (choice letters). Every value is our own, none copied from those
sets, and none is a repro from the issue. Each class has positives and near-miss negatives.

The labels follow the decisions documented in docs/rewards.md (``50\\%`` equals ``50`` and
``0.5``; a decimal reference with 3 or more significant digits is a rounding of a value with no
finite expansion; a decimal prediction of such a value needs 6; a box followed by a retraction,
several different boxes and an empty box are no answer). The items were written by the engineer
who made the fixes: a regression set, not a blind audit.

``kind`` is ``pair`` (``text`` is the extracted answer, checked with ``verify``) or ``response``
(``text`` is a whole model response, scored with ``compute_score``, extraction included).
"""

from __future__ import annotations

from typing import NamedTuple


class Item(NamedTuple):
    cls: str
    convention: str
    kind: str  # "pair" or "response"
    text: str
    gold: str
    equal: bool


def _pairs(cls: str, convention: str, rows: list[tuple[str, str, bool]]) -> list[Item]:
    return [Item(cls, convention, "pair", p, g, e) for p, g, e in rows]


ITEMS: list[Item] = [
    *_pairs(
        "integer",
        "AIME/GSM8K",
        [
            ("042", "42", True),
            ("907", "907", True),
            ("1,024", "1024", True),
            (r"\$18", "18", True),
            ("18.00", "18", True),
            ("-12", "12", False),
            ("612", "621", False),
            (r"18 \text{ dollars}", "18", True),
            ("1,000,000", "1000000", True),
            ("7", "007", True),
            ("100", "1000", False),
            ("17", "17.5", False),
            ("2^{10}", "1024", True),
            ("12,5", "125", False),
        ],
    ),
    *_pairs(
        "exact_near_miss",
        "MATH/OlympiadBench",
        [
            ("4000001", "4000000", False),
            ("2^{50}+1", "2^{50}", False),
            ("10^{-10}", "0", False),
            (r"3 \times 10^{-7}", "0", False),
            ("999999999", "10^9", False),
            ("10^9", "1000000000", True),
            (r"\frac{1}{10^{8}}", "10^{-8}", True),
            ("(9000000, 1)", "(9000001, 1)", False),
            ("k^2 + 3000000", "k^2 + 3000001", False),
            ("[10^{-7}, 2)", "[0, 2)", False),
            ("1 - 10^{-9}", "1", False),
            (r"\frac{123456789}{123456790}", "1", False),
            ("2^{64}", "18446744073709551616", True),
            ("0.0000005", r"5 \times 10^{-7}", True),
        ],
    ),
    *_pairs(
        "fraction_decimal",
        "MATH",
        [
            (r"\frac{3}{8}", "0.375", True),
            ("0.375", r"\dfrac38", True),
            (r"\frac{6}{16}", r"\frac{3}{8}", True),
            (r"\frac{3}{8}", "0.38", False),
            (r"\frac{5}{9}", "0.56", False),
            (r"-\frac{4}{5}", "-0.8", True),
            (r"\frac{-4}{5}", r"-\frac45", True),
            (r"\frac{4}{5}", "-0.8", False),
            ("7/20", r"\frac{7}{20}", True),
            (r"\frac{7}{20}", "0.36", False),
            ("1.5", r"\frac{3}{2}", True),
            (r"\frac{22}{7}", r"\pi", False),
            ("0.1", r"\frac{1}{9}", False),
            (r"\tfrac{9}{12}", "0.75", True),
        ],
    ),
    *_pairs(
        "float_precision",
        "OlympiadBench",
        [
            (r"\sqrt{3}", "1.732", True),
            (r"\sqrt{3}", "1.73", True),
            (r"\sqrt{3}", "1.7", False),
            ("1.7321", r"\sqrt{3}", False),
            ("1.732051", r"\sqrt{3}", True),
            (r"\frac{1}{7}", "0.1429", True),
            (r"\frac{1}{7}", "0.1428", False),
            ("e^2", "7.389", True),
            (r"\ln 2", "0.693", True),
            (r"\ln 2", "0.694", False),
            (r"6.67 \times 10^{-11}", r"6.67 \times 10^{-11}", True),
            (r"6.674 \times 10^{-11}", r"6.67 \times 10^{-11}", False),
            (r"2\pi", "6.283", True),
            ("4.0", "4", True),
        ],
    ),
    *_pairs(
        "percent",
        "MATH/GSM8K",
        [
            (r"35\%", "35", True),
            (r"35\%", "0.35", True),
            (r"0.35\%", r"35\%", False),
            (r"3.5\%", r"35\%", False),
            ("35", r"35\%", True),
            ("0.35", r"35\%", True),
            (r"7\%", r"0.07\%", False),
            (r"12\frac{1}{2}\%", r"12.5\%", True),
            (r"62.5 \text{ percent}", r"62.5\%", True),
            (r"62.5\%", "0.0625", False),
            (r"150\%", "1.5", True),
            (r"20\%", r"25\%", False),
        ],
    ),
    *_pairs(
        "mixed_number",
        "MATH/AMC",
        [
            (r"4\frac{1}{3}", r"\frac{13}{3}", True),
            (r"4\frac{1}{3}", r"\frac{4}{3}", False),
            (r"4 \frac{1}{3}", r"4.\overline{3}", True),
            (r"-3\frac{1}{2}", "-3.5", True),
            (r"-3\frac12", "-2.5", False),
            (r"2\dfrac{3}{5}", "2.6", True),
            (r"2\dfrac{3}{5}", r"\frac{6}{5}", False),
            (r"\frac{29}{8}", r"3\frac{5}{8}", True),
            (r"\frac{15}{8}", r"3\frac{5}{8}", False),
            (r"1\frac{1}{2} \text{ cups}", "1.5", True),
            (r"10\frac{3}{4}", "10.75", True),
            (r"10\frac{3}{4}", "7.5", False),
        ],
    ),
    *_pairs(
        "multiplier_word",
        "GSM8K",
        [
            (r"4 \text{ million}", "4000000", True),
            (r"4 \text{ million}", "4", False),
            ("2.5 thousand", "2500", True),
            ("2.5 thousand", "2.5", False),
            (r"3 \text{ billion}", "3000000000", True),
            (r"3 \text{ billion}", "3000000", False),
            ("5 dozen", "60", True),
            ("5 dozen", "5", False),
            ("8 hundred", "800", True),
            (r"1.2 \text{ million dollars}", "1200000", True),
            (r"1.2 \text{ million dollars}", "1.2", False),
            (r"\$7 \text{ thousand}", "7000", True),
        ],
    ),
    *_pairs(
        "unicode",
        "model output",
        [
            ("\u22128", "-8", True),
            ("\u22128", "8", False),
            ("\uff13/\uff14", "0.75", True),
            ("x\u00b2 \u2212 9", "(x-3)(x+3)", True),
            ("x\u00b2 \u2212 9", "x^2+9", False),
            ("2\u221a5", r"2\sqrt{5}", True),
            ("\u221a20", r"2\sqrt5", True),
            ("\u221a20", "20", False),
            ("\u03c0/3", r"\frac{\pi}{3}", True),
            ("\u00be", "0.75", True),
            ("\u00bd", "2", False),
            ("x\u00b3", "3x", False),
        ],
    ),
    *_pairs(
        "base_subscript",
        "MATH",
        [
            ("10110_2", "10110_{2}", True),
            ("10110_{2}", "10110_2", True),
            ("10110", "10110_2", True),
            ("22", "10110_2", False),
            ("10110_2", "22", True),
            ("10111_2", "10110_2", False),
            ("2A_{16}", "2a_{16}", True),
            ("1202_3", "1202_{3}", True),
            ("1202_4", "1202_{3}", False),
            ("55_{6}", "35_{10}", True),
            ("55_6", "55_{7}", False),
            ("344_5", "99", True),
        ],
    ),
    *_pairs(
        "function_notation",
        "MATH",
        [
            (r"f^{-1}(x) = \frac{x+7}{3}", r"\frac{x+7}{3}", True),
            (r"\frac{x+7}{3}", r"f^{-1}(x)=\frac{x+7}{3}", True),
            (r"f^{-1}(x) = \frac{x-7}{3}", r"\frac{x+7}{3}", False),
            ("h(x) = 4x^2-1", "4x^2-1", True),
            ("h(x) = 4x^2+1", "4x^2-1", False),
            ("y = 5x - 2", "5x-2", True),
            ("f(x) = 3x+7", "f^{-1}(x) = 3x+7", False),
            (r"f^{-1}(x)=\sqrt{x}+2", r"\sqrt{x}+2", True),
            ("p(t) = 2t^2", "2t^2", True),
            ("p(t) = 2t^3", "2t^2", False),
            ("y = x^2 + 2x + 1", "(x+1)^2", True),
            ("x = 4", "y = 4", False),
        ],
    ),
    *_pairs(
        "repeating_decimal",
        "MATH",
        [
            (r"0.\overline{7}", r"\frac{7}{9}", True),
            (r"0.\overline{7}", "0.7", False),
            (r"0.\overline{7}", "0.78", False),
            (r"0.\overline{45}", r"\frac{5}{11}", True),
            (r"0.4\overline{5}", r"\frac{5}{11}", False),
            (r"0.4\overline{5}", r"\frac{41}{90}", True),
            (r"2.\overline{3}", r"\frac{7}{3}", True),
            (r"\frac{1}{3}", r"0.\overline{3}", True),
            (r"0.\overline{285714}", r"\frac{2}{7}", True),
            (r"0.\overline{285714}", r"\frac{2}{9}", False),
        ],
    ),
    *_pairs(
        "expression",
        "MATH",
        [
            (r"2\sqrt{6}", r"\sqrt{24}", True),
            (r"2\sqrt{6}", r"\sqrt{12}", False),
            (r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt3}", True),
            (r"3+2\sqrt2", r"(1+\sqrt2)^2", True),
            (r"3-2\sqrt2", r"(1+\sqrt2)^2", False),
            ("x^2-5x+6", "(x-2)(x-3)", True),
            ("x^2-5x+6", "(x-2)(x+3)", False),
            (r"\frac{x+1}{x^2-1}", r"\frac{1}{x-1}", True),
            (r"\frac{8\pi}{2}", r"4\pi", True),
            (r"\frac{\pi}{3}", r"\frac{\pi}{6}", False),
            (r"\log_3 27", "3", True),
            (r"\log_3 27", "9", False),
            (r"\binom{9}{2}", "36", True),
            (r"\sqrt[3]{54}", r"3\sqrt[3]{2}", True),
        ],
    ),
    *_pairs(
        "interval",
        "MATH/OlympiadBench",
        [
            ("(-3, 5]", "(-3,5]", True),
            ("[-3, 5]", "(-3,5]", False),
            ("x > -1", r"(-1, \infty)", True),
            (r"x \ge -1", r"(-1, \infty)", False),
            (r"(-\infty, 2) \cup (4, \infty)", r"(4,\infty)\cup(-\infty,2)", True),
            (r"(-\infty, 2] \cup (4, \infty)", r"(-\infty,2)\cup(4,\infty)", False),
            (r"-2 \le x \le 7", "[-2, 7]", True),
            ("[1, 1000001)", "[1, 1000000)", False),
            (r"x \in [\frac12, 3)", "[0.5, 3)", True),
            (r"(0, \infty)", r"[0, \infty)", False),
            (r"(-\infty, \frac{7}{2}]", r"x \le 3.5", True),
            ("(2, 9)", "(2, 8)", False),
        ],
    ),
    *_pairs(
        "tuple_set",
        "MATH/OlympiadBench",
        [
            ("(3, -4)", "(3,-4)", True),
            ("(-4, 3)", "(3,-4)", False),
            (r"(\frac12, 2)", "(0.5, 2)", True),
            ("(2000000, 3)", "(2000001, 3)", False),
            (r"\{-2, 6\}", "6, -2", True),
            ("-2, 6", "-2, 6, 8", False),
            (r"x = 3 \text{ or } x = -3", r"\pm 3", True),
            ("4, 9", r"\{4, 9\}", True),
            ("4, 9", r"\{4, 10\}", False),
            (r"2 \pm \sqrt{5}", r"2+\sqrt5, 2-\sqrt5", True),
            (r"2 + \sqrt5", r"2 \pm \sqrt5", False),
            (r"\begin{pmatrix} 5 \\ -1 \end{pmatrix}", "(5, -1)", True),
        ],
    ),
    *_pairs(
        "choice_letter",
        "AMC",
        [
            ("C", r"\text{(C)}", True),
            ("(C)", r"\textbf{(C)}", True),
            (r"\textbf{(C) }18", "C", True),
            (r"\textbf{(D) }18", "C", False),
            ("(B) or (C)", "C", False),
            ("B", "(E)", False),
            (r"\text{(A)}", "A", True),
            ("E", r"\textbf{(E)}", True),
        ],
    ),
    *[
        Item("extraction", convention, "response", text, gold, equal)
        for convention, text, gold, equal in [
            ("GSM8K", "Tom has 9 + 7 = 16 marbles.\n#### 16", "16", True),
            ("GSM8K", "Tom has 16 marbles.\n#### 15", "16", False),
            ("GSM8K", "She saves 40 a week for 13 weeks.\n#### 520", "520", True),
            ("GSM8K", "There are 6 rows of 9.\n6 * 9 = 54\n\n54", "54", True),
            ("MATH", "The area doubles, so\n$$\n\\frac{49}{2}\n$$", "24.5", True),
            ("hack", "we find 13 and then 14 more", "27", False),
            ("hack", "Possible values:\n13 or 14", "14", False),
            ("hack", "So \\boxed{13}. Or \\boxed{14}.", "14", False),
            ("MATH", "Thus \\boxed{14}, i.e. \\boxed{14}.", "14", True),
            ("hack", "The answer is \\boxed{}", "14", False),
            ("hack", "Therefore \\boxed{21}. Wait, I double counted; it is 20.", "21", False),
            ("hack", "Therefore \\boxed{21}. Wait, I double counted; it is 20.", "20", False),
            ("MATH", "Therefore \\boxed{21}. Check: 3 \\cdot 7 = 21.", "21", True),
            ("think-block", "<think>maybe \\boxed{3}</think> The answer is \\boxed{4}.", "4", True),
            ("hack", "<think>it is \\boxed{3}", "3", False),
            ("MATH", "The final answer is $\\frac{2}{3}$.", "0.\\overline{6}", True),
        ]
    ],
]

assert len(ITEMS) == 200, len(ITEMS)
