"""Isolation levels for sandboxed runs, strongest first, probed once per process.

============  ========================================================================
level         protects against
============  ========================================================================
bwrap         everything below, plus: the whole filesystem is read-only except the run
              directory (private /tmp, /var/tmp, /dev/shm), a private PID namespace (the
              program cannot see or signal any host process), private IPC and UTS. Needs
              ``bwrap`` and unprivileged user namespaces (it runs as the run's own uid).
namespaces    (root only) a private network namespace (no network at all, not even
              loopback), a private mount namespace with fresh tmpfs on /tmp, /var/tmp and
              /dev/shm, plus everything of ``uid``. Other processes stay visible.
uid           (root only) the program runs as a dedicated unprivileged uid per concurrent
              run: it cannot signal the reward worker or other runs, cannot write root's
              files, and ``nproc`` is counted per run. Network is NOT isolated.
rlimits       no privilege to drop: only resource limits and a separate session. The
              program runs as the reward worker's user; network is NOT isolated. Logged.
============  ========================================================================

Every level applies :class:`~longcat_plugins.rewards.sandbox.limits.Limits` and runs the
program in its own session (process group), which is SIGKILLed as a whole on timeout; levels
with a uid also sweep every process of that uid afterwards, so nothing is left behind even if
the program escaped its process group.
"""

from __future__ import annotations

import ctypes
import enum
import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Callable

from longcat_plugins.rewards.sandbox.limits import Limits

logger = logging.getLogger(__name__)

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
_PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")


class IsolationLevel(str, enum.Enum):
    """Strongest first; see the module docstring for what each protects against."""

    BWRAP = "bwrap"
    NAMESPACES = "namespaces"
    UID = "uid"
    RLIMITS = "rlimits"


class IsolationUnavailable(RuntimeError):
    """A requested isolation level cannot be provided on this machine."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _enter_namespaces() -> None:
    """Child side of ``namespaces``: new net + mount namespaces, private tmp dirs."""
    libc = _libc()
    if libc.unshare(CLONE_NEWNET | CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET|CLONE_NEWNS) failed")
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making / private failed")
    for path in _PRIVATE_TMP:
        if os.path.isdir(path) and libc.mount(b"tmpfs", path.encode(), b"tmpfs", 0, b"size=16m,mode=1777") != 0:
            raise OSError(ctypes.get_errno(), f"mounting a private tmpfs on {path} failed")


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def make_preexec(level: IsolationLevel, limits: Limits, uid: int | None) -> Callable[[], None]:
    """The function the child runs between fork and exec (as the reward worker's user)."""

    def preexec() -> None:
        os.setsid()
        if level is IsolationLevel.NAMESPACES:
            _enter_namespaces()
        limits.apply()
        if uid is not None and level is not IsolationLevel.RLIMITS:
            _drop_privileges(uid)

    return preexec


def wrap_argv(level: IsolationLevel, argv: list[str], run_dir: str) -> list[str]:
    """``argv`` prefixed with the bwrap invocation for level ``bwrap``; unchanged otherwise."""
    if level is not IsolationLevel.BWRAP:
        return argv
    prefix = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/var/tmp",
        "--bind",
        run_dir,
        run_dir,
        "--chdir",
        run_dir,
        "--",
    ]
    return prefix + argv


def _probe(level: IsolationLevel, uid: int) -> str | None:
    """None when ``level`` works here, else the reason it does not."""
    is_root = os.geteuid() == 0
    if level is IsolationLevel.RLIMITS:
        return None
    if level in (IsolationLevel.UID, IsolationLevel.NAMESPACES) and not is_root:
        return "needs root to switch to a per-run uid"
    if level is IsolationLevel.BWRAP and shutil.which("bwrap") is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    argv = wrap_argv(level, ["/bin/true"], "/")
    try:
        proc = subprocess.run(
            argv,
            preexec_fn=make_preexec(level, Limits(memory_mb=256, nproc=16), uid if is_root else None),
            capture_output=True,
            timeout=20,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"probe failed: {exc}"
    if proc.returncode != 0:
        return f"probe exited {proc.returncode}: {proc.stderr.decode(errors='replace').strip()[:200]}"
    return None


@functools.cache
def available_levels(probe_uid: int = 61999) -> dict[IsolationLevel, str | None]:
    """Each level -> None if available, else why not (probed once per process)."""
    return {level: _probe(level, probe_uid) for level in IsolationLevel}


def choose_level(requested: str = "auto") -> IsolationLevel:
    """The level to use: the strongest available for ``auto``; the requested one or an error otherwise."""
    levels = available_levels()
    if requested == "auto":
        for level in IsolationLevel:
            if levels[level] is None:
                skipped = {lv.value: why for lv, why in levels.items() if why and list(IsolationLevel).index(lv) < list(IsolationLevel).index(level)}
                if skipped:
                    logger.warning("code sandbox: isolation %s (stronger levels unavailable: %s)", level.value, skipped)
                return level
    try:
        level = IsolationLevel(requested)
    except ValueError:
        names = ", ".join(lv.value for lv in IsolationLevel)
        raise ValueError(f"sandbox isolation {requested!r} is unknown; use auto or one of: {names}") from None
    if levels[level] is not None:
        raise IsolationUnavailable(f"sandbox isolation {level.value!r} is unavailable here: {levels[level]}")
    return level
