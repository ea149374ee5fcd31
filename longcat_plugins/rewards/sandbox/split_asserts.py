"""An assert-based Python test cut in two, so that its verdict is reached outside the program.

Run in the program's namespace, ``assert abs(half(3) - 1.5) < 1e-9`` passes whenever the program
makes it complete: an object whose comparisons all say yes, an ``abs`` it shadows or patches,
a ``math.isclose`` it replaces, a result line it forges. So each assert is split:

- the *probes*, the subexpressions that call into the program (``half(3)``), run in the
  program's process and come back as plain data (numbers, strings, containers of them; a
  subclass is sent as its base type, so an overridden ``__eq__`` never leaves the program);
- the rest (``abs(__lc_probe_0 - 1.5) < 1e-9``) is evaluated by the harness's judge, a process
  that never runs the program's code, on those values. The rest never enters the program's
  process, so neither do the expectations it holds.

Statements between asserts run where their names are needed: a statement that uses the
program's names (``s = Stack()``, ``s.push(1)``) in the program's process, binding names the
judge then treats as the program's; any other (``import math``, ``xs = [3, 1]``) in the judge,
and in the program's process too when a later probe reads what it binds.

A comprehension whose element calls into the program with its own variable
(``all(f(x) == 2 * x for x in xs)``) is lifted whole: the program's process computes its rows.
A test of another shape (an assert inside a loop or a function, a probe that reads a lambda's
variable, a dunder attribute of the program's objects) cannot be cut this way: :func:`split_test`
says why, and the case is not credited.
"""

from __future__ import annotations

import ast
import builtins
import sys
from dataclasses import dataclass, field
from typing import Any

#: the name the judge binds probe ``i``'s value to
PROBE = "__lc_probe_{}"
#: the judge's name for a lifted comprehension's row of probe values
ROW = "__lc_row"

