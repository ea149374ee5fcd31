"""A small LaTeX -> sympy-syntax translator for the subset real answers use.

sympy's own ``parse_latex`` needs antlr4 4.11 (this environment has 4.9.3, which it rejects) or
lark; neither is a dependency we want. Answers use a small subset: fractions, roots, powers,
products, constants, trig/log functions, brackets, mixed numbers (``2\\frac{1}{4}`` and ``2 1/4``
are 9/4, as in MATH, AMC and GSM8K answers, never the product 1/2) and repeating decimals (``0.\\overline{6}`` is
2/3). Anything else is kept as plain text and the equivalence check falls back to string
comparison.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

_DROP = (
    r"\left",
    r"\right",
    r"\bigl",
    r"\bigr",
    r"\Bigl",
    r"\Bigr",
    r"\big",
    r"\Big",
    r"\displaystyle",
    r"\textstyle",
    r"\!",
    r"\,",
    r"\;",
    r"\:",
    r"\quad",
    r"\qquad",
    r"\limits",
)
_TEXT_CMDS = {"text", "textbf", "textit", "mathrm", "mathbf", "mathit", "mbox", "operatorname", "textrm", "boldsymbol"}
_FUNCS = {
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "cot": "cot",
    "sec": "sec",
    "csc": "csc",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "ln": "log",
    "log": "log",
    "lg": "log",
    "exp": "exp",
}
_SYMBOLS = {
    "pi": "pi",
    "infty": "oo",
    "infinity": "oo",
    "cdot": "*",
    "times": "*",
    "div": "/",
    "ast": "*",
    "le": "<=",
    "leq": "<=",
    "leqslant": "<=",
    "ge": ">=",
    "geq": ">=",
    "geqslant": ">=",
    "lt": "<",
    "gt": ">",
    "neq": "!=",
    "ne": "!=",
    "alpha": "alpha",
    "beta": "beta",
    "gamma": "gamma_",
    "theta": "theta",
    "lambda": "lamda",
    "mu": "mu",
    "sigma": "sigma",
    "phi": "phi",
    "omega": "omega",
    "imath": "i",
    "circ": "",
    "degree": "",
    "%": "",
    "$": "",
    "{": "(",
    "}": ")",
}


_TRIG = {"sin", "cos", "tan", "cot", "sec", "csc"}
_DEGREE_SUFFIX = re.compile(r"\s*\^\s*(?:\{\s*\\circ\s*\}|\\circ)|\s*°")


_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_SUPERSCRIPT_RUN = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+")
_UNICODE_MATH = {
    "\u2212": "-",  # minus sign
    "\u2044": "/",  # fraction slash (NFKC writes ½ as 1⁄2)
    "×": "\\times ",
    "·": "\\cdot ",
    "⋅": "\\cdot ",
    "÷": "\\div ",
    "π": "\\pi ",
    "∞": "\\infty ",
    "≠": "\\ne ",
}
_SQRT_SIGN = re.compile(r"√\s*(\d+|[A-Za-z]|\{)")


def unify_unicode(s: str) -> str:
    """NFKC and Unicode math signs as the LaTeX they stand for: ``−5`` is ``-5``, ``x²`` is ``x^{2}``.

    Superscripts become powers before NFKC, which would otherwise turn ``x²`` into ``x2``.
    """
    if s.isascii():
        return s
    s = _SUPERSCRIPT_RUN.sub(lambda m: "^{" + m.group(0).translate(_SUPERSCRIPTS) + "}", s)
    s = _SQRT_SIGN.sub(lambda m: "\\sqrt" + ("{" if m.group(1) == "{" else "{" + m.group(1) + "}"), s)
    s = s.replace("√", "\\sqrt")
    s = unicodedata.normalize("NFKC", s)
    for a, b in _UNICODE_MATH.items():
        s = s.replace(a, b)
    return s


class LatexError(ValueError):
    """The input is not LaTeX this translator understands (unbalanced braces, unknown command)."""


def _group(s: str, i: int) -> tuple[str, int]:
    """Read one argument at ``s[i:]``: a ``{...}`` group or a single token; returns (content, next index)."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        raise LatexError(f"missing argument at position {i}")
    if s[i] == "{":
        depth = 0
        for j in range(i, len(s)):
            if s[j] == "{":
                depth += 1
            elif s[j] == "}":
                depth -= 1
                if depth == 0:
                    return s[i + 1 : j], j + 1
        raise LatexError(f"unbalanced '{{' at position {i}")
    if s[i] == "\\":
        m = re.match(r"\\[a-zA-Z]+", s[i:])
        if m:
            return m.group(0), i + len(m.group(0))
    return s[i], i + 1


