"""Is a predicted answer equivalent to the reference? Runs inside a killable worker process.

Everything here may be slow on adversarial input (``9^9^9^9``, deep nesting): sympy evaluates
while parsing and simplification has no time bound. So this module is only ever called from
:mod:`longcat_plugins.rewards.math.pool`, which enforces the hard time limit by killing the
worker. The checks, in order: normalised string equality; structure (intervals, sets, tuples,
unions, equations, comma lists); then per scalar: percentages and degrees, multiplier words,
exact symbolic difference ``simplify(a - b) == 0``, then exact values at random points.

Exact numbers are compared exactly: a decimal written in an answer is the exact rational it
spells (``0.5`` is 1/2, ``1.7`` is 17/10), so ``1000001`` never equals ``1000000`` and
``10^{-9}`` never equals 0, inside tuples, intervals and polynomials too. A tolerance exists
only between a decimal and a value with no finite decimal expansion (``\\sqrt 2``, 1/3), and it
is the precision the decimal was written with: see :func:`scalar_equal`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication,
    parse_expr,
    rationalize,
    standard_transformations,
)

from longcat_plugins.rewards.math.latex import LatexError, latex_to_sympy_text, unify_unicode

EQUAL, DIFFERENT, UNPARSABLE_REFERENCE = "equal", "different", "unparsable_reference"

#: ``rationalize``: a decimal literal parses to the exact rational it spells, never a binary float
_TRANSFORMS = (*standard_transformations, implicit_multiplication, convert_xor, rationalize)
_GLOBALS: dict[str, Any] = {k: getattr(sympy, k) for k in dir(sympy) if not k.startswith("_")}
_GLOBALS["__builtins__"] = {}
_SAFE_CHARS = re.compile(r"^[0-9A-Za-z_+\-*/().,=<>! ]*$")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ALLOWED_FUNCS = {
    "sqrt",
    "sin",
    "cos",
    "tan",
    "cot",
    "sec",
    "csc",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "log",
    "exp",
    "binomial",
    "pi",
    "oo",
    "E",
    "I",
}
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")
#: ``1 000 000``: thin-space thousands (SI style), never the product 1 * 000 * 000
_SPACED_THOUSANDS = re.compile(r"^-?\d{1,3}( \d{3})+(\.\d+)?$")
#: punctuation a text answer may carry; not ``!`` (a factorial: ``5!`` is 120) nor ``?`` (a question)
_TEXT_NORMALISE = re.compile(r"[\s.,;:'\"`]+")
#: words that make trailing ``\text{...}`` a hedge or a negation, never a unit: ``42 \text{ I think}``,
#: ``42 \text{ is wrong}``
_NOT_A_UNIT = re.compile(
    r"\b(?:not?|never|wrong|incorrect|false|untrue|maybe|perhaps|probably|possibly|likely|unlikely|think|"
    r"guess(?:ed|ing)?|believe|sure|unsure|uncertain|approx(?:imately)?|about|around|roughly|nearly|almost|"
    r"or|nor|either|if|unless|except|but|than|wait|hmm|idk)\b"
)
MAX_LEN = 1000


def normalise(s: str) -> str:
    """Cosmetic LaTeX/text normalisation that never changes meaning."""
    s = unify_unicode(s)
    s = s.strip().strip("$").strip()
    s = re.sub(r"^\\\$\s*", "", s)  # \$5: a currency sign, not part of the value
    for a, b in (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\left", ""), ("\\right", ""), ("\\!", "")):
        s = s.replace(a, b)
    s = s.replace("\\,", "").replace("~", "")
    s = re.sub(r"(?<!\\)\\ ", "", s)  # a LaTeX space, not the end of a matrix row ``\\ ``
    s = s.replace("{,}", ",")  # 1{,}000
    s = re.sub(r"\\(?:varnothing|emptyset)(?![a-zA-Z])|\\\{\s*\\\}", r"\\emptyset", s)
    s = re.sub(r"\\mathbb\s*\{?R\}?\s*$", r"(-\\infty, \\infty)", s)  # x \in \mathbb{R}
    s = re.sub(r"\s*\\(?:text|mbox)\{\s*(?:and|or)\s*\}\s*", ", ", s)  # 3 \text{ or } 5
    s = re.sub(r"(?<=[\d}])\s+(?:and|or)\s+(?=[-\d\\])", ", ", s)
    s = re.sub(r"\s+", " ", s).strip().rstrip(".").strip()
    if _THOUSANDS.match(s.replace(" ", "")) or _SPACED_THOUSANDS.match(s):
        s = s.replace(",", "").replace(" ", "")
    if re.fullmatch(r"-?0+\d{1,50}", s):  # AIME's 042 is 42 (not an octal literal, not a syntax error)
        s = str(int(s))
    return s


def _text_key(s: str) -> str:
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}", r"\1", s)
    return _TEXT_NORMALISE.sub(" ", s.replace("\\", "")).strip().lower()


def _split_top(s: str, seps: tuple[str, ...] = (",",)) -> list[str]:
    """Split at top-level separators (outside (), [], {})."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        ch = s[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            for sep in seps:
                if s.startswith(sep, i):
                    parts.append(s[start:i])
                    start = i + len(sep)
                    i += len(sep) - 1
                    break
        i += 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth < 0:
            return False
    return depth == 0


