"""A domain made executable: the copy-on-write database and the tools generated from the spec.

:class:`BaseDB` is one environment's initial state, shared read-only by every episode and indexed once
(unique fields, ref children, searchable values). :class:`DBView` is one episode's state: an overlay of
changed, created and deleted records over the base, so an episode costs a few hundred bytes until it
writes, and 32k of them fit in one process. :class:`Toolkit` turns each :class:`ToolDef` into a
function ``(view, args, page_size) -> (ok, payload)`` that checks its arguments and preconditions and
never raises on bad input.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Iterator
from typing import Any

from longcat_plugins.environments.spec import DomainSpec, EntitySpec, FieldSpec, Rule, ToolDef

Record = dict[str, Any]
Tables = dict[str, dict[str, Record]]
ToolFn = Callable[["DBView", dict[str, Any], int], tuple[bool, Any]]
_DELETED = None


class BaseDB:
    """The shared initial state of one environment, with the indices the tools look things up by."""

    def __init__(self, spec: DomainSpec, tables: Tables) -> None:
        self.spec = spec
        self.tables: Tables = {e: dict(tables.get(e, {})) for e in spec.entities}
        self.index: dict[tuple[str, str], dict[Any, list[str]]] = {}
        for ename, ent in spec.entities.items():
            for fname, f in ent.fields.items():
                if f.type in ("ref", "enum", "city", "word") or f.unique:
                    idx: dict[Any, list[str]] = {}
                    for key, rec in self.tables[ename].items():
                        idx.setdefault(rec.get(fname), []).append(key)
                    self.index[(ename, fname)] = idx
        self.next_id = {e: _max_serial(t) + 1 for e, t in self.tables.items()}


def _max_serial(table: dict[str, Record]) -> int:
    best = 0
    for key in table:
        m = re.search(r"(\d+)$", key)
        if m:
            best = max(best, int(m.group(1)))
    return best


class DBView:
    """One episode's database: reads fall through to the base; writes land in a private overlay."""

    __slots__ = ("base", "overlay", "created")

    def __init__(self, base: BaseDB) -> None:
        self.base = base
        self.overlay: dict[str, dict[str, Record | None]] | None = None
        self.created: dict[str, int] | None = None

    def get(self, entity: str, key: str) -> Record | None:
        if self.overlay is not None:
            ov = self.overlay.get(entity)
            if ov is not None and key in ov:
                return ov[key]
        return self.base.tables[entity].get(key)

    def put(self, entity: str, key: str, record: Record) -> None:
        if self.overlay is None:
            self.overlay = {}
        self.overlay.setdefault(entity, {})[key] = record

    def delete(self, entity: str, key: str) -> None:
        if self.overlay is None:
            self.overlay = {}
        self.overlay.setdefault(entity, {})[key] = _DELETED

    def new_key(self, entity: str) -> str:
        if self.created is None:
            self.created = {}
        n = self.base.next_id[entity] + self.created.get(entity, 0)
        self.created[entity] = self.created.get(entity, 0) + 1
        return f"{self.base.spec.entities[entity].prefix}-{n:04d}"

    def where(self, entity: str, field: str, value: Any) -> list[str]:
        """Keys of live records whose ``field`` equals ``value``, base order then new records."""
        idx = self.base.index.get((entity, field))
        if idx is not None:
            cand = idx.get(value, [])
        else:
            cand = [k for k, r in self.base.tables[entity].items() if r.get(field) == value]
        if self.overlay is None or entity not in self.overlay:
            return list(cand)
        ov = self.overlay[entity]
        out = [k for k in cand if k not in ov]
        for k, rec in ov.items():
            if rec is not None and rec.get(field) == value:
                out.append(k)
        return sorted(out)

    def keys(self, entity: str) -> Iterator[str]:
        ov = self.overlay.get(entity, {}) if self.overlay else {}
        for k in self.base.tables[entity]:
            if ov.get(k, 1) is not None:
                yield k
        for k, rec in ov.items():
            if k not in self.base.tables[entity] and rec is not None:
                yield k

    def changes(self) -> dict[str, dict[str, Record | None]]:
        """Every record this episode changed, created (new key) or deleted (None)."""
        return {e: dict(v) for e, v in (self.overlay or {}).items()}


