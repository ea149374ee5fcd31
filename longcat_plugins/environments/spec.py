"""The declarative domain spec (E2): typed entities and tools, loaded with file + key-path errors.

A spec is YAML or JSON::

    domain: retail
    description: an online store
    policy: |                       # the system prompt every episode of this domain gets
      You are a customer-service agent ...
    entities:
      customer:
        key: customer_id            # the id field (string, generated as PREFIX-0001)
        prefix: CUS
        label: name                 # how a user refers to a record (values unique per entity)
        fields:
          name:  {type: name}
          email: {type: email, unique: true}
          tier:  {type: enum, values: [basic, gold]}
      order:
        key: order_id
        prefix: ORD
        label: placed_on
        fields:
          customer_id: {type: ref, entity: customer}
          status: {type: enum, values: [pending, delivered, cancelled]}
          placed_on: {type: date}
    tools:
      - {name: find_customer_by_email, op: find, entity: customer, by: email}
      - {name: list_customer_orders, op: list, entity: order, by: customer_id}
      - {name: get_order, op: get, entity: order}
      - {name: cancel_order, op: transition, entity: order, field: status, from: [pending], to: cancelled}

A tool's ``op`` fixes its typed parameters, its typed returns and what it reads and writes
(:class:`ToolDef`); ops: ``find`` (by a unique field, or by a ``unique_together`` group of the
entity: a two-key lookup), ``search`` (by a non-unique field), ``get`` (by key; optional ``fields``
subset), ``list`` / ``count`` (children by a ref field), ``update`` (set ``field``), ``transition``
(``field`` from ``from`` to ``to``, optional extra ``args`` fields; a ref field among them is an id
argument, with ``require`` preconditions on the record it names), ``create`` (``args`` fields,
``require`` preconditions on referenced records, ``defaults``), ``delete``. ``update``,
``transition`` and ``delete`` take preconditions ``when`` (all hold) and ``when_any`` (one
alternative holds), whose keys are fields or paths through refs to related records
(``drug_id.requires_prior_auth``). A transition's conditions on related records, its ``require:``
on ref arguments included, are also rules the seed data keeps (:meth:`DomainSpec.rules`). Ref
fields must not form a cycle (a record's references are made before it).

Every key is honoured or rejected with its key path: :data:`OP_KEYS` lists what each op takes, and
field keys are checked per type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

from longcat_plugins.config import ConfigProblem
from longcat_plugins.environments.contract import SpecError

#: field type -> JSON schema type
FIELD_TYPES: dict[str, str] = {
    "name": "string",
    "email": "string",
    "phone": "string",
    "city": "string",
    "word": "string",
    "text": "string",
    "code": "string",
    "date": "string",
    "time": "string",
    "int": "integer",
    "money": "number",
    "bool": "boolean",
    "enum": "string",
    "ref": "string",
}
OPS = ("find", "search", "get", "list", "count", "update", "transition", "create", "delete")
READ_OPS = frozenset({"find", "search", "get", "list", "count"})
WRITE_OPS = frozenset({"update", "transition", "create", "delete"})
BUILTIN_SPECS = Path(__file__).parent / "domains"


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: str
    values: tuple[Any, ...] = ()
    entity: str = ""
    unique: bool = False
    min: float = 0
    max: float = 100

    @property
    def json_type(self) -> str:
        return FIELD_TYPES[self.type]

    def json_schema(self, description: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.json_type}
        if self.type == "enum":
            out["enum"] = list(self.values)
        if self.type == "date":
            out["description"] = "date, YYYY-MM-DD"
        if description:
            out["description"] = description if "description" not in out else f"{description} ({out['description']})"
        return out


@dataclass(frozen=True)
class EntitySpec:
    name: str
    key: str
    prefix: str
    label: str
    fields: dict[str, FieldSpec]
    #: field groups whose combined values identify one record (a two-key lookup's key)
    unique_together: tuple[tuple[str, ...], ...] = ()

    def refs(self) -> dict[str, str]:
        """ref field -> referenced entity."""
        return {f.name: f.entity for f in self.fields.values() if f.type == "ref"}


@dataclass(frozen=True)
class Param:
    """One typed tool parameter; ``ref`` names the entity whose key it takes (a dependency)."""

    name: str
    field: FieldSpec
    ref: str = ""
    required: bool = True

    def json_schema(self) -> dict[str, Any]:
        if self.ref:
            return {"type": "string", "description": f"the {self.ref} id"}
        if self.name == "page":
            return {"type": "integer", "description": "result page, from 1"}
        return self.field.json_schema(self.name.replace("_", " "))


@dataclass(frozen=True)
class ToolDef:
    """One tool as the spec declares it, with its derived signature and data access."""

    name: str
    op: str
    entity: str
    description: str
    verb: str
    params: tuple[Param, ...]
    #: (name, json type, entity whose key it is or "") of what the tool returns
    returns: tuple[tuple[str, str, str], ...]
    reads: frozenset[str]
    writes: frozenset[str]
    by: str = ""
    field: str = ""
    fields: tuple[str, ...] = ()
    from_: tuple[Any, ...] = ()
    to: Any = None
    args: tuple[str, ...] = ()
    #: precondition, every path must hold: ``field`` or ``ref_field.field`` (a related record)
    when: dict[str, tuple[Any, ...]] = dc_field(default_factory=dict)
    #: precondition, at least one alternative (a ``when``-style mapping) must hold
    when_any: tuple[dict[str, tuple[Any, ...]], ...] = ()
    #: ref argument -> precondition on the record it names (create and transition)
    require: dict[str, dict[str, tuple[Any, ...]]] = dc_field(default_factory=dict)
    defaults: dict[str, Any] = dc_field(default_factory=dict)
    #: every field a find looks up by (``by`` is the first); one field unless a two-key lookup
    by_all: tuple[str, ...] = ()

    @property
    def lookup(self) -> tuple[str, ...]:
        """The fields a find/search takes (two-key lookups take several)."""
        return self.by_all or ((self.by,) if self.by else ())

    @property
    def ref_args(self) -> dict[str, str]:
        """Argument -> entity whose id it takes, for a create's or transition's ref-valued args."""
        return {p.name: p.ref for p in self.params if p.ref and p.name in self.args}

    @property
    def needs(self) -> frozenset[str]:
        """Entities whose keys this tool needs as arguments: its parameter dependencies."""
        return frozenset(p.ref for p in self.params if p.ref)

    @property
    def produces(self) -> frozenset[str]:
        """Entities whose keys appear in this tool's result."""
        return frozenset(r[2] for r in self.returns if r[2])

    @property
    def is_write(self) -> bool:
        return self.op in WRITE_OPS

    def openai_schema(self) -> dict[str, Any]:
        props = {p.name: p.json_schema() for p in self.params}
        required = [p.name for p in self.params if p.required]
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {"type": "object", "properties": props, "required": required},
            },
        }