def _bracketed(s: str) -> tuple[str, str, list[str]] | None:
    """``(a, b]``-like: (open, close, items), or ``\\{a, b\\}`` as ('{', '}', items)."""
    if s.startswith("\\{") and s.endswith("\\}"):
        return "{", "}", _split_top(s[2:-2])
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and _balanced(s[1:-1]):
        items = _split_top(s[1:-1])
        if len(items) >= 2:
            return s[0], s[-1], items
    return None


def to_sympy(s: str) -> sympy.Expr:
    """Parse one scalar answer (LaTeX or plain) into sympy; ValueError when it is not math."""
    text = latex_to_sympy_text(s)
    text = text.replace("{", "(").replace("}", ")")
    if len(text) > MAX_LEN:
        raise ValueError(f"expression longer than {MAX_LEN} characters")
    if not _SAFE_CHARS.match(text) or "__" in text:
        raise ValueError(f"not a math expression: {s[:80]!r}")
    local: dict[str, Any] = {}
    for name in set(_IDENT.findall(text)):
        if name in _ALLOWED_FUNCS:
            continue
        if len(name) > 2 and name not in ("alpha", "beta", "gamma_", "theta", "lamda", "sigma", "omega", "phi"):
            raise ValueError(f"word {name!r} makes this a text answer")
        # e and i are the constants: an answer with a variable named i compares the same way on both sides
        local[name] = {"e": sympy.E, "i": sympy.I}.get(name) or sympy.Symbol(name)
    expr = parse_expr(text, local_dict=local, global_dict=_GLOBALS, transformations=_TRANSFORMS)
    if isinstance(expr, tuple):
        raise ValueError("a tuple, not a scalar")
    return expr


@dataclass(frozen=True)
class Decimal:
    """A lone decimal as written (``1.414``, ``6.02 \\times 10^{23}``): half a unit in its last place."""

    half_ulp: sympy.Rational
    significant: int


_DECIMAL = re.compile(r"^\s*[+-]?(\d*)\.(\d+)\s*(?:(?:\\times|\\cdot|\*)\s*10\s*\^\s*\{?\s*([+-]?\d{1,4})\s*\}?)?\s*$")
#: a decimal reference with fewer significant digits (``1.7``, ``0.33``) is read as exact, never as a rounding
MIN_REFERENCE_DIGITS = 3
#: a decimal prediction of a value with no finite decimal expansion needs float precision (``1.414214``)
MIN_PREDICTION_DIGITS = 6