# -- argument parsing -----------------------------------------------------------------------------

_DATE_US = re.compile(r"^(\d{1,2})/(\d{1,2})/(\d{4})$")


def normalize_date(value: str) -> str | None:
    """ISO ``YYYY-MM-DD`` from ISO or ``MM/DD/YYYY`` (the format tool noise may show); None if neither."""
    s = value.strip()
    m = _DATE_US.match(s)
    try:
        if m:
            return _dt.date(int(m.group(3)), int(m.group(1)), int(m.group(2))).isoformat()
        return _dt.date.fromisoformat(s).isoformat()
    except ValueError:
        return None


def coerce(f: FieldSpec, value: Any, name: str) -> tuple[bool, Any]:
    """The argument as the field's type, or (False, message)."""
    t = f.type
    if t == "int":
        if isinstance(value, bool):
            return False, f"{name} must be an integer"
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return True, int(value.strip())
        return False, f"{name} must be an integer"
    if t == "money":
        try:
            return True, round(float(value), 2)
        except (TypeError, ValueError):
            return False, f"{name} must be a number"
    if t == "bool":
        if isinstance(value, bool):
            return True, value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return True, value.lower() == "true"
        return False, f"{name} must be true or false"
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return False, f"{name} must be a string"
    s = str(value).strip()
    if t == "enum":
        if s in f.values:
            return True, s
        low = {str(v).lower(): v for v in f.values}
        if s.lower() in low:
            return True, low[s.lower()]
        return False, f"{name} must be one of {list(f.values)}"
    if t == "date":
        d = normalize_date(s)
        return (True, d) if d else (False, f"{name} must be a date YYYY-MM-DD")
    if t in ("email", "code", "ref"):
        return True, s
    return True, s


class Toolkit:
    """Executable tools generated from a :class:`DomainSpec`, one closure per :class:`ToolDef`."""

    def __init__(self, spec: DomainSpec) -> None:
        self.spec = spec
        self.fns: dict[str, ToolFn] = {name: _compile(spec, t) for name, t in spec.tools.items()}

    def call(self, view: DBView, name: str, args: Any, page_size: int = 50) -> tuple[bool, Any]:
        fn = self.fns.get(name)
        if fn is None:
            return False, {"error": f"unknown tool {name!r}"}
        if not isinstance(args, dict):
            return False, {"error": "arguments must be a JSON object"}
        return fn(view, args, page_size)