_BUILTINS = frozenset(dir(builtins))
_STDLIB = frozenset(sys.stdlib_module_names)
_STATEMENTS = (ast.Import, ast.ImportFrom, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = (ast.Lambda, *_COMPREHENSIONS)


class Unsplittable(ValueError):
    """The test has a shape :func:`split_test` cannot cut; the message says which."""


@dataclass
class SplitTest:
    """What each side runs, in order. ``child``: ``{"run": code}`` or ``{"probe": expr, "imports":
    [module, ...]}``, each answered by one message. ``judge``: ``{"run": code}`` (``"child": true``
    when the program's process runs it too, or alone: ``"judge": false``), ``{"check": expr,
    "probes": n, "imports": [...]}`` (the next ``n`` probe values bound to :data:`PROBE`)."""

    child: list[dict[str, Any]] = field(default_factory=list)
    judge: list[dict[str, Any]] = field(default_factory=list)


def _stored(node: ast.AST) -> set[str]:
    """Names a statement binds (assignment targets, import aliases)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _scope_names(node: ast.AST) -> set[str]:
    """The names a lambda or a comprehension binds for its own body."""
    if isinstance(node, ast.Lambda):
        a = node.args
        args = [
            *a.posonlyargs,
            *a.args,
            *a.kwonlyargs,
            *([a.vararg] if a.vararg else []),
            *([a.kwarg] if a.kwarg else []),
        ]
        return {x.arg for x in args}
    return {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}  # type: ignore[attr-defined]


class _Cutter:
    """Replaces an assert's probes by :data:`PROBE` names; collects their source."""

    def __init__(
        self, program: set[str], bound: set[str], first: int, defined: frozenset[str], row: frozenset[str] = frozenset()
    ) -> None:
        self.program, self.bound, self.first, self.defined = program, bound, first, defined
        #: inside a lifted comprehension: its variables, which the probes may read (each probe is
        #: then a column of the comprehension's row, ``__lc_row[j]``)
        self.row = row
        self.probes: list[str] = []

    def is_program(self, name: str, local: frozenset[str]) -> bool:
        """Whether ``name`` is the program's: not the test's own (local or bound), not a builtin
        (a program that defines ``abs`` does not change what the test's ``abs`` means), defined
        by the program, or else not a standard module (which the judge imports itself)."""
        if name in local:
            return False
        if name in self.program:
            return True
        if name in self.bound or name in _BUILTINS:
            return False
        return name in self.defined or name not in _STDLIB

    def touches_program(self, node: ast.AST, local: frozenset[str]) -> bool:
        return any(self.is_program(n, local) for n in _loaded(node))

    def cut(self, node: ast.AST, local: frozenset[str] = frozenset()) -> ast.AST:
        if not self.touches_program(node, local):
            return node
        if isinstance(node, _COMPREHENSIONS) and self._element_reads_its_variables(node, local):
            return self._lift(node, local)
        probe = self._probe(node, local)
        if probe is not None:
            uses_local = _loaded(probe) & (local - self.row)
            if uses_local:
                raise Unsplittable(
                    f"the call into the program {ast.unparse(probe)!r} reads {sorted(uses_local)[0]!r}, a variable of "
                    "a comprehension or a lambda: it cannot run apart from the assert"
                )
            if any(isinstance(n, ast.Attribute) and n.attr.startswith("__") for n in ast.walk(probe)):
                raise Unsplittable(f"{ast.unparse(probe)!r} reads a dunder attribute of the program's objects")
            if any(isinstance(n, ast.NamedExpr) for n in ast.walk(probe)):
                raise Unsplittable(f"{ast.unparse(probe)!r} assigns inside an expression")
            self.probes.append(ast.unparse(probe))
            new = self._reference(len(self.probes) - 1)
            return new if probe is node else self._replace(node, probe, new, local)
        if isinstance(node, ast.NamedExpr):
            raise Unsplittable(f"{ast.unparse(node)!r} assigns inside an assert")
        inner = local | _scope_names(node) if isinstance(node, _SCOPES) else local
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                setattr(node, name, self.cut(value, frozenset(inner)))
            elif isinstance(value, list):
                setattr(node, name, [self.cut(v, frozenset(inner)) if isinstance(v, ast.AST) else v for v in value])
        return node

    def _reference(self, index: int) -> ast.expr:
        """What the judge reads in place of probe ``index``."""
        if self.row:
            return ast.Subscript(value=ast.Name(id=ROW, ctx=ast.Load()), slice=ast.Constant(index), ctx=ast.Load())
        return ast.Name(id=PROBE.format(self.first + index), ctx=ast.Load())

    def _element_reads_its_variables(self, node: ast.AST, local: frozenset[str]) -> bool:
        """Whether a comprehension's element calls into the program with its own variables."""
        inner = local | _scope_names(node)
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]  # type: ignore[attr-defined]
        return any(self.touches_program(p, inner) and _loaded(p) & _scope_names(node) for p in parts)

    def _lift(self, node: ast.AST, local: frozenset[str]) -> ast.AST:
        """``[f(x) == 2 * x for x in xs]``: the program's process computes the rows ``[(f(x),) for x
        in xs]`` (one probe); the judge runs the comprehension over ``zip`` of the same iteration and
        those rows (``strict``: a row more or less fails), reading ``f(x)`` as ``__lc_row[0]``."""
        generators = node.generators  # type: ignore[attr-defined]
        if self.row or len(generators) != 1 or generators[0].is_async:
            raise Unsplittable(f"{ast.unparse(node)!r}: a comprehension over more than one loop calls into the program")
        loop = generators[0]
        names = _scope_names(node)
        if self.touches_program(loop.iter, local) or any(self.touches_program(c, local | names) for c in loop.ifs):
            raise Unsplittable(f"{ast.unparse(node)!r}: both the loop and its element call into the program")
        columns = _Cutter(self.program, self.bound, 0, self.defined, row=frozenset(names))
        fields = ("key", "value") if isinstance(node, ast.DictComp) else ("elt",)
        for name in fields:
            setattr(node, name, columns.cut(getattr(node, name), local | names))
        rows = ast.ListComp(
            elt=ast.Tuple(elts=[ast.parse(p, mode="eval").body for p in columns.probes], ctx=ast.Load()),
            generators=[loop],
        )
        self.probes.append(ast.unparse(rows))
        iteration = ast.ListComp(elt=_as_load(loop.target), generators=[loop])
        paired = ast.Call(
            func=ast.Name(id="zip", ctx=ast.Load()),
            args=[iteration, self._reference(len(self.probes) - 1)],
            keywords=[ast.keyword(arg="strict", value=ast.Constant(True))],
        )
        target = ast.Tuple(elts=[loop.target, ast.Name(id=ROW, ctx=ast.Store())], ctx=ast.Store())
        node.generators = [ast.comprehension(target=target, iter=paired, ifs=[], is_async=0)]  # type: ignore[attr-defined]
        return node

    def _probe(self, node: ast.AST, local: frozenset[str]) -> ast.AST | None:
        """The probe of an access chain (``f(x)``, ``s.pop()``, ``Solution().solve(x)``, ``obj.size``)
        rooted at a program name: up to its first call that is not a class's constructor (a
        capitalised name called bare), so what a later call or comparison holds stays out of the
        program's process; the whole chain when it calls nothing."""
        chain = [node]
        while isinstance(chain[-1], ast.Call | ast.Attribute | ast.Subscript):
            last = chain[-1]
            chain.append(last.func if isinstance(last, ast.Call) else last.value)  # type: ignore[attr-defined]
        root = chain[-1]
        if not (isinstance(root, ast.Name) and self.is_program(root.id, local)):
            return None
        for link in reversed(chain[:-1]):
            if isinstance(link, ast.Call):
                constructor = isinstance(link.func, ast.Name) and link.func.id[:1].isupper() and link is not node
                if not constructor:
                    return link
        return node

    def _replace(self, node: ast.AST, old: ast.AST, new: ast.AST, local: frozenset[str]) -> ast.AST:
        """``node`` with the chain link ``old`` replaced by ``new``; the rest of the chain cut too."""
        for name, value in ast.iter_fields(node):
            if value is old:
                setattr(node, name, new)
            elif isinstance(value, ast.AST):
                setattr(
                    node,
                    name,
                    self._replace(value, old, new, local) if _contains(value, old) else self.cut(value, local),
                )
            elif isinstance(value, list):
                setattr(
                    node,
                    name,
                    [
                        (self._replace(v, old, new, local) if _contains(v, old) else self.cut(v, local))
                        if isinstance(v, ast.AST)
                        else v
                        for v in value
                    ],
                )
        return node