@dataclass(frozen=True)
class Rule:
    """A transition's conditions on related records, read as a data invariant: every ``entity``
    record whose ``field`` is ``to`` meets them, in the seed data too (a prescription already sent
    to a pharmacy had its authorisation approved, and went to an open pharmacy). The conditions are
    the transition's ``when``/``when_any`` paths through refs and its ``require:`` on ref arguments
    (as ``arg.field`` paths). Where several transitions lead to one state, a record there must meet
    one of them (``when_any``, ``tool`` names them all, joined by ``|``); a state that a transition
    or a create reaches without such conditions has no rule."""

    tool: str
    entity: str
    field: str
    to: Any
    when: dict[str, tuple[Any, ...]]
    when_any: tuple[dict[str, tuple[Any, ...]], ...]


@dataclass(frozen=True)
class DomainSpec:
    domain: str
    description: str
    policy: str
    entities: dict[str, EntitySpec]
    tools: dict[str, ToolDef]
    source: str = ""
    raw: dict[str, Any] = dc_field(default_factory=dict, compare=False, repr=False)

    def rules(self) -> list[Rule]:
        """Every declared cross-record rule (see :class:`Rule`), one per state that only conditioned
        transitions lead to."""
        by_state: dict[tuple[str, str, Any], list[tuple[str, dict[str, tuple[Any, ...]], tuple]]] = {}
        free: set[tuple[str, str, Any]] = set()
        for t in self.tools.values():
            if t.op == "create":
                free |= {(t.entity, f, v) for f, v in t.defaults.items()}
                ent = self.entities[t.entity]
                free |= {(t.entity, a, v) for a in t.args for v in ent.fields[a].values}
                continue
            if t.op != "transition":
                continue
            when = {p: v for p, v in t.when.items() if "." in p}
            when |= {f"{a}.{p}": v for a, conds in t.require.items() for p, v in conds.items()}
            alts = t.when_any if any("." in p for alt in t.when_any for p in alt) else ()
            state = (t.entity, t.field, t.to)
            if when or alts:
                by_state.setdefault(state, []).append((t.name, when, alts))
            else:
                free.add(state)
        out = []
        for (entity, field, to), conds in by_state.items():
            if (entity, field, to) in free:
                continue
            if len(conds) == 1:
                name, when, alts = conds[0]
                out.append(Rule(name, entity, field, to, when, alts))
                continue
            # one of several transitions: their conditions as alternatives (each one's when, with
            # each of its when_any alternatives)
            options = tuple(
                both
                for _, when, alts in conds
                for alt in (alts or ({},))
                if (both := both_conditions(when, alt)) is not None
            )
            out.append(Rule("|".join(n for n, _, _ in conds), entity, field, to, {}, options))
        return out


