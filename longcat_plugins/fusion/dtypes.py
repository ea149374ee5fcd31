"""The safetensors dtype codes fusion handles: their sizes, which are merged and which copied, and
their torch dtypes. A leaf that the reader (:mod:`.checkpoint`) and the writer (:mod:`.writer`)
both build on, so neither imports the other for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: safetensors dtype -> bytes per element
ITEMSIZE = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
#: merged in float32 and written back in their own dtype
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})
#: copied from the base unchanged
COPIED_DTYPES = frozenset({"I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL"})
#: safetensors dtype -> the torch dtype's name (the ones fusion merges or copies)
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