def _parse_args(t: ToolDef, args: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    known = {p.name for p in t.params}
    extra = sorted(k for k in args if k not in known)
    if extra:
        return {}, f"unexpected argument(s) {extra}; {t.name} takes {sorted(known)}"
    out: dict[str, Any] = {}
    for p in t.params:
        if p.name not in args or args[p.name] is None:
            if p.required:
                return {}, f"missing required argument {p.name!r}"
            continue
        ok, v = coerce(p.field, args[p.name], p.name)
        if not ok:
            return {}, str(v)
        out[p.name] = v
    return out, None


def _page(items: list[Record], page: int, size: int) -> dict[str, Any]:
    start = (page - 1) * size
    chunk = items[start : start + size]
    return {"items": chunk, "page": page, "more_available": start + size < len(items)}


def path_value(spec: DomainSpec, view: DBView, entity: str, rec: Record, path: str) -> tuple[bool, Any]:
    """The value at ``field`` or ``ref_field.field...`` from ``rec`` (following refs in ``view``);
    (False, None) when a referenced record does not exist."""
    parts = path.split(".")
    cur_e, cur = entity, rec
    for part in parts[:-1]:
        ref_e = spec.entities[cur_e].fields[part].entity
        nxt = view.get(ref_e, cur.get(part))
        if nxt is None:
            return False, None
        cur_e, cur = ref_e, nxt
    return True, cur.get(parts[-1])


def check_conditions(
    spec: DomainSpec,
    view: DBView,
    ent: EntitySpec,
    rec: Record,
    when: dict[str, tuple[Any, ...]],
    when_any: tuple[dict[str, tuple[Any, ...]], ...] = (),
) -> str | None:
    """Why ``rec`` fails a tool's precondition (``when`` all hold, and one ``when_any``
    alternative holds), or None."""

    def fails(conds: dict[str, tuple[Any, ...]]) -> str | None:
        for path, allowed in conds.items():
            found, v = path_value(spec, view, ent.name, rec, path)
            if not found:
                return f"{ent.name} {path}: the related record does not exist"
            if v not in allowed:
                return f"{ent.name} {path} is {v!r}, must be one of {list(allowed)}"
        return None

    err = fails(when)
    if err:
        return f"precondition failed: {err}"
    if when_any:
        errs = [fails(alt) for alt in when_any]
        if all(errs):
            return "precondition failed: none of the alternatives holds (" + "; or ".join(str(e) for e in errs) + ")"
    return None


def rule_violations(spec: DomainSpec, tables: Tables) -> list[tuple[Rule, str, str]]:
    """(rule, record key, why) for every record that breaks a declared cross-record rule
    (:meth:`DomainSpec.rules`): it is in a transition's ``to`` state without meeting the
    transition's conditions on related records."""
    rules = spec.rules()
    if not rules:
        return []
    view = DBView(BaseDB(spec, tables))
    out = []
    for r in rules:
        ent = spec.entities[r.entity]
        for k, rec in tables[r.entity].items():
            if rec.get(r.field) == r.to:
                why = check_conditions(spec, view, ent, rec, r.when, r.when_any)
                if why:
                    out.append((r, k, why))
    return out


def _compile(spec: DomainSpec, t: ToolDef) -> ToolFn:  # noqa: C901 - one branch per op, each short
    ent = spec.entities[t.entity]
    e, key, label = t.entity, ent.key, ent.label

    def fetch(view: DBView, a: dict[str, Any]) -> tuple[Record | None, str | None]:
        rec = view.get(e, a[key])
        return rec, (None if rec is not None else f"no {e} with {key} {a[key]!r}")

    def check_refs(view: DBView, a: dict[str, Any]) -> str | None:
        """Every ref-valued argument names an existing record that meets its ``require``."""
        for x, ref_e in t.ref_args.items():
            owner = spec.entities[ref_e]
            rec = view.get(ref_e, a[x])
            if rec is None:
                return f"no {ref_e} with {owner.key} {a[x]!r}"
            err = check_conditions(spec, view, owner, rec, t.require.get(x, {}))
            if err:
                return err
        return None

    def clash(view: DBView, new: Record, own: str) -> str | None:
        """Another record already has this record's values of a ``unique_together`` group."""
        for group in ent.unique_together:
            same = [k for k in view.where(e, group[0], new.get(group[0])) if k != own]
            if any(all((view.get(e, k) or {}).get(g) == new.get(g) for g in group) for k in same):
                return f"another {e} already has this {' and '.join(group)}"
        return None

    def brief(view: DBView, k: str) -> Record:
        rec = view.get(e, k) or {}
        return {key: k, label: rec.get(label)}

    def parsed(op: ToolFn) -> ToolFn:
        """The tool: its arguments checked and parsed (an error response if they are bad), then ``op``."""

        def tool(view: DBView, args: dict[str, Any], page_size: int) -> tuple[bool, Any]:
            a, err = _parse_args(t, args)
            if err:
                return False, {"error": err}
            return op(view, a, page_size)

        return tool

    def missing_parent(view: DBView, a: dict[str, Any]) -> str | None:
        """The record ``t.by`` names in its parent entity does not exist (``list`` and ``count``)."""
        parent = spec.entities[ent.fields[t.by].entity]
        if view.get(parent.name, a[t.by]) is None:
            return f"no {parent.name} with {parent.key} {a[t.by]!r}"
        return None

    if t.op == "find":

        def find(view: DBView, a: dict[str, Any], page_size: int) -> tuple[bool, Any]:
            keys = view.where(e, t.by, a[t.by])
            for other in t.lookup[1:]:  # a two-key lookup: every key must match
                keys = [k for k in keys if (view.get(e, k) or {}).get(other) == a[other]]
            if not keys:
                what = " and ".join(f"{x} {a[x]!r}" for x in t.lookup)
                return False, {"error": f"no {e} with {what}"}
            return True, brief(view, keys[0])

        return parsed(find)
    if t.op in ("search", "list"):

        def listing(view: DBView, a: dict[str, Any], page_size: int) -> tuple[bool, Any]:
            err = missing_parent(view, a) if t.op == "list" else None
            if err:
                return False, {"error": err}
            items = [brief(view, k) for k in view.where(e, t.by, a[t.by])]
            page = a.get("page", 1)
            if page < 1:
                return False, {"error": "page must be >= 1"}
            return True, _page(items, page, page_size)

        return parsed(listing)
    if t.op == "count":

        def count(view: DBView, a: dict[str, Any], page_size: int) -> tuple[bool, Any]:
            err = missing_parent(view, a)
            if err:
                return False, {"error": err}
            return True, {"count": len(view.where(e, t.by, a[t.by]))}

        return parsed(count)
    if t.op == "get":

        def get(view: DBView, a: dict[str, Any], page_size: int) -> tuple[bool, Any]:
            rec, err = fetch(view, a)
            if rec is None:
                return False, {"error": err}
            return True, {key: a[key], **{f: rec.get(f) for f in t.fields}}

        return parsed(get)
    if t.op in ("update", "transition", "delete"):

        def write(view: DBView, a: dict[str, Any], page_size: int) -> tuple[bool, Any]:
            rec, err = fetch(view, a)
            if rec is None:
                return False, {"error": err}
            err = check_conditions(spec, view, ent, rec, t.when, t.when_any) or check_refs(view, a)
            if err:
                return False, {"error": err}
            if t.op == "delete":
                view.delete(e, a[key])
                return True, {key: a[key], "deleted": True}
            new = dict(rec)
            if t.op == "update":
                if ent.fields[t.field].unique and [k for k in view.where(e, t.field, a[t.field]) if k != a[key]]:
                    return False, {"error": f"another {e} already has {t.field} {a[t.field]!r}"}
                new[t.field] = a[t.field]
                err = clash(view, new, a[key])
                if err:
                    return False, {"error": err}
            else:
                if rec.get(t.field) not in t.from_:
                    return False, {
                        "error": f"precondition failed: {e} {t.field} is {rec.get(t.field)!r}, "
                        f"must be one of {list(t.from_)} to {t.verb}"
                    }
                new[t.field] = t.to
                for x in t.args:
                    new[x] = a[x]
            view.put(e, a[key], new)
            return True, {key: a[key], t.field: new[t.field]}

        return parsed(write)
    if t.op == "create":

        def create(view: DBView, a: dict[str, Any], page_size: int) -> tuple[bool, Any]:
            err = check_refs(view, a)
            if err:
                return False, {"error": err}
            for x in t.args:
                f = ent.fields[x]
                if f.unique and view.where(e, x, a[x]):
                    return False, {"error": f"a {e} with {x} {a[x]!r} already exists"}
            new = {**t.defaults, **{x: a[x] for x in t.args}}
            err = clash(view, new, "")
            if err:
                return False, {"error": err}
            new_key = view.new_key(e)
            view.put(e, new_key, new)
            return True, {key: new_key}

        return parsed(create)
    raise AssertionError(t.op)
