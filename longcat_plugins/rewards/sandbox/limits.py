"""Per-run resource limits, applied with setrlimit in the child before it executes anything."""

from __future__ import annotations

import resource
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Limits for one process tree. ``nproc`` counts every process of the run's uid (that is
    why each concurrent run gets its own uid), so a fork bomb stops at ``nproc``."""

    cpu_s: float = 5.0
    wall_s: float = 10.0
    memory_mb: int = 512
    nproc: int = 32
    fsize_mb: int = 16
    nofile: int = 64
    output_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        for name in ("cpu_s", "wall_s", "memory_mb", "nproc", "fsize_mb", "nofile", "output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")

    def apply(self) -> None:
        """Set the rlimits of the calling process (the sandbox child, before exec)."""
        cpu = max(1, int(self.cpu_s + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        mem = self.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc, self.nproc))
        size = self.fsize_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


#: compilers need more than the programs they build
COMPILE_LIMITS = Limits(cpu_s=30.0, wall_s=60.0, memory_mb=2048, nproc=64, fsize_mb=64, nofile=256)
