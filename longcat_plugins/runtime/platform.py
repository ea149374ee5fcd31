"""verl platform ``cpu``: lets verl's real trainer run where there is no accelerator.

verl picks a platform once per process (``verl.plugin.platform.get_platform``). Ours claims the
process only when asked (``VERL_PLATFORM=cpu`` / ``LONGCAT_RUNTIME=cpu``) or when the machine
has no accelerator at all, so a CPU-only Ray actor on a GPU node never takes it by mistake.
Ray sees logical ``GPU`` resources (``ray_init.num_gpus``) because verl's resource-pool
check counts only GPU/NPU; each "GPU" is one CPU worker process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

ENV_RUNTIME = "LONGCAT_RUNTIME"
PLATFORM_NAME = "cpu"


def accelerator_present() -> bool:
    """Whether this machine has any accelerator verl knows (not just this process)."""
    if torch.cuda.is_available():
        return True
    if any(Path("/dev").glob("nvidia[0-9]*")) or Path("/dev/kfd").exists() or any(Path("/dev").glob("davinci[0-9]*")):
        return True
    return any(shutil.which(cmd) for cmd in ("nvidia-smi", "npu-smi", "rocm-smi"))


def cpu_runtime_requested() -> bool | None:
    """``True``/``False`` when the environment says so explicitly, ``None`` otherwise."""
    value = (os.environ.get(ENV_RUNTIME) or "").strip().lower()
    if value:
        return value == PLATFORM_NAME
    verl_platform = (os.environ.get("VERL_PLATFORM") or "").strip().lower()
    if verl_platform:
        return verl_platform == PLATFORM_NAME
    return None


def cpu_runtime_active() -> bool:
    """The embedded CPU runtime applies in this process."""
    requested = cpu_runtime_requested()
    return requested if requested is not None else not accelerator_present()


class _CPUDeviceModule(ModuleType):
    """What verl reaches for through ``get_torch_device()`` (a ``torch.cuda``-like module):
    memory statistics read as zero, seeding and RNG state go to the CPU generator, and
    everything else falls through to ``torch.cpu``."""

    def __init__(self) -> None:
        super().__init__("longcat_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def set_device(self, device: Any) -> None:
        return None

    def synchronize(self, device: Any = None) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def memory_allocated(self, device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        return None

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        pages, page_size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page_size
        return pages * page_size, total

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    def get_device_name(self, device: Any = None) -> str:
        return "cpu"

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        return (0, 0)


CPU_DEVICE_MODULE = _CPUDeviceModule()


def platform_class() -> type:
    """Build the ``PlatformBase`` subclass (verl is imported only when this is called)."""
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """Device ``cpu``, collectives over gloo, logical Ray ``GPU`` slots."""

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> ModuleType:
            return CPU_DEVICE_MODULE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return cpu_runtime_active()

        def current_device(self) -> Any:
            # verl uses this as a device in `.to(...)` and `torch.device(...)`; an index would mean cuda:0
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            # Ray sets this for logical GPUs; nothing reads it on the CPU
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    return PlatformCPU


def register_platform() -> None:
    """Add ``cpu`` to verl's ``PlatformRegistry`` (it is probed after cuda/npu/rocm)."""
    from verl.plugin.platform import PlatformRegistry

    if PlatformRegistry.get(PLATFORM_NAME) is None:
        PlatformRegistry.register(PLATFORM_NAME)(platform_class())