def decimal_written(raw: str) -> Decimal | None:
    """The precision of ``raw`` when it is one decimal number; None for anything else (exact)."""
    m = _DECIMAL.match(raw)
    if m is None:
        return None
    whole, frac, exp = m.group(1), m.group(2), int(m.group(3) or 0)
    significant = len((whole + frac).lstrip("0")) or 1
    return Decimal(sympy.Rational(5, 10 ** (len(frac) + 1)) * sympy.Integer(10) ** exp, significant)


@dataclass(frozen=True)
class Scalar:
    """One parsed scalar answer: its value, a ``%``/degree marker, and its written precision."""

    value: sympy.Expr
    marker: str = ""  # "%" or "deg"
    decimal: Decimal | None = None

    def scaled(self, factor: sympy.Expr) -> Scalar:
        dec = self.decimal
        if dec is not None and factor.is_Rational:
            dec = Decimal(dec.half_ulp * abs(factor), dec.significant)
        return Scalar(self.value * factor, "", dec if factor.is_Rational else None)


def parse_scalar(raw: str, multiplier: int = 1) -> Scalar:
    """``50\\%`` -> (50, "%"), ``30^\\circ`` -> (30, "deg"), ``1.5`` with ``million`` -> 1500000."""
    marker = "%" if "%" in raw else "deg" if re.search(r"\\circ|°|\\degree", raw) else ""
    stripped = raw.replace("\\%", "").replace("%", "").replace("°", "")
    value = to_sympy(stripped)
    dec = decimal_written(stripped) if not marker else decimal_written(re.sub(r"\^\s*\{?\s*\\circ\s*\}?", "", stripped))
    if multiplier != 1:
        value, dec = value * multiplier, None if dec is None else Decimal(dec.half_ulp * multiplier, dec.significant)
    return Scalar(value, marker, dec)


def scalars_equal(pred: Scalar, gold: Scalar) -> bool:
    """Markers must agree, except that one side alone may carry one.

    ``0.5\\%`` is not ``50\\%`` and ``2\\%`` is not ``0.02\\%`` (both marked: the numbers must
    match); ``50\\%`` equals ``50`` and ``0.5`` (only one side marked: the number as written, or
    the fraction it stands for); ``30^\\circ`` equals ``30`` and ``\\frac{\\pi}{6}``.
    """
    if pred.marker == gold.marker:
        return scalar_equal(pred.value, gold.value, pred.decimal, gold.decimal)
    if pred.marker and gold.marker:
        return False
    marked, plain = (pred, gold) if pred.marker else (gold, pred)
    factor = sympy.Rational(1, 100) if marked.marker == "%" else sympy.pi / 180
    for m in (Scalar(marked.value, "", marked.decimal), marked.scaled(factor)):
        p, g = (m, plain) if marked is pred else (plain, m)
        if scalar_equal(p.value, g.value, p.decimal, g.decimal):
            return True
    return False


def _terminates(v: sympy.Expr) -> bool:
    """A rational with a finite decimal expansion (denominator 2^a 5^b)."""
    if not v.is_Rational:
        return False
    q = int(v.q)
    for f in (2, 5):
        while q % f == 0:
            q //= f
    return q == 1


_NOT_FINITE = (sympy.oo, -sympy.oo, sympy.zoo, sympy.nan)
_ZERO_PREC = 10  # evalf bits left when a difference cancelled to nothing: an exact zero simplify missed


def _is_zero(d: sympy.Expr) -> bool:
    """``d`` (already evaluated) is zero, or cancelled to nothing at 300 digits."""
    for part in d.as_real_imag():
        if part == 0:
            continue
        if not part.is_Float or getattr(part, "_prec", 999) >= _ZERO_PREC:
            return False
    return True


