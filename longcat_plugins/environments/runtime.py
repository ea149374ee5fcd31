"""The environment runtime (E1): environment folders, tasks, and isolated episodes.

An environment folder, shaped like a tau2-bench domain folder::

    env_00042/
      domain.json   the domain spec it was generated from (tools are rebuilt from it)
      db.json       the initial database: {entity: {key: record}}
      tools.json    the OpenAI function schemas of this environment's tools (a subset of the domain's)
      policy.md     the system prompt
      tasks.json    [{task_id, persona, facts, goals, rubric, golden, chain}]
      env.json      manifest: domain, seed, tool list, generation log (chains, BFS order, f values)

Loading is cached per folder, so a process running thousands of episodes of one environment reads
and indexes it once; every episode then writes only to its own overlay (:class:`DBView`).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from longcat_plugins.environments.contract import EnvironmentLoadError, Outcome, ToolResult
from longcat_plugins.environments.domain import BaseDB, DBView, Tables, Toolkit
from longcat_plugins.environments.noise import CLEAN, NoiseConfig, ToolNoise
from longcat_plugins.environments.rubric import evaluate as evaluate_rubric
from longcat_plugins.environments.rubric import id_form, mentions, revealed_forms, stated_output, string_values
from longcat_plugins.environments.spec import DomainSpec, parse_spec
from longcat_plugins.environments.user_sim import Fact, ScriptedUser, UserScript, UserSimulator

FILES = ("domain.json", "db.json", "tools.json", "policy.md", "tasks.json", "env.json")


@dataclass
class Task:
    """One task of an environment: user profile, facts, goals, rubric and a golden tool chain."""

    task_id: str
    persona: str
    facts: list[Fact]
    goals: list[str]
    rubric: list[dict[str, Any]]
    golden: list[tuple[str, dict[str, Any]]]
    #: the seed chain's tool names, in order (the golden chain may repeat none of the listing pages)
    chain: list[str] = field(default_factory=list)
    kind: str = "seed"

    @property
    def description(self) -> str:
        """The clean request as one text (what a clean-level user opens with)."""
        return " ".join([f.text for f in self.facts] + self.goals)

    @property
    def required_outputs(self) -> list[Any]:
        return [item["value"] for item in self.rubric if item["kind"] == "output"]

    def script(self) -> UserScript:
        return UserScript(self.persona, self.facts, self.goals)

    def to_dict(self, domain: str = "") -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "kind": self.kind,
            "persona": self.persona,
            "facts": [f.to_dict() for f in self.facts],
            "goals": self.goals,
            "rubric": self.rubric,
            "golden": [[n, a] for n, a in self.golden],
            "chain": self.chain,
            **self.tau2_view(domain),
        }

    def tau2_view(self, domain: str) -> dict[str, Any]:
        """The same task in tau2-bench's task fields (``id``, ``user_scenario``, ``evaluation_criteria``),
        so tau2 users can read it; the loader reads the fields above."""
        return {
            "id": self.task_id,
            "user_scenario": {
                "persona": self.persona,
                "instructions": {
                    "domain": domain,
                    "reason_for_call": " ".join(self.goals),
                    "known_info": " ".join(f.text for f in self.facts),
                    "unknown_info": None,
                    "task_instructions": "Reveal what you know when the agent asks; stop when your requests are done.",
                },
            },
            "evaluation_criteria": {
                "actions": [
                    {"action_id": f"{n}_{i}", "requestor": "assistant", "name": n, "arguments": a}
                    for i, (n, a) in enumerate(self.golden)
                ],
                "communicate_info": [
                    str((item.get("renderings") or [item["value"]])[0])
                    for item in self.rubric
                    if item["kind"] == "output"
                ],
                "reward_basis": ["DB", "COMMUNICATE"],
            },
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return cls(
            task_id=str(d["task_id"]),
            persona=str(d.get("persona", "")),
            facts=[Fact.from_dict(f) for f in d.get("facts", [])],
            goals=list(d.get("goals", [])),
            rubric=list(d["rubric"]),
            golden=[(str(n), dict(a)) for n, a in d.get("golden", [])],
            chain=list(d.get("chain", [])),
            kind=str(d.get("kind", "seed")),
        )


UserFactory = Callable[[UserScript, NoiseConfig, int], UserSimulator]


class ToolEnvironment:
    """One loaded environment: shared spec, toolkit, indexed initial database and tasks."""

    def __init__(
        self,
        spec: DomainSpec,
        db: Tables,
        tools: list[str],
        tasks: list[Task],
        *,
        path: Path | None = None,
        manifest: dict[str, Any] | None = None,
        toolkit: Toolkit | None = None,
    ) -> None:
        unknown = [t for t in tools if t not in spec.tools]
        if unknown:
            raise EnvironmentLoadError(f"{path or 'environment'}: tools not in the domain spec: {unknown}")
        self.spec = spec
        self.domain = spec.domain
        self.path = path or Path(".")
        self.toolkit = toolkit or Toolkit(spec)
        self.base = BaseDB(spec, db)
        self.tool_names = list(tools)
        self.tool_set = frozenset(tools)
        self.tasks = list(tasks)
        self.task_by_id = {t.task_id: t for t in tasks}
        self.manifest = manifest or {}
        self.policy = spec.policy
        self._schemas = [spec.tools[t].openai_schema() for t in tools]

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [json.loads(json.dumps(s)) for s in self._schemas]

    def new_episode(
        self,
        task_id: str,
        *,
        seed: int,
        noise: NoiseConfig | None = None,
        user: UserFactory | None = None,
    ) -> ToolEpisode:
        """A fresh, isolated episode; ``user`` swaps the scripted user simulator for another one."""
        task = self.task_by_id.get(task_id)
        if task is None:
            raise KeyError(f"{self.path}: no task {task_id!r} (tasks: {sorted(self.task_by_id)[:10]})")
        return ToolEpisode(self, task, seed, noise or CLEAN, user)

    # -- disk -----------------------------------------------------------------------------------

    def save(self, out: str | Path) -> None:
        """Write the environment folder (the caller makes it atomic by writing into a temp dir)."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "domain.json").write_text(json.dumps(self.spec.raw, indent=1))
        (out / "db.json").write_text(json.dumps(self.base.tables, separators=(",", ":")))
        (out / "tools.json").write_text(json.dumps(self._schemas, indent=1))
        (out / "policy.md").write_text(self.policy)
        (out / "tasks.json").write_text(json.dumps([t.to_dict(self.domain) for t in self.tasks], indent=1))
        (out / "env.json").write_text(json.dumps({"domain": self.domain, "tools": self.tool_names, **self.manifest}))


