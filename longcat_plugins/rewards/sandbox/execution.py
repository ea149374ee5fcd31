"""What running a program in the sandbox yields, and the one interface that runs it.

A leaf of the sandbox package: the batch API (:mod:`.runner`) and the warm interpreters
(:mod:`.warm`) both speak these types, and the warm harnesses drive any :class:`Executor`
(a :class:`~.runner.Sandbox` is one), so neither module imports the other for them.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Protocol

from longcat_plugins.rewards.sandbox.limits import Limits


@dataclass
class ProcResult:
    """One process tree's outcome."""

    returncode: int | None
    wall_s: float
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def status(self) -> str:
        if self.timed_out or self.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
            return "time_limit"
        if self.returncode == -signal.SIGXFSZ:
            return "output_limit"
        return "ok" if self.returncode == 0 else "runtime_error"

    @property
    def isolation_failed(self) -> bool:
        """bwrap itself failed (its message leads stderr): the program never ran, so whatever the
        status says is the sandbox's failure, never the program's verdict."""
        return self.stderr.startswith("bwrap:")

    def check_isolation(self) -> None:
        """OSError when :attr:`isolation_failed`, for callers whose OSError path is the infra-error one."""
        if self.isolation_failed:
            raise OSError(f"isolation failed: {self.stderr.strip()[:300]}")


@dataclass
class CaseResult:
    passed: bool
    status: str  # passed, wrong_answer, runtime_error, time_limit, output_limit
    wall_s: float = 0.0
    detail: str = ""


class Executor(Protocol):
    """Runs one sandboxed process tree and cleans up after a uid (what :class:`~.runner.Sandbox` offers)."""

    limits: Limits

    async def exec(
        self, argv: list[str], run_dir: str, io_dir: str, limits: Limits, uid: int | None, stdin: str = ""
    ) -> ProcResult:
        """Run ``argv`` in ``run_dir`` under ``limits`` as ``uid``."""
        ...

    async def sweep(self, uid: int | None) -> None:
        """Kill every process of ``uid``."""
        ...
