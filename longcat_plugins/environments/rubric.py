"""Rubric evaluation (R5, report §3.1.1): final database state + required outputs, any tool chain.

A rubric is a list of items, each checked on its own (score = fraction met):

- ``db_field``: record ``key`` of ``entity`` has ``field == value`` at the end;
- ``db_created``: exactly one new ``entity`` record has all of ``fields``;
- ``db_deleted``: record ``key`` of ``entity`` is gone;
- ``output``: the final answer states ``value`` (any of its ``renderings``, as a whole token) and
  no rival of it (:func:`rivals_stated`): an answer that lists every status an enum allows, both
  yes and no, or a run of numbers states nothing, so hedging is never credited. An empty value
  (``""``, whitespace, ``None``) has no rendering, so it is never met: a required output must be
  something an answer can be checked against, not a pattern every answer contains;
- a ``db_field`` or ``db_deleted`` item on a record whose key the agent *guessed* (used in a tool
  call before any message or tool result it was shown contained it; the episode records these)
  is not met: a write to an id the episode never revealed is luck, not skill, and a generator
  whose target ids follow a pattern would otherwise pay for learning the pattern;
- ``no_collateral``: nothing else in the database changed (no wrong record cancelled, no stray
  create), *and* some other item was met: doing nothing changes nothing, and earns nothing.

``Outcome.details`` maps ``index:kind[:what]`` to a bool per item; ``Outcome.notes`` holds
``stray_changes`` (a list) when ``no_collateral`` failed. Nothing names an action sequence, so any chain of calls that reaches the same state passes.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from longcat_plugins.environments.contract import Outcome
from longcat_plugins.environments.domain import DBView, Record


def renderings(value: Any) -> list[str]:
    """The ways a final answer may state ``value``: dates ISO or MM/DD/YYYY, money with or without cents.

    Empty for an empty value: nothing an answer says can state "nothing"."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    if isinstance(value, bool):
        return ["yes", "true"] if value else ["no", "false"]
    if isinstance(value, float):
        out = [f"{value:.2f}", str(value)]
        if value.is_integer():
            out.append(str(int(value)))
        return list(dict.fromkeys(out))
    s = str(value)
    try:
        d = _dt.date.fromisoformat(s)
        return [s, f"{d.month:02d}/{d.day:02d}/{d.year}"]
    except ValueError:
        return [s]


def _said(answer: str, forms: list[str]) -> bool:
    low = answer.lower()
    for form in forms:
        if not str(form).strip():
            continue  # an empty form would match every answer
        if re.search(r"(?<![\w.])" + re.escape(form.lower()) + r"(?![\w]|\.\d)", low):
            return True
    return False


#: a number standing on its own: not part of an id (``ORD-0012``), a date, a time or a word
_NUMBER = re.compile(r"(?<![\w.\-/:])\d+(?:\.\d+)?(?![\w\-/:]|\.\d)")


def string_values(arguments: Any) -> list[str]:
    """Every string among a tool call's argument values (nested lists and objects included)."""
    if isinstance(arguments, str):
        return [arguments] if arguments.strip() else []
    if isinstance(arguments, dict):
        return [v for x in arguments.values() for v in string_values(x)]
    if isinstance(arguments, list | tuple):
        return [v for x in arguments for v in string_values(x)]
    return []


def mentions(text: str, value: str) -> bool:
    """Whether ``value`` occurs in ``text`` as a whole token (``SHP-0003`` is not in ``SHP-00031``)."""
    return re.search(r"(?<![\w-])" + re.escape(value) + r"(?![\w-])", text) is not None


def _field_of(spec: Any, name: str) -> Any:
    """The entity field an output item ``tool.field`` reports, if the domain spec has one."""
    tool, _, field = str(name).partition(".")
    td = getattr(spec, "tools", {}).get(tool)
    if td is None or td.entity not in spec.entities:
        return None
    return spec.entities[td.entity].fields.get(field)


