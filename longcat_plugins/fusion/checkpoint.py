"""Hugging Face safetensors checkpoints, sharded or not: find the files, check them, read tensors.

Opening a checkpoint parses every shard's header (8-byte length + JSON) and checks it against
the file's size and against ``model.safetensors.index.json``, so a missing shard, a truncated
or padded file and an index that disagrees with its shards are all reported, together and
with file names, before a single tensor is read. Tensors (or element ranges of them) are then
read with ``os.pread`` straight into memory the caller owns: nothing is memory-mapped, so the
process's RSS counts only the buffers in use, never the shards' pages, and reads from several
threads need no lock. The next range can be announced with ``posix_fadvise(WILLNEED)`` so the
kernel reads it while the current one is merged.
"""

from __future__ import annotations

import json
import math
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from longcat_plugins.fusion.dtypes import FLOAT_DTYPES, ITEMSIZE, torch_dtype
from longcat_plugins.fusion.errors import CheckpointError

if TYPE_CHECKING:
    import torch

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: its shard file, dtype, shape and byte range in the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES


@dataclass(frozen=True)
class Shard:
    """One safetensors file: its header bytes verbatim (the writer reuses them) and its tensors."""

    path: Path
    header: bytes
    metadata: dict[str, str]
    tensors: dict[str, TensorInfo]

    @property
    def data_start(self) -> int:
        return len(self.header)


