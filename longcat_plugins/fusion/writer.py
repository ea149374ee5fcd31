"""Streaming safetensors writer that reproduces a base shard's layout exactly.

The fused checkpoint has the base's tensor names, shapes and dtypes, so each output shard
can start with the base shard's header *verbatim* (same offsets, same ``__metadata__``) and
every tensor is written at its offset as soon as it is merged: one tensor in memory at a
time, and the output is byte-for-byte the base's sharding scheme.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from longcat_plugins.fusion.checkpoint import Shard, TensorInfo

if TYPE_CHECKING:
    import torch

TORCH_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
}


def torch_dtype(code: str) -> torch.dtype:
    """The torch dtype of a safetensors dtype code (``BF16`` -> ``torch.bfloat16``)."""
    import torch

    return getattr(torch, TORCH_DTYPES[code])


class ShardWriter:
    """Writes one output shard laid out exactly like ``template`` (a base shard)."""

    def __init__(self, path: Path, template: Shard) -> None:
        self.path = path
        self.template = template
        self.remaining = set(template.tensors)
        self.bytes_written = 0
        self._fh = open(path, "wb")  # noqa: SIM115 - closed in close(), which the engine always calls
        self._fh.write(template.header)

    def write(self, info: TensorInfo, tensor: torch.Tensor) -> None:
        """Write ``tensor`` (already in the template's dtype) at ``info``'s offset."""
        import torch

        if info.name not in self.remaining:
            raise RuntimeError(f"{self.path.name}: tensor {info.name} is not expected here or was already written")
        if tuple(tensor.shape) != info.shape or tensor.dtype != torch_dtype(info.dtype):
            raise RuntimeError(
                f"{self.path.name}: tensor {info.name} is {tensor.dtype}{list(tensor.shape)}, "
                f"expected {info.dtype}{list(info.shape)}"
            )
        raw = tensor.contiguous().reshape(-1).view(torch.uint8)
        if raw.numel() != info.nbytes:
            raise RuntimeError(f"{self.path.name}: tensor {info.name} has {raw.numel()} bytes, expected {info.nbytes}")
        self._fh.seek(self.template.data_start + info.begin)
        self._fh.write(memoryview(raw.numpy()))
        self.remaining.discard(info.name)
        self.bytes_written += info.nbytes

    def close(self) -> None:
        """Close; a shard with tensors left unwritten is an error (the engine then discards the output)."""
        self._fh.close()
        if self.remaining:
            missing = ", ".join(sorted(self.remaining)[:5])
            raise RuntimeError(f"{self.path.name}: {len(self.remaining)} tensor(s) never written ({missing}, ...)")

    def abort(self) -> None:
        self._fh.close()
