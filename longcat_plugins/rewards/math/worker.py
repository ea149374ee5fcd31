"""The check processes: a root "zygote" with everything imported, and the workers it forks.

The zygote is started as ``python -c`` with this module as its only entry point, so it never
re-imports the caller's ``__main__`` (multiprocessing's ``spawn``/``forkserver`` children do,
which costs seconds inside a verl worker and needs an ``if __name__ == "__main__"`` guard).
It imports sympy and runs the canary checks *as root*, so every module a check needs is loaded
before any worker drops privileges: a dropped worker may be unable to read the interpreter's
or the virtualenv's files at all (a venv under a 0700 ``/root``). Each worker is a fork of the
zygote (milliseconds): it caps its memory, drops to ``drop_uid`` (sympy's parser calls
``eval``), re-runs the canaries and only then reports ready, so a worker that cannot check is
refused at pool start, loudly, instead of marking every sample invalid.

Messages are length-prefixed JSON (never pickle: a worker runs untrusted input through
``eval`` and must not be able to make its parent run code).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import socket
import sys
from multiprocessing.connection import Connection

#: (prediction, reference, expected verdict): one pair per code path of :func:`equivalence.check`
CANARIES: tuple[tuple[str, str, str], ...] = (
    ("a^2-b^2", "(a+b)(a-b)", "equal"),
    ("x^2+1", "(x+1)^2", "different"),
    (r"\sin^2 x + \cos^2 x", "1", "equal"),
    ("y = 2x + 1", "2x - y + 1 = 0", "equal"),
    (r"(-\infty, 3] \cup (5, \infty)", r"(5,\infty)\cup(-\infty,3]", "equal"),
    (r"\{2, 1\}", r"\{1,2\}", "equal"),
    (r"x \in (0,\infty)", r"(0,\infty)", "equal"),
    ("3, 5", r"\{5, 3\}", "equal"),
    (r"50\%", "0.5", "equal"),
    (r"30^\circ", r"\frac{\pi}{6}", "equal"),
    (r"e^{i\pi}", "-1", "equal"),
    (r"\log_2 8", "3", "equal"),
    (r"\binom{5}{2}", "10", "equal"),
    (r"1 \pm \sqrt{2}", r"1+\sqrt2, 1-\sqrt2", "equal"),
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", r"\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}", "equal"),
    (r"\frac{\sqrt{2}}{2}", r"\cos \frac{\pi}{4}", "equal"),
    ("5!", "120", "equal"),
    (r"2\sqrt{2} + i", r"\sqrt{8} + \sqrt{-1}", "equal"),
    (r"\text{Monday}", "monday", "equal"),
    (r"\sqrt{3}", "1.7", "different"),
    # issue 32's paths: exact comparison, the decimal tolerance, percent markers, exact numerals, Unicode
    ("1000001", "1000000", "different"),
    (r"\sqrt{3}", "1.732", "equal"),
    (r"0.5\%", r"50\%", "different"),
    (r"2\frac{1}{4}", r"0.\overline{2}+2", "different"),
    (r"2 \text{ million}", "\u22122000000+4000000", "equal"),
    ("1011_2", "1011_{2}", "equal"),
)
#: modules sympy imports lazily inside functions, found by running the test table and the
#: bench pairs after the canaries; imported by the zygote as root on top of the canary run
PRELOAD = (
    "longcat_plugins.rewards.math.equivalence",
    "sympy.assumptions.wrapper",
    "sympy.sets.setexpr",
    "sympy.tensor.tensor",
)
MAX_MESSAGE = 1 << 20
#: memory a worker must still be able to allocate under its cap before it reports ready
HEADROOM_MB = 64


def run_canaries(pairs: tuple[tuple[str, str, str], ...] = CANARIES) -> str | None:
    """None when every canary pair gets its expected verdict, else what went wrong."""
    from longcat_plugins.rewards.math.equivalence import check

    for pred, gold, want in pairs:
        try:
            got, detail = check(pred, gold)
        except Exception as exc:  # noqa: BLE001 - reported to the pool, which refuses to start
            return f"{pred!r} vs {gold!r} raised {type(exc).__name__}: {exc}"
        if got != want:
            return f"{pred!r} vs {gold!r}: expected {want}, got {got} ({detail})"
    return None


def _serve(conn: Connection) -> None:
    """Worker loop: a JSON ``[pred, gold]`` in, a JSON ``[verdict, detail]`` out."""
    from longcat_plugins.rewards.math.equivalence import check

    while True:
        try:
            pred, gold = json.loads(conn.recv_bytes(MAX_MESSAGE))
        except (EOFError, OSError):
            return
        try:
            reply = check(pred, gold)
        except MemoryError:
            reply = ("error", "MemoryError: the check exceeded the worker's memory limit")
        except RecursionError:
            reply = ("error", "RecursionError: expression nested too deeply")
        except ImportError as exc:
            reply = ("error", f"{type(exc).__name__} after dropping privileges (not preloaded): {exc}")
        except Exception as exc:  # noqa: BLE001 - every failure is reported as an invalid result
            reply = ("error", f"{type(exc).__name__}: {str(exc)[:200]}")
        try:
            conn.send_bytes(json.dumps(list(reply)).encode())
        except OSError:
            return


def _worker(sock: socket.socket, memory_mb: int, drop_uid: int | None, full: bool) -> None:
    """In the forked child: limits, privilege drop, canaries, then serve.

    The first workers of a pool prove the memory headroom and run every canary (the pool
    refuses to start otherwise); a replacement, forked from the same zygote with the same
    limits and uid, skips both so it is ready after milliseconds of CPU even on a loaded host.
    """
    conn = Connection(sock.detach())
    try:
        if memory_mb > 0:
            limit = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if drop_uid is not None and os.getuid() == 0:
            os.setgroups([])
            os.setgid(drop_uid)
            os.setuid(drop_uid)
        # headroom: a cap below what a check needs must fail here, not as MemoryError on every sample
        problem = None
        if full:  # a replacement comes from the same zygote with the same limits: already proven
            headroom = bytearray(HEADROOM_MB << 20)
            del headroom
            problem = run_canaries()
    except Exception as exc:  # noqa: BLE001 - reported to the pool, which refuses to start
        problem = f"{type(exc).__name__}: {exc}"
    if problem is not None:
        who = f"uid {os.getuid()}"
        conn.send_bytes(json.dumps(["failed", f"as {who}: {problem}"]).encode())
        return
    conn.send_bytes(json.dumps(["ready", ""]).encode())
    _serve(conn)


def zygote_main(ctl_fd: int, memory_mb: int, drop_uid: int) -> None:
    """Preload as root, then fork one worker per request on ``ctl_fd`` until the pool closes it."""
    ctl = socket.socket(fileno=ctl_fd)
    for name in PRELOAD:
        importlib.import_module(name)
    problem = run_canaries()  # as root: loads every module the canaries' code paths use
    ctl.sendall(json.dumps(["failed" if problem else "ready", problem or ""]).encode() + b"\n")
    if problem:
        return
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps killed workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the caller, which closes us
    while True:
        try:
            request = ctl.recv(1)
        except OSError:
            return
        if not request:
            return
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ctl.close()
            ours.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _worker(theirs, memory_mb, None if drop_uid < 0 else drop_uid, full=request == b"F")
            finally:
                os._exit(0)
        theirs.close()
        try:
            pidfd = os.pidfd_open(pid)
        except (OSError, AttributeError):  # gone, or no pidfds here: the pool kills by pid
            pidfd = -1
        try:
            socket.send_fds(ctl, [str(pid).encode()], [ours.fileno()] + ([pidfd] if pidfd >= 0 else []))
        finally:
            ours.close()
            if pidfd >= 0:
                os.close(pidfd)


#: the zygote's whole command line: no ``__main__`` of the caller, the caller's ``sys.path``
BOOT = (
    "import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
    "from longcat_plugins.rewards.math.worker import zygote_main; "
    "zygote_main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))"
)


def zygote_argv(ctl_fd: int, memory_mb: int, drop_uid: int | None) -> list[str]:
    """The command that starts a zygote serving ``ctl_fd``."""
    path = [p or os.getcwd() for p in sys.path]
    return [
        sys.executable,
        "-c",
        BOOT,
        json.dumps(path),
        str(ctl_fd),
        str(memory_mb),
        str(-1 if drop_uid is None else drop_uid),
    ]
