"""Whole-file-or-nothing writes: a crash mid-write never leaves a truncated file behind.

Every writer goes through :func:`replacing`: the content is written to a temporary file in the
target's own folder (so the final ``os.replace`` is a rename on one file system) that replaces
the target only when the write finished; on any failure the temporary file is removed.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def replacing(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; it becomes ``target`` when the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text_atomic(target: str | os.PathLike[str], text: str) -> Path:
    with replacing(target) as tmp:
        tmp.write_text(text)
    return Path(target)


def write_json_atomic(target: str | os.PathLike[str], payload: Any, **dump_kwargs: Any) -> Path:
    """``payload`` as JSON and a final newline (``dump_kwargs`` go to ``json.dumps``)."""
    return write_text_atomic(target, json.dumps(payload, **dump_kwargs) + "\n")


def write_parquet_atomic(frame: Any, target: str | os.PathLike[str]) -> Path:
    """A pandas frame as parquet."""
    with replacing(target) as tmp:
        frame.to_parquet(tmp)
    return Path(target)
