"""A small pool of killable worker processes: the hard time limit for sympy.

A signal alarm cannot interrupt sympy stuck in C code or a huge integer power, and does not
work off the main thread (verl runs ``compute_score`` in an executor thread). So each check is
sent to a worker process; if no answer arrives in time the worker is SIGKILLed and the caller
gets ``timeout`` at once: the replacement is forked by a background thread from a preloaded
zygote (:mod:`.worker`), off the caller's critical path. The zygote is a plain subprocess with
its own entry point, so callers need no ``if __name__ == "__main__"`` guard and their main
script is never re-imported. The pool refuses to start, naming the reason, when a worker that
has dropped privileges cannot verify the canary pairs.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from longcat_plugins.rewards.math.worker import MAX_MESSAGE, zygote_argv
from longcat_plugins.rewards.result import RewardSetupError

logger = logging.getLogger(__name__)

_VERDICTS = {"equal", "different", "unparsable_reference", "error"}
START_TIMEOUT_S = 120.0


class PoolStartError(RewardSetupError):
    """The check workers cannot work here (typically: unreadable files after the privilege drop)."""


@dataclass
class _Worker:
    pid: int
    pidfd: int
    conn: Connection

    def kill(self) -> None:
        """SIGKILL through the pidfd (never a recycled pid), then release the handles.

        Without a pidfd (kernel < 5.3) by pid: the zygote's workers are reaped at once, so a
        recycled pid is possible but unlikely in the milliseconds between.
        """
        try:
            if self.pidfd >= 0:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            elif self.pid > 0:
                os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass  # already dead
        finally:
            if self.pidfd >= 0:
                os.close(self.pidfd)
                self.pidfd = -1
            self.conn.close()


class _Zygote:
    """The root process that forks workers; one per pool."""

    def __init__(self, memory_mb: int, drop_uid: int | None) -> None:
        self._memory_mb, self._drop_uid = memory_mb, drop_uid
        self._ctl, child = socket.socketpair()
        self._lock = threading.Lock()
        try:
            self.proc = subprocess.Popen(
                zygote_argv(child.fileno(), memory_mb, drop_uid),
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        finally:
            child.close()
        self._ctl.settimeout(START_TIMEOUT_S)
        try:
            line = self._ctl.makefile("rb").readline(MAX_MESSAGE)
        except OSError as exc:
            self.close()
            raise PoolStartError(f"math check zygote did not start within {START_TIMEOUT_S:g} s: {exc}") from None
        if not line:
            code = self.proc.wait()
            raise PoolStartError(f"math check zygote exited with code {code} before it was ready (see stderr)")
        status, detail = json.loads(line)
        if status != "ready":
            self.close()
            raise PoolStartError(f"math check zygote failed its canary checks as uid {os.getuid()}: {detail}")

    def fork(self, timeout: float = START_TIMEOUT_S, full: bool = True) -> _Worker:
        """A new worker that has dropped privileges and passed its canaries (all, or one when not
        ``full``); PoolStartError if not."""
        with self._lock:
            self._ctl.settimeout(timeout)
            self._ctl.sendall(b"F" if full else b"Q")
            msg, fds, _flags, _addr = socket.recv_fds(self._ctl, 64, 2)
        if not fds:
            raise PoolStartError(f"math check zygote (pid {self.proc.pid}) is gone (exit {self.proc.poll()})")
        worker = _Worker(int(msg), fds[1] if len(fds) > 1 else -1, Connection(fds[0]))
        try:
            if not worker.conn.poll(timeout):
                raise PoolStartError(f"math check worker was not ready within {timeout:g} s")
            status, detail = json.loads(worker.conn.recv_bytes(MAX_MESSAGE))
        except (EOFError, OSError, ValueError) as exc:
            worker.kill()
            raise PoolStartError(f"math check worker died while starting: {type(exc).__name__}") from None
        except PoolStartError:
            worker.kill()
            raise
        if status != "ready":
            worker.kill()
            raise PoolStartError(
                f"math check worker failed its canary pairs after the privilege drop and memory cap "
                f"({detail}). Common causes: the interpreter, virtualenv or this package lives in a "
                f"directory uid {self._drop_uid} cannot read (e.g. under a 0700 /root; install it "
                "world-readable, or set longcat.settings.reward.math.drop_uid=-1 to keep root), or "
                f"memory_mb={self._memory_mb} is too small"
            )
        return worker

    def close(self) -> None:
        self._ctl.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class CheckPool:
    """``check(pred, gold, timeout)`` in one of ``size`` worker processes, never longer than ``timeout``."""

    def __init__(self, size: int = 2, memory_mb: int = 2048, drop_uid: int | None = 65534) -> None:
        if size < 1:
            raise ValueError(f"CheckPool size must be >= 1, got {size}")
        self.size, self.memory_mb, self.drop_uid = size, memory_mb, drop_uid
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._closed = False
        self.replaced = 0
        self._last_error = ""
        self._zygote = _Zygote(memory_mb, drop_uid)
        try:
            for _ in range(size):
                self._idle.put(self._zygote.fork())
        except BaseException:
            self.close()
            raise
        self._to_replace: queue.Queue[None] = queue.Queue()
        threading.Thread(target=self._replenish, name="longcat-math-replenish", daemon=True).start()

    def _replenish(self) -> None:
        """Background thread: fork a replacement for every killed worker."""
        while True:
            self._to_replace.get()
            while not self._closed:
                try:
                    fresh = self._zygote.proc.poll() is not None
                    if fresh:  # killed (OOM?): start a new one, and verify it fully
                        self._zygote = _Zygote(self.memory_mb, self.drop_uid)
                    worker = self._zygote.fork(full=fresh)
                except (PoolStartError, OSError, ValueError) as exc:
                    self._last_error = str(exc)
                    logger.error("math reward: replacing a check worker failed, retrying: %s", exc)
                    time.sleep(1.0)
                    continue
                if self._closed:
                    worker.kill()
                    return
                self.replaced += 1
                self._idle.put(worker)
                break

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        self._to_replace.put(None)

    def check(self, pred: str, gold: str, timeout: float) -> tuple[str, str]:
        """(verdict, detail); verdict ``timeout`` or ``error`` when no answer could be computed."""
        if self._closed:
            raise RuntimeError("CheckPool is closed")
        try:
            worker = self._idle.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            return "error", f"no math check worker became available: {self._last_error or 'all busy'}"
        start = time.monotonic()
        try:
            worker.conn.send_bytes(json.dumps([pred, gold]).encode())
            if worker.conn.poll(timeout):
                verdict, detail = json.loads(worker.conn.recv_bytes(MAX_MESSAGE))
                if verdict not in _VERDICTS or not isinstance(detail, str):
                    raise ValueError(f"malformed reply {verdict!r}")
                self._idle.put(worker)
                return verdict, detail
        except (EOFError, OSError, ValueError, TypeError) as exc:
            self._discard(worker)
            return "error", f"worker died or misbehaved: {type(exc).__name__}: {str(exc)[:100]}"
        self._discard(worker)
        return "timeout", f"check exceeded {timeout:g}s (killed after {time.monotonic() - start:.2f}s)"

    def close(self) -> None:
        """Kill every worker and the zygote."""
        self._closed = True
        while True:
            try:
                self._idle.get_nowait().kill()
            except queue.Empty:
                break
        self._zygote.close()


_pools: dict[tuple[int, int, int, int | None], CheckPool] = {}
_pools_lock = threading.Lock()


def shared_pool(size: int = 2, memory_mb: int = 2048, drop_uid: int | None = 65534) -> CheckPool:
    """The process-wide pool for these settings, created on first use and closed at exit.

    Keyed by pid too: a forked child must not share its parent's sockets to the zygote.
    """
    key = (os.getpid(), size, memory_mb, drop_uid)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None or pool._closed:
            pool = _pools[key] = CheckPool(size, memory_mb, drop_uid)
        return pool


@atexit.register
def _close_all() -> None:
    for (pid, *_), pool in list(_pools.items()):
        if pid == os.getpid():
            pool.close()