def _numbers_equal(a: sympy.Expr, b: sympy.Expr, a_dec: Decimal | None, b_dec: Decimal | None) -> bool:
    """Two numbers, exactly; a written decimal against a value with no finite expansion, to its precision."""
    if a.is_Rational and b.is_Rational:
        if a == b:
            return True
        d: sympy.Expr = a - b
    else:
        na, nb = sympy.N(a, 20), sympy.N(b, 20)
        if na.has(*_NOT_FINITE) or nb.has(*_NOT_FINITE):
            # an infinite value only equals itself (inf - 1 is no small difference); NaN never equals.
            # sympy's own values, never Python floats: 10^{400} sqrt 2 and 10^{400} sqrt 3 both overflow a float
            return bool(na == nb) and not na.has(sympy.nan)
        d = sympy.N(a - b, 30, maxn=300)
        if _is_zero(d):
            return True
    for dec, other, need in ((b_dec, a, MIN_REFERENCE_DIGITS), (a_dec, b, MIN_PREDICTION_DIGITS)):
        if dec is not None and dec.significant >= need and not _terminates(other) and other.is_real:
            if bool(abs(d) <= dec.half_ulp):
                return True
    return False


def scalar_equal(a: sympy.Expr, b: sympy.Expr, a_dec: Decimal | None = None, b_dec: Decimal | None = None) -> bool:
    """Is prediction ``a`` the reference ``b``? Exact, with one tolerance.

    Symbolic difference first; then, for numbers, exact comparison (a difference that evalf
    cancels to nothing at 300 digits is an identity simplify missed); for expressions, the
    same at three random rational points. The one tolerance: a lone decimal against a value with
    no finite decimal expansion (irrational, or 1/3) may differ by half a unit in the decimal's
    last written place, when the decimal is the reference and has at least
    ``MIN_REFERENCE_DIGITS`` significant digits (``1.414`` for ``\\sqrt 2``: the reference was
    rounded), or is the prediction with at least ``MIN_PREDICTION_DIGITS`` (``1.414214``). A
    coarser decimal (``1.7`` for ``\\sqrt 3``, ``0.33`` for 1/3) and two decimals are compared exactly.
    """
    if isinstance(a, sympy.Rel) or isinstance(b, sympy.Rel):
        return type(a) is type(b) and scalar_equal(a.lhs - a.rhs, b.lhs - b.rhs)
    try:
        if sympy.simplify(a - b) == 0:
            return True
    except (TypeError, ValueError, AttributeError):
        pass
    try:
        symbols = sorted((a.free_symbols | b.free_symbols), key=str)
        if not symbols:
            return _numbers_equal(a, b, a_dec, b_dec)
        rng = random.Random(0)
        for _ in range(3):
            point = {s: sympy.Rational(rng.randint(11, 97), rng.randint(7, 13)) for s in symbols}
            if not _numbers_equal(a.subs(point), b.subs(point), None, None):
                return False
        return True
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return False


def _equation(s: str) -> tuple[str, str] | None:
    parts = _split_top(s, ("=",))
    if len(parts) == 2 and all(parts) and not re.search(r"[<>!]$", parts[0]):
        return parts[0], parts[1]
    return None


#: unit words recognised after a number without ``\text{}``; no single letters (``5 m`` may be 5*m)
_UNIT_WORDS = (
    "units?|cm|mm|km|kg|mg|sec|seconds?|minutes?|hours?|hrs?|days?|weeks?|years?|"
    "inches|inch|feet|foot|ft|yards?|miles?|meters?|metres?|liters?|litres?|ml|"
    "dollars?|cents?|degrees?|percent|sq\\s*units|square\\s*units|cubic\\s*units"
)
_TEXT_UNIT = re.compile(
    r"(?:\\[,;:! ]|\s)*\\(?:text|mbox|mathrm|textrm|rm)\s*\{([^{}]*)\}\s*(\^\s*\{?\s*[23]\s*\}?)?\s*$"
)
_MULTIPLIER_WORDS = "hundreds?|thousands?|millions?|billions?|trillions?|dozens?"
_PLAIN_UNIT = re.compile(
    rf"\s+((?:(?:{_MULTIPLIER_WORDS})\s+){{0,2}}(?:{_UNIT_WORDS}|{_MULTIPLIER_WORDS}))(\^\s*\{{?\s*[23]\s*\}}?|²|³)?\s*$",
    re.IGNORECASE,
)
_MATRIX = re.compile(r"^\\begin\{([pbBvV]?matrix|array)\}(?:\{[^{}]*\})?(.*)\\end\{\1\}$", re.DOTALL)
_REL = r"(<=|>=|<|>|≤|≥|\\leq?(?![a-z])|\\geq?(?![a-z])|\\lt(?![a-z])|\\gt(?![a-z])|\\leqslant|\\geqslant)"
_ONE_SIDED = re.compile(rf"^([A-Za-z])\s*{_REL}\s*(.+)$")
_TWO_SIDED = re.compile(rf"^(.+?)\s*{_REL}\s*([A-Za-z])\s*{_REL}\s*(.+)$")
_VAR_RIGHT = re.compile(rf"^(.+?)\s*{_REL}\s*([A-Za-z])$")
_MEMBER = re.compile(r"^[A-Za-z]\s*(?:\\in(?![a-zA-Z])|∈)\s*")


