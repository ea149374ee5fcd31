"""Per-run resource limits, applied with setrlimit in the child before it executes anything."""

from __future__ import annotations

import resource
from dataclasses import dataclass

from longcat_plugins.bounds import bounded, check_bounds


@dataclass(frozen=True)
class Limits:
    """Limits for one process tree. ``nproc`` counts every process of the run's uid (that is
    why each concurrent run gets its own uid), so a fork bomb stops at ``nproc``."""

    cpu_s: float = bounded(5.0, gt=0)
    wall_s: float = bounded(10.0, gt=0)
    memory_mb: int = bounded(512, gt=0)
    nproc: int = bounded(32, gt=0)
    fsize_mb: int = bounded(16, gt=0)
    nofile: int = bounded(64, gt=0)
    output_bytes: int = bounded(1 << 20, gt=0)

    def __post_init__(self) -> None:
        check_bounds(self, "Limits.")

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
