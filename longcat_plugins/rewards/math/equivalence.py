"""Is a predicted answer equivalent to the reference? Runs inside a killable worker process.

Everything here may be slow on adversarial input (``9^9^9^9``, deep nesting): sympy evaluates
while parsing and simplification has no time bound. So this module is only ever called from
:mod:`longcat_plugins.rewards.math.pool`, which enforces the hard time limit by killing the
worker. The checks, in order: normalised string equality; structure (intervals, sets, tuples,
unions, equations, comma lists); then per scalar: percentages and degrees as alternatives,
exact symbolic difference ``simplify(a - b) == 0``, then a numeric fallback at random points.
"""

from __future__ import annotations

import random
import re
from typing import Any

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication,
    parse_expr,
    standard_transformations,
)

from longcat_plugins.rewards.math.latex import LatexError, latex_to_sympy_text

EQUAL, DIFFERENT, UNPARSABLE_REFERENCE = "equal", "different", "unparsable_reference"

_TRANSFORMS = (*standard_transformations, implicit_multiplication, convert_xor)
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
    "pi",
    "oo",
    "E",
    "I",
}
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")
_TEXT_NORMALISE = re.compile(r"[\s.,;:!?'\"`]+")
MAX_LEN = 1000


def normalise(s: str) -> str:
    """Cosmetic LaTeX/text normalisation that never changes meaning."""
    s = s.strip().strip("$").strip()
    s = re.sub(r"\\text\{\s*(?:units?|cm|m|km|kg|g|s|degrees?)\s*\}", "", s)
    for a, b in (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\left", ""), ("\\right", ""), ("\\!", "")):
        s = s.replace(a, b)
    s = s.replace("\\,", "").replace("\\ ", "").replace("~", "")
    s = re.sub(r"\s+", " ", s).strip().rstrip(".").strip()
    if _THOUSANDS.match(s.replace(" ", "")):
        s = s.replace(",", "").replace(" ", "")
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
        local[name] = sympy.E if name == "e" else sympy.Symbol(name)
    expr = parse_expr(text, local_dict=local, global_dict=_GLOBALS, transformations=_TRANSFORMS)
    if isinstance(expr, tuple):
        raise ValueError("a tuple, not a scalar")
    return expr


def _alternatives(raw: str) -> list[sympy.Expr]:
    """Values an answer may mean: ``50\\%`` is 50 or 1/2; ``30^\\circ`` is 30 or pi/6."""
    percent = "%" in raw
    degree = bool(re.search(r"\\circ|°|\\degree", raw))
    base = to_sympy(raw.replace("\\%", "").replace("%", "").replace("°", ""))
    values = [base]
    if percent:
        values.append(base / 100)
    if degree:
        values.append(base * sympy.pi / 180)
    return values


def _numeric_equal(a: sympy.Expr, b: sympy.Expr, rel: float = 1e-6) -> bool:
    symbols = sorted((a.free_symbols | b.free_symbols), key=str)
    rng = random.Random(0)
    for _ in range(3 if symbols else 1):
        point = {s: sympy.Rational(rng.randint(11, 97), rng.randint(7, 13)) for s in symbols}
        va, vb = complex(sympy.N(a.subs(point), 30)), complex(sympy.N(b.subs(point), 30))
        if abs(va - vb) > rel * max(1.0, abs(vb)):
            return False
    return True


def scalar_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Symbolic difference first, then numbers at random points (handles forms simplify misses)."""
    if isinstance(a, sympy.Rel) or isinstance(b, sympy.Rel):
        return type(a) is type(b) and scalar_equal(a.lhs - a.rhs, b.lhs - b.rhs)
    try:
        if sympy.simplify(a - b) == 0:
            return True
    except (TypeError, ValueError, AttributeError):
        pass
    try:
        return _numeric_equal(a, b)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return False


def _equation(s: str) -> tuple[str, str] | None:
    parts = _split_top(s, ("=",))
    if len(parts) == 2 and all(parts) and not re.search(r"[<>!]$", parts[0]):
        return parts[0], parts[1]
    return None


def _one_equal(pred: str, gold: str) -> bool:
    """Equivalence of two single answers (possibly structured); raises ValueError if gold is unparsable."""
    if normalise(pred) == normalise(gold) or (_text_key(pred) and _text_key(pred) == _text_key(gold)):
        return True
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
    g_eq, p_eq = _equation(gold), _equation(pred)
    if g_eq is not None:
        if p_eq is None:
            # "x = 3" vs "3": compare with the right-hand side when the left is a lone variable
            return bool(re.fullmatch(r"[A-Za-z]", g_eq[0].strip())) and _one_equal(pred, g_eq[1])
        if g_eq[0].strip() == p_eq[0].strip():
            return _one_equal(p_eq[1], g_eq[1])
        gl, gr = to_sympy(g_eq[0]), to_sympy(g_eq[1])
        pl, pr = to_sympy(p_eq[0]), to_sympy(p_eq[1])
        ratio = sympy.simplify((pl - pr) / (gl - gr))
        return bool(ratio.is_number and ratio != 0)
    if p_eq is not None and re.fullmatch(r"[A-Za-z]", p_eq[0].strip()):
        pred = p_eq[1]
    gold_values = _alternatives(gold)
    try:
        pred_values = _alternatives(pred)
    except (ValueError, LatexError, SyntaxError, TypeError):
        return False
    return any(scalar_equal(p, g) for p in pred_values[:1] for g in gold_values) or any(
        scalar_equal(p, gold_values[0]) for p in pred_values[1:]
    )


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


def check(pred: str, gold: str) -> tuple[str, str]:
    """(verdict, detail): ``equal``, ``different`` or ``unparsable_reference`` (the reference is broken)."""
    pred, gold = normalise(pred), normalise(gold)
    if pred == gold:
        return EQUAL, "identical after normalisation"
    try:
        for sep in ("\\cup", "∪"):
            if sep in gold:
                gp, pp = [x for x in gold.split(sep)], [x for x in pred.split(sep)]
                return (EQUAL if _unordered_equal(pp, gp) else DIFFERENT), "union"
        gold_items = _split_top(gold)
        if len(gold_items) > 1 and _bracketed(gold) is None:
            pred_items = _split_top(pred)
            return (EQUAL if _unordered_equal(pred_items, gold_items) else DIFFERENT), "answer list"
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
