"""Start several training runs at once and let them train one at a time, in order.

verl spends about two minutes of a short GPU run starting (``schedulers/start_gate.py``); a
lent GPU has fifteen. :func:`pipelined` keeps up to ``depth`` runs alive: each is launched with
a start gate (a file path) and holds before its first step until the file exists, and the
files are created one at a time, each when the run before it has finished. So the next runs
start up while one trains, and no two runs ever train at once.

Runs are reported in order: a run that failed while it started up (or was not held by its gate)
stops the bench when its turn comes, so the run training before it finishes first. Whatever
stops the bench (such a failure, ``SIGTERM`` from ``timeout``, Ctrl-C) stops every run's process
tree.
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
    opened: float | None = None
    finished: float | None = None
    result: Any = None
    error: BaseException | None = None


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


def pipelined(
    jobs: Sequence[tuple[str, JobFn]], depth: int, gate_dir: Path, poll_s: float = 0.2
) -> Iterator[tuple[int, Any, dict[str, Any]]]:
    """Run ``jobs`` (label, fn) with up to ``depth`` alive; yield (index, result, overlap) in job
    order as each finishes. ``overlap`` says which other runs were alive while it trained, and
    when (seconds since the first launch) it started, was let train and ended."""
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    gate_dir.mkdir(parents=True, exist_ok=True)
    slots = [_Slot(label, gate_dir / f"gate_{k}") for k, (label, _) in enumerate(jobs)]

    def launch(k: int) -> None:
        slot, fn = slots[k], jobs[k][1]

        def body() -> None:
            try:
                slot.result = fn(slot.gate, slot.procs.append)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
                slot.error = exc
            finally:
                slot.finished = time.perf_counter()

        slot.started = time.perf_counter()
        slot.thread = threading.Thread(target=body, name=f"run-{slot.label}", daemon=True)
        slot.thread.start()

    def alive(k: int) -> list[str]:
        return [s.label for j, s in enumerate(slots) if j != k and s.started is not None and s.finished is None]

    previous = signal.getsignal(signal.SIGTERM)
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:  # `timeout` sends SIGTERM: leave through the cleanup below
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    launched = 0
    t0 = time.perf_counter()
    try:
        while launched < min(depth, len(slots)):
            launch(launched)
            launched += 1
        for k, slot in enumerate(slots):
            ended_early = slot.finished is not None
            slot.gate.touch()
            slot.opened = time.perf_counter()
            seen = set(alive(k))
            assert slot.thread is not None
            while slot.thread.is_alive():
                slot.thread.join(poll_s)
                seen |= set(alive(k))
            if slot.error is not None:  # a failure while it started up or trained stops the bench here
                raise slot.error
            if ended_early:
                raise SystemExit(f"{slot.label} finished before its start gate was opened: the gate did not hold it")
            times = {"started_s": slot.started, "gate_opened_s": slot.opened, "finished_s": slot.finished}
            # seconds since the first launch: when it started, was let train, and ended
            when = {key: round(t - t0, 3) for key, t in times.items() if t is not None}
            yield k, slot.result, {"depth": depth, "others_alive": sorted(seen), **when}
            if launched < len(slots):
                launch(launched)
                launched += 1
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
