"""Id-guessing agents: how a policy could earn a write it never looked up, used to audit the rubric.

Each strategy knows the task's golden chain (an oracle: the strongest guesser) but skips every
lookup, so no id it uses was revealed to it as data: it plays the writes with the right ids, with
the ids padded with blanks, after provoking an error that echoes each id, or with the ``-0003`` id
of each entity (the pattern a policy found in generated targets). The rubric must credit none of
their writes: :func:`guess_credited` lists the strategies that earned a database item on an id the
episode never revealed (empty: the guard holds). ``bench/bench_envs.py --audit`` counts it per
domain (``guessable_credited``); the tests run it on every shipped domain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from longcat_plugins.environments.rubric import id_form
from longcat_plugins.environments.runtime import Task, ToolEnvironment, ToolEpisode

Call = tuple[str, dict[str, Any]]


def _writes(env: ToolEnvironment, task: Task) -> list[Call]:
    return [(n, dict(a)) for n, a in task.golden if env.spec.tools[n].is_write]


def _map_ids(env: ToolEnvironment, calls: list[Call], fn: Callable[[str, str], str]) -> list[Call]:
    """Every id argument (a ref parameter) replaced by ``fn(entity, id)``."""
    out = []
    for name, args in calls:
        tool = env.spec.tools[name]
        new = dict(args)
        for p in tool.params:
            if p.ref and isinstance(new.get(p.name), str):
                new[p.name] = fn(p.ref, new[p.name])
        out.append((name, new))
    return out


def _provoke(env: ToolEnvironment, calls: list[Call]) -> list[Call]:
    """Before each write, a lookup by a user value whose error message echoes each of its ids."""
    probe = next(
        (t for t in env.spec.tools.values() if t.name in env.tool_set and t.op == "find" and len(t.lookup) == 1),
        None,
    )
    out: list[Call] = []
    for name, args in calls:
        if probe is not None:
            tool = env.spec.tools[name]
            out += [(probe.name, {probe.by: args[p.name]}) for p in tool.params if p.ref and p.name in args]
        out.append((name, args))
    return out


def strategies(env: ToolEnvironment, task: Task) -> dict[str, list[Call]]:
    """Name -> the calls of each id-guessing strategy on ``task``."""
    writes = _writes(env, task)
    prefix = {e: ent.prefix for e, ent in env.spec.entities.items()}
    return {
        "skip_lookups": writes,
        "padded_ids": _map_ids(env, writes, lambda e, v: f" {v} "),
        "provoked_error": _provoke(env, writes),
        "guess_0003": _map_ids(env, writes, lambda e, v: f"{prefix[e]}-0003"),
    }


def credited_on_unrevealed(ep: ToolEpisode, answer: str) -> list[str]:
    """The database items the episode earned on ids it never revealed to the agent (a ``db_field``
    or ``db_deleted`` key or ref value, a ``db_created`` record's ref), by rubric detail name."""
    spec = ep.env.spec
    out = ep.evaluate(answer)
    hits = []
    for name, ok in out.details.items():
        item = ep.task.rubric[int(name.split(":")[0])]  # details are named index:kind[:what]
        if not ok or item["kind"] not in ("db_field", "db_deleted", "db_created"):
            continue
        ent = spec.entities[item["entity"]]
        refs = {f for f, fs in ent.fields.items() if fs.type == "ref"}
        if item["kind"] == "db_created":
            ids = [v for f, v in item["fields"].items() if f in refs]
        else:
            ids = [item["key"]] + ([item["value"]] if item.get("field") in refs else [])
        if any(id_form(v) not in ep.revealed for v in ids if isinstance(v, str)):
            hits.append(name)
    return hits


def guess_credited(env: ToolEnvironment, task: Task) -> dict[str, list[str]]:
    """Strategy -> the items it earned on unrevealed ids (only strategies that earned some)."""
    out: dict[str, list[str]] = {}
    for name, calls in strategies(env, task).items():
        ep = env.new_episode(task.task_id, seed=0)
        for tool, args in calls:
            ep.call_tool(tool, args)
        hits = credited_on_unrevealed(ep, ep.golden_answer())
        if hits:
            out[name] = hits
    return out