_ARITY = {r"\frac": 2, r"\dfrac": 2, r"\tfrac": 2, r"\sqrt": 1, r"\binom": 2}


def _function_script(s: str, i: int, mark: str) -> tuple[str | None, int]:
    """The group after ``mark`` between a function name and its argument: ``^`` its exponent
    (``\\sin^2 x``), ``_`` the base of ``\\log`` (``\\log_2 x``); ``None`` where there is none."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i < len(s) and s[i] == mark:
        return _group(s, i + 1)
    return None, i


def _function_argument(s: str, i: int) -> tuple[str, int]:
    """A function's argument: ``(...)``, ``{...}`` or one token (``\\sin x``, ``\\ln 2``)."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i < len(s) and s[i] == "(":
        depth = 0
        for j in range(i, len(s)):
            depth += s[j] == "("
            depth -= s[j] == ")"
            if depth == 0:
                return s[i + 1 : j], j + 1
        raise LatexError(f"unbalanced '(' at position {i}")
    m = re.match(r"\\[a-zA-Z]+|[A-Za-z]|\d+(?:\.\d+)?", s[i:])
    if s[i : i + 1] == "{" or not m:
        return _group(s, i)
    start, i = i, i + len(m.group(0))
    for _ in range(_ARITY.get(m.group(0), 0)):  # \cos \frac{\pi}{4}: the command with its arguments
        _, i = _group(s, i)
    degree = _DEGREE_SUFFIX.match(s, i)  # \sin 30^\circ: the degree sign belongs to the argument
    if degree:
        i = degree.end()
    return s[start:i], i


#: ``0.1\\overline{6}``, ``.\\overline{3}``, ``1.\\overline{142857}``: digits, point, repeating block
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)\s*\\overline\s*(?:\{\s*(\d+)\s*\}|(\d))")
#: a whole number written right before a fraction of whole numbers: ``2\\frac{1}{4}``, ``3\\tfrac34``
_MIXED = re.compile(r"(?<![\w.^_}\\])(\d+)\s*\\[dt]?frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))")
#: the plain-text form GSM8K answers use: ``2 1/4`` (never the product 2 * 1/4)
_MIXED_PLAIN = re.compile(r"(?<![\w./^_}\\])(\d+)\s+(\d+)\s*/\s*(\d+)(?![\w.(])")
#: a repeating decimal or mixed number with more digits than this is refused, not expanded
MAX_EXACT_DIGITS = 200


def _repeating_value(m: re.Match[str]) -> str:
    whole, fixed, block = m.group(1), m.group(2), m.group(3) or m.group(4)
    if len(whole) + len(fixed) + len(block) > MAX_EXACT_DIGITS:
        raise LatexError(f"repeating decimal with more than {MAX_EXACT_DIGITS} digits")
    value = Fraction(int(whole or "0")) + Fraction(int(fixed or "0"), 10 ** len(fixed))
    value += Fraction(int(block), 10 ** len(fixed) * (10 ** len(block) - 1))
    return f"(({value.numerator})/({value.denominator}))"


def _mixed_value(m: re.Match[str]) -> str:
    if m.re is _MIXED_PLAIN:
        whole, num, den = m.group(1), m.group(2), m.group(3)
    else:
        whole, num, den = m.group(1), m.group(2) or m.group(3), m.group(4) or m.group(5)
    if len(whole) + len(num) + len(den) > MAX_EXACT_DIGITS:
        raise LatexError(f"mixed number with more than {MAX_EXACT_DIGITS} digits")
    if not 0 < int(num) < int(den):
        return m.group(0)  # 2\frac{5}{4} is no mixed number: left to read as a product
    return f"(({int(whole) * int(den) + int(num)})/({den}))"