def _as_load(target: ast.expr) -> ast.expr:
    """A loop target (``x``, ``(i, x)``) as the expression of its value."""
    return ast.parse(ast.unparse(target), mode="eval").body


def _contains(tree: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(tree))


def _modules(node: ast.AST, program: set[str], bound: set[str]) -> list[str]:
    """Standard modules an expression names without importing them (the program may have)."""
    return sorted(n for n in _loaded(node) if n in _STDLIB and n not in bound and n not in program)


def program_names(source: str) -> frozenset[str]:
    """What the program's top level defines (functions, classes, assignments, and imports of
    anything but a standard module): the names a test means as the program's."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {n for n in _stored(node) if n not in _STDLIB}
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            names |= _stored(node)
    return frozenset(names)


def split_test(code: str, defined: frozenset[str] = frozenset()) -> SplitTest:
    """Cut ``code`` (a Python test of top-level statements and asserts) for the child and the
    judge; ``defined``: :func:`program_names` of the program under test. Raises
    :class:`Unsplittable` naming what stops it."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise Unsplittable(f"the test does not parse: {exc}") from None
    program: set[str] = set()  # names bound from the program's values
    bound: set[str] = set()  # names bound by the test's own code
    split, probes, kinds = SplitTest(), 0, []
    for statement in tree.body:
        if isinstance(statement, ast.Assert):
            cutter = _Cutter(program, bound, probes, defined)
            check = cutter.cut(statement.test)
            for source in cutter.probes:
                expr = ast.parse(source, mode="eval").body
                split.child.append({"probe": source, "imports": _modules(expr, program, bound)})
            split.judge.append(
                {
                    "check": ast.unparse(check),
                    "first": probes,
                    "probes": len(cutter.probes),
                    "imports": _modules(check, program, bound),
                }
            )
            kinds.append(None)
            probes += len(cutter.probes)
        elif isinstance(statement, _STATEMENTS):
            cutter = _Cutter(program, bound, 0, defined)
            stored = _stored(statement)
            used = _loaded(statement) | (stored if isinstance(statement, ast.AugAssign) else set())
            source, imports = ast.unparse(statement), _modules(statement, program, bound)
            if any(cutter.is_program(name, frozenset()) for name in used):
                split.child.append({"run": source, "imports": imports})
                split.judge.append({"run": source, "imports": imports, "child": True, "judge": False})
                program |= stored
                bound -= stored
            else:
                split.judge.append({"run": source, "imports": imports, "child": False, "judge": True})
                bound |= stored
                program -= stored
            kinds.append(stored)
        else:
            raise Unsplittable(
                f"line {statement.lineno}: a {type(statement).__name__} statement; only imports, assignments, "
                "expressions and asserts at the top level can be checked outside the program"
            )
    _share_needed_statements(split, kinds)
    if not any("check" in step for step in split.judge):
        raise Unsplittable("the test asserts nothing")
    return split


def split_value(setup: str, expression: str, defined: frozenset[str] = frozenset()) -> SplitTest:
    """:func:`split_test` of ``setup`` then ``expression``, whose judge answers with the
    expression's value instead of a verdict (a ``{"value": ...}`` last step): the ``assert <expr>
    == <literal>`` tests compared outside the sandbox (``testcases.value_checks``)."""
    split = split_test(f"{setup}\nassert ({expression})", defined)
    split.judge[-1]["value"] = split.judge[-1].pop("check")
    return split


def _share_needed_statements(split: SplitTest, kinds: list[set[str] | None]) -> None:
    """A judge-side statement whose names a later child step reads runs in the program's process
    too (before it, in order); it is then answered by one message like the others."""
    needed: set[str] = set()
    child_index = len(split.child)
    inserts: list[tuple[int, dict[str, Any]]] = []
    for step, stored in zip(reversed(split.judge), reversed(kinds), strict=True):
        if "check" in step or "value" in step:
            probes = split.child[child_index - step["probes"] : child_index]
            child_index -= step["probes"]
            for probe in probes:
                needed |= _loaded(ast.parse(probe["probe"], mode="eval"))
        elif step["child"]:
            child_index -= 1
            needed |= _loaded(ast.parse(split.child[child_index]["run"]))
        elif stored and stored & needed:
            step["child"] = True
            inserts.append((child_index, {"run": step["run"], "imports": step["imports"]}))
            needed |= _loaded(ast.parse(step["run"]))
    for at, step in inserts:  # collected from the end, so earlier indices stay valid
        split.child.insert(at, step)


__all__ = ["PROBE", "ROW", "SplitTest", "Unsplittable", "program_names", "split_test", "split_value"]
