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
  call before a user turn or a tool result presented it as data; the episode records these) is
  not met, nor a ``db_field`` whose value is a guessed id (a ref field), nor a ``db_created``
  whose record links a guessed id: a write to an id the episode never revealed is luck, not
  skill, and a generator whose target ids follow a pattern would otherwise pay for learning the
  pattern. Ids are compared canonically (:func:`id_form`: blanks stripped, case folded), so
  ``" SHP-0003"`` is the same guess as ``SHP-0003``;
- with ``revealed`` (what the episode's tool results presented as data), an ``output`` whose value
  no tool result presented is not met: an answer cannot state a database value it never read.
  A value a content-free sign-off could contain (a bool, an enum member, a single word or a code
  of up to three characters: ``completed``, ``A``) must also be stated in context, within
  :data:`CONTEXT_CHARS` characters of a word of its field's name or of its entity's whole name
  ("status: completed", "the appointment is completed"); "I have completed your request." and
  "your request was approved" (for a refund request's status) state nothing;
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


def mentions(text: str, value: str, ignore_case: bool = False) -> bool:
    """Whether ``value`` occurs in ``text`` as a whole token (``SHP-0003`` is not in ``SHP-00031``)."""
    pattern = r"(?<![\w-])" + re.escape(value) + r"(?![\w-])"
    return re.search(pattern, text, re.IGNORECASE if ignore_case else 0) is not None


def id_form(value: Any) -> str:
    """The canonical form ids are compared in: blanks stripped (the tools strip them too) and case
    folded, so padding or recasing an id never turns a guess into something new."""
    return str(value).strip().casefold()


def revealed_forms(value: Any) -> set[str]:
    """The canonical forms (:func:`id_form`) under which a tool result's scalar ``value`` counts as
    presented to the agent: the value itself and each of its :func:`renderings`."""
    if value is None or isinstance(value, (dict, list)):
        return set()
    return {id_form(v) for v in [value, *renderings(value)] if str(v).strip()}


#: how near (in characters) a word of the field's or entity's name must stand to a value that
#: needs context (see :func:`needs_context`)
CONTEXT_CHARS = 40
#: a single word as prose writes it (``completed``, ``Lisbon``), not an upper-case code (``CFPWFG``)
_CONTENT_WORD = re.compile(r"^[A-Za-z][a-z]*$")


def needs_context(item: dict[str, Any], spec: Any) -> bool:
    """Whether an output's value is one a content-free answer could contain by chance: a bool, an
    enum member, a single word as prose writes it, or a string of at most three characters."""
    value = item.get("value")
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)) or value is None:
        return False
    field = _field_of(spec, item.get("name", ""))
    s = str(value).strip()
    return (field is not None and field.type == "enum") or len(s) <= 3 or bool(_CONTENT_WORD.match(s))


def context_words(item: dict[str, Any], spec: Any) -> list[str]:
    """The words of the output's field name (three characters or more) and its tool's entity name
    as a whole (``refund request``, not ``request``: a sign-off says "your request")."""
    tool, _, field = str(item.get("name", "")).partition(".")
    td = getattr(spec, "tools", {}).get(tool)
    words = [w for w in field.split("_") if len(w) >= 3 and w.isalnum() and not w.isdigit()]
    if td is not None:
        words.append(td.entity.replace("_", " "))
    return list(dict.fromkeys(w.lower() for w in words))


def _said_in_context(answer: str, forms: list[str], words: list[str]) -> bool:
    """Some occurrence of one of ``forms`` has one of ``words`` (as a word start) within
    :data:`CONTEXT_CHARS` characters of it."""
    low = answer.lower()
    near = re.compile(r"(?<![a-z])(?:" + "|".join(re.escape(w) for w in words) + ")")
    for form in forms:
        if not str(form).strip():
            continue
        for m in re.finditer(r"(?<![\w.])" + re.escape(form.lower()) + r"(?![\w]|\.\d)", low):
            before = low[max(0, m.start() - CONTEXT_CHARS) : m.start()]
            after = low[m.end() : m.end() + CONTEXT_CHARS]
            if near.search(before) or near.search(after):
                return True
    return False


def stated_output(item: dict[str, Any], spec: Any) -> str:
    """How a final answer states an output item clearly: its first rendering, after its field's
    name when the value needs context (``status: completed``)."""
    text = str((item.get("renderings") or renderings(item.get("value")) or [item.get("value")])[0])
    if needs_context(item, spec):
        _, _, field = str(item.get("name", "")).partition(".")
        if field:
            return f"{field.replace('_', ' ')}: {text}"
    return text


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
    view: DBView,
    rubric: list[dict[str, Any]],
    final_answer: str = "",
    guessed: set[str] | None = None,
    revealed: set[str] | None = None,
) -> Outcome:
    """Check every rubric item against the episode's final state and answer (``guessed``: the
    argument values the agent used before it was shown them; ``revealed``: the :func:`id_form` of
    every value the episode's tool results presented, None to skip that check)."""
    guessed = {id_form(g) for g in guessed or ()}
    spec = view.base.spec

    def ref_fields(entity: str) -> set[str]:
        ent = spec.entities.get(entity)
        return {f for f, fs in ent.fields.items() if fs.type == "ref"} if ent is not None else set()

    def is_guessed(value: Any) -> bool:
        return isinstance(value, str) and id_form(value) in guessed

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
            ok = ok and not is_guessed(item["key"])
            ok = ok and not (item["field"] in ref_fields(item["entity"]) and is_guessed(item["value"]))
            allowed_fields.add((item["entity"], item["key"], item["field"]))
            name += f":{item['entity']}.{item['key']}.{item['field']}"
        elif kind == "db_created":
            hits = [
                (k, rec)
                for k, rec in created.get(item["entity"], [])
                if all(_same(rec.get(f), v) for f, v in item["fields"].items())
            ]
            refs = ref_fields(item["entity"])
            ok = len(hits) == 1 and not any(is_guessed(hits[0][1].get(f)) for f in refs)
            hits = [k for k, _ in hits]
            claimed |= {(item["entity"], k) for k in hits[:1]}
            name += f":{item['entity']}"
        elif kind == "db_deleted":
            ok = view.get(item["entity"], item["key"]) is None and not is_guessed(item["key"])
            allowed_deleted.add((item["entity"], item["key"]))
            name += f":{item['entity']}.{item['key']}"
        elif kind == "output":
            forms = [f for f in (item.get("renderings") or renderings(item["value"])) if str(f).strip()]
            ok = bool(forms) and bool(renderings(item.get("value"))) and _said(final_answer, forms)
            if ok and revealed is not None:
                ok = bool(revealed_forms(item.get("value")) & revealed)
            if ok and needs_context(item, spec) and (words := context_words(item, spec)):
                ok = _said_in_context(final_answer, forms, words)
            if ok:
                others = list(outputs)
                others.remove(item.get("value"))
                ok = not rivals_stated(final_answer, item, spec, others)
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
