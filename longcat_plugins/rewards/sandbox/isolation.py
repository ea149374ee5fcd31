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
rlimits       not root, no bwrap: only resource limits and a separate session. The
              program runs as the reward worker's user; network is NOT isolated. Logged.
              Refused when running as root (root ignores RLIMIT_NPROC, and a program's
              ``kill(-1)`` would reach every process on the machine).
============  ========================================================================

Every level applies :class:`~longcat_plugins.rewards.sandbox.limits.Limits` and runs the
program in its own session (process group), which is SIGKILLed as a whole on timeout; levels
with a uid also sweep every process of that uid afterwards, so nothing is left behind even if
the program escaped its process group.
"""

from __future__ import annotations

import ctypes
import enum
import fcntl
import functools
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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


def blocked_for_other_users(path: str) -> str | None:
    """The first directory or file on ``path`` a uid with no group in common cannot traverse/execute.

    The program and its toolchain run as a dropped uid: an interpreter under a 0700 ``/root``
    (a pyenv or venv Python) fails every run there, which would read as the policy's fault.
    """
    for candidate in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
        parts = candidate.split(os.sep)
        for depth in range(2, len(parts) + 1):
            prefix = os.sep.join(parts[:depth]) or os.sep
            try:
                mode = os.stat(prefix).st_mode
            except OSError:
                return prefix
            if not mode & 0o001:
                return prefix
    return None


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def make_preexec(level: IsolationLevel, limits: Limits, uid: int | None) -> Callable[[], None]:
    """The function the child runs between fork and exec (as the reward worker's user)."""

    if level is IsolationLevel.RLIMITS and os.geteuid() == 0:
        raise IsolationUnavailable("refusing to run untrusted code as root at isolation level 'rlimits'")

    def preexec() -> None:
        os.setsid()
        if level is IsolationLevel.NAMESPACES:
            _enter_namespaces()
        limits.apply()
        if uid is not None and level is not IsolationLevel.RLIMITS:
            _drop_privileges(uid)

    return preexec


#: The first process of every run, started as the run's uid. It is a child subreaper, so every
#: orphan of the run is re-parented to it and reaped (orphans re-parented to PID 1 may stay
#: zombies for a long time, and zombies count against the uid's RLIMIT_NPROC). When the program
#: exits, or on SIGTERM (the runner's timeout), it kills the rest of the run: with a dedicated
#: uid ("uid" mode) ``kill(-1, SIGKILL)`` reaches every process of that uid and nothing else; in
#: "group" mode (no dedicated uid) only the program's process group. It exits with the
#: program's status, re-raising the signal that killed it (bwrap reports one as 128+N).
_REAPER = """
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
mode, cmd = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.setpgid(0, 0)
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
done = False
def kill_rest(*_):
    try:
        if mode == "uid":
            os.kill(-1, signal.SIGKILL)
        else:
            os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
signal.signal(signal.SIGTERM, kill_rest)
code = 1
while True:
    try:
        got, st = os.wait()
    except ChildProcessError:
        break
    if got == pid:
        code, done = os.waitstatus_to_exitcode(st), True
    if done:
        kill_rest()
sig = -code if code < 0 else (code - 128 if 128 < code <= 192 else 0)
if sig:
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
sys.exit(code)
"""


#: The same reaper in C, compiled once per machine when a C compiler exists: starting the
#: Python reaper costs tens of milliseconds per test case, the C one about one.
_REAPER_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
static pid_t child;
static int uid_mode;
static void kill_rest(void) { if (uid_mode) kill(-1, SIGKILL); else killpg(child, SIGKILL); }
static void on_term(int s) { (void)s; if (child > 0) kill_rest(); }
int main(int argc, char **argv) {
    if (argc < 3) return 126;
    uid_mode = strcmp(argv[1], "uid") == 0;
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    child = fork();
    if (child < 0) return 126;
    if (child == 0) { setpgid(0, 0); execvp(argv[2], argv + 2); _exit(127); }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    int code = 1, sig = 0, done = 0, st;
    for (;;) {
        pid_t p = wait(&st);
        if (p < 0) { if (errno == EINTR) continue; break; }
        if (p == child) {
            done = 1;
            if (WIFEXITED(st)) code = WEXITSTATUS(st);
            else if (WIFSIGNALED(st)) sig = WTERMSIG(st);
        }
        if (done) kill_rest();
    }
    if (!sig && code > 128 && code <= 192) sig = code - 128;
    if (sig) { signal(sig, SIG_DFL); kill(getpid(), sig); }
    return code;
}
"""


@functools.cache
def reaper_argv() -> tuple[str, ...]:
    """The reaper command: the compiled C reaper, or the Python one (logged) without a compiler."""
    import hashlib
    import tempfile

    cc = shutil.which("gcc") or shutil.which("cc")
    digest = hashlib.sha256(_REAPER_C.encode()).hexdigest()[:12]
    bin_dir = (
        "/run/longcat-sandbox-bin"
        if os.geteuid() == 0
        else os.path.join(tempfile.gettempdir(), f"longcat-sandbox-bin-{os.getuid()}")
    )
    exe = os.path.join(bin_dir, f"reaper-{digest}")
    if os.access(exe, os.X_OK):
        return (exe,)
    why = "no C compiler"
    if cc:
        try:
            os.makedirs(bin_dir, mode=0o755, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=bin_dir) as tmp:
                src = os.path.join(tmp, "reaper.c")
                with open(src, "w") as f:
                    f.write(_REAPER_C)
                out = os.path.join(tmp, "reaper")
                proc = subprocess.run([cc, "-O2", "-o", out, src], capture_output=True, timeout=60)
                if proc.returncode == 0:
                    os.chmod(out, 0o755)
                    os.replace(out, exe)
                    return (exe,)
                why = proc.stderr.decode(errors="replace")[-200:]
        except (OSError, subprocess.SubprocessError) as exc:
            why = str(exc)
    logger.warning("code sandbox: using the Python reaper (slower per run): %s", why)
    return (_reaper_python(), "-I", "-S", "-c", _REAPER)


def _reaper_python() -> str:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return "python3"


def wrap_argv(level: IsolationLevel, argv: list[str], run_dir: str, dedicated_uid: bool = True) -> list[str]:
    """``argv`` behind the reaper (every level) and, for level ``bwrap``, the bwrap invocation."""
    reaper = [*reaper_argv(), "uid" if dedicated_uid else "group"]
    if level is not IsolationLevel.BWRAP:
        return reaper + argv
    bwrap = [
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
    return reaper + bwrap + argv


#: per-uid lock files: a uid is used by one run, or one level probe, at a time across every
#: process on the machine (the reaper's ``kill(-1)`` as that uid reaches all of its processes)
UID_LOCK_DIR = "/run/longcat-sandbox-uids"


def lock_uid(uid: int) -> int | None:
    """The lock fd of ``uid`` if no other process holds it (released if we die), else None."""
    os.makedirs(UID_LOCK_DIR, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(UID_LOCK_DIR, f"{uid}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextmanager
def _probe_uid(base: int = 61000, count: int = 1000) -> Iterator[int]:
    """A sandbox uid held for the probes, from the top of the runs' range (runs start at a
    random offset): two processes probing at once, or a probe beside a run, never share a uid,
    so no reaper kills the other's program (which made a level look unavailable)."""
    while True:
        for uid in range(base + count - 1, base - 1, -1):
            fd = lock_uid(uid)
            if fd is not None:
                try:
                    yield uid
                finally:
                    os.close(fd)
                return
        time.sleep(0.05)  # every uid busy machine-wide: rare, wait