def both_conditions(a: dict[str, tuple[Any, ...]], b: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]] | None:
    """Two conditions at once (allowed values intersect); None when some path can hold no value.
    The spec's rule expansion and the generator's pinning (:mod:`.generate`) both use it."""
    out = dict(a)
    for k, v in b.items():
        out[k] = tuple(x for x in out[k] if x in v) if k in out else v
        if not out[k]:
            return None
    return out


def resolve_spec_path(spec: str | Path) -> Path:
    """A path, or the name of a built-in domain (``retail``, ``travel``, ``food_delivery``)."""
    p = Path(spec)
    if p.exists():
        return p
    for ext in (".yaml", ".yml", ".json"):
        cand = BUILTIN_SPECS / f"{spec}{ext}"
        if cand.exists():
            return cand
    known = sorted(x.stem for x in BUILTIN_SPECS.glob("*.yaml"))
    raise SpecError(
        [ConfigProblem(str(spec), f"no such file and no built-in domain of that name (built-ins: {known})")]
    )


def load_spec(spec: str | Path) -> DomainSpec:
    """Read and check a domain spec; :class:`SpecError` names the file and every bad key path."""
    path = resolve_spec_path(spec)
    text = path.read_text()
    try:
        if path.suffix == ".json":
            raw = json.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 - any parse error is reported with the file
        raise SpecError([ConfigProblem("<file>", f"cannot parse: {exc}")], source=str(path)) from exc
    return parse_spec(raw, source=str(path))


def parse_spec(raw: Any, source: str = "spec") -> DomainSpec:
    """Check plain data as a domain spec (see the module doc) and derive every tool's signature."""
    problems: list[ConfigProblem] = []
    if not isinstance(raw, dict):
        raise SpecError([ConfigProblem("<root>", "must be a mapping")], source=source)
    _unknown(raw, {"domain", "description", "policy", "entities", "tools"}, "", problems)
    for key in ("domain", "entities", "tools"):
        if key not in raw:
            problems.append(ConfigProblem(key, "required key is missing"))
    if "domain" in raw and not (isinstance(raw["domain"], str) and raw["domain"].isidentifier()):
        problems.append(ConfigProblem("domain", f"must be an identifier (got {raw['domain']!r})"))
    for key in ("description", "policy"):
        if key in raw and not isinstance(raw[key], str):
            problems.append(ConfigProblem(key, f"must be a string (got {type(raw[key]).__name__})"))
    if problems:
        raise SpecError(problems, source=source)
    entities = _parse_entities(raw["entities"], problems)
    _check_ref_cycles(entities, problems)
    tools: dict[str, ToolDef] = {}
    if not isinstance(raw["tools"], list):
        problems.append(ConfigProblem("tools", "must be a list of tool mappings"))
    else:
        for i, t in enumerate(raw["tools"]):
            tool = _parse_tool(t, f"tools[{i}]", entities, problems)
            if tool is None:
                continue
            if tool.name in tools:
                problems.append(ConfigProblem(f"tools[{i}].name", f"duplicate tool name {tool.name!r}"))
            tools[tool.name] = tool
    if problems:
        raise SpecError(problems, source=source)
    spec = DomainSpec(
        domain=str(raw["domain"]),
        description=str(raw.get("description", "")),
        policy=str(raw.get("policy", "")),
        entities=entities,
        tools=tools,
        source=source,
        raw=raw,
    )
    _check_reachable(spec, problems)
    if problems:
        raise SpecError(problems, source=source)
    return spec


