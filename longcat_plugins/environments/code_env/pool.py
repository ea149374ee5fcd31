"""Workspaces provisioned ahead of demand and recycled off the critical path (2601 report §3.1.1).

A slot is a directory pair (``ws``: the workspace, owned by the slot's sandbox uid; ``io``: the
runner's private files) plus a uid leased from the sandbox for the slot's whole life. An episode
takes a slot already holding its task's pristine repo when one is ready (the common case under
GRPO: a task's n rollouts run back to back), else provisions one on the spot. A released slot is
handed to a background worker that kills what still runs as its uid and resets the workspace to
the pristine copy, so the next episode of that task starts at once. Concurrency is bounded by the
slot count (``acquire`` waits). A slot that cannot be reset, or whose processes survive the sweep,
is destroyed (uid released, directories removed) and a fresh one takes its place. ``close``
leaves nothing behind: no directories, no processes, no held uids.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from longcat_plugins.rewards.sandbox import Sandbox
from longcat_plugins.rewards.sandbox.runner import live_pids_of_uid

logger = logging.getLogger(__name__)


class PoolClosed(RuntimeError):
    """The pool was closed while an episode waited for a slot."""


@dataclass
class Slot:
    """One reusable workspace."""

    index: int
    dir: str
    uid: int | None
    lock_fd: int | None
    task_dir: str | None = None  # whose pristine repo ``ws`` holds (None: empty)
    uses: int = 0

    @property
    def ws(self) -> str:
        return os.path.join(self.dir, "ws")

    @property
    def io(self) -> str:
        return os.path.join(self.dir, "io")


def copy_owned(src: str, dst: str, uid: int | None) -> None:
    """An exact copy of the tree ``src`` at ``dst`` (links kept as links), every entry owned by
    ``uid`` (the sandbox's user for the workspace; ``None``: left as copied)."""
    shutil.copytree(src, dst, symlinks=True)
    if uid is not None:
        for dirpath, dirnames, filenames in os.walk(dst):
            os.lchown(dirpath, uid, uid)
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), uid, uid)


@dataclass
class PoolStats:
    """Counters (for the bench and the leak test)."""

    created: int = 0
    destroyed: int = 0
    replaced: int = 0
    ready_hits: int = 0
    on_demand: int = 0
    recycled: int = 0
    provision_s: list[float] = field(default_factory=list)  # critical-path provisioning per acquire


