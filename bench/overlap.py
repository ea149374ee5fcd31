"""Start several training runs at once, then let them train one at a time, in order.

verl spends about two minutes of a short GPU run starting (``schedulers/start_gate.py``); a
lent GPU has fifteen. :func:`in_batches` launches ``depth`` runs together, each with a start gate
(a file path) that holds it before its first step. Once every run of the batch is waiting at its
gate (or has ended), the gates are opened one at a time, in order, each when the run before it
has ended; the next batch is launched when the last run of this one has ended. So the start-ups
are spent side by side, no two runs train at once, and no run trains while another starts up:
beside a training run there are only runs idle at their gates.

A run that fails (while starting or training) does not stop the others: it is reported in its
place, with its error, and the caller decides. Whatever stops the bench (an error, ``SIGTERM``
from ``timeout``, Ctrl-C) stops every run's process tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

#: what a job is: (gate path, on_start(process)) -> its result
JobFn = Callable[[Path, Callable[[subprocess.Popen[str]], None]], Any]


@dataclass
class _Slot:
    label: str
    gate: Path
    thread: threading.Thread | None = None
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    started: float | None = None
    ready: float | None = None
    opened: float | None = None
    finished: float | None = None
    result: Any = None
    error: BaseException | None = None

    @property
    def waiting(self) -> bool:
        """At its gate: the gate wrote its ``.waiting`` marker (``schedulers/start_gate.py``)."""
        return self.gate.with_name(self.gate.name + ".waiting").exists()


def stop_tree(procs: Sequence[subprocess.Popen[str]], grace_s: float = 10.0) -> None:
    """SIGTERM each process and everything under it (a verl driver starts Ray's processes), then
    SIGKILL what is left after ``grace_s``."""
    victims: list[psutil.Process] = []
    for proc in procs:
        if proc.poll() is not None:
            continue
        with contextlib.suppress(psutil.Error):
            parent = psutil.Process(proc.pid)
            victims += [parent, *parent.children(recursive=True)]
    for victim in victims:
        with contextlib.suppress(psutil.Error):
            victim.terminate()
    _, alive = psutil.wait_procs(victims, timeout=grace_s)
    for victim in alive:
        with contextlib.suppress(psutil.Error):
            victim.kill()


def in_batches(
    jobs: Sequence[tuple[str, JobFn]], depth: int, gate_dir: Path, poll_s: float = 0.2
) -> Iterator[tuple[int, Any, BaseException | None, dict[str, Any]]]:
    """Run ``jobs`` (label, fn) in batches of ``depth``; yield (index, result, error, overlap) in
    job order as each ends. ``overlap`` holds the batch, the runs alive while it trained (all idle
    at their gates) and when, in seconds since the first launch, it started, reached its gate,
    was let train and ended. A run that ended before it was let train gets an error saying so."""
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    gate_dir.mkdir(parents=True, exist_ok=True)
    slots = [_Slot(label, gate_dir / f"gate_{k}") for k, (label, _) in enumerate(jobs)]
    t0 = time.perf_counter()

    def launch(k: int) -> None:
        slot, fn = slots[k], jobs[k][1]

        def body() -> None:
            try:
                slot.result = fn(slot.gate, slot.procs.append)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller with the run's record
                slot.error = exc
            finally:
                slot.finished = time.perf_counter()

        slot.started = time.perf_counter()
        slot.thread = threading.Thread(target=body, name=f"run-{slot.label}", daemon=True)
        slot.thread.start()

    def wait_until_up(batch: range) -> None:
        """Until every run of ``batch`` waits at its gate or has ended."""
        while True:
            for k in batch:
                slot = slots[k]
                if slot.ready is None and slot.waiting:
                    slot.ready = time.perf_counter()
            if all(slots[k].ready is not None or slots[k].finished is not None for k in batch):
                return
            time.sleep(poll_s)

    def report(k: int, beside: set[str], batch: int) -> tuple[int, Any, BaseException | None, dict[str, Any]]:
        slot = slots[k]
        error = slot.error
        if error is None and (slot.opened is None or slot.ready is None):
            error = SystemExit(f"{slot.label} ended before its start gate was opened: the gate did not hold it")
        times = {
            "started_s": slot.started,
            "ready_s": slot.ready,
            "gate_opened_s": slot.opened,
            "finished_s": slot.finished,
        }
        when = {key: round(t - t0, 3) for key, t in times.items() if t is not None}
        return k, slot.result, error, {"depth": depth, "batch": batch, "others_alive": sorted(beside), **when}

    previous = signal.getsignal(signal.SIGTERM)
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:  # `timeout` sends SIGTERM: leave through the cleanup below
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        for first in range(0, len(slots), depth):
            batch = range(first, min(first + depth, len(slots)))
            for k in batch:
                launch(k)
            wait_until_up(batch)
            for k in batch:
                slot = slots[k]
                beside: set[str] = set()
                if slot.finished is None:  # up and held: let it train
                    slot.gate.touch()
                    slot.opened = time.perf_counter()
                    assert slot.thread is not None
                    while slot.thread.is_alive():
                        beside |= {slots[j].label for j in batch if j != k and slots[j].finished is None}
                        slot.thread.join(poll_s)
                yield report(k, beside, first // depth)
    finally:
        stop_tree([p for s in slots for p in s.procs])
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def gate_env(gate: Path) -> dict[str, str]:
    """The environment that holds a run at ``gate`` (see ``schedulers/start_gate.py``)."""
    from longcat_plugins.schedulers.start_gate import ENV_GATE

    return {ENV_GATE: os.fspath(gate)}