def _split_unit(s: str) -> tuple[str, str | None]:
    """``5\\text{ cm}`` -> ("5", "cm"); a value with no unit -> (s, None)."""
    for pattern in (_TEXT_UNIT, _PLAIN_UNIT):
        m = pattern.search(s)
        if m and m.start() > 0 and re.search(r"[\d})a-zA-Z]$", s[: m.start()].strip()):
            unit = re.sub(r"\s+", " ", m.group(1)).strip().lower()
            if unit and (pattern is _PLAIN_UNIT or (re.fullmatch(r"[a-z ]+", unit) and not _NOT_A_UNIT.search(unit))):
                return s[: m.start()].strip(), unit + (m.group(2) or "").replace(" ", "")
    return s, None


def _unit_key(unit: str) -> str:
    unit = unit.replace("²", "^2").replace("³", "^3").replace("{", "").replace("}", "")
    return re.sub(r"(?<=[a-z]{3})s\b", "", unit)  # plural


def _rel_kind(op: str) -> str:
    op = op.lstrip("\\")
    if op in ("<", "lt"):
        return "<"
    if op in (">", "gt"):
        return ">"
    return "<=" if op in ("<=", "≤", "le", "leq", "leqslant") else ">="


def _inequality_interval(s: str) -> str | None:
    """``x > 0`` -> ``(0, \\infty)``; ``1 \\le x < 2`` -> ``[1, 2)``: one variable only."""
    m = _TWO_SIDED.match(s)
    if m:
        lo, op1, _var, op2, hi = m.groups()
        k1, k2 = _rel_kind(op1), _rel_kind(op2)
        if k1[0] == "<" and k2[0] == "<":
            return f"{'[' if k1 == '<=' else '('}{lo}, {hi}{']' if k2 == '<=' else ')'}"
        if k1[0] == ">" and k2[0] == ">":
            return f"{'[' if k2 == '>=' else '('}{hi}, {lo}{']' if k1 == '>=' else ')'}"
        return None
    m = _ONE_SIDED.match(s)
    flipped = None if m else _VAR_RIGHT.match(s)
    if flipped and not re.search(_REL, flipped.group(1)):  # 0 < x is x > 0
        bound, op, _var = flipped.groups()
        kind = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}[_rel_kind(op)]
    elif m and not re.search(_REL, m.group(3)):
        _var, op, bound = m.groups()
        kind = _rel_kind(op)
    else:
        return None
    if kind[0] == ">":
        return f"{'[' if kind == '>=' else '('}{bound}, \\infty)"
    return f"(-\\infty, {bound}{']' if kind == '<=' else ')'}"


def _matrix(s: str) -> tuple[str, list[list[str]]] | None:
    """``\\begin{pmatrix} a & b \\\\ c & d \\end{pmatrix}`` -> (kind, rows); vmatrix is a determinant."""
    m = _MATRIX.match(s.strip())
    if not m:
        return None
    kind = "det" if m.group(1).lower() == "vmatrix" else "matrix"
    rows = [r for r in re.split(r"\\\\", m.group(2)) if r.strip()]
    return kind, [[c.strip() for c in r.split("&")] for r in rows]