def _check_ref_cycles(entities: dict[str, EntitySpec], problems: list[ConfigProblem]) -> None:
    """Ref fields must not form a cycle (``a.b_id -> b``, ``b.a_id -> a``, or a record naming its
    own entity): every record's references are made before it, and a cycle has no first record."""
    seen: set[tuple[str, ...]] = set()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[tuple[str, str]] = []  # (entity, ref field) hops of the current path

    def visit(e: str) -> None:
        state[e] = 1
        for fname, f in entities[e].fields.items():
            if f.type != "ref" or f.entity not in entities:
                continue
            path.append((e, fname))
            if state.get(f.entity) == 1:
                start = next(i for i, (x, _) in enumerate(path) if x == f.entity)
                hops = path[start:]
                key = tuple(sorted(f"{x}.{y}" for x, y in hops))
                if key not in seen:
                    seen.add(key)
                    chain = " -> ".join(f"{x}.{y}" for x, y in hops) + f" -> {f.entity}"
                    problems.append(
                        ConfigProblem(
                            f"entities.{hops[0][0]}.fields.{hops[0][1]}",
                            f"ref cycle {chain}: every record's references must exist before it, so "
                            "a cycle has no first record; break it (drop or re-point one ref field)",
                        )
                    )
            elif state.get(f.entity) is None:
                visit(f.entity)
            path.pop()
        state[e] = 2

    for e in entities:
        if e not in state:
            visit(e)


def _unknown(d: dict[str, Any], allowed: set[str], path: str, problems: list[ConfigProblem]) -> None:
    for k in d:
        if k not in allowed:
            where = f"{path}.{k}" if path else str(k)
            problems.append(ConfigProblem(where, f"unknown key (allowed: {sorted(allowed)})"))


#: keys a field may carry, by type (anything else is rejected: it would be silently ignored)
_FIELD_KEYS: dict[str, set[str]] = {t: {"type", "unique"} for t in FIELD_TYPES}
_FIELD_KEYS["enum"] = {"type", "values"}
_FIELD_KEYS["bool"] = {"type"}
_FIELD_KEYS["ref"] = {"type", "entity"}
_FIELD_KEYS["int"] = {"type", "unique", "min", "max"}
_FIELD_KEYS["money"] = {"type", "min", "max"}