def _probe(level: IsolationLevel, uid: int) -> str | None:
    """None when ``level`` works here, else the reason it does not."""
    is_root = os.geteuid() == 0
    if level is IsolationLevel.RLIMITS:
        # root ignores RLIMIT_NPROC and kill(-1) from root reaches every process on the machine
        return "refused as root: without a uid drop the program would run as root" if is_root else None
    if level in (IsolationLevel.UID, IsolationLevel.NAMESPACES) and not is_root:
        return "needs root to switch to a per-run uid"
    if level is IsolationLevel.BWRAP and shutil.which("bwrap") is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    argv = wrap_argv(level, ["/bin/true"], "/", dedicated_uid=is_root)
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
def available_levels() -> dict[IsolationLevel, str | None]:
    """Each level -> None if available, else why not (probed once per process)."""
    if os.geteuid() != 0:
        return {level: _probe(level, -1) for level in IsolationLevel}  # no uid switch without root
    with _probe_uid() as uid:
        return {level: _probe(level, uid) for level in IsolationLevel}


def check_isolation_name(requested: str) -> None:
    """ValueError unless ``requested`` is ``auto`` or a level's name (settings check it before
    Ray starts; whether the level is available is only known where the sandbox runs)."""
    names = ["auto", *(level.value for level in IsolationLevel)]
    if requested not in names:
        raise ValueError(f"isolation must be one of {names}, got {requested!r}")


def choose_level(requested: str = "auto") -> IsolationLevel:
    """The level to use: the strongest available for ``auto``; the requested one or an error otherwise."""
    levels = available_levels()
    if requested == "auto":
        for level in IsolationLevel:
            if levels[level] is None:
                skipped = {
                    lv.value: why
                    for lv, why in levels.items()
                    if why and list(IsolationLevel).index(lv) < list(IsolationLevel).index(level)
                }
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