def _plus_minus(s: str) -> list[str] | None:
    """``1 \\pm \\sqrt2`` -> both values; None without exactly one \\pm/\\mp."""
    found = re.findall(r"\\pm(?![a-z])|\\mp(?![a-z])|±", s)
    if len(found) != 1:
        return None
    first, second = ("+", "-") if found[0] != "\\mp" else ("-", "+")
    pattern = r"\\pm(?![a-z])|\\mp(?![a-z])|±"
    return [re.sub(pattern, first, s, count=1), re.sub(pattern, second, s, count=1)]


def _vector_items(s: str) -> list[str] | None:
    """A one-row or one-column matrix, or an ordered tuple ``(a, b)``, as its items."""
    mat = _matrix(s)
    if mat is not None:
        kind, rows = mat
        if kind == "matrix" and len(rows) == 1:
            return rows[0]
        if kind == "matrix" and all(len(r) == 1 for r in rows):
            return [r[0] for r in rows]
        return None
    br = _bracketed(s)
    if br is not None and br[0] == "(" and br[1] == ")":
        return br[2]
    return None


def _one_equal(pred: str, gold: str) -> bool:
    """Equivalence of two single answers (possibly structured); raises ValueError if gold is unparsable."""
    pred, gold = _MEMBER.sub("", pred, count=1), _MEMBER.sub("", gold, count=1)
    if normalise(pred) == normalise(gold) or (_text_key(pred) and _text_key(pred) == _text_key(gold)):
        return True
    based = _base_numerals_equal(pred, gold)
    if based is not None:
        return based
    g_choice = _CHOICE_ONLY.match(_unwrap_text(gold))
    if g_choice is not None:
        p_choice = _CHOICE_THEN_VALUE.match(_unwrap_text(pred))
        if p_choice is not None and not _CHOICE_IN_TEXT.search(p_choice.group(2) or ""):
            return (p_choice.group(1) or p_choice.group(3)) == g_choice.group(1)
    g_mat, p_mat = _matrix(gold), _matrix(pred)
    if g_mat is not None or p_mat is not None:
        if g_mat is not None and p_mat is not None:
            (gk, grows), (pk, prows) = g_mat, p_mat
            if gk != pk or [len(r) for r in grows] != [len(r) for r in prows]:
                return False
            return all(
                _one_equal(p, g) for pr, gr in zip(prows, grows, strict=True) for p, g in zip(pr, gr, strict=True)
            )
        g_vec, p_vec = _vector_items(gold), _vector_items(pred)
        if g_vec is None or p_vec is None or len(g_vec) != len(p_vec):
            return False
        return all(_one_equal(p, g) for p, g in zip(p_vec, g_vec, strict=True))
    gold = _inequality_interval(gold) or gold
    pred = _inequality_interval(pred) or pred
    gold_struct, pred_struct = _bracketed(gold), _bracketed(pred)
    if gold_struct is not None:
        if pred_struct is None:
            return False
        (go, gc, gi), (po, pc, pi) = gold_struct, pred_struct
        if (go, gc) != (po, pc) or len(gi) != len(pi):
            return False
        if go == "{":
            return _unordered_equal(pi, gi)
        return all(_one_equal(p, g) for p, g in zip(pi, gi, strict=True))
    if pred_struct is not None:
        return False
    g_eq, p_eq = _equation(gold), _equation(pred)
    if g_eq is not None:
        if p_eq is None:
            # "x = 3" or "f^{-1}(x) = ..." vs the bare value: compare with the right-hand side
            return _lhs(g_eq[0]) is not None and _one_equal(pred, g_eq[1])
        if g_eq[0].strip() == p_eq[0].strip() or _same_function(p_eq[0], g_eq[0]):
            return _one_equal(p_eq[1], g_eq[1])
        gl, gr = to_sympy(g_eq[0]), to_sympy(g_eq[1])
        pl, pr = to_sympy(p_eq[0]), to_sympy(p_eq[1])
        ratio = sympy.simplify((pl - pr) / (gl - gr))
        return bool(ratio.is_number and ratio != 0)
    if p_eq is not None and _lhs(p_eq[0]) is not None:
        pred = p_eq[1]
    (pred, p_unit), (gold, g_unit) = _split_unit(pred), _split_unit(gold)
    (p_mult, p_unit), (g_mult, g_unit) = _multiplier(p_unit), _multiplier(g_unit)
    if p_unit and g_unit and _unit_key(p_unit) != _unit_key(g_unit):
        return False
    pred, gold = (_unit_value(pred, p_unit), _unit_value(gold, g_unit))
    gold_scalar = parse_scalar(gold, g_mult)
    try:
        pred_scalar = parse_scalar(pred, p_mult)
    except (ValueError, LatexError, SyntaxError, TypeError):
        return False
    return scalars_equal(pred_scalar, gold_scalar)


