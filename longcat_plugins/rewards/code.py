"""Code reward: extract the program from the response, run it against verl-format test cases.

``compute_score`` is an *async* verl reward function (verl awaits coroutine reward functions
directly, so many samples' programs run concurrently on the reward worker's event loop). The
score is 1.0 when every case passes (``score_mode: all``) or the pass rate
(``score_mode: pass_rate``); a sandbox failure or a malformed ground truth is invalid (NaN).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from longcat_plugins.bounds import bounded, check_bounds
from longcat_plugins.per_process import PerProcess
from longcat_plugins.rewards.result import RewardSetupError, invalid, scored
from longcat_plugins.rewards.sandbox import Limits, Sandbox, parse_test_cases
from longcat_plugins.rewards.sandbox.isolation import check_isolation_name
from longcat_plugins.rewards.sandbox.languages import ALIASES, LANGUAGES, get_language
from longcat_plugins.rewards.sandbox.runner import check_python_modes

_FENCE = re.compile(r"```([A-Za-z0-9+#]*)[ \t]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class CodeRewardConfig:
    """Settings of the ``code`` reward (``longcat.settings.reward.code``)."""

    language: str = "python"
    isolation: str = "auto"
    score_mode: str = "all"
    #: run at most this many of a sample's test cases (0: all)
    max_cases: int = bounded(0, ge=0)
    max_concurrent: int = bounded(8, ge=1)
    cpu_s: float = bounded(5.0, gt=0)
    wall_s: float = bounded(10.0, gt=0)
    memory_mb: int = bounded(512, gt=0)
    nproc: int = bounded(32, gt=0)
    fsize_mb: int = bounded(16, gt=0)
    python_call_mode: str = "batch"
    python_stdio_mode: str = "warm"

    def __post_init__(self) -> None:
        # everything the sandbox would refuse on the reward worker, refused here (before Ray):
        # there it would make every sample invalid
        check_bounds(self)
        if self.score_mode not in ("all", "pass_rate"):
            raise ValueError(f"score_mode must be 'all' or 'pass_rate', got {self.score_mode!r}")
        get_language(self.language)
        check_isolation_name(self.isolation)
        check_python_modes(self.python_call_mode, self.python_stdio_mode)

    def limits(self) -> Limits:
        return Limits(
            cpu_s=self.cpu_s, wall_s=self.wall_s, memory_mb=self.memory_mb, nproc=self.nproc, fsize_mb=self.fsize_mb
        )


def extract_code(response: str, default_language: str) -> tuple[str | None, str]:
    """(code, language) from the last fenced block whose tag is a known language (or untagged)."""
    found: tuple[str | None, str] = (None, default_language)
    for tag, body in _FENCE.findall(response or ""):
        key = ALIASES.get(tag.lower(), tag.lower())
        if key in LANGUAGES:
            found = (body, key)
        elif not tag:
            found = (body, default_language)
    return found


_SANDBOXES: PerProcess[tuple[Any, ...], Sandbox] = PerProcess()


def get_sandbox(cfg: CodeRewardConfig) -> Sandbox:
    """One sandbox per distinct setting set per process (it owns the per-run uid slots)."""
    key = (cfg.isolation, cfg.limits(), cfg.max_concurrent, cfg.python_call_mode, cfg.python_stdio_mode)
    return _SANDBOXES.get(
        key,
        lambda: Sandbox(
            cfg.isolation,
            cfg.limits(),
            max_concurrent=cfg.max_concurrent,
            python_call_mode=cfg.python_call_mode,
            python_stdio_mode=cfg.python_stdio_mode,
        ),
    )


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl reward function: run the response's program against ``ground_truth``'s test cases."""
    from longcat_plugins.host import settings_with_overrides  # lazily, as the reward module imports without the host

    cfg = settings_with_overrides("reward", "code", CodeRewardConfig, kwargs)
    language = str((extra_info or {}).get("language") or cfg.language)
    try:
        suite = parse_test_cases(ground_truth, cfg.max_cases)
    except ValueError as exc:
        return invalid(f"code reward ({data_source}): {exc}", pass_rate=0.0)
    code, language = extract_code(solution_str, language)
    if code is None:
        return scored(0.0, acc=0.0, pass_rate=0.0)
    try:
        report = await get_sandbox(cfg).run(language, code, suite)
    except RewardSetupError:
        raise
    except (ValueError, RuntimeError) as exc:
        return invalid(f"code reward ({data_source}): {exc}", pass_rate=0.0)
    if report.infra_error:
        return invalid(report.infra_error, pass_rate=0.0)
    if report.unjudgeable:  # the dataset's test, not the answer: neither credit nor blame
        return invalid(f"code reward ({data_source}): {report.unjudgeable}", pass_rate=0.0)
    rate = report.pass_rate
    score = rate if cfg.score_mode == "pass_rate" else float(report.all_passed)
    return scored(score, acc=float(report.all_passed), pass_rate=rate)