def _parse_entities(raw: Any, problems: list[ConfigProblem]) -> dict[str, EntitySpec]:
    out: dict[str, EntitySpec] = {}
    if not isinstance(raw, dict) or not raw:
        problems.append(ConfigProblem("entities", "must be a non-empty mapping of entity name -> entity"))
        return out
    for ename, e in raw.items():
        path = f"entities.{ename}"
        if not isinstance(e, dict):
            problems.append(ConfigProblem(path, "must be a mapping"))
            continue
        _unknown(e, {"key", "prefix", "label", "fields", "unique_together"}, path, problems)
        fields: dict[str, FieldSpec] = {}
        rawf = e.get("fields")
        if not isinstance(rawf, dict) or not rawf:
            problems.append(ConfigProblem(f"{path}.fields", "must be a non-empty mapping"))
            rawf = {}
        for fname, f in rawf.items():
            fp = f"{path}.fields.{fname}"
            if not isinstance(f, dict) or "type" not in f:
                problems.append(ConfigProblem(fp, "must be a mapping with a 'type'"))
                continue
            ftype = f["type"]
            if ftype not in FIELD_TYPES:
                problems.append(ConfigProblem(f"{fp}.type", f"unknown type {ftype!r} (known: {sorted(FIELD_TYPES)})"))
                continue
            n0 = len(problems)
            for k in f:
                if k not in _FIELD_KEYS[ftype]:
                    problems.append(
                        ConfigProblem(
                            f"{fp}.{k}", f"not used by a {ftype} field (allowed: {sorted(_FIELD_KEYS[ftype])})"
                        )
                    )
            if ftype == "enum" and not (isinstance(f.get("values"), list) and f["values"]):
                problems.append(ConfigProblem(f"{fp}.values", "an enum needs a non-empty list of values"))
            if ftype == "ref" and f.get("entity") not in raw:
                problems.append(
                    ConfigProblem(f"{fp}.entity", f"ref to unknown entity {f.get('entity')!r} (known: {sorted(raw)})")
                )
            if "unique" in f and not isinstance(f["unique"], bool):
                problems.append(ConfigProblem(f"{fp}.unique", f"must be true or false (got {f['unique']!r})"))
            bounds = {}
            for b, default in (("min", 1 if ftype == "int" else 5), ("max", 10 if ftype == "int" else 500)):
                v = f.get(b, default)
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    problems.append(ConfigProblem(f"{fp}.{b}", f"must be a number (got {v!r})"))
                bounds[b] = v
            if len(problems) > n0:
                continue
            if bounds["min"] > bounds["max"]:
                problems.append(ConfigProblem(f"{fp}.min", f"{bounds['min']} > max {bounds['max']}"))
                continue
            fields[fname] = FieldSpec(
                name=fname,
                type=ftype,
                values=tuple(f.get("values", ())),
                entity=str(f.get("entity", "")),
                unique=bool(f.get("unique", False)),
                min=float(bounds["min"]),
                max=float(bounds["max"]),
            )
        key = e.get("key")
        if not isinstance(key, str) or not key:
            problems.append(ConfigProblem(f"{path}.key", "required: the name of the id field"))
            continue
        if key in fields:
            problems.append(ConfigProblem(f"{path}.key", f"{key!r} is generated; do not list it in fields"))
        label = e.get("label")
        if label not in fields or fields[label].type in ("ref", "bool", "enum"):
            problems.append(
                ConfigProblem(f"{path}.label", f"must name a non-ref, non-enum field of {ename} (got {label!r})")
            )
            continue
        refs = [f.entity for f in fields.values() if f.type == "ref"]
        if len(refs) != len(set(refs)):
            problems.append(ConfigProblem(f"{path}.fields", "at most one ref field per referenced entity"))
        if "prefix" in e and not (isinstance(e["prefix"], str) and e["prefix"].isalnum()):
            problems.append(ConfigProblem(f"{path}.prefix", f"must be letters/digits (got {e['prefix']!r})"))
        groups: list[tuple[str, ...]] = []
        raw_groups = e.get("unique_together") or []
        if not isinstance(raw_groups, list):
            problems.append(ConfigProblem(f"{path}.unique_together", "must be a list of field lists"))
            raw_groups = []
        for gi, g in enumerate(raw_groups):
            gp = f"{path}.unique_together[{gi}]"
            if not isinstance(g, list) or len(g) < 2 or len(set(map(str, g))) != len(g):
                problems.append(ConfigProblem(gp, f"must list two or more distinct fields (got {g!r})"))
                continue
            bad = [x for x in g if x not in fields or fields[x].type in ("ref", "bool", "enum")]
            if bad:
                problems.append(ConfigProblem(gp, f"not value fields (non-ref, non-enum, non-bool) of {ename}: {bad}"))
                continue
            groups.append(tuple(g))
        out[ename] = EntitySpec(
            name=ename,
            key=key,
            prefix=str(e.get("prefix", ename[:3].upper())),
            label=str(label),
            fields=fields,
            unique_together=tuple(groups),
        )
    return out


_COMMON_TOOL_KEYS = {"name", "op", "entity", "description"}
#: the keys each op honours; any other key is rejected with its path (never accepted and ignored)
OP_KEYS: dict[str, set[str]] = {
    "find": {"by"},
    "search": {"by"},
    "get": {"fields"},
    "list": {"by"},
    "count": {"by"},
    "update": {"field", "when", "when_any"},
    "transition": {"field", "from", "to", "args", "when", "when_any", "require", "verb"},
    "create": {"args", "require", "defaults"},
    "delete": {"when", "when_any"},
}
_TOOL_KEYS = _COMMON_TOOL_KEYS.union(*OP_KEYS.values())


def value_problem(f: FieldSpec, v: Any) -> str | None:
    """Why ``v`` cannot be a value of field ``f`` (None: it can)."""
    if f.type == "enum":
        return None if v in f.values else f"{v!r} is not one of {list(f.values)}"
    if f.type == "bool":
        return None if isinstance(v, bool) else f"{v!r} is not true/false"
    if f.type == "int":
        return None if isinstance(v, int) and not isinstance(v, bool) else f"{v!r} is not an integer"
    if f.type == "money":
        return None if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{v!r} is not a number"
    return None if isinstance(v, str) else f"{v!r} is not a string"


