"""The script the sandbox runs for call-based and assert-based Python tests (copied into each
run directory and started as ``python -I -S -B harness.py SOLUTION FN_NAME CASES``, with the
judge's part of the checks on stdin). Standalone: it imports nothing of this package.

Two processes, so that no result can be forged by the program:

- the **judge** (this process) makes itself non-dumpable (a process of the same uid can then
  neither open its file descriptors through ``/proc`` nor trace it), forks, reads its checks
  (only after the fork: the child's copy of its memory never holds them), and is the only
  writer of the result lines on stdout. It never runs the program's code.
- the **child** closes stdin and the result channel, points its stdout at stderr, loads the
  program and answers each step of ``CASES`` with one message on a pipe: a call's value, an
  assert's probe value (as plain data: :func:`plain`), or that a statement ran.

The judge relays a call's value (compared outside the sandbox), and evaluates an assert's check
on the probe values in its own clean namespace. A child that lies on the pipe only gives values,
which is what any program can return; one that dies or hangs leaves its cases unanswered.
"""

from __future__ import annotations

# bisect, functools, heapq, itertools, math, re and string are loaded before the fork so that a
# program importing them finds them ready, as it always has (hence the unused imports)
import bisect  # noqa: F401
import builtins
import collections
import fractions
import functools  # noqa: F401
import heapq  # noqa: F401
import importlib
import itertools  # noqa: F401
import json
import math  # noqa: F401
import os
import re  # noqa: F401
import string  # noqa: F401
import sys
import types
from decimal import Decimal
from typing import Any