#: AMC's answer choices: a reference ``(C)`` or ``\\textbf{(C)}``; a prediction ``C``, ``(C)``, ``\\textbf{(C) }12``
_CHOICE_ONLY = re.compile(r"^\(?([A-E])\)?$")
_CHOICE_THEN_VALUE = re.compile(r"^\(([A-E])\)(.*)$|^([A-E])$", re.DOTALL)
_CHOICE_IN_TEXT = re.compile(r"\([A-E]\)|\b[A-E]\b")


def _unwrap_text(s: str) -> str:
    return re.sub(r"\\(?:text|textbf|mathrm|mbox|mathbf)\s*\{([^{}]*)\}", r"\1", s).strip()


#: ``y``, ``f(x)``, ``f^{-1}(x)``: a left-hand side that only names what the right-hand side is
_LHS = re.compile(r"^(?:([A-Za-z])|([A-Za-z])\s*(\^\s*\{?\s*-\s*1\s*\}?)?\s*\(\s*([A-Za-z])\s*\))$")


def _lhs(s: str) -> tuple[str, bool, str] | None:
    """(name, inverse, argument) of a naming left-hand side; argument "" for a lone variable."""
    m = _LHS.match(s.strip())
    if m is None:
        return None
    if m.group(1):
        return m.group(1), False, ""
    return m.group(2), bool(m.group(3)), m.group(4)


def _same_function(pred_lhs: str, gold_lhs: str) -> bool:
    """``f^{-1}(x)`` and ``g^{-1}(x)``, or ``y`` and ``f(x)``: the same thing named; never ``f`` for ``f^{-1}``.

    ``y`` stands for any function of ``x`` (also an inverse, written after swapping variables).
    """
    p, g = _lhs(pred_lhs), _lhs(gold_lhs)
    if p is None or g is None or (not p[2] and not g[2]):
        return False  # x = 3 vs y = 3: two different variables
    if p[2] and g[2]:
        return p[1:] == g[1:]
    var, func = (p, g) if not p[2] else (g, p)
    return var[0] == "y" and func[2] == "x"


_BASE_NUMERAL = re.compile(r"^([0-9A-Za-z]{1,64})_\{?\s*\(?\s*(\d{1,2})\s*\)?\s*\}?$")


def _base_value(digits: str, base: int) -> int | None:
    try:
        return int(digits, base) if 2 <= base <= 36 else None
    except ValueError:
        return None


def _base_numerals_equal(pred: str, gold: str) -> bool | None:
    """``1011_2`` vs ``1011_{2}``, ``13_8``, ``11``, ``1011``; None when neither side is one.

    Both with a base: the values. Only the reference: the same digits (the problem named the
    base). Only the prediction: its value against a decimal integer reference.
    """
    g, p = _BASE_NUMERAL.match(gold.strip()), _BASE_NUMERAL.match(pred.strip())
    if g is None and p is None:
        return None
    g_val = None if g is None else _base_value(g.group(1), int(g.group(2)))
    if g is not None and g_val is None:
        raise ValueError(f"reference {gold!r}: digits not valid in base {g.group(2)}")
    p_val = None if p is None else _base_value(p.group(1), int(p.group(2)))
    if p is not None and p_val is None:
        return False
    if g is not None and p is not None:
        return p_val == g_val
    if g is not None:
        return pred.strip().upper() == g.group(1).upper()
    return bool(re.fullmatch(r"\d{1,64}", gold.strip())) and p_val == int(gold.strip())