def resolve_path(entities: dict[str, EntitySpec], ename: str, path: str) -> tuple[list[tuple[str, str]], FieldSpec]:
    """``a.b.c`` from entity ``ename``: the (entity, ref field) hops and the final field; every
    part but the last must be a ref field. Raises KeyError with a message naming the bad part."""
    parts = path.split(".")
    hops: list[tuple[str, str]] = []
    cur = ename
    for i, part in enumerate(parts):
        if cur not in entities:
            raise KeyError(f"entity {cur!r} did not parse")
        f = entities[cur].fields.get(part)
        if f is None:
            raise KeyError(f"no field {part!r} in {cur}")
        if i == len(parts) - 1:
            return hops, f
        if f.type != "ref":
            raise KeyError(f"{part!r} of {cur} is not a ref field, so {'.'.join(parts[i + 1 :])!r} cannot follow it")
        hops.append((cur, part))
        cur = f.entity
    raise KeyError("empty path")


def _parse_tool(t: Any, path: str, entities: dict[str, EntitySpec], problems: list[ConfigProblem]) -> ToolDef | None:
    if not isinstance(t, dict):
        problems.append(ConfigProblem(path, "must be a mapping"))
        return None
    name, op, ename = t.get("name"), t.get("op"), t.get("entity")
    if not isinstance(name, str) or not name.isidentifier():
        _unknown(t, _TOOL_KEYS, path, problems)
        problems.append(ConfigProblem(f"{path}.name", f"must be an identifier (got {name!r})"))
        return None
    path = f"{path}({name})"
    if op not in OPS:
        _unknown(t, _TOOL_KEYS, path, problems)
        problems.append(ConfigProblem(f"{path}.op", f"unknown op {op!r} (known: {list(OPS)})"))
        return None
    n0 = len(problems)
    for k in t:
        if k not in _COMMON_TOOL_KEYS | OP_KEYS[op]:
            users = sorted(o for o, ks in OP_KEYS.items() if k in ks)
            why = f"used only by op {users}" if users else "unknown key"
            problems.append(
                ConfigProblem(f"{path}.{k}", f"{why}; a {op} tool takes {sorted(_COMMON_TOOL_KEYS | OP_KEYS[op])}")
            )
    if ename not in entities:
        problems.append(ConfigProblem(f"{path}.entity", f"unknown entity {ename!r} (known: {sorted(entities)})"))
        return None
    if any(f.entity not in entities for f in entities[ename].fields.values() if f.type == "ref"):
        return None  # an entity it links to failed to parse; that problem is already listed
    for k in ("description", "verb"):
        if k in t and not isinstance(t[k], str):
            problems.append(ConfigProblem(f"{path}.{k}", f"must be a string (got {t[k]!r})"))
    ent = entities[ename]

    def need_field(key: str, cond: Any = None, what: str = "a field") -> FieldSpec | None:
        fname = t.get(key)
        f = ent.fields.get(fname) if isinstance(fname, str) else None
        if f is None or (cond is not None and not cond(f)):
            problems.append(ConfigProblem(f"{path}.{key}", f"must name {what} of {ename} (got {fname!r})"))
            return None
        return f

    def conds(raw: Any, where: str, owner: EntitySpec, empty_ok: bool = True) -> dict[str, tuple[Any, ...]]:
        """``path -> allowed values``; a path is a field of ``owner`` or ``ref.field...`` through refs."""
        out: dict[str, tuple[Any, ...]] = {}
        if raw is None and empty_ok:
            return out
        if not isinstance(raw, dict) or (not raw and not empty_ok):
            problems.append(ConfigProblem(where, "must map field (or ref_field.field) -> list of allowed values"))
            return out
        for k, v in raw.items():
            try:
                _, f = resolve_path(entities, owner.name, str(k))
            except KeyError as exc:
                problems.append(ConfigProblem(f"{where}.{k}", str(exc.args[0])))
                continue
            vals = tuple(v) if isinstance(v, list) else (v,)
            bad = [m for m in (value_problem(f, x) for x in vals) if m]
            if not vals or bad:
                problems.append(ConfigProblem(f"{where}.{k}", bad[0] if bad else "needs at least one value"))
                continue
            out[str(k)] = vals
        return out

    def when_keys() -> None:
        if t.get("when") is not None:
            extra["when"] = conds(t["when"], f"{path}.when", ent)
        raw_any = t.get("when_any")
        if raw_any is not None:
            if not isinstance(raw_any, list) or len(raw_any) < 2:
                problems.append(ConfigProblem(f"{path}.when_any", "must be a list of two or more alternatives"))
            else:
                extra["when_any"] = tuple(
                    conds(a, f"{path}.when_any[{i}]", ent, empty_ok=False) for i, a in enumerate(raw_any)
                )

    def require_key(ref_args: list[str]) -> None:
        req: dict[str, dict[str, tuple[Any, ...]]] = {}
        raw = t.get("require")
        if raw is None:
            return
        if not isinstance(raw, dict):
            problems.append(ConfigProblem(f"{path}.require", "must map a ref argument -> its precondition"))
            return
        for rf, c in raw.items():
            if rf not in ref_args:
                problems.append(ConfigProblem(f"{path}.require.{rf}", f"must be a ref field listed in args {ref_args}"))
                continue
            req[rf] = conds(c, f"{path}.require.{rf}", entities[ent.fields[rf].entity])
        extra["require"] = req

    def arg_list(required: bool) -> list[str] | None:
        args = t.get("args", [])
        if args is None:
            args = []
        if not isinstance(args, list) or (required and not args) or len(set(map(str, args))) != len(args):
            problems.append(
                ConfigProblem(f"{path}.args", f"must be a list of distinct fields of {ename} (got {args!r})")
            )
            return None
        bad = [a for a in args if a not in ent.fields]
        if bad:
            problems.append(ConfigProblem(f"{path}.args", f"no such fields in {ename}: {bad}"))
            return None
        return args

    def ref_param(a: str) -> Param:
        f = ent.fields[a]
        return Param(a, f, ref=f.entity if f.type == "ref" else "")

    key_param = Param(ent.key, FieldSpec(ent.key, "ref", entity=ename), ref=ename)
    page = Param("page", FieldSpec("page", "int"), required=False)
    label_ret = (ent.label, ent.fields[ent.label].json_type, "")
    key_ret = (ent.key, "string", ename)
    params: list[Param] = []
    returns: list[tuple[str, str, str]] = []
    reads, writes = {ename}, set()
    extra: dict[str, Any] = {}
    if op == "find" and isinstance(t.get("by"), list):
        by = t["by"]
        if tuple(by) not in ent.unique_together:
            problems.append(
                ConfigProblem(
                    f"{path}.by",
                    f"a lookup by several fields must name a unique_together group of {ename} "
                    f"(declared: {[list(g) for g in ent.unique_together]}; got {by!r})",
                )
            )
        else:
            params = [Param(x, ent.fields[x]) for x in by]
            returns = [key_ret, label_ret]
            extra.update(by=by[0], by_all=tuple(by))
    elif op in ("find", "search"):
        cond = (
            (lambda f: f.unique and f.type != "ref") if op == "find" else (lambda f: not f.unique and f.type != "ref")
        )
        f = need_field("by", cond, "a unique non-ref field" if op == "find" else "a non-unique non-ref field")
        if f:
            params = [Param(f.name, f)] + ([page] if op == "search" else [])
            returns = [key_ret, label_ret]
            extra["by"] = f.name
    elif op == "get":
        names = t.get("fields") or list(ent.fields)
        bad = [x for x in names if x not in ent.fields] if isinstance(names, list) else names
        if bad:
            problems.append(ConfigProblem(f"{path}.fields", f"unknown fields {bad} of {ename}"))
        else:
            params = [key_param]
            returns = [key_ret] + [
                (x, ent.fields[x].json_type, ent.fields[x].entity if ent.fields[x].type == "ref" else "") for x in names
            ]
            extra["fields"] = tuple(names)
    elif op in ("list", "count"):
        f = need_field("by", lambda f: f.type == "ref", "a ref field")
        if f:
            params = [Param(f.name, f, ref=f.entity)] + ([page] if op == "list" else [])
            returns = [key_ret, label_ret] if op == "list" else [("count", "integer", "")]
            reads.add(f.entity)
            extra["by"] = f.name
    elif op == "update":
        f = need_field("field", lambda f: f.type != "ref", "a non-ref field")
        if f:
            params = [key_param, Param(f.name, f)]
            returns = [key_ret, (f.name, f.json_type, "")]
            writes.add(f"{ename}.{f.name}")
            extra["field"] = f.name
        when_keys()
    elif op == "transition":
        f = need_field("field", lambda f: f.type == "enum", "an enum field")
        args = arg_list(required=False)
        if args is not None and f is not None:
            if f.name in args:
                problems.append(
                    ConfigProblem(f"{path}.args", f"{f.name!r} is the transition's field; it is set by 'to'")
                )
            if t.get("to") not in f.values:
                problems.append(ConfigProblem(f"{path}.to", f"must be one of {list(f.values)}"))
            frm = t.get("from") or []
            if not isinstance(frm, list) or not frm or any(x not in f.values for x in frm):
                problems.append(ConfigProblem(f"{path}.from", f"must be a non-empty list of {list(f.values)}"))
            params = [key_param] + [ref_param(a) for a in args]
            returns = [key_ret, (f.name, "string", "")]
            writes |= {f"{ename}.{f.name}"} | {f"{ename}.{a}" for a in args}
            reads |= {ent.fields[a].entity for a in args if ent.fields[a].type == "ref"}
            extra.update(field=f.name, from_=tuple(frm), to=t.get("to"), args=tuple(args))
            require_key([a for a in args if ent.fields[a].type == "ref"])
        when_keys()
    elif op == "create":
        args = arg_list(required=True)
        if args is not None:
            params = [ref_param(a) for a in args]
            returns = [key_ret]
            writes.add(ename)
            reads |= {ent.fields[a].entity for a in args if ent.fields[a].type == "ref"}
            extra["args"] = tuple(args)
            defaults = t.get("defaults", {}) or {}
            if not isinstance(defaults, dict):
                problems.append(ConfigProblem(f"{path}.defaults", "must map field -> value"))
                defaults = {}
            for k, v in defaults.items():
                if k not in ent.fields:
                    problems.append(ConfigProblem(f"{path}.defaults.{k}", f"no field {k!r} in {ename}"))
                elif k in args:
                    problems.append(ConfigProblem(f"{path}.defaults.{k}", "is also in args; the argument would win"))
                elif ent.fields[k].type == "ref":
                    problems.append(ConfigProblem(f"{path}.defaults.{k}", "a ref field must be an argument"))
                elif (m := value_problem(ent.fields[k], v)) is not None:
                    problems.append(ConfigProblem(f"{path}.defaults.{k}", m))
            missing = [x for x in ent.fields if x not in args and x not in defaults]
            if missing:
                problems.append(ConfigProblem(f"{path}.defaults", f"fields neither in args nor defaults: {missing}"))
            extra["defaults"] = dict(defaults)
            require_key([a for a in args if ent.fields[a].type == "ref"])
    elif op == "delete":
        params = [key_param]
        returns = [key_ret]
        writes.add(ename)
        when_keys()
    if len(problems) > n0:
        return None
    desc = str(t.get("description") or _default_description(op, ename, extra))
    return ToolDef(
        name=name,
        op=op,
        entity=ename,
        description=desc,
        verb=str(t.get("verb") or name.split("_")[0]),
        params=tuple(params),
        returns=tuple(returns),
        reads=frozenset(reads),
        writes=frozenset(writes),
        **extra,
    )


