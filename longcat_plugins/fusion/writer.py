"""Streaming safetensors writer that reproduces a base shard's layout exactly.

The fused checkpoint has the base's tensor names, shapes and dtypes, so each output shard
can start with the base shard's header *verbatim* (same offsets, same ``__metadata__``) and
every tensor (or element range of one) is written at its offset with ``os.pwrite`` as soon as
it is merged, from whichever thread merged it: only the ranges being merged are in memory, and
the output is byte-for-byte the base's sharding scheme.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from longcat_plugins.fusion.checkpoint import Shard, TensorInfo
from longcat_plugins.fusion.dtypes import torch_dtype

if TYPE_CHECKING:
    import torch


class ShardWriter:
    """Writes one output shard laid out exactly like ``template`` (a base shard); thread-safe."""

    def __init__(self, path: Path, template: Shard) -> None:
        self.path = path
        self.template = template
        self.remaining = {name: info.nbytes for name, info in template.tensors.items()}
        self.bytes_written = 0
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._pwrite(template.header, 0)

    def _pwrite(self, data: bytes | memoryview, offset: int) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, offset)
            view, offset = view[n:], offset + n

    def write(self, info: TensorInfo, tensor: torch.Tensor) -> None:
        """Write ``tensor`` (already in the template's dtype, the tensor's shape) at ``info``'s offset."""
        if tuple(tensor.shape) != info.shape:
            raise RuntimeError(
                f"{self.path.name}: tensor {info.name} is {tensor.dtype}{list(tensor.shape)}, "
                f"expected {info.dtype}{list(info.shape)}"
            )
        self.write_range(info, 0, tensor)

    def write_range(self, info: TensorInfo, start: int, tensor: torch.Tensor) -> None:
        """Write ``tensor`` as elements ``[start, start + tensor.numel())`` of ``info``'s tensor."""
        import torch

        if tensor.dtype != torch_dtype(info.dtype):
            raise RuntimeError(f"{self.path.name}: tensor {info.name} is {tensor.dtype}, expected {info.dtype}")
        raw = tensor.contiguous().reshape(-1).view(torch.uint8)
        offset = start * (info.nbytes // max(info.numel, 1))
        with self._lock:
            left = self.remaining.get(info.name)
            if left is None or offset + raw.numel() > info.nbytes or raw.numel() > left:
                raise RuntimeError(f"{self.path.name}: tensor {info.name} is not expected here or was already written")
            if left == raw.numel():
                del self.remaining[info.name]
            else:
                self.remaining[info.name] = left - raw.numel()
            self.bytes_written += raw.numel()
        self._pwrite(memoryview(raw.numpy()), self.template.data_start + info.begin + offset)

    def close(self) -> None:
        """Close; a shard with tensors left unwritten is an error (the engine then discards the output)."""
        os.close(self._fd)
        if self.remaining:
            missing = ", ".join(sorted(self.remaining)[:5])
            raise RuntimeError(f"{self.path.name}: {len(self.remaining)} tensor(s) never written ({missing}, ...)")

    def abort(self) -> None:
        os.close(self._fd)
