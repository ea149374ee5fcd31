"""A small pool of killable worker processes: the hard time limit for sympy.

A signal alarm cannot interrupt sympy stuck in C code or a huge integer power, and does not
work off the main thread (verl runs ``compute_score`` in an executor thread). So each check is
sent over a pipe to a worker process; if no answer arrives in time the worker is SIGKILLed and
replaced. Workers come from a ``forkserver`` with sympy preloaded: a replacement costs
milliseconds, and forking never copies the reward worker's threads. Each worker caps its
address space (a memory bomb raises MemoryError instead of swapping the host) and, when
started as root, drops to an unprivileged uid (sympy's parser calls ``eval``).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import os
import queue
import resource
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

logger = logging.getLogger(__name__)

_PRELOAD = ["longcat_plugins.rewards.math.equivalence"]


def _worker_main(conn: Connection, memory_mb: int, drop_uid: int | None) -> None:
    """Worker loop: receive (pred, gold), send back (verdict, detail) or ("error", message)."""
    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if drop_uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(drop_uid)
        os.setuid(drop_uid)
    from longcat_plugins.rewards.math.equivalence import check

    conn.send(("ready", ""))
    while True:
        try:
            pred, gold = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        try:
            reply: tuple[str, str] = check(pred, gold)
        except MemoryError:
            reply = ("error", "MemoryError: the check exceeded the worker's memory limit")
        except RecursionError:
            reply = ("error", "RecursionError: expression nested too deeply")
        except Exception as exc:  # noqa: BLE001 - every failure is reported as an invalid result
            reply = ("error", f"{type(exc).__name__}: {str(exc)[:200]}")
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


@dataclass
class _Worker:
    process: Any
    conn: Connection


class CheckPool:
    """``check(pred, gold, timeout)`` in one of ``size`` worker processes, never longer than ``timeout``."""

    def __init__(self, size: int = 2, memory_mb: int = 2048, drop_uid: int | None = 65534) -> None:
        if size < 1:
            raise ValueError(f"CheckPool size must be >= 1, got {size}")
        self.size, self.memory_mb, self.drop_uid = size, memory_mb, drop_uid
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(_PRELOAD)
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self.replaced = 0
        for _ in range(size):
            self._idle.put(self._spawn())

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, self.memory_mb, self.drop_uid), daemon=True)
        proc.start()
        child.close()
        # wait for the worker to be ready so start-up time never counts against a check's limit
        if not parent.poll(120) or parent.recv()[0] != "ready":
            proc.kill()
            raise RuntimeError("math check worker did not start within 120 s")
        return _Worker(proc, parent)

    def _replace(self, worker: _Worker) -> None:
        worker.process.kill()
        worker.process.join(timeout=5)
        worker.conn.close()
        self.replaced += 1
        self._idle.put(self._spawn())

    def check(self, pred: str, gold: str, timeout: float) -> tuple[str, str]:
        """(verdict, detail); verdict ``timeout`` or ``error`` when no answer could be computed."""
        if self._closed:
            raise RuntimeError("CheckPool is closed")
        worker = self._idle.get()
        start = time.monotonic()
        try:
            worker.conn.send((pred, gold))
            if worker.conn.poll(timeout):
                reply = worker.conn.recv()
                self._idle.put(worker)
                return reply
        except (EOFError, OSError) as exc:
            self._replace(worker)
            return "error", f"worker died: {type(exc).__name__} (exit code {worker.process.exitcode})"
        self._replace(worker)
        return "timeout", f"check exceeded {timeout:g}s (killed after {time.monotonic() - start:.2f}s)"

    def close(self) -> None:
        """Kill every worker."""
        self._closed = True
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                return
            worker.process.kill()
            worker.process.join(timeout=5)
            worker.conn.close()


_pools: dict[tuple[int, int, int | None], CheckPool] = {}
_pools_lock = threading.Lock()


def shared_pool(size: int = 2, memory_mb: int = 2048, drop_uid: int | None = 65534) -> CheckPool:
    """The process-wide pool for these settings, created on first use and closed at exit."""
    key = (size, memory_mb, drop_uid)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None or pool._closed:
            pool = _pools[key] = CheckPool(size, memory_mb, drop_uid)
        return pool


@atexit.register
def _close_all() -> None:
    for pool in list(_pools.values()):
        pool.close()
