"""Plain Python data from what verl hands a reward: parquet rows arrive as numpy arrays.

``reward_model.ground_truth`` and ``extra_info`` come out of pandas/pyarrow, so lists inside
them are ``numpy.ndarray`` and numbers numpy scalars; JSON, jsonschema and ``isinstance(x, list)``
checks all reject those. Every reward converts its inputs with :func:`plain` first.
"""

from __future__ import annotations

from typing import Any


def plain(value: Any) -> Any:
    """``value`` with numpy arrays/scalars turned into lists/Python scalars, recursively."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and type(value).__module__ == "numpy":
        return plain(tolist())
    return value