def _default_description(op: str, entity: str, extra: dict[str, Any]) -> str:
    e = entity.replace("_", " ")
    by = " and ".join(extra.get("by_all") or (extra.get("by", ""),)).replace("_", " ")
    return {
        "find": f"Find a {e} by its {by}; returns its id.",
        "search": f"Search {e} records by {by}; paginated.",
        "get": f"Details of a {e}.",
        "list": f"List the {e} records of a {by.removesuffix(' id')}; paginated.",
        "count": f"Count the {e} records of a {by.removesuffix(' id')}.",
        "update": f"Change the {str(extra.get('field', '')).replace('_', ' ')} of a {e}.",
        "transition": f"Set a {e}'s {extra.get('field', '')} to {extra.get('to')}.",
        "create": f"Create a {e}.",
        "delete": f"Delete a {e}.",
    }[op]


def _check_reachable(spec: DomainSpec, problems: list[ConfigProblem]) -> None:
    """Every tool must be callable from user-provided values alone, through other tools' results."""
    produced: set[str] = set()
    reached: set[str] = set()
    changed = True
    while changed:
        changed = False
        for t in spec.tools.values():
            if t.name not in reached and t.needs <= produced:
                reached.add(t.name)
                produced |= t.produces
                changed = True
    for i, t in enumerate(spec.tools.values()):
        if t.name not in reached:
            missing = sorted(t.needs - produced)
            problems.append(
                ConfigProblem(f"tools[{i}]({t.name})", f"unreachable: no tool chain yields the ids of {missing}")
            )
