"""Verification of generated environments (report §3.1.1: every environment stays executable and
verifiable). Each task's golden chain must run without an error and pass its rubric, and require
no empty output (a rubric any answer would meet); an empty
trajectory, the chain missing its last state-changing step, and the chain with one argument changed
must each fail. An agent that may only use revealed ids (:func:`revealed_only_replay`) must solve
the task, and no content-free sign-off (:data:`SIGNOFFS`) may meet a required output, with or
without the golden chain run first. An environment with any task that does not behave so is
rejected.

:func:`check_tools` is the unit test of the generated tool code itself (once per domain, before
any environment is built)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from longcat_plugins.environments.domain import Toolkit, rule_violations
from longcat_plugins.environments.rubric import renderings
from longcat_plugins.environments.runtime import Task, ToolEnvironment
from longcat_plugins.environments.spec import DomainSpec


@dataclass
class Verdict:
    ok: bool
    #: reason -> count of failed checks (empty when ok)
    reasons: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)


#: answers that say nothing about the task: none may meet a required output (a policy that learns
#: to sign off like this must earn nothing for it)
SIGNOFFS = (
    "I have completed your request.",
    "Done.",
    "Sure: done",
    "All done! Your request has been completed successfully.",
    "Everything is taken care of, confirmed and complete. Have a great day!",
    "Yes, that is done. Is there anything else I can help you with?",
    "Your request has been processed and approved. Thank you for your patience.",
    "No problem, it's all set and active now.",
)


def revealed_only_replay(env: ToolEnvironment, task: Task) -> tuple[list[str], bool]:
    """Replay the golden chain as an agent that may only use ids a user turn or an earlier tool
    result revealed: (the ids it would have had to guess, whether it earns the rubric). An id it
    was never shown is one it cannot type, so the task is unsolvable for it when any is listed."""
    ep = env.new_episode(task.task_id, seed=0)
    unrevealed: list[str] = []
    for name, args in task.golden:
        tool = env.spec.tools[name]
        for p in tool.params:
            v = args.get(p.name)
            if p.ref and isinstance(v, str) and not ep.is_revealed(v):
                unrevealed.append(f"{name}.{p.name}={v}")
        ep.call_tool(name, args)
    return unrevealed, not unrevealed and ep.evaluate(ep.golden_answer()).success


def signoff_met(env: ToolEnvironment, task: Task) -> list[str]:
    """The required outputs a :data:`SIGNOFFS` answer meets, after no call and after the golden
    chain (``name: answer``; empty: none)."""
    outputs = [i for i, item in enumerate(task.rubric) if item["kind"] == "output"]
    if not outputs:
        return []
    met: list[str] = []
    fresh = env.new_episode(task.task_id, seed=0)
    done = env.new_episode(task.task_id, seed=0)
    for name, args in task.golden:
        done.call_tool(name, args)
    for ep in (fresh, done):
        for answer in SIGNOFFS:
            details = ep.evaluate(answer).details
            for k, ok in details.items():
                if ok and k.split(":")[1] == "output":
                    met.append(f"{k}: {answer!r}")
    return sorted(set(met))


def run_chain(
    env: ToolEnvironment, task: Task, chain: list[tuple[str, dict[str, Any]]], answer: str
) -> tuple[bool, bool]:
    """(every call ok, rubric passed) for ``chain`` on a fresh clean episode."""
    ep = env.new_episode(task.task_id, seed=0)
    all_ok = True
    for name, args in chain:
        all_ok &= ep.call_tool(name, args).ok
    return all_ok, ep.evaluate(answer).success


def _mutated(chain: list[tuple[str, dict[str, Any]]], env: ToolEnvironment) -> list[tuple[str, dict[str, Any]]] | None:
    """The chain with the last write's last user-supplied argument changed (a wrong value)."""
    for i in range(len(chain) - 1, -1, -1):
        name, args = chain[i]
        t = env.spec.tools[name]
        if not t.is_write:
            continue
        for p in reversed(t.params):
            if p.ref or p.name not in args:
                continue
            v = args[p.name]
            if isinstance(v, bool):
                w: Any = not v
            elif isinstance(v, (int, float)):
                w = v + 1
            elif p.field.type == "enum":
                others = [x for x in p.field.values if x != v]
                if not others:
                    continue
                w = others[0]
            else:
                w = f"{v}-x"
            return chain[:i] + [(name, {**args, p.name: w})] + chain[i + 1 :]
    return None