#: multiplier words, as in GSM8K answers (``2.5 million``); ``percent`` is a marker, not a multiplier
_MULTIPLIERS = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9, "trillion": 10**12, "dozen": 12}


def _multiplier(unit: str | None) -> tuple[int, str | None]:
    """(factor, the rest of the unit) for ``million dollars`` or ``hundred thousand``; (1, unit) without one."""
    factor, rest = 1, unit
    while rest:
        first, _, after = rest.partition(" ")
        word = _MULTIPLIERS.get(first.rstrip("s"))
        if word is None:
            break
        factor, rest = factor * word, after.strip() or None
    return factor, rest


def _unit_value(value: str, unit: str | None) -> str:
    """A unit that changes the value's meaning (degrees, percent) is written back as a symbol."""
    if unit is None:
        return value
    key = _unit_key(unit)
    if key in ("degree", "deg"):
        return value + "^\\circ"
    if key == "percent":
        return value + "\\%"
    return value


def _unordered_equal(preds: list[str], golds: list[str]) -> bool:
    if len(preds) != len(golds):
        return False
    remaining = list(preds)
    for g in golds:
        for k, p in enumerate(remaining):
            if _one_equal(p, g):
                del remaining[k]
                break
        else:
            return False
    return True


def _answer_set(s: str) -> list[str] | None:
    """Several answers in any order: ``3, 5``, ``\\{5, 3\\}``, ``1 \\pm \\sqrt 2``; None for one answer.

    Brackets that make an interval or an ordered tuple (``(1, 2)``, ``[1, 2)``) are not a set.
    """
    s = _MEMBER.sub("", s, count=1)
    if s.startswith("\\{") and s.endswith("\\}") and _balanced(s[2:-2]):
        items = _split_top(s[2:-2])
    elif _bracketed(s) is None and _matrix(s) is None:
        items = _split_top(s)
    else:
        return None
    expanded: list[str] = []
    for item in items:
        both = _plus_minus(item)
        expanded.extend(both if both is not None else [item])
    return expanded if len(expanded) > 1 or s.startswith("\\{") else None


def check(pred: str, gold: str) -> tuple[str, str]:
    """(verdict, detail): ``equal``, ``different`` or ``unparsable_reference`` (the reference is broken)."""
    pred, gold = normalise(pred), normalise(gold)
    if pred == gold:
        return EQUAL, "identical after normalisation"
    if "?" in pred and "?" not in gold:
        return DIFFERENT, "a question mark: a guess, not an answer"
    try:
        for sep in ("\\cup", "∪"):
            if sep in gold:
                gp, pp = [x for x in gold.split(sep)], [x for x in pred.split(sep)]
                return (EQUAL if _unordered_equal(pp, gp) else DIFFERENT), "union"
        gold_items, pred_items = _answer_set(gold), _answer_set(pred)
        if gold_items is not None or pred_items is not None:
            return (EQUAL if _unordered_equal(pred_items or [pred], gold_items or [gold]) else DIFFERENT), "answer set"
        return (EQUAL if _one_equal(pred, gold) else DIFFERENT), ""
    except (ValueError, LatexError, SyntaxError, TypeError, RecursionError, AttributeError) as exc:
        if _text_key(pred) == _text_key(gold):
            return EQUAL, "text"
        try:
            to_sympy(gold)
        except (ValueError, LatexError, SyntaxError, TypeError, RecursionError) as gold_exc:
            if re.search(r"[A-Za-z]{3,}", gold) and not re.search(r"\\(?:frac|sqrt)", gold):
                return DIFFERENT, f"text answer differs ({type(gold_exc).__name__})"
            return UNPARSABLE_REFERENCE, f"reference {gold[:80]!r}: {gold_exc}"
        return DIFFERENT, f"prediction not comparable: {type(exc).__name__}: {str(exc)[:100]}"