def rivals_stated(answer: str, item: dict[str, Any], spec: Any, others: list[Any]) -> bool:
    """Whether ``answer`` also states a value the item's value competes with, so that it does not
    clearly answer: the other members of its enum, the opposite of a bool, or another number (for an
    integer, another integer; for a decimal, any other number). Values that other
    output items of the task ask for are never rivals (a two-output task states both)."""
    value = item.get("value")
    if isinstance(value, bool):
        return _said(answer, renderings(not value))
    if isinstance(value, (int, float)):
        taken = [float(v) for v in [value, *others] if isinstance(v, (int, float)) and not isinstance(v, bool)]
        for token in _NUMBER.findall(answer):
            if isinstance(value, int) and "." in token:
                continue  # a count competes with counts, not with prices
            if not any(abs(float(token) - t) < 1e-6 for t in taken):
                return True
        return False
    field = _field_of(spec, item.get("name", ""))
    if field is not None and field.type == "enum":
        excluded = {str(v) for v in [value, *others]}
        forms = [r for v in field.values if str(v) not in excluded for r in renderings(v)]
        return _said(answer, forms)
    return False


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) < 1e-6
    return a == b


def evaluate(
    view: DBView, rubric: list[dict[str, Any]], final_answer: str = "", guessed: set[str] | None = None
) -> Outcome:
    """Check every rubric item against the episode's final state and answer (``guessed``: the
    argument values the agent used before it was shown them)."""
    guessed = guessed or set()
    details: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    met = 0
    changes = view.changes()
    base = view.base.tables
    created: dict[str, list[tuple[str, Record]]] = {}
    for ent, recs in changes.items():
        for k, rec in recs.items():
            if k not in base[ent] and rec is not None:
                created.setdefault(ent, []).append((k, rec))
    outputs = [item.get("value") for item in rubric if item["kind"] == "output"]
    allowed_fields: set[tuple[str, str, str]] = set()
    allowed_deleted: set[tuple[str, str]] = set()
    claimed: set[tuple[str, str]] = set()
    for i, item in enumerate(rubric):
        kind = item["kind"]
        name = f"{i}:{kind}"
        if kind == "db_field":
            rec = view.get(item["entity"], item["key"])
            ok = rec is not None and _same(rec.get(item["field"]), item["value"])
            ok = ok and str(item["key"]) not in guessed
            allowed_fields.add((item["entity"], item["key"], item["field"]))
            name += f":{item['entity']}.{item['key']}.{item['field']}"
        elif kind == "db_created":
            hits = [
                k
                for k, rec in created.get(item["entity"], [])
                if all(_same(rec.get(f), v) for f, v in item["fields"].items())
            ]
            ok = len(hits) == 1
            claimed |= {(item["entity"], k) for k in hits[:1]}
            name += f":{item['entity']}"
        elif kind == "db_deleted":
            ok = view.get(item["entity"], item["key"]) is None and str(item["key"]) not in guessed
            allowed_deleted.add((item["entity"], item["key"]))
            name += f":{item['entity']}.{item['key']}"
        elif kind == "output":
            forms = [f for f in (item.get("renderings") or renderings(item["value"])) if str(f).strip()]
            ok = bool(forms) and bool(renderings(item.get("value"))) and _said(final_answer, forms)
            if ok:
                others = list(outputs)
                others.remove(item.get("value"))
                ok = not rivals_stated(final_answer, item, view.base.spec, others)
            name += f":{item.get('name', '')}"
        elif kind == "no_collateral":
            continue
        else:
            ok = False
        details[name] = bool(ok)
        met += bool(ok)
    for i, item in enumerate(rubric):
        if item["kind"] != "no_collateral":
            continue
        stray: list[str] = []
        for ent, recs in changes.items():
            for k, rec in recs.items():
                if k in base[ent]:
                    if rec is None:
                        if (ent, k) not in allowed_deleted:
                            stray.append(f"deleted {ent} {k}")
                        continue
                    old = base[ent][k]
                    for f in sorted(set(old) | set(rec)):
                        if not _same(old.get(f), rec.get(f)) and (ent, k, f) not in allowed_fields:
                            stray.append(f"changed {ent} {k}.{f}")
                elif rec is not None and (ent, k) not in claimed:
                    stray.append(f"created {ent} {k}")
        ok = not stray and met > 0  # met: the other items so far (no_collateral items come last)
        details[f"{i}:no_collateral"] = ok
        if stray:
            notes["stray_changes"] = stray[:5]
        met += ok
    total = len(rubric)
    score = met / total if total else 0.0
    return Outcome(success=total > 0 and met == total, score=score, details=details, notes=notes)
