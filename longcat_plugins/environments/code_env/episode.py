"""One code episode: a pooled workspace, the unified tools, and the hidden-test reward.

Follows the tool-use :class:`~longcat_plugins.environments.contract.Episode` contract, so the
tool-agent loop drives it unchanged. ``shell`` runs ``/bin/sh -c`` in the workspace inside the
code sandbox (the strongest isolation available: bwrap -> no network, read-only system, private
PID namespace; the slot's own uid; CPU, wall, memory, process and file-size limits). ``submit``
ends the episode; so does an answer without a tool call. ``evaluate`` runs the hidden tests in one
warm sandboxed interpreter (a fork per test: :mod:`longcat_plugins.rewards.sandbox.warm`);
the score is the share passed. When the sandbox itself fails (a shell call or the test run
cannot start), the score is NaN: the sample is invalid and masked, never scored as the model's
mistake.
"""

from __future__ import annotations

import asyncio
import atexit
import math
from dataclasses import dataclass
from typing import Any

from longcat_plugins.bounds import bounded, check_bounds
from longcat_plugins.environments.code_env.pool import Slot, WorkspacePool
from longcat_plugins.environments.code_env.tasks import CodeTask, load_task
from longcat_plugins.environments.code_env.workspace import Workspace, err
from longcat_plugins.environments.contract import Outcome, ToolResult
from longcat_plugins.per_process import PerProcess
from longcat_plugins.rewards.plain import plain
from longcat_plugins.rewards.sandbox import Limits, Sandbox
from longcat_plugins.rewards.sandbox.isolation import check_isolation_name
from longcat_plugins.rewards.sandbox.warm import CodeCase, run_warm, started

SYSTEM_PROMPT = (
    "You are a software engineer working in a Python repository (the current directory). "
    "Use the tools to find the problem, fix it, and check your fix; call submit when you are done."
)
#: shell output kept (bytes); the loop cuts tool messages further
SHELL_OUTPUT_BYTES = 16 * 1024


@dataclass(frozen=True)
class CodeEnvSettings:
    """The sandbox and pool knobs of the code environment."""

    #: sandbox isolation level: auto (strongest available), bwrap, namespaces, uid, rlimits
    isolation: str = "auto"
    #: workspaces per agent-loop worker process (bounds concurrent episodes there)
    pool_size: int = bounded(8, gt=0)
    #: limits of one shell call
    shell_cpu_s: float = bounded(5.0, gt=0)
    shell_wall_s: float = bounded(10.0, gt=0)
    shell_memory_mb: int = bounded(512, gt=0)
    shell_nproc: int = bounded(32, gt=0)
    #: limits of one hidden test (the whole batch gets n times the time)
    test_cpu_s: float = bounded(2.0, gt=0)
    test_wall_s: float = bounded(5.0, gt=0)
    test_memory_mb: int = bounded(512, gt=0)
    #: where workspaces live ('' : the sandbox's default)
    work_root: str = ""

    def __post_init__(self) -> None:
        check_bounds(self)
        check_isolation_name(self.isolation)

    def shell_limits(self) -> Limits:
        return Limits(
            cpu_s=self.shell_cpu_s,
            wall_s=self.shell_wall_s,
            memory_mb=self.shell_memory_mb,
            nproc=self.shell_nproc,
            output_bytes=SHELL_OUTPUT_BYTES,
        )

    def test_limits(self) -> Limits:
        return Limits(cpu_s=self.test_cpu_s, wall_s=self.test_wall_s, memory_mb=self.test_memory_mb)


_POOLS: PerProcess[CodeEnvSettings, WorkspacePool] = PerProcess()
_TASKS: PerProcess[str, CodeTask] = PerProcess()
_pools = _POOLS.values


def get_pool(settings: CodeEnvSettings) -> WorkspacePool:
    """The process's pool for ``settings`` (created on first use, closed at exit)."""

    def create() -> WorkspacePool:
        sandbox = Sandbox(
            settings.isolation,
            settings.shell_limits(),
            max_concurrent=settings.pool_size,
            work_root=settings.work_root or None,
        )
        pool = WorkspacePool(sandbox, settings.pool_size)
        atexit.register(pool.close)
        return pool

    return _POOLS.get(settings, create)


def get_task(task_dir: str) -> CodeTask:
    """The task at ``task_dir``, loaded once per process."""
    return _TASKS.get(task_dir, lambda: load_task(task_dir))


