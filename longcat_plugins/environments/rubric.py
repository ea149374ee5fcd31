"""Rubric evaluation (R5, report §3.1.1): final database state + required outputs, any tool chain.

A rubric is a list of items, each checked on its own (score = fraction met):

- ``db_field``: record ``key`` of ``entity`` has ``field == value`` at the end;
- ``db_created``: exactly one new ``entity`` record has all of ``fields``;
- ``db_deleted``: record ``key`` of ``entity`` is gone;
- ``output``: the final answer states ``value`` (any of its ``renderings``, as a whole token); an
  empty value (``""``, whitespace, ``None``) has no rendering, so it is never met: a required output
  must be something an answer can be checked against, not a pattern every answer contains;
- ``no_collateral``: nothing else in the database changed (no wrong record cancelled, no stray create).

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


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) < 1e-6
    return a == b


def evaluate(view: DBView, rubric: list[dict[str, Any]], final_answer: str = "") -> Outcome:
    """Check every rubric item against the episode's final state and answer."""
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
    allowed_fields: set[tuple[str, str, str]] = set()
    allowed_deleted: set[tuple[str, str]] = set()
    claimed: set[tuple[str, str]] = set()
    for i, item in enumerate(rubric):
        kind = item["kind"]
        name = f"{i}:{kind}"
        if kind == "db_field":
            rec = view.get(item["entity"], item["key"])
            ok = rec is not None and _same(rec.get(item["field"]), item["value"])
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
            ok = view.get(item["entity"], item["key"]) is None
            allowed_deleted.add((item["entity"], item["key"]))
            name += f":{item['entity']}.{item['key']}"
        elif kind == "output":
            forms = [f for f in (item.get("renderings") or renderings(item["value"])) if str(f).strip()]
            ok = bool(forms) and bool(renderings(item.get("value"))) and _said(final_answer, forms)
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
        ok = not stray
        details[f"{i}:no_collateral"] = ok
        if stray:
            notes["stray_changes"] = stray[:5]
        met += ok
    total = len(rubric)
    score = met / total if total else 0.0
    return Outcome(success=total > 0 and met == total, score=score, details=details, notes=notes)
