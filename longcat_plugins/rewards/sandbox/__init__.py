"""Code sandbox: compile once, run many test cases, strict limits, no network, nothing left behind.

- :mod:`.limits` — per-run resource limits (CPU time, memory, processes, file size, wall time).
- :mod:`.isolation` — the isolation levels (bwrap / namespaces / uid / rlimits), probed once.
- :mod:`.languages` — how to compile and run each language.
- :mod:`.testcases` — verl's ground-truth formats (prime_code / sandbox_fusion) as test cases.
- :mod:`.execution` — a process's and a case's outcome, and the executor interface.
- :mod:`.warm` — many cases in one warm interpreter, a fork per case.
- :mod:`.runner` — the async batch API (asyncio subprocesses, no polling).
"""

from longcat_plugins.rewards.sandbox.execution import CaseResult
from longcat_plugins.rewards.sandbox.isolation import IsolationLevel, available_levels, choose_level
from longcat_plugins.rewards.sandbox.limits import Limits
from longcat_plugins.rewards.sandbox.runner import Sandbox, SandboxReport, SandboxSetupError
from longcat_plugins.rewards.sandbox.testcases import TestCase, parse_test_cases

__all__ = [
    "CaseResult",
    "IsolationLevel",
    "Limits",
    "Sandbox",
    "SandboxReport",
    "SandboxSetupError",
    "TestCase",
    "available_levels",
    "choose_level",
    "parse_test_cases",
]