def exact_numerals(s: str) -> str:
    """Repeating decimals and mixed numbers as exact fractions, before anything reads them as products."""
    if "overline" in s:
        s = _REPEATING.sub(_repeating_value, s)
    if "frac" in s:
        s = _MIXED.sub(_mixed_value, s)
    if "/" in s:
        s = _MIXED_PLAIN.sub(_mixed_value, s)
    return s


def latex_to_sympy_text(s: str, depth: int = 0) -> str:
    """Translate LaTeX ``s`` into text for ``sympy.parse_expr``; :class:`LatexError` when it cannot."""
    if depth > 50:
        raise LatexError("nesting deeper than 50 levels")
    if depth == 0:
        s = exact_numerals(s)
    for token in _DROP:
        s = s.replace(token, " ")
    out: list[str] = []
    i = 0
    n = len(s)
    while i < n:
        ch = s[i]
        if ch == "\\":
            m = re.match(r"\\([a-zA-Z]+|.)", s[i:])
            if not m:
                raise LatexError(f"dangling backslash at position {i}")
            name = m.group(1)
            i += len(m.group(0))
            if name in ("frac", "dfrac", "tfrac", "cfrac"):
                num, i = _group(s, i)
                den, i = _group(s, i)
                out.append(f"(({latex_to_sympy_text(num, depth + 1)})/({latex_to_sympy_text(den, depth + 1)}))")
            elif name == "sqrt":
                index = None
                if i < n and s[i] == "[":
                    close = s.find("]", i)
                    if close < 0:
                        raise LatexError(f"unclosed '[' in \\sqrt at position {i}")
                    index, i = s[i + 1 : close], close + 1
                arg, i = _group(s, i)
                inner = latex_to_sympy_text(arg, depth + 1)
                if index is None:
                    out.append(f"sqrt({inner})")
                else:
                    out.append(f"(({inner})**(1/({latex_to_sympy_text(index, depth + 1)})))")
            elif name in _TEXT_CMDS:
                arg, i = _group(s, i)
                out.append(f" {latex_to_sympy_text(arg, depth + 1)} ")
            elif name in ("binom", "dbinom", "tbinom"):
                top, i = _group(s, i)
                bottom, i = _group(s, i)
                top, bottom = latex_to_sympy_text(top, depth + 1), latex_to_sympy_text(bottom, depth + 1)
                out.append(f" binomial(({top}),({bottom})) ")
            elif name in _FUNCS:
                base, i = _function_script(s, i, "_") if name == "log" else (None, i)
                expo, i = _function_script(s, i, "^")
                if base is None and name == "log":
                    base, i = _function_script(s, i, "_")
                if name == "lg":
                    base = "10"
                arg, i = _function_argument(s, i)
                inner = latex_to_sympy_text(arg, depth + 1)
                if name in _TRIG and re.search(r"\\circ|°|\\degree", arg):  # \sin 30^\circ
                    inner = f"({inner.replace('°', '')})*pi/180"
                if base is not None:  # \log_2 8 is log(8, 2), never 'log * _ * 2 * 8'
                    call = f"log(({inner}),({latex_to_sympy_text(base, depth + 1)}))"
                else:
                    call = f"{_FUNCS[name]}({inner})"
                out.append(f" ({call})**({latex_to_sympy_text(expo, depth + 1)})" if expo else f" {call}")
            elif name in _SYMBOLS:
                out.append(f" {_SYMBOLS[name]} ")
            elif name in ("cup", "cap", "in", "pm", "mp", "mid", "to", "rightarrow"):
                raise LatexError(f"\\{name} is not part of a single expression")
            else:
                raise LatexError(f"unknown LaTeX command \\{name}")
        elif ch == "^":
            arg, i = _group(s, i + 1)
            if arg.strip() in (r"\circ", "circ", r"\degree"):
                continue
            out.append(f"**({latex_to_sympy_text(arg, depth + 1)})")
        elif ch == "{":
            arg, i = _group(s, i)
            out.append(f"({latex_to_sympy_text(arg, depth + 1)})")
        elif ch == "}":
            raise LatexError(f"unbalanced '}}' at position {i}")
        elif ch in "[]":
            out.append("(" if ch == "[" else ")")
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)