def verify_environment(env: ToolEnvironment, min_tools: int = 20) -> Verdict:
    v = Verdict(ok=True)

    def fail(reason: str, msg: str) -> None:
        v.ok = False
        v.reasons[reason] = v.reasons.get(reason, 0) + 1
        v.messages.append(msg)

    if len(env.tool_names) < min_tools:
        fail("too_few_tools", f"{len(env.tool_names)} tools < {min_tools}")
    for rule, key, why in rule_violations(env.spec, env.base.tables):
        fail("seed_rule_violated", f"{rule.entity} {key} is {rule.to} but breaks {rule.tool}: {why}")
    for task in env.tasks:
        answer = env.new_episode(task.task_id, seed=0).golden_answer()
        golden = list(task.golden)
        calls_ok, passed = run_chain(env, task, golden, answer)
        if not calls_ok:
            fail("golden_call_failed", f"{task.task_id}: a golden call returned an error")
        if not passed:
            fail("golden_rubric_failed", f"{task.task_id}: the golden chain does not pass its rubric")
        if run_chain(env, task, [], "")[1]:
            fail("empty_passes", f"{task.task_id}: an empty trajectory passes")
        writes = [i for i, (n, _) in enumerate(golden) if env.spec.tools[n].is_write]
        if writes:
            i = writes[-1]
            if run_chain(env, task, golden[:i] + golden[i + 1 :], answer)[1]:
                fail("missing_step_passes", f"{task.task_id}: the chain without step {i} passes")
        wrong = _mutated(golden, env)
        if wrong is not None and run_chain(env, task, wrong, answer)[1]:
            fail("wrong_argument_passes", f"{task.task_id}: the chain with a wrong argument passes")
        for item in task.rubric:
            if item["kind"] == "output" and not renderings(item.get("value")):
                fail("empty_required_output", f"{task.task_id}: requires an empty output {item.get('name', '')}")
        if task.required_outputs and run_chain(env, task, golden, "Done.")[1]:
            fail("missing_output_passes", f"{task.task_id}: passes without stating the required outputs")
        unrevealed, solved = revealed_only_replay(env, task)
        if unrevealed:
            fail("golden_uses_unrevealed_id", f"{task.task_id}: nothing reveals {', '.join(unrevealed)}")
        elif not solved:
            fail("revealed_only_fails", f"{task.task_id}: an agent using only revealed ids cannot solve it")
        for met in signoff_met(env, task):
            fail("signoff_meets_output", f"{task.task_id}: a content-free answer meets {met}")
    return v


def check_tools(spec: DomainSpec, toolkit: Toolkit | None = None, seed: int = 0) -> dict[str, str]:
    """Unit-test every generated tool on a synthetic database (the report validates generated tool
    code by unit tests): valid calls do what the op says, invalid ones are refused. Returns
    tool name -> what went wrong (empty: all pass)."""
    import random

    from longcat_plugins.environments.domain import BaseDB, DBView
    from longcat_plugins.environments.values import ValueMaker

    kit = toolkit or Toolkit(spec)
    values = ValueMaker(random.Random(seed))
    tables: dict[str, dict[str, dict[str, Any]]] = {e: {} for e in spec.entities}

    def make(e: str) -> str:
        ent = spec.entities[e]
        rec: dict[str, Any] = {}
        for fname, f in ent.fields.items():
            if f.type == "ref":
                rec[fname] = next(iter(tables[f.entity])) if tables[f.entity] else make(f.entity)
            else:
                rec[fname] = values.make(e, f, unique=fname == ent.label)
        key = f"{ent.prefix}-{len(tables[e]) + 1:04d}"
        tables[e][key] = rec
        return key

    for e in spec.entities:
        while len(tables[e]) < 3:
            make(e)
    base = BaseDB(spec, tables)
    problems: dict[str, str] = {}
    for name in spec.tools:
        try:
            err = _check_tool(spec, kit, base, DBView, values, name)
        except Exception as exc:  # noqa: BLE001 - a crashing tool is exactly what this reports
            err = f"raised {type(exc).__name__}: {exc}"
        if err:
            problems[name] = err
    return problems