class ToolEpisode:
    """One rollout: its own database overlay, tool-noise stream and user simulator (the Episode contract)."""

    __slots__ = (
        "env",
        "task",
        "task_id",
        "domain",
        "noise_level",
        "noise",
        "view",
        "tool_noise",
        "user",
        "tool_calls",
        "tool_errors",
        "latency_s",
        "shown",
        "guessed",
        "revealed",
    )

    def __init__(
        self, env: ToolEnvironment, task: Task, seed: int, noise: NoiseConfig, user: UserFactory | None
    ) -> None:
        self.env = env
        self.task = task
        self.task_id = task.task_id
        self.domain = env.domain
        self.noise = noise
        self.noise_level = noise.level
        self.view = DBView(env.base)
        self.tool_noise = ToolNoise(noise, seed)
        self.user: UserSimulator = (user or ScriptedUser)(task.script(), noise, seed)
        self.tool_calls = 0
        self.tool_errors = 0
        self.latency_s = 0.0
        #: the texts that present data to the agent (the policy, the user's turns with whatever
        #: they echo of the agent's own message masked), in order; the opening is pure, so it is
        #: here even when a loop renders the prompt some other way
        self.shown: list[str] = [env.policy, self.user.opening()]
        #: argument values (blanks stripped) the agent used before a user turn or tool result
        #: presented them
        self.guessed: set[str] = set()
        #: :func:`~.rubric.id_form` of every scalar a successful tool result presented as data: not
        #: an echo of the call's own arguments, and nothing from a call that used a guessed id
        self.revealed: set[str] = set()

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.env.tool_schemas()

    def system_prompt(self) -> str:
        return self.env.policy

    def first_user_message(self) -> str:
        return self.user.opening()

    def call_tool(self, name: str, arguments: dict[str, Any] | str) -> ToolResult:
        self.tool_calls += 1
        parsed = _parsed(arguments)
        tainted = self._note_guesses(name, parsed)
        try:
            result = self._call(name, arguments)
        except Exception as exc:  # noqa: BLE001 - a rollout must never die on the policy's input
            result = ToolResult(json.dumps({"error": f"internal error in {name}: {type(exc).__name__}: {exc}"}), False)
        if not result.ok:
            self.tool_errors += 1
        self.latency_s += result.latency_s
        if result.ok and not tainted:
            self._reveal(result.content, parsed)
        elif result.ok and isinstance(parsed, dict) and self.env.spec.tools[name].is_write:
            # a write made with a guessed id is luck for every record it names
            tool = self.env.spec.tools[name]
            self.guessed |= {str(parsed[p.name]).strip() for p in tool.params if p.ref and p.name in parsed}
        return result

    def is_revealed(self, value: str) -> bool:
        """Whether a user turn or an earlier tool result presented ``value`` (compared canonically)."""
        form = id_form(value)
        return form in self.revealed or mentions("\n".join(self.shown), value.strip(), ignore_case=True)

    def _note_guesses(self, name: str, arguments: Any) -> bool:
        """Record the argument values nothing presented so far (an id typed before a user turn or
        tool result revealed it is a guess, and the rubric does not credit it). True when an id
        argument of the tool was guessed: what that call returns is then no revelation either."""
        if not isinstance(arguments, dict):
            return False
        tool = self.env.spec.tools.get(name)
        ids = {p.name for p in tool.params if p.ref} if tool is not None else set()
        tainted = False
        for key, raw in arguments.items():
            for value in string_values(raw):
                value = value.strip()
                if value and (value in self.guessed or not self.is_revealed(value)):
                    self.guessed.add(value)
                    tainted |= key in ids
        return tainted

    def _reveal(self, content: str, arguments: Any) -> None:
        """Add the scalars of a successful result to :attr:`revealed`, less the call's own
        argument values (a result that echoes the agent's id presents nothing new)."""
        try:
            payload = json.loads(content)
        except json.JSONDecodeError:
            return
        echo = {id_form(v) for v in string_values(arguments)} if isinstance(arguments, dict) else set()
        for leaf in _leaves(payload):
            self.revealed |= revealed_forms(leaf) - echo

    def _call(self, name: str, arguments: dict[str, Any] | str) -> ToolResult:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return ToolResult(json.dumps({"error": f"arguments are not valid JSON: {exc}"}), False)
        if name not in self.env.tool_set:
            return ToolResult(json.dumps({"error": f"unknown tool {name!r}; available: {self.env.tool_names}"}), False)
        latency = self.tool_noise.latency()
        if self.tool_noise.fails(name):
            msg = {"error": "503 Service Unavailable: the service is temporarily unavailable, please retry"}
            return ToolResult(json.dumps(msg), False, latency, transient=True)
        ok, payload = self.env.toolkit.call(self.view, name, arguments, self.noise.page_size)
        if ok:
            payload = self.tool_noise.shape(payload)
        return ToolResult(json.dumps(payload, default=str), ok, latency)

    def user_reply(self, assistant_text: str) -> str | None:
        reply = self.user.reply(assistant_text)
        if reply is not None:
            self.shown.append(_unechoed(reply, assistant_text, self.task))
        return reply

    def evaluate(self, final_answer: str = "") -> Outcome:
        return evaluate_rubric(self.view, self.task.rubric, final_answer, guessed=self.guessed, revealed=self.revealed)

    def golden_chain(self) -> list[tuple[str, dict[str, Any]]]:
        return [(n, dict(a)) for n, a in self.task.golden]

    def golden_answer(self) -> str:
        """A final answer stating every required output (for scripted policies)."""
        outs = [item for item in self.task.rubric if item["kind"] == "output"]
        return "Done. " + "; ".join(stated_output(item, self.env.spec) for item in outs)