class WorkspacePool:
    """At most ``size`` workspaces over ``sandbox``; thread-safe (episodes run in worker threads)."""

    def __init__(self, sandbox: Sandbox, size: int = 8, recycle_workers: int = 2) -> None:
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.sandbox = sandbox
        self.size = size
        self.root = tempfile.mkdtemp(dir=sandbox.work_root, prefix="pool")
        os.chmod(self.root, 0o711)
        self.stats = PoolStats()
        #: every uid a slot of this pool ever held (for leak checks)
        self.uids_seen: set[int] = set()
        self._cond = threading.Condition()
        self._ready: OrderedDict[int, Slot] = OrderedDict()  # free slots, least recently used first
        self._busy: set[int] = set()
        self._slots = 0  # live slots (free, busy, or being recycled)
        self._next = 0
        self._closed = False
        self._recycler = ThreadPoolExecutor(recycle_workers, thread_name_prefix="lc-pool-recycle")

    # -- slots -----------------------------------------------------------------------------
    def _new_slot(self) -> Slot:
        with self._cond:
            index = self._next
            self._next += 1
        uid, fd = asyncio.run(self.sandbox.lease_uid())
        if uid is not None:
            self.uids_seen.add(uid)
        d = os.path.join(self.root, f"slot{index}")
        try:
            os.mkdir(d, 0o711)
            os.mkdir(os.path.join(d, "io"), 0o700)
        except OSError:
            asyncio.run(self.sandbox.release_uid(uid, fd))
            raise
        self.stats.created += 1
        return Slot(index, d, uid, fd)

    def _destroy(self, slot: Slot) -> None:
        try:
            asyncio.run(self.sandbox.release_uid(slot.uid, slot.lock_fd))
        finally:
            shutil.rmtree(slot.dir, ignore_errors=True)
            self.stats.destroyed += 1

    def _fill(self, slot: Slot, task_dir: str) -> None:
        """Make ``slot.ws`` an exact copy of the task's pristine repo, owned by the slot's uid."""
        if os.path.lexists(slot.ws):
            shutil.rmtree(slot.ws)
        copy_owned(os.path.join(task_dir, "repo"), slot.ws, slot.uid)
        os.chmod(slot.ws, 0o700)
        slot.task_dir = task_dir

    # -- API -------------------------------------------------------------------------------
    def acquire(self, task_dir: str, timeout: float | None = None) -> Slot:
        """A slot whose workspace is ``task_dir``'s pristine repo; waits while every slot is busy."""
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        task_dir = os.path.realpath(task_dir)
        with self._cond:
            while True:
                if self._closed:
                    raise PoolClosed("workspace pool is closed")
                slot = next((s for s in self._ready.values() if s.task_dir == task_dir), None)
                if slot is not None:
                    del self._ready[slot.index]
                    self._busy.add(slot.index)
                    self.stats.ready_hits += 1
                    self.stats.provision_s.append(time.monotonic() - start)
                    return slot
                if self._slots < self.size:
                    self._slots += 1
                    slot = None
                    break
                if self._ready:  # evict the least recently used free slot of another task
                    _, slot = self._ready.popitem(last=False)
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"no free workspace within {timeout} s (pool size {self.size})")
                self._cond.wait(left)
        try:
            if slot is None:
                slot = self._new_slot()
            with self._cond:
                self._busy.add(slot.index)
            self._fill(slot, task_dir)
        except BaseException:
            with self._cond:
                self._slots -= 1
                if slot is not None:
                    self._busy.discard(slot.index)
                self._cond.notify_all()
            if slot is not None:
                self._destroy(slot)
            raise
        self.stats.on_demand += 1
        self.stats.provision_s.append(time.monotonic() - start)
        return slot

    def prewarm(self, task_dirs: list[str]) -> None:
        """Provision free slots for ``task_dirs`` now (up to the pool size), ahead of the episodes."""
        for task_dir in task_dirs:
            with self._cond:
                if self._slots >= self.size or self._closed:
                    return
                self._slots += 1
            try:
                slot = self._new_slot()
                self._fill(slot, os.path.realpath(task_dir))
            except BaseException:
                with self._cond:
                    self._slots -= 1
                raise
            with self._cond:
                self._ready[slot.index] = slot
                self._cond.notify_all()

    def release(self, slot: Slot) -> None:
        """Give ``slot`` back; it is reset to its task's pristine repo in the background."""
        slot.uses += 1
        try:
            self._recycler.submit(self._recycle, slot)
        except RuntimeError:  # closed: nothing will reuse it
            with self._cond:
                self._busy.discard(slot.index)
                self._slots -= 1
            self._destroy(slot)

    def _recycle(self, slot: Slot) -> None:
        try:
            asyncio.run(self.sandbox.sweep(slot.uid))
            if slot.uid is not None and live_pids_of_uid(slot.uid):
                raise RuntimeError(f"processes of uid {slot.uid} survive the sweep")
            assert slot.task_dir is not None
            self._fill(slot, slot.task_dir)
        except Exception as exc:  # noqa: BLE001 - a wedged slot is replaced, never reused
            logger.warning("code env pool: slot %d is replaced: %s", slot.index, exc)
            try:
                self._destroy(slot)
            finally:
                with self._cond:  # its place is free: the next acquire creates a fresh slot
                    self._busy.discard(slot.index)
                    self._slots -= 1
                    self.stats.replaced += 1
                    self._cond.notify_all()
            return
        with self._cond:
            self._busy.discard(slot.index)
            self.stats.recycled += 1
            if self._closed:
                self._slots -= 1
                destroy = True
            else:
                self._ready[slot.index] = slot
                destroy = False
            self._cond.notify_all()
        if destroy:
            self._destroy(slot)

    def close(self) -> None:
        """Wait for recycling, then destroy every slot and the pool directory."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._recycler.shutdown(wait=True)
        with self._cond:
            free = list(self._ready.values())
            self._ready.clear()
            self._slots -= len(free)
        for slot in free:
            self._destroy(slot)
        if self._busy:
            logger.warning("code env pool closed with %d workspaces still in use", len(self._busy))
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> WorkspacePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