def parse_shard(path: Path) -> Shard:
    """Parse and check one safetensors file's header; ``ValueError`` says what is wrong with it."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise ValueError(f"not a safetensors file: {size} bytes, too short for a header")
        (length,) = struct.unpack("<Q", prefix)
        if length > _MAX_HEADER:
            raise ValueError(f"not a safetensors file: header length {length} is implausible")
        if 8 + length > size:
            raise ValueError(f"truncated: the header alone needs {8 + length} bytes, the file has {size}")
        raw = fh.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"corrupt header: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError("corrupt header: not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    tensors: dict[str, TensorInfo] = {}
    data_end = 0
    for name, entry in header.items():
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"corrupt header: bad entry for tensor {name!r}") from None
        if dtype in ITEMSIZE and end - begin != math.prod(shape) * ITEMSIZE[dtype]:
            raise ValueError(f"corrupt header: tensor {name!r} has {end - begin} bytes for {dtype}{list(shape)}")
        tensors[name] = TensorInfo(name, dtype, shape, path.name, begin, end)
        data_end = max(data_end, end)
    expected = 8 + length + data_end
    if size < expected:
        raise ValueError(
            f"truncated: the header says the data ends at byte {expected}, the file has {size} "
            f"({expected - size} bytes missing)"
        )
    if size > expected:
        raise ValueError(f"{size - expected} unexpected bytes after the last tensor (expected {expected} bytes)")
    return Shard(path, prefix + raw, dict(metadata), tensors)


@dataclass
class Checkpoint:
    """A checkpoint directory: its shards in order, and every tensor by name."""

    label: str
    path: Path
    index: dict[str, Any] | None
    shards: dict[str, Shard]
    tensors: dict[str, TensorInfo]
    _reader: _Reader | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: str | Path, label: str = "checkpoint") -> Checkpoint:
        """Find and check the checkpoint in ``path``; :class:`CheckpointError` lists every problem."""
        root = Path(path)
        where = f"{label} ({root})"
        if not root.exists():
            raise CheckpointError([f"{where}: no such directory"])
        if not root.is_dir():
            raise CheckpointError([f"{where}: not a directory (give the checkpoint's directory)"])
        problems: list[str] = []
        index: dict[str, Any] | None = None
        index_path = root / INDEX_FILE
        if index_path.is_file():
            try:
                index = json.loads(index_path.read_text())
                weight_map = index["weight_map"]
                if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                    raise TypeError("weight_map must map tensor names to file names")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CheckpointError([f"{where}: unreadable {INDEX_FILE}: {type(exc).__name__}: {exc}"]) from None
            files = sorted(set(weight_map.values()))
        elif (root / SINGLE_FILE).is_file():
            weight_map = None
            files = [SINGLE_FILE]
        else:
            found = sorted(p.name for p in root.glob("*.safetensors"))
            hint = f" (found {', '.join(found)})" if found else ""
            raise CheckpointError([f"{where}: no {SINGLE_FILE} or {INDEX_FILE}{hint}"])
        shards: dict[str, Shard] = {}
        for name in files:
            file = root / name
            if not file.is_file():
                problems.append(f"{where}: shard {name} listed in {INDEX_FILE} is missing")
                continue
            try:
                shards[name] = parse_shard(file)
            except (OSError, ValueError) as exc:
                problems.append(f"{where}: {name}: {exc}")
        tensors: dict[str, TensorInfo] = {}
        for shard in shards.values():
            tensors.update(shard.tensors)
        if weight_map is not None:
            for tensor, file in weight_map.items():
                if file in shards and tensor not in shards[file].tensors:
                    problems.append(f"{where}: {INDEX_FILE} puts {tensor} in {file}, which does not contain it")
            for tensor, info in tensors.items():
                if weight_map.get(tensor) != info.file:
                    problems.append(f"{where}: {info.file} holds {tensor}, which {INDEX_FILE} does not map to it")
        if problems:
            raise CheckpointError(problems, partial=cls(label, root, index, shards, tensors))
        return cls(label, root, index, shards, tensors)

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def iter_in_file_order(self) -> Iterator[TensorInfo]:
        """Every tensor, shard by shard, in byte order: the order the writer lays them out."""
        for shard in self.shards.values():
            yield from sorted(shard.tensors.values(), key=lambda t: t.begin)

    def read(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as stored (its own dtype and shape)."""
        info = self.tensors[name]
        return self.read_range(info, 0, info.numel).view(info.shape)

    def read_range(self, info: TensorInfo, start: int, stop: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """Elements ``[start, stop)`` of the tensor named like ``info`` (row-major), as a flat tensor
        of its dtype; this checkpoint's own layout is used (an expert may be sharded otherwise).
        ``out``: a uint8 buffer to read into (at least the range's bytes), reused by the caller."""
        if self._reader is None:
            self._reader = _Reader(self.path)
        own = self.tensors[info.name]
        return self._reader.read(self.shards[own.file], own, start, stop, out)

    def will_need(self, info: TensorInfo, start: int, stop: int) -> None:
        """Ask the kernel to start reading elements ``[start, stop)`` now (a hint; never blocks)."""
        if self._reader is None:
            self._reader = _Reader(self.path)
        own = self.tensors[info.name]
        self._reader.will_need(self.shards[own.file], own, start, stop)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class _Reader:
    """One read-only descriptor per shard; ``os.pread`` is safe to call from several threads."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fds: dict[str, int] = {}
        self.lock = threading.Lock()
        #: per file, the byte ranges already announced with ``WILLNEED`` (sorted, disjoint)
        self.requested: dict[str, list[tuple[int, int]]] = {}

    def _fd(self, file: str) -> int:
        with self.lock:
            fd = self.fds.get(file)
            if fd is None:
                fd = self.fds[file] = os.open(self.root / file, os.O_RDONLY)
            return fd

    @staticmethod
    def _span(shard: Shard, info: TensorInfo, start: int, stop: int) -> tuple[int, int]:
        size = ITEMSIZE[info.dtype]
        return shard.data_start + info.begin + start * size, (stop - start) * size

    def read(
        self, shard: Shard, info: TensorInfo, start: int, stop: int, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        import torch

        offset, nbytes = self._span(shard, info, start, stop)
        buf = torch.empty(nbytes, dtype=torch.uint8) if out is None else out[:nbytes]
        view = memoryview(buf.numpy())
        fd, got = self._fd(info.file), 0
        while got < nbytes:
            n = os.preadv(fd, [view[got:]], offset + got)
            if n == 0:
                raise CheckpointError([f"{self.root / info.file}: ends inside tensor {info.name} (file changed?)"])
            got += n
        return buf.view(torch_dtype(info.dtype))

    def will_need(self, shard: Shard, info: TensorInfo, start: int, stop: int) -> None:
        """Announce the bytes of ``[start, stop)`` not announced before: the engine's rolling
        windows overlap (each tensor asks for the next 64 MiB), and a repeated ``WILLNEED`` still
        walks every page of its range in the kernel (a second of CPU per merge, in a profile)."""
        offset, nbytes = self._span(shard, info, start, stop)
        fd = self._fd(info.file)
        with self.lock:
            gaps = _claim(self.requested.setdefault(info.file, []), offset, offset + nbytes)
        for a, b in gaps:
            os.posix_fadvise(fd, a, b - a, os.POSIX_FADV_WILLNEED)

    def close(self) -> None:
        with self.lock:
            for fd in self.fds.values():
                os.close(fd)
            self.fds.clear()
            self.requested.clear()


def _claim(spans: list[tuple[int, int]], start: int, stop: int) -> list[tuple[int, int]]:
    """Add ``[start, stop)`` to ``spans`` (sorted, disjoint, merged in place); returns the parts
    of it that no span covered before, in order."""
    if stop <= start:
        return []
    gaps, cursor, merged_start, merged_stop = [], start, start, stop
    keep: list[tuple[int, int]] = []
    for a, b in spans:
        if b < start or a > stop:  # disjoint and not touching: stays as it is
            keep.append((a, b))
            continue
        if a > cursor:
            gaps.append((cursor, min(a, stop)))
        cursor = max(cursor, b)
        merged_start, merged_stop = min(merged_start, a), max(merged_stop, b)
    if cursor < stop:
        gaps.append((cursor, stop))
    keep.append((merged_start, merged_stop))
    spans[:] = sorted(keep)
    return gaps
