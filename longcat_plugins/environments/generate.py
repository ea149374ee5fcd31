"""Environment construction from a domain's tool graph (E2, report §3.1.1, Fig. 4).

For one environment:

1. **Seed chain** ``s1``: a random walk over the tool graph from a root (a tool that needs only
   user-known values); each next tool must take an id an earlier tool returned, or be another root
   (the user names a second record; down-weighted 0.4). A tool picked in
   earlier environments is down-weighted by ``reuse_decay ** (uses - min uses)`` (diversity).
   While walking, the database is instantiated tool by tool so every dependency and precondition
   holds (target records are created, preconditions pinned, siblings added as distractors).
2. **Task** from the chain: facts the user knows, goals, a rubric (expected database facts +
   required outputs + no collateral change) and the golden call sequence.
3. **BFS expansion** ``R(s)``: neighbours of the environment's tools are visited breadth-first and a
   tool is added only if every id it needs is already returned by a tool in the environment
   (whose records exist); records for its entity are added next to the chain's records.
4. **Further seeds**: with ``E_n`` the environment and ``D_n = G \\ E_n``, a new seed chain
   ``s_{n+1} ⊆ D_n`` is sampled (``g`` = attempts it took) and kept when
   ``p = f(c(E_n), g(D_n), |D_n|) > tau`` (see :func:`growth_probability`), then expanded.
5. **Fallback**: while the environment has fewer than ``min_tools`` tools, a chain sampled from the
   whole graph is added (its records are fresh, so the database stays consistent) and expanded.

Every chain becomes one task of the environment. :mod:`.verify` then executes each golden chain and
checks the rubric; failures are rejected and counted.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from longcat_plugins.environments.domain import BaseDB, DBView, Record, Tables, Toolkit, rule_violations
from longcat_plugins.environments.genconfig import GenConfig
from longcat_plugins.environments.graph import ToolGraph
from longcat_plugins.environments.rubric import renderings
from longcat_plugins.environments.runtime import Task, ToolEnvironment
from longcat_plugins.environments.spec import DomainSpec, ToolDef, both_conditions
from longcat_plugins.environments.user_sim import Fact
from longcat_plugins.environments.values import ValueMaker

__all__ = ["EnvironmentGenerator", "GenConfig", "GenerationError", "complexity", "growth_probability"]


def complexity(graph: ToolGraph, tools: set[str], cfg: GenConfig) -> float:
    """c(E) = |V_E| (1 + ρ_E) / K, clipped to [0, 1]: size plus connectivity of the environment."""
    return min(1.0, len(tools) * (1.0 + graph.density(tools)) / cfg.size_ref)


def growth_probability(c: float, attempts: int | None, remaining: int, total: int, cfg: GenConfig) -> float:
    """f(c(E_n), g(D_n), |D_n|) = (1 - c) · (1 - (g - 1)/(A - 1)) · sqrt(|D_n| / |G|).

    Monotone as the report asks: falls as the environment gets more complex (c), as a new valid chain
    gets harder to find in the remaining graph (g attempts out of A; no chain found: 0), and rises with
    the number of unused tools. A new seed chain is added while it exceeds ``tau``.
    """
    if attempts is None or total <= 0:
        return 0.0
    g = (attempts - 1) / max(1, cfg.max_attempts - 1)
    return max(0.0, (1.0 - c) * (1.0 - g) * math.sqrt(remaining / total))


@dataclass
class _Step:
    tool: str
    args: dict[str, Any]
    output_field: str = ""


@dataclass
class _Chain:
    """One chain being sampled: bindings, pinned/written fields, the task it becomes."""

    bound: dict[str, str] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)
    frozen: set[tuple[str, str, str]] = field(default_factory=set)
    written: set[tuple[str, str, str]] = field(default_factory=set)
    fixed: set[tuple[str, str, str]] = field(default_factory=set)
    sim: dict[tuple[str, str], Record] = field(default_factory=dict)
    created: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    counted: set[str] = field(default_factory=set)
    #: records a question is asked about (an output): never deleted in the same chain
    asked: set[tuple[str, str]] = field(default_factory=set)
    steps: list[_Step] = field(default_factory=list)
    facts: dict[str, Fact] = field(default_factory=dict)
    goals: list[str] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    #: fact key -> index of the step that introduced it
    fact_step: dict[str, int] = field(default_factory=dict)

    @property
    def tools(self) -> list[str]:
        return [s.tool for s in self.steps]

    def scored(self) -> bool:
        return bool(self.items) or any(s.output_field for s in self.steps)


def _h(name: str) -> str:
    return name.replace("_", " ")


class EnvironmentGenerator:
    """Generates environments of one domain; keeps tool-use counts across environments (diversity)."""

    def __init__(self, spec: DomainSpec, *, seed: int = 0, config: GenConfig | None = None) -> None:
        self.spec = spec
        self.cfg = config or GenConfig()
        bad = self.cfg.problems()
        if bad:
            raise ValueError("GenConfig: " + "; ".join(bad))
        self.graph = ToolGraph.build(spec)
        self.toolkit = Toolkit(spec)
        self.seed = seed
        self.uses: dict[str, int] = {t: 0 for t in spec.tools}
        self.persona_entity = next(iter(spec.entities))

    def generate(self, index: int) -> ToolEnvironment:
        """Environment number ``index`` (deterministic given the seed and the environments before it)."""
        b = _Builder(self, random.Random(f"{self.seed}:{index}"))
        env = b.build(index)
        for t in env.manifest["generation"]["chains"]:
            for name in t["tools"]:
                self.uses[name] += 1
        return env


class _Builder:
    def __init__(self, gen: EnvironmentGenerator, rng: random.Random) -> None:
        self.gen = gen
        self.spec = gen.spec
        self.cfg = gen.cfg
        self.graph = gen.graph
        self.rng = rng
        self.values = ValueMaker(rng, pool=self.cfg.value_pool)
        self.tables: Tables = {e: {} for e in self.spec.entities}
        self.serial: dict[str, int] = {e: 0 for e in self.spec.entities}
        self.env_tools: list[str] = []
        self.produced: set[str] = set()
        self.log: list[dict[str, Any]] = []
        self.chains: list[tuple[str, _Chain]] = []
        self.growth: list[dict[str, Any]] = []
        #: (entity, key, field) whose initial value an accepted chain relies on: later chains keep it
        self.pinned: set[tuple[str, str, str]] = set()

    # -- records --------------------------------------------------------------------------------

    def new_record(self, e: str, fixed: dict[str, Any] | None = None, ctx: _Chain | None = None) -> str:
        ent = self.spec.entities[e]
        fixed = dict(fixed or {})
        rec: Record = {}
        for fname, f in ent.fields.items():
            if fname in fixed:
                rec[fname] = fixed[fname]
                if f.unique or fname == ent.label:
                    self.values.claim(e, f, fixed[fname])
            elif f.type == "ref":
                rk = self.ensure_bound(f.entity, ctx) if ctx is not None else ""
                # a record created later by the chain ("$i") or one being made ("?") cannot be linked to
                rec[fname] = rk if rk and rk[0] not in "$?" else self.any_record(f.entity)
            else:
                rec[fname] = self.values.make(e, f, unique=fname == ent.label)
        for group in ent.unique_together:
            for _ in range(50):
                if not any(all(r.get(g) == rec.get(g) for g in group) for r in self.tables[e].values()):
                    break
                free = [g for g in group if g not in fixed]
                if not free:
                    raise GenerationError(f"{e}: {dict((g, rec[g]) for g in group)} is already taken")
                g = self.rng.choice(free)
                rec[g] = self.values.make(e, ent.fields[g], unique=g == ent.label)
            else:
                raise GenerationError(f"{e}: no free combination of {list(group)}")
        self.serial[e] += 1
        key = f"{ent.prefix}-{self.serial[e]:04d}"
        self.tables[e][key] = rec
        return key

    def any_record(self, e: str) -> str:
        keys = list(self.tables[e])
        if keys and self.rng.random() < 0.8:
            return self.rng.choice(keys)
        return self.new_record(e)

    def ensure_bound(self, e: str, ctx: _Chain) -> str:
        if e not in ctx.bound:
            ctx.bound[e] = "?"  # guards ref cycles
            ctx.bound[e] = self.new_record(e, ctx=ctx)
        return ctx.bound[e]

    def siblings(self, e: str, fixed: dict[str, Any]) -> None:
        for _ in range(self.rng.randint(1, 2)):
            self.new_record(e, fixed)

    def cur(self, ctx: _Chain, e: str, k: str) -> Record:
        return ctx.sim.get((e, k)) or self.tables[e][k]

    def pin(self, ctx: _Chain, e: str, k: str, conds: dict[str, tuple[Any, ...]], check_only: bool) -> bool:
        """Make the record satisfy ``conds``: check pinned fields, pin free ones (initial value).
        A ``ref.field`` path pins the related record the ref names (and the link itself)."""
        rec = self.cur(ctx, e, k)
        remote: dict[str, dict[str, tuple[Any, ...]]] = {}
        local: dict[str, tuple[Any, ...]] = {}
        for path, allowed in conds.items():
            head, _, rest = path.partition(".")
            if rest:
                remote.setdefault(head, {})[rest] = allowed
            else:
                local[head] = allowed
        for head, sub in remote.items():
            ref_e = self.spec.entities[e].fields[head].entity
            rk = rec.get(head)
            if not isinstance(rk, str) or rk == "?" or (not rk.startswith("$") and rk not in self.tables[ref_e]):
                return False
            if not self.pin(ctx, ref_e, rk, sub, check_only):
                return False
            if not check_only and not k.startswith("$"):
                ctx.fixed.add((e, k, head))
        for f, allowed in local.items():
            if (e, k, f) in ctx.fixed or (e, k, f) in ctx.frozen or (e, k, f) in self.pinned or k.startswith("$"):
                if rec.get(f) not in allowed:
                    return False
            elif not check_only:
                v = rec.get(f) if rec.get(f) in allowed else self.rng.choice(allowed)
                self.tables[e][k][f] = v
                if (e, k) in ctx.sim:
                    ctx.sim[(e, k)][f] = v
                ctx.fixed.add((e, k, f))
        return True

    def pin_any(
        self,
        ctx: _Chain,
        e: str,
        k: str,
        conds: dict[str, tuple[Any, ...]],
        alternatives: tuple[dict[str, tuple[Any, ...]], ...],
    ) -> bool:
        """Pin ``conds`` plus one of ``alternatives`` that can hold (tried in random order)."""
        alts = list(alternatives) or [{}]
        self.rng.shuffle(alts)
        for alt in alts:
            both = both_conditions(conds, alt)
            if both is not None and self.pin(ctx, e, k, both, check_only=True):
                self.pin(ctx, e, k, both, check_only=False)
                return True
        return False

    # -- planning one step ----------------------------------------------------------------------

    def plan(self, ctx: _Chain, t: ToolDef) -> bool:
        """Add tool ``t`` to the chain if it can run now; instantiate what it needs. False: not now."""
        e = t.entity
        ent = self.spec.entities[e]
        if not t.needs <= ctx.known or (t.needs | {e}) & ctx.deleted:
            return False
        k = ctx.bound.get(e, "")
        if t.op in ("find", "search", "list"):
            if k.startswith("$"):
                return False
            if t.op == "list":
                parent = ent.fields[t.by].entity
                pk = ctx.bound[parent]
                if pk.startswith("$"):
                    return False
            lookup = t.lookup
            if k and any((e, k, x) in ctx.written for x in (*lookup, ent.label)):
                return False
            if t.op == "list" and not k:
                k = ctx.bound[e] = self.new_record(e, {t.by: ctx.bound[parent]}, ctx)
            elif t.op == "list" and self.cur(ctx, e, k).get(t.by) != ctx.bound[parent]:
                return False  # the record the task means is not among the ones this list shows
            k = self.ensure_bound(e, ctx)
            rec = self.tables[e][k]
            ctx.frozen |= {(e, k, x) for x in (*lookup, ent.label)}
            v = rec[t.by]
            if t.op == "find":
                who = "My" if e == self.gen.persona_entity else f"The {_h(e)}'s"
                said = " and ".join(f"{_h(x)} is {rec[x]}" for x in lookup)
                words = [w for x in lookup for w in (_h(x), x.split("_")[0])]
                self._fact(ctx, f"{e}.{'+'.join(lookup)}", f"{who} {said}.", words)
                first = ent.fields[lookup[0]]
                if len(lookup) > 1 and not first.unique and lookup[0] != ent.label:
                    self.new_record(e, {lookup[0]: v})  # same name, other birth date: one key is not enough
            else:
                self.siblings(e, {t.by: v})
                if t.op == "search":
                    self._fact(ctx, f"{e}.{t.by}", f"I am looking at {_h(e)}s with {_h(t.by)} {v}.", [_h(t.by)])
                lv = rec[ent.label]
                self._fact(
                    ctx,
                    f"{e}.label",
                    f"The {_h(e)} I mean is the one with {_h(ent.label)} {lv}.",
                    [_h(ent.label), ent.label.split("_")[0], "which"],
                    identifying=True,
                    vague=f"It is one of the {_h(e)}s; I am not sure which one.",
                )
            step_args = {x: rec[x] for x in lookup} if t.op != "list" else {t.by: ctx.bound[parent]}
            ctx.steps.append(_Step(t.name, step_args))
            ctx.known.add(e)
            return True
        if t.op == "count":
            if e in ctx.created or e in ctx.deleted:
                return False
            parent = ent.fields[t.by].entity
            ctx.counted.add(e)
            ctx.steps.append(_Step(t.name, {t.by: ctx.bound[parent]}, output_field="count"))
            ctx.goals.append(f"Please tell me how many {_h(e)}s the {_h(parent)} has.")
            return True
        if not k:
            return False
        if t.op == "get":
            rec = self.cur(ctx, e, k)
            options = [
                f
                for f in t.fields
                if ent.fields[f].type != "ref"
                and (e, k, f) not in ctx.written
                and ent.fields[f].type != "text"
                and renderings(rec.get(f))  # never ask for an empty value (a create's "" default)
            ]
            out = self.rng.choice(options) if options else ""
            if out:
                ctx.frozen.add((e, k, out))
                ctx.asked.add((e, k))
                ctx.goals.append(f"Please tell me the {_h(out)} of the {_h(e)}.")
            ctx.steps.append(_Step(t.name, {ent.key: k}, output_field=out))
            for f in t.fields:
                if ent.fields[f].type == "ref":
                    ref_e = ent.fields[f].entity
                    if ref_e not in ctx.known:
                        # the task now names "the one of that record": the record this result shows,
                        # whatever an earlier step bound unseen; the link must keep showing it
                        self._fact(ctx, f"{ref_e}.via", f"The {_h(ref_e)} I mean is the one of that {_h(e)}.", [])
                        ctx.bound[ref_e] = self.cur(ctx, e, k)[f]
                        ctx.frozen.add((e, k, f))
                    ctx.known.add(ref_e)
            return True
        if t.op in ("update", "transition", "delete"):
            targets = [t.field] if t.op == "update" else ([t.field, *t.args] if t.op == "transition" else [])
            if any((e, k, f) in ctx.frozen for f in targets):
                return False
            # a field written earlier in the chain is written again only by a transition moving the
            # record on (draft -> signed -> sent); the rubric then expects the last value
            rewrites = [f for f in targets if (e, k, f) in ctx.written]
            if rewrites and (t.op != "transition" or k.startswith("$") or self.tables[e][k].get(t.field) == t.to):
                return False  # (moving back to the initial value would make doing nothing pass)
            if t.op == "delete" and (
                k.startswith("$")
                or e in ctx.counted
                or (e, k) in ctx.asked
                or any(w[0] == e and w[1] == k for w in ctx.written)
            ):
                return False
            conds = dict(t.when)
            if t.op == "transition":
                conds[t.field] = tuple(x for x in t.from_ if x != t.to)
                if not conds[t.field]:
                    return False
            targets_of = {a: ctx.bound[ref_e] for a, ref_e in (t.ref_args.items() if t.op == "transition" else ())}
            for a, rk in targets_of.items():
                ref_e = t.ref_args[a]
                same = self.cur(ctx, e, k).get(a) == rk
                if same and ((e, k, a) in ctx.fixed | ctx.frozen | self.pinned or k.startswith("$")):
                    return False
                if not self.pin(ctx, ref_e, rk, t.require.get(a, {}), check_only=True):
                    return False
            if not any(
                (m := both_conditions(conds, alt)) is not None and self.pin(ctx, e, k, m, check_only=True)
                for alt in (t.when_any or ({},))
            ):
                return False
            for a, rk in targets_of.items():
                ref_e = t.ref_args[a]
                if self.cur(ctx, e, k).get(a) == rk:  # the record must name another one before the change
                    other = self.new_record(ref_e)
                    self.tables[e][k][a] = other
                    if (e, k) in ctx.sim:
                        ctx.sim[(e, k)][a] = other
                self.pin(ctx, ref_e, rk, t.require.get(a, {}), check_only=False)
                ctx.frozen |= {(ref_e, rk, f) for f in t.require.get(a, {}) if "." not in f}
            self.pin_any(ctx, e, k, conds, t.when_any)
            rec = dict(self.cur(ctx, e, k))
            args: dict[str, Any] = {ent.key: k}
            if t.op == "delete":
                ctx.deleted.add(e)
                ctx.items.append({"kind": "db_deleted", "entity": e, "key": k})
                ctx.goals.append(f"Please {self._phrase(t)}.")
            else:
                sets: dict[str, Any] = {}
                if t.op == "update":
                    f = ent.fields[t.field]
                    sets[t.field] = self.values.different(e, f, rec.get(t.field))
                else:
                    sets[t.field] = t.to
                    for a in t.args:
                        if a in targets_of:
                            sets[a] = targets_of[a]
                        else:
                            sets[a] = self.values.different(e, ent.fields[a], rec.get(a))
                for f, v in sets.items():
                    rec[f] = v
                    ctx.written.add((e, k, f))
                    ctx.fixed.add((e, k, f))
                    ctx.items = [
                        i
                        for i in ctx.items
                        if not (i["kind"] == "db_field" and (i["entity"], i["key"], i["field"]) == (e, k, f))
                    ]
                    ctx.items.append({"kind": "db_field", "entity": e, "key": k, "field": f, "value": v})
                    for item in ctx.items:  # a record created earlier in the chain ends with the new value
                        if item.get("placeholder") == k and f in item["fields"]:
                            item["fields"][f] = v
                ctx.sim[(e, k)] = rec
                user_args = {a: sets[a] for a in (t.args if t.op == "transition" else [t.field])}
                args.update(user_args)
                if t.op == "update":
                    ctx.goals.append(f"Please change the {_h(t.field)} of the {_h(e)} to {sets[t.field]}.")
                else:
                    extra = ", ".join(
                        f"{_h(a)}: {v}" if a not in targets_of else f"to the {_h(t.ref_args[a])} I mentioned"
                        for a, v in user_args.items()
                    )
                    ctx.goals.append(f"Please {self._phrase(t)}" + (f" ({extra})." if extra else "."))
            ctx.steps.append(_Step(t.name, args))
            return True
        raise AssertionError(t.op)

    def plan_create(self, ctx: _Chain, t: ToolDef) -> bool:
        e = t.entity
        ent = self.spec.entities[e]
        if not t.needs <= ctx.known or (t.needs | {e}) & ctx.deleted or e in ctx.counted or e in ctx.bound:
            return False
        refs = {a: ctx.bound[ent.fields[a].entity] for a in t.args if ent.fields[a].type == "ref"}
        for a, rk in refs.items():
            if not self.pin(ctx, ent.fields[a].entity, rk, t.require.get(a, {}), check_only=True):
                return False
        for a, rk in refs.items():
            self.pin(ctx, ent.fields[a].entity, rk, t.require.get(a, {}), check_only=False)
            for f in t.require.get(a, {}):
                if "." not in f:
                    ctx.frozen.add((ent.fields[a].entity, rk, f))
        user = {
            a: self.values.make(e, ent.fields[a], unique=a == ent.label) for a in t.args if ent.fields[a].type != "ref"
        }
        placeholder = f"${len(ctx.steps)}"
        ctx.steps.append(_Step(t.name, {**refs, **user}))
        ctx.created.add(e)
        ctx.bound[e] = placeholder
        ctx.known.add(e)
        ctx.sim[(e, placeholder)] = {**t.defaults, **refs, **user}
        ctx.items.append({"kind": "db_created", "entity": e, "fields": {**refs, **user}, "placeholder": placeholder})
        extra = ", ".join(f"{_h(a)} {v}" for a, v in user.items())
        ctx.goals.append(f"Please {self._phrase(t)}" + (f" with {extra}." if extra else "."))
        return True

    def _phrase(self, t: ToolDef) -> str:
        words = t.name.split("_")
        ent_words = t.entity.split("_")
        for i in range(len(words) - len(ent_words) + 1):
            if words[i : i + len(ent_words)] == ent_words:
                art = "a new" if t.op == "create" else "the"
                return " ".join(words[:i] + [art] + words[i:])
        return f"{_h(t.name)} (the {_h(t.entity)})"

    def _fact(
        self, ctx: _Chain, key: str, text: str, keywords: list[str], identifying: bool = False, vague: str = ""
    ) -> None:
        if key not in ctx.facts:
            ctx.facts[key] = Fact(key, text, tuple(dict.fromkeys(keywords)), identifying, vague)
            ctx.fact_step[key] = len(ctx.steps)

    # -- chains ---------------------------------------------------------------------------------

    def weight(self, tool: str, base: int) -> float:
        return self.cfg.reuse_decay ** (self.gen.uses[tool] - base)

    def sample_chain(self, allowed: set[str]) -> tuple[_Chain | None, int]:
        """Up to A attempts to walk a valid chain inside ``allowed``; (chain, attempts) or (None, A)."""
        for attempt in range(1, self.cfg.max_attempts + 1):
            snap = self._snapshot()
            ctx = self._walk(allowed)
            if ctx is not None:
                return ctx, attempt
            self._restore(snap)
        return None, self.cfg.max_attempts

    def _walk(self, allowed: set[str]) -> _Chain | None:
        spec = self.spec
        roots = sorted(t for t in allowed if not spec.tools[t].needs and spec.tools[t].op in ("find", "search"))
        if not roots:
            return None
        ctx = _Chain()
        length = self.rng.randint(self.cfg.min_chain, self.cfg.max_chain)
        cands = roots
        while len(ctx.steps) < length:
            base = min(self.gen.uses[t] for t in cands) if cands else 0
            pool = list(cands)
            added = False
            while pool:
                last_prod = spec.tools[ctx.steps[-1].tool].produces if ctx.steps else frozenset()
                w = [
                    self.weight(t, base)
                    * (1.5 if spec.tools[t].is_write else 1.0)
                    * (2.0 if spec.tools[t].needs & last_prod else 1.0)
                    * (0.4 if ctx.steps and not spec.tools[t].needs else 1.0)
                    for t in pool
                ]
                t = self.rng.choices(pool, weights=w)[0]
                pool.remove(t)
                tool = spec.tools[t]
                ok = self.plan_create(ctx, tool) if tool.op == "create" else self.plan(ctx, tool)
                if ok:
                    added = True
                    break
            if not added:
                break
            used = set(ctx.tools)
            # tools that take an id the chain has; or another root (the user names a second record)
            cands = sorted(
                t
                for t in allowed
                if t not in used
                and (
                    (spec.tools[t].needs and spec.tools[t].needs <= ctx.known)
                    or (t in roots and not spec.tools[t].produces <= ctx.known)
                )
            )
            if not cands:
                break
        self._prune(ctx)
        if len(ctx.steps) < self.cfg.min_chain or not ctx.scored():
            return None
        return ctx

    def _prune(self, ctx: _Chain) -> None:
        """Drop reads that feed no later step and ask for nothing, with the facts they introduced."""
        spec = self.spec
        keep: list[int] = []
        needed: set[str] = set()
        for i in range(len(ctx.steps) - 1, -1, -1):
            t = spec.tools[ctx.steps[i].tool]
            if t.is_write or ctx.steps[i].output_field or t.produces & needed:
                keep.append(i)
                needed |= t.needs
        keep.reverse()
        if len(keep) == len(ctx.steps):
            return
        renumber = {old: new for new, old in enumerate(keep)}
        ctx.steps = [ctx.steps[i] for i in keep]
        ctx.facts = {k: f for k, f in ctx.facts.items() if ctx.fact_step[k] in renumber}
        ctx.fact_step = {k: renumber[i] for k, i in ctx.fact_step.items() if i in renumber}
        for item in ctx.items:  # placeholders name step indices
            if "placeholder" in item:
                item["placeholder"] = _renumber(item["placeholder"], renumber)
            if "key" in item:
                item["key"] = _renumber(item["key"], renumber)
            if "value" in item:
                item["value"] = _renumber(item["value"], renumber)
            if "fields" in item:
                item["fields"] = {k: _renumber(v, renumber) for k, v in item["fields"].items()}
        for step in ctx.steps:
            step.args = {k: _renumber(v, renumber) for k, v in step.args.items()}

    def _snapshot(self) -> tuple[Tables, dict[str, int], dict[tuple[str, str], set[Any]]]:
        return (
            {e: {k: dict(r) for k, r in t.items()} for e, t in self.tables.items()},
            dict(self.serial),
            {k: set(v) for k, v in self.values.used.items()},
        )

    def _restore(self, snap: tuple[Tables, dict[str, int], dict[tuple[str, str], set[Any]]]) -> None:
        self.tables, self.serial, self.values.used = snap[0], snap[1], snap[2]

    # -- expansion ------------------------------------------------------------------------------

    def add_chain(self, ctx: _Chain, kind: str, pool: set[str]) -> None:
        self.chains.append((kind, ctx))
        self.pinned |= ctx.fixed | ctx.frozen | ctx.written
        for t in ctx.tools:
            if t not in self.env_tools:
                self.env_tools.append(t)
                self.log.append({"tool": t, "via": f"chain{len(self.chains)}", "needs": sorted(self.graph.needs(t))})
        for t in ctx.tools:
            self.produced |= self.graph.produces(t)
        self.expand(ctx.tools, pool, self.rng.randint(self.cfg.expand_min, self.cfg.expand_max), ctx)

    def expand(self, seeds: list[str], pool: set[str], budget: int, ctx: _Chain | None) -> None:
        """BFS over the graph from ``seeds``: add a tool only when every id it needs is already returned
        by a tool in the environment; give its entity records beside the chain's records."""
        queue: deque[str] = deque()
        for s in seeds:
            nxt = list(self.graph.succ[s])
            self.rng.shuffle(nxt)
            queue.extend(nxt)
        added = 0
        while queue and added < budget:
            t = queue.popleft()
            if t in self.env_tools or t not in pool:
                continue
            needs = self.graph.needs(t)
            if not needs <= self.produced:
                continue
            self.env_tools.append(t)
            self.log.append({"tool": t, "via": "bfs", "needs": sorted(needs), "available": sorted(self.produced)})
            self.produced |= self.graph.produces(t)
            self.augment(t, ctx)
            added += 1
            nxt = list(self.graph.succ[t])
            self.rng.shuffle(nxt)
            queue.extend(nxt)

    def augment(self, tool: str, ctx: _Chain | None) -> None:
        """Records for an added tool's entity, linked to the chain's bound records where it can."""
        t = self.spec.tools[tool]
        ent = self.spec.entities[t.entity]
        fixed: dict[str, Any] = {}
        for fname, f in ent.fields.items():
            if f.type == "ref" and ctx is not None:
                k = ctx.bound.get(f.entity, "")
                if k and not k.startswith("$") and k in self.tables[f.entity]:
                    fixed[fname] = k
        if not self.tables[t.entity] or fixed:
            self.new_record(t.entity, fixed)

    # -- the whole environment ------------------------------------------------------------------

    def build(self, index: int) -> ToolEnvironment:
        cfg = self.cfg
        all_tools = set(self.spec.tools)
        for e in self.spec.entities:
            for _ in range(cfg.filler_per_entity):
                self.new_record(e)
        first, attempts = self.sample_chain(all_tools)
        if first is None:
            raise GenerationError(f"{self.spec.domain}: no valid seed chain in {attempts} attempts")
        self.add_chain(first, "seed", all_tools)
        while len([k for k, _ in self.chains if k == "seed"]) < cfg.max_seeds:
            remaining = all_tools - set(self.env_tools)
            c = complexity(self.graph, set(self.env_tools), cfg)
            snap = self._snapshot()
            chain, attempts = self.sample_chain(remaining)
            p = growth_probability(c, attempts if chain else None, len(remaining), len(all_tools), cfg)
            self.growth.append(
                {"c": round(c, 4), "g": attempts if chain else None, "remaining": len(remaining), "p": round(p, 4)}
            )
            if chain is None or p <= cfg.tau:
                self._restore(snap)
                break
            self.add_chain(chain, "seed", remaining)
        tries = 0
        while len(self.env_tools) < cfg.min_tools and tries < 8:
            tries += 1
            chain, _ = self.sample_chain(all_tools)
            if chain is not None:
                self.add_chain(chain, "fallback", all_tools)
            else:
                self.expand(list(self.env_tools), all_tools, cfg.min_tools - len(self.env_tools), None)
        if len(self.env_tools) < cfg.min_tools:
            self.expand(list(self.env_tools), all_tools, cfg.min_tools - len(self.env_tools), None)
        if len(self.env_tools) < cfg.min_tools:
            raise GenerationError(f"{self.spec.domain}: only {len(self.env_tools)} tools reachable")
        self.enforce_rules()
        return self.finalize(index)

    def enforce_rules(self) -> None:
        """Seed data that keeps every declared cross-record rule: a record in a rule's ``to`` state
        that breaks it is moved to another state, or (when a task relies on that state) its
        related records are pinned to one alternative of the rule. GenerationError if neither can."""
        spec = self.spec
        protected = _Chain()
        for _ in range(4):
            bad = rule_violations(spec, self.tables)
            if not bad:
                return
            for rule, k, _why in bad:
                e = rule.entity
                if (e, k, rule.field) not in self.pinned | protected.fixed:
                    targets = {r.to for r in spec.rules() if r.entity == e and r.field == rule.field}
                    others = [v for v in spec.entities[e].fields[rule.field].values if v not in targets]
                    if others:
                        self.tables[e][k][rule.field] = self.rng.choice(others)
                        continue
                if not self.pin_any(protected, e, k, rule.when, rule.when_any):
                    raise GenerationError(f"{spec.domain}: {e} {k} breaks rule {rule.tool} and a task relies on it")
        left = rule_violations(spec, self.tables)
        if left:
            raise GenerationError(f"{spec.domain}: seed data still breaks {len(left)} rule(s): {left[0][2]}")

    def finalize(self, index: int) -> ToolEnvironment:
        base = BaseDB(self.spec, self.tables)
        tasks: list[Task] = []
        for n, (kind, ctx) in enumerate(self.chains):
            view = DBView(base)
            golden: list[tuple[str, dict[str, Any]]] = []
            results: list[Any] = []
            items: list[dict[str, Any]] = []
            for step in ctx.steps:
                args = {k: _resolve(v, results, self.spec, ctx) for k, v in step.args.items()}
                ok, payload = self.gen.toolkit.call(view, step.tool, args)
                if not ok:
                    raise GenerationError(f"golden step {step.tool}{args} failed while building: {payload}")
                golden.append((step.tool, args))
                results.append(payload)
                if step.output_field:
                    v = payload[step.output_field]
                    items.append(
                        {
                            "kind": "output",
                            "name": f"{step.tool}.{step.output_field}",
                            "value": v,
                            "renderings": renderings(v),
                        }
                    )
            for item in ctx.items:
                item = dict(item)
                item.pop("placeholder", None)
                if item["kind"] == "db_created":
                    item["fields"] = {k: _resolve(v, results, self.spec, ctx) for k, v in item["fields"].items()}
                elif "key" in item:
                    item["key"] = _resolve(item["key"], results, self.spec, ctx)
                if "value" in item:
                    item["value"] = _resolve(item["value"], results, self.spec, ctx)
                items.append(item)
            items.append({"kind": "no_collateral"})
            persona = self._persona(ctx)
            tasks.append(
                Task(
                    task_id=f"{self.spec.domain}-{index:05d}-t{n}",
                    persona=persona,
                    facts=list(ctx.facts.values()),
                    goals=ctx.goals,
                    rubric=items,
                    golden=golden,
                    chain=ctx.tools,
                    kind=kind,
                )
            )
        manifest = {
            "index": index,
            "seed": self.gen.seed,
            "generation": {
                "chains": [{"kind": k, "tools": c.tools} for k, c in self.chains],
                "added": self.log,
                "growth": self.growth,
                "complexity": round(complexity(self.graph, set(self.env_tools), self.cfg), 4),
                "density": round(self.graph.density(self.env_tools), 4),
            },
        }
        return ToolEnvironment(
            self.spec, self.tables, self.env_tools, tasks, manifest=manifest, toolkit=self.gen.toolkit
        )

    def _persona(self, ctx: _Chain) -> str:
        pe = self.gen.persona_entity
        ent = self.spec.entities[pe]
        k = ctx.bound.get(pe, "")
        if k and not k.startswith("$") and k in self.tables[pe]:
            # a person's name when the entity has one (a patient's label may be a record number)
            shown = next((f for f, fs in ent.fields.items() if fs.type == "name"), ent.label)
            return f"You are {self.tables[pe][k][shown]}, a {_h(pe)} of this {self.spec.domain} service."
        return f"You are a {_h(pe)} of this {self.spec.domain} service."


def _resolve(v: Any, results: list[Any], spec: DomainSpec, ctx: _Chain) -> Any:
    """A ``$i`` placeholder becomes the id that golden step ``i`` (a create) returned."""
    if isinstance(v, str) and v.startswith("$") and v[1:].isdigit():
        i = int(v[1:])
        step_tool = spec.tools[ctx.steps[i].tool]
        return results[i][spec.entities[step_tool.entity].key]
    return v


class GenerationError(RuntimeError):
    """One environment could not be built (the caller counts it as a rejection and moves on)."""


def _renumber(v: Any, renumber: dict[int, int]) -> Any:
    if isinstance(v, str) and v.startswith("$") and v[1:].isdigit():
        return f"${renumber[int(v[1:])]}"
    return v