def _parsed(arguments: Any) -> Any:
    """A call's arguments as data (a JSON text decoded); None when they do not decode."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None
    return arguments


def _leaves(payload: Any) -> list[Any]:
    """Every scalar in a decoded tool result (nested objects and lists included)."""
    if isinstance(payload, dict):
        return [x for v in payload.values() for x in _leaves(v)]
    if isinstance(payload, list):
        return [x for v in payload for x in _leaves(v)]
    return [payload]


_TOKEN = re.compile(r"[\w-]+")


def _unechoed(reply: str, assistant_text: str, task: Task) -> str:
    """The user's reply with every token it repeats from the agent's message masked, unless the
    user's own script holds that token: a user who repeats the agent's guessed id reveals nothing."""
    own = {t.casefold() for t in _TOKEN.findall(" ".join([task.persona, task.description]))}
    echo = {t.casefold() for t in _TOKEN.findall(assistant_text)} - own
    if not echo:
        return reply
    return _TOKEN.sub(lambda m: "[echo]" if m.group(0).casefold() in echo else m.group(0), reply)


def load_environment(path: str | Path) -> ToolEnvironment:
    """Load an environment folder; cached per resolved path and modification time."""
    p = Path(path).resolve()
    stamps = []
    for f in FILES:
        try:
            stamps.append(os.stat(p / f).st_mtime_ns)
        except OSError:
            stamps.append(-1)
    return _load_cached(str(p), tuple(stamps))


@functools.lru_cache(maxsize=512)
def _load_cached(path: str, stamps: tuple[int, ...]) -> ToolEnvironment:
    p = Path(path)
    if not p.is_dir():
        raise EnvironmentLoadError(f"{p}: not an environment folder (does not exist or is not a directory)")
    missing = [f for f in FILES if not (p / f).exists()]
    if missing:
        raise EnvironmentLoadError(f"{p}: missing {missing} (an environment folder holds {list(FILES)})")
    data: dict[str, Any] = {}
    for f in ("db.json", "tasks.json", "env.json"):
        try:
            data[f] = json.loads((p / f).read_text())
        except json.JSONDecodeError as exc:
            raise EnvironmentLoadError(f"{p / f}: not valid JSON: {exc}") from exc
    try:
        spec, toolkit = _domain_cached((p / "domain.json").read_text())
    except (json.JSONDecodeError, ValueError) as exc:
        raise EnvironmentLoadError(f"{p / 'domain.json'}: not a valid domain spec: {exc}") from exc
    manifest = data["env.json"]
    try:
        tasks = [Task.from_dict(t) for t in data["tasks.json"]]
    except (KeyError, TypeError) as exc:
        raise EnvironmentLoadError(f"{p / 'tasks.json'}: malformed task: {exc!r}") from exc
    tools = manifest.get("tools")
    if not isinstance(tools, list):
        raise EnvironmentLoadError(f"{p / 'env.json'}: key 'tools' must list the environment's tool names")
    extra = {k: v for k, v in manifest.items() if k not in ("domain", "tools")}
    return ToolEnvironment(spec, data["db.json"], tools, tasks, path=p, manifest=extra, toolkit=toolkit)


@functools.lru_cache(maxsize=32)
def _domain_cached(raw_json: str) -> tuple[DomainSpec, Toolkit]:
    """Environments of one domain share one parsed spec and one toolkit (keyed by the file's text)."""
    spec = parse_spec(json.loads(raw_json), source="domain.json")
    return spec, Toolkit(spec)
