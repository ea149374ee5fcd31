"""verl's multi-turn SFT dataset with each example tokenized once, for many-epoch SFT of tiny
models on the CPU.

``MultiTurnSFTDataset.__getitem__`` renders the chat template and tokenizes every message
each time an example is drawn, so for the warm start's tiny model (936 examples x 32 epochs)
re-tokenizing is a large part of the build (bench/results/sft_build.json). The result
depends only on the example and the tokenizer, so this subclass computes it once per index
and hands out copies: the batches, and therefore the trained weights, are bitwise those of
the parent class. :func:`.sft.build_command` selects it with verl's ``data.custom_cls``.
"""

from __future__ import annotations

from typing import Any

import torch
from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset


class CachedMultiTurnSFTDataset(MultiTurnSFTDataset):
    """:class:`MultiTurnSFTDataset` whose items are computed on first use and then reused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._items: dict[int, dict[str, Any]] = {}

    def __getitem__(self, item: int) -> dict[str, Any]:
        key = int(item)
        cached = self._items.get(key)
        if cached is None:
            cached = self._items[key] = super().__getitem__(key)
        # copies, so nothing downstream can change the cached example in place
        return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in cached.items()}
