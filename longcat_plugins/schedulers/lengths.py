"""The trained length distribution of a step (length censoring is invisible in samples/s).

A trainer that drops long answers trains more samples per second and fewer tokens per sample;
``response_length/mean`` (verl's) shows the mean, not the tail that censoring removes, so the
``dora`` trainer also reports the 90th percentile and the maximum of its trained responses,
measured exactly as verl measures ``response_length`` (the response tokens of every
non-padding trajectory in the batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

PREFIX = "dora/trained_len"


def trained_length_metrics(lengths: Sequence[int]) -> dict[str, float]:
    """``dora/trained_len_{mean,p90,max}`` of the trained responses' token counts (p90: numpy's
    linear interpolation); empty when nothing was trained."""
    if not len(lengths):
        return {}
    values = np.asarray(lengths, dtype=np.float64)
    return {
        f"{PREFIX}_mean": float(values.mean()),
        f"{PREFIX}_p90": float(np.percentile(values, 90)),
        f"{PREFIX}_max": float(values.max()),
    }


def batch_response_lengths(batch: Any, kv_batch_get: Any) -> list[int]:
    """Response tokens of each non-padding trajectory of a TransferQueue batch (``KVBatchMeta``),
    read as verl's ``_compute_metrics`` reads them (the jagged ``responses`` offsets)."""
    keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
    if not keep:
        return []
    data = kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["responses"])
    lengths = data["responses"].offsets().diff().tolist()
    return [int(lengths[i]) for i in keep]