def _check_tool(spec: DomainSpec, kit: Toolkit, base: Any, view_cls: Any, values: Any, name: str) -> str | None:
    t = spec.tools[name]
    ent = spec.entities[t.entity]
    e = t.entity
    view = view_cls(base)
    key = next(iter(base.tables[e]))
    rec = dict(base.tables[e][key])

    def call(args: dict[str, Any]) -> tuple[bool, Any]:
        return kit.call(view, name, args)

    required = [p.name for p in t.params if p.required]
    if required:
        ok, _ = call({})
        if ok:
            return "accepted a call without its required arguments"
    ok, _ = call({"no_such_argument": 1})
    if ok:
        return "accepted an unknown argument"
    if t.op == "find":
        ok, out = call({x: rec[x] for x in t.lookup})
        if not ok or out[ent.key] != key:
            return f"did not find {key}: {out}"
        if len(t.lookup) > 1:
            other = {x: rec[x] for x in t.lookup} | {t.lookup[-1]: f"{rec[t.lookup[-1]]}-x"}
            if call(other)[0]:
                return "found a record by only some of its lookup keys"
        return None
    if t.op in ("search", "list", "count"):
        v = rec[t.by]
        want = [k for k, r in base.tables[e].items() if r[t.by] == v]
        ok, out = call({t.by: v})
        if not ok:
            return f"refused a valid call: {out}"
        got = out["count"] if t.op == "count" else [i[ent.key] for i in out["items"]]
        return None if got == (len(want) if t.op == "count" else want) else f"returned {got}, expected {want}"
    if t.op == "get":
        ok, out = call({ent.key: key})
        if not ok or set(out) != {ent.key, *t.fields} or any(out[f] != rec[f] for f in t.fields):
            return f"returned {out} for {key}"
        ok, _ = call({ent.key: "NOPE-0000"})
        return "found a record that does not exist" if ok else None
    if t.op in ("update", "transition", "delete"):
        ready = dict(rec)
        view.put(e, key, ready)
        for f, allowed in {**t.when, **(t.when_any[0] if t.when_any else {})}.items():
            _put_path(spec, view, e, key, f, allowed[0])
        ready = dict(view.get(e, key) or {})
        if t.op == "transition":
            ready[t.field] = t.from_[0]
        view.put(e, key, ready)
        args: dict[str, Any] = {ent.key: key}
        if t.op == "update":
            args[t.field] = values.different(e, ent.fields[t.field], ready[t.field])
        elif t.op == "transition":
            for a in t.args:
                if a in t.ref_args:
                    args[a] = _ready_ref(spec, view, base, t.ref_args[a], t.require.get(a, {}), ready[a])
                else:
                    args[a] = values.different(e, ent.fields[a], ready[a])
        ok, out = call(args)
        if not ok:
            return f"refused a call whose preconditions hold: {out}"
        after = view.get(e, key)
        if t.op == "delete":
            return None if after is None else "the record is still there"
        want = {t.field: args[t.field]} if t.op == "update" else {t.field: t.to, **{a: args[a] for a in t.args}}
        if any(after[f] != v for f, v in want.items()):
            return f"wrote {after}, expected {want}"
        if t.op == "transition" and t.to not in t.from_:
            ok, _ = call(args)
            if ok:
                return f"applied twice although {t.field} is no longer in {list(t.from_)}"
        return None
    if t.op == "create":
        args = {}
        for a in t.args:
            f = ent.fields[a]
            if f.type == "ref":
                args[a] = _ready_ref(spec, view, base, f.entity, t.require.get(a, {}), None)
            else:
                args[a] = values.make(e, f, unique=True)
        ok, out = call(args)
        if not ok:
            return f"refused a call whose preconditions hold: {out}"
        new = view.get(e, out[ent.key])
        if new is None or any(new[a] != v for a, v in args.items()):
            return f"created {new}, expected the arguments {args}"
        return None
    return f"unknown op {t.op}"


def _put_path(spec: DomainSpec, view: Any, e: str, key: str, path: str, value: Any) -> None:
    """Set ``path`` (a field, or ``ref.field...`` on the related record) of record ``key`` in ``view``."""
    head, _, rest = path.partition(".")
    rec = dict(view.get(e, key) or {})
    if not rest:
        rec[head] = value
        view.put(e, key, rec)
        return
    _put_path(spec, view, spec.entities[e].fields[head].entity, rec[head], rest, value)


def _ready_ref(spec: DomainSpec, view: Any, base: Any, e: str, require: dict[str, Any], avoid: Any) -> str:
    """A record of ``e`` other than ``avoid`` made to meet ``require``; its key."""
    pk = next(k for k in base.tables[e] if k != avoid)
    for rf, allowed in require.items():
        _put_path(spec, view, e, pk, rf, allowed[0])
    return pk