#: the longest message the child may send for one step
MAX_MESSAGE = 16 << 20
#: the most items a generator or an iterator probe is read to
MAX_ITEMS = 100_000
_ITERATORS = (
    types.GeneratorType,
    map,
    filter,
    zip,
    enumerate,
    reversed,
    type(iter([])),
    type(iter(())),
    type(iter(range(0))),
    type(iter("")),
)


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON with tags, read through the base types' own slots: an instance of a
    subclass of ``int``, ``str``, ``list``, ``dict``... is sent as its base value, so nothing it
    overrides (``__eq__``, ``__iter__``, ``__len__``) reaches the judge. Raises ``TypeError`` for
    anything else (the program's own classes, functions, modules)."""
    if depth > 64:
        raise ValueError("a value nested more than 64 deep")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int):
        return int.__add__(value, 0)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, complex):
        return {"$": "complex", "v": [complex.real.__get__(value), complex.imag.__get__(value)]}
    if isinstance(value, bytes | bytearray):
        return {"$": "bytes", "v": bytes.hex(bytes(memoryview(value)))}
    if isinstance(value, list):
        return [plain(x, depth + 1) for x in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"$": "tuple", "v": [plain(x, depth + 1) for x in tuple.__iter__(value)]}
    if isinstance(value, dict):
        return {"$": "dict", "v": [[plain(k, depth + 1), plain(v, depth + 1)] for k, v in dict.items(value)]}
    if isinstance(value, frozenset):
        return {"$": "frozenset", "v": [plain(x, depth + 1) for x in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"$": "set", "v": [plain(x, depth + 1) for x in set.__iter__(value)]}
    if isinstance(value, collections.deque):
        return {"$": "deque", "v": [plain(x, depth + 1) for x in collections.deque.__iter__(value)]}
    if type(value) is range:
        return {"$": "range", "v": [value.start, value.stop, value.step]}
    if type(value) is fractions.Fraction:
        return {"$": "fraction", "v": str(value)}
    if type(value) is Decimal:
        return {"$": "decimal", "v": str(value)}
    if type(value) in _ITERATORS:
        items = []
        for item in value:
            if len(items) == MAX_ITEMS:
                raise ValueError(f"an iterator longer than {MAX_ITEMS} items")
            items.append(plain(item, depth + 1))
        return {"$": "iter", "v": items}
    raise TypeError(f"a {type(value).__name__} is not plain data (numbers, strings, containers of them)")


def unplain(data: Any, depth: int = 0) -> Any:
    """The judge's inverse of :func:`plain`; anything it did not write is refused."""
    if depth > 66:
        raise ValueError("a value nested too deep")
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if isinstance(data, list):
        return [unplain(x, depth + 1) for x in data]
    if not (isinstance(data, dict) and set(data) == {"$", "v"}):
        raise ValueError("a malformed value")
    tag, v = data["$"], data["v"]
    if tag == "complex":
        return complex(float(v[0]), float(v[1]))
    if tag == "bytes":
        return bytes.fromhex(v)
    if tag == "range":
        return range(int(v[0]), int(v[1]), int(v[2]))
    if tag == "fraction":
        return fractions.Fraction(str(v))
    if tag == "decimal":
        return Decimal(str(v))
    items = [unplain(x, depth + 1) for x in v]
    if tag == "tuple":
        return tuple(items)
    if tag == "dict":
        return {k: x for k, x in items}
    if tag in ("set", "frozenset"):
        return (set if tag == "set" else frozenset)(items)
    if tag == "deque":
        return collections.deque(items)
    if tag == "iter":
        return iter(items)
    raise ValueError(f"an unknown value tag {tag!r}")


def _import_missing(names: list[str], namespace: dict[str, Any]) -> None:
    for name in names:
        if name not in namespace:
            namespace[name] = importlib.import_module(name)


def _error(exc: BaseException) -> dict[str, Any]:
    return {"ok": False, "error": (type(exc).__name__ + ": " + str(exc))[:300]}


def child(solution: str, fn_name: str, cases: list[Any], channel: Any) -> None:
    """Load the program, then answer every step of ``cases`` in order, one line each."""

    def send(message: dict[str, Any]) -> None:
        try:
            line = json.dumps(message)
        except (TypeError, ValueError):
            line = json.dumps({"ok": True, "value": repr(message.get("value"))})
        channel.write(line + "\n")
        channel.flush()

    ns: dict[str, Any] = {"__name__": "solution"}
    exec(compile(open(solution).read(), "solution.py", "exec"), ns)
    for case in cases:
        if isinstance(case, dict) and "split" in case:
            for step in case["split"]:
                try:
                    _import_missing(step.get("imports", []), ns)
                    if "run" in step:
                        exec(compile(step["run"], "<test>", "exec"), ns)
                        send({"ok": True, "value": None})
                    else:
                        send({"ok": True, "value": plain(eval(compile(step["probe"], "<test>", "eval"), ns))})
                except BaseException as exc:  # noqa: BLE001 - the program's failure is its verdict
                    send(_error(exc))
            continue
        try:  # a call-based case: its arguments
            fn = ns.get(fn_name) or getattr(ns["Solution"](), fn_name)
            value = fn(*case)
            if isinstance(value, tuple):
                value = list(value)
            send({"ok": True, "value": value})
        except BaseException as exc:  # noqa: BLE001
            send(_error(exc))


def judge_split(steps: list[dict[str, Any]], messages: Any) -> dict[str, Any]:
    """One split assert test: the child's answers to its steps, checked here (or, for a
    ``value`` step, the expression's value, which the reward compares outside the sandbox)."""
    namespace: dict[str, Any] = {"__builtins__": builtins, "__name__": "test"}
    failure: dict[str, Any] | None = None
    value: Any = None
    for step in steps:
        if "check" in step or "value" in step:
            values = [next(messages) for _ in range(step["probes"])]
            if failure is not None:
                continue
            bad = next((m for m in values if not m.get("ok")), None)
            if bad is not None:
                failure = {"ok": False, "error": str(bad.get("error", ""))[:300]}
                continue
            try:
                for i, message in enumerate(values):
                    namespace[f"__lc_probe_{step['first'] + i}"] = unplain(message.get("value"))
                _import_missing(step.get("imports", []), namespace)
                if "value" in step:
                    value = eval(compile(step["value"], "<test>", "eval"), namespace)
                elif not eval(compile(step["check"], "<test>", "eval"), namespace):
                    failure = {"ok": False, "error": f"AssertionError: {step['check'][:200]}"}
            except Exception as exc:  # noqa: BLE001 - a check that cannot run is a failure
                failure = _error(exc)
            continue
        answer = next(messages) if step["child"] else {"ok": True}
        if failure is not None:
            continue
        if not answer.get("ok"):
            failure = {"ok": False, "error": str(answer.get("error", ""))[:300]}
        elif step["judge"]:
            try:
                _import_missing(step.get("imports", []), namespace)
                exec(compile(step["run"], "<test>", "exec"), namespace)
            except Exception as exc:  # noqa: BLE001
                failure = _error(exc)
    if failure is not None:
        return failure
    return {"ok": True, "value": list(value) if isinstance(value, tuple) else value}


def _messages(pipe: Any) -> Any:
    """The child's messages, parsed; a malformed or oversized one ends the stream."""
    while True:
        line = pipe.readline(MAX_MESSAGE + 1)
        if not line or len(line) > MAX_MESSAGE or not line.endswith(b"\n"):
            return
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        yield message


def _nondumpable() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE, 0
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def main() -> None:
    solution, fn_name, cases_path = sys.argv[1:4]
    cases = [json.loads(line) for line in open(cases_path)]
    _nondumpable()
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.close(results.fileno())
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            child(solution, fn_name, cases, os.fdopen(write_end, "w"))
        finally:
            os._exit(0)
    os.close(write_end)
    # read only now: a fork carries the parent's memory, so the checks (and the expectations in
    # them) must not be in it when the child starts; the child's stdin is /dev/null
    judged = json.loads(sys.stdin.read() or "{}")  # case index -> the judge's steps of a split test
    messages = _messages(os.fdopen(read_end, "rb"))
    for index, case in enumerate(cases):
        if isinstance(case, dict) and "split" in case:
            try:
                out = judge_split(judged[str(index)], messages)
            except StopIteration:
                break  # the child stopped answering: the rest of the cases are unanswered
        else:
            out = next(messages, None)
            if out is None:
                break
        try:
            line = json.dumps(out)
        except (TypeError, ValueError):  # a value JSON cannot hold (a set): its repr, as ever
            line = json.dumps({"ok": bool(out.get("ok")), "value": repr(out.get("value"))})
        results.write("\x00LCRES" + line + "\n")
        results.flush()
    try:
        os.kill(pid, 9)  # every answer is in: a child still running has nothing left to say
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