def _schema(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


_S, _I = {"type": "string"}, {"type": "integer"}
TOOL_SCHEMAS = [
    _schema(
        "search",
        "Search the repository: lines matching a regular expression, as path:line: text.",
        {"pattern": _S, "path": _S},
        ["pattern"],
    ),
    _schema(
        "read_file",
        "Read a text file with line numbers (optionally lines start_line..end_line).",
        {"path": _S, "start_line": _I, "end_line": _I},
        ["path"],
    ),
    _schema("write_file", "Create or overwrite a text file.", {"path": _S, "content": _S}, ["path", "content"]),
    _schema(
        "edit",
        "Replace the one exact occurrence of old with new in a file.",
        {"path": _S, "old": _S, "new": _S},
        ["path", "old", "new"],
    ),
    _schema("shell", "Run a shell command in the repository (sandboxed, no network).", {"command": _S}, ["command"]),
    _schema("submit", "Submit the repository as it is now; ends the episode.", {}, []),
]


class CodeEpisode:
    """One rollout of one code task over a pooled workspace; ``close`` returns the workspace."""

    domain = "code"
    noise_level = 0

    def __init__(self, task: CodeTask, pool: WorkspacePool, settings: CodeEnvSettings, slot: Slot) -> None:
        self.task = task
        self.task_id = task.task_id
        self.pool = pool
        self.settings = settings
        self.slot: Slot | None = slot
        self.workspace = Workspace(slot.ws, slot.uid)
        self.submitted = False
        self.infra_error = ""
        self.tool_ms: list[float] = []

    @classmethod
    def open(cls, extra_info: Any, settings: CodeEnvSettings, timeout: float | None = None) -> CodeEpisode:
        """An episode for one dataset row (``extra_info.task_dir``); waits up to ``timeout`` for a free workspace."""
        info = plain(extra_info) or {}
        if not isinstance(info, dict) or not info.get("task_dir"):
            raise ValueError("extra_info lacks task_dir: a longcat_code_agent sample needs the task's directory")
        task = get_task(str(info["task_dir"]))
        pool = get_pool(settings)
        return cls(task, pool, settings, pool.acquire(str(info["task_dir"]), timeout))

    # -- the Episode contract ---------------------------------------------------------------
    def tool_schemas(self) -> list[dict[str, Any]]:
        return TOOL_SCHEMAS

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def first_user_message(self) -> str:
        files = "\n".join(sorted(p for p in self.task.files))
        return f"{self.task.statement}\n\nFiles:\n{files}"

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        import time

        start = time.perf_counter()
        try:
            return self._call(name, arguments)
        finally:
            self.tool_ms.append((time.perf_counter() - start) * 1e3)

    def _call(self, name: str, a: dict[str, Any]) -> ToolResult:
        if self.slot is None:
            return err("the episode is closed")
        if self.submitted:
            return err("already submitted")
        ws = self.workspace
        if name == "search":
            return ws.search(a.get("pattern"), a.get("path", "."))
        if name == "read_file":
            return ws.read_file(a.get("path"), a.get("start_line", 1), a.get("end_line"))
        if name == "write_file":
            return ws.write_file(a.get("path"), a.get("content"))
        if name == "edit":
            return ws.edit(a.get("path"), a.get("old"), a.get("new"))
        if name == "shell":
            return self._shell(a.get("command"))
        if name == "submit":
            self.submitted = True
            return ToolResult("Submitted.", ok=True)
        return err(f"unknown tool {name!r}; tools: search, read_file, write_file, edit, shell, submit")

    def _shell(self, command: object) -> ToolResult:
        if not isinstance(command, str) or not command.strip():
            return err("command must be a non-empty string")
        if len(command) > 10_000:
            return err("command is longer than 10000 characters")
        slot = self.slot
        assert slot is not None
        sandbox = self.pool.sandbox

        async def go() -> Any:
            try:
                return await sandbox.exec(
                    ["/bin/sh", "-c", command], slot.ws, slot.io, self.settings.shell_limits(), slot.uid
                )
            finally:
                await sandbox.sweep(slot.uid)

        try:
            res = asyncio.run(go())
        except OSError as exc:
            self.infra_error = f"shell: {type(exc).__name__}: {exc}"
            return err("the sandbox failed to run the command (not your fault)")
        if res.isolation_failed:
            self.infra_error = f"shell: isolation failed: {res.stderr.strip()[:200]}"
            return err("the sandbox failed to run the command (not your fault)")
        head = {
            "ok": "",
            "time_limit": f" (killed: over the {self.settings.shell_wall_s:g} s / {self.settings.shell_cpu_s:g} s CPU limit)",
            "output_limit": " (killed: output file size limit)",
        }.get(res.status, "")
        code = res.returncode if res.returncode is not None else -9
        body = f"exit code {code}{head}\n{res.stdout}"
        if res.stderr:
            body += f"\n[stderr]\n{res.stderr}"
        return ToolResult(body, ok=res.status == "ok" and code == 0)

    def user_reply(self, assistant_text: str) -> str | None:
        return None  # an answer without a tool call ends the episode, like submit

    def evaluate(self, final_answer: str = "") -> Outcome:
        """Hidden tests passed / hidden tests (NaN when the sandbox failed)."""
        if self.slot is None:
            raise RuntimeError("evaluate() after close()")
        if self.infra_error:
            return Outcome(False, math.nan, notes={"infra_error": self.infra_error})
        slot, sandbox = self.slot, self.pool.sandbox
        cases = [CodeCase(t["name"], t["code"]) for t in self.task.hidden]
        module = self.task.meta.get("module", "")

        async def go() -> Any:
            try:
                return await run_warm(
                    sandbox, cases, slot.ws, slot.io, slot.uid, self.settings.test_limits(), (module,)
                )
            finally:
                await sandbox.sweep(slot.uid)

        try:
            results, proc = asyncio.run(go())
        except OSError as exc:
            return Outcome(False, math.nan, notes={"infra_error": f"tests: {type(exc).__name__}: {exc}"})
        if not started(proc):
            why = (proc.stderr or proc.status)[-200:]
            return Outcome(False, math.nan, notes={"infra_error": f"test harness did not start: {why}"})
        passed = sum(r.passed for r in results)
        details = {c.name: r.status for c, r in zip(cases, results, strict=True)}
        return Outcome(passed == len(cases), passed / len(cases), details=details)

    def golden_chain(self) -> list[tuple[str, dict[str, Any]]]:
        """A solving trajectory: look, fix with one edit, run the public test, submit."""
        fix = self.task.golden_edit
        return [
            ("read_file", {"path": fix["path"]}),
            ("edit", {"path": fix["path"], "old": fix["old"], "new": fix["new"]}),
            ("shell", {"command": f"PYTHONPATH=. python3 {self.task.public_test}"}),
            ("submit", {}),
        ]

    def close(self) -> None:
        """Return the workspace to the pool (reset in the background); idempotent."""
        slot, self.slot = self.slot, None
        if slot is not None:
            self.pool.release(slot)
