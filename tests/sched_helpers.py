"""Shared pieces of the DORA sampler tests (a pytest plugin of tests/conftest.py, for the ``tq``
fixture): an in-memory TransferQueue that verl's real replay-buffer code reads and writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from longcat_plugins.schedulers import sampler as sampler_mod
from longcat_plugins.schedulers.sampler import DoraReplayBuffer
from longcat_plugins.schedulers.settings import DoraSettings


class FakeTQ:
    """The TransferQueue calls the replay buffer makes, over dicts of tags and values."""

    def __init__(self) -> None:
        self.store: dict[str, dict[str, dict[str, Any]]] = {"train": {}}
        self.values: dict[str, dict[str, dict[str, Any]]] = {"train": {}}

    def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, dict[str, Any]]]:
        return {pid: {k: dict(t) for k, t in items.items()} for pid, items in self.store.items()}

    def kv_clear(self, keys: list[str], partition_id: str) -> None:
        for key in keys:
            self.store[partition_id].pop(key, None)
            self.values[partition_id].pop(key, None)

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str]) -> Any:
        """The selected fields of ``keys`` in the TensorDict form verl stores them in."""
        values = self.values[partition_id]
        rows = [{f: values[k][f] for f in select_fields if f in values.get(k, {})} for k in keys]
        present = [f for f in select_fields if all(f in row for row in rows)]
        return list_of_dict_to_tensordict([{f: row[f] for f in present} for row in rows])

    def prompt(self, uid: str, submitted: int, status: str) -> None:
        self.store["train"][uid] = {"is_prompt": True, "status": status, "global_steps": submitted}

    def trajectory(self, uid: str, session: int, version: int, reward: float | None = None, **fields: Any) -> None:
        key = f"{uid}_{session}_0"
        self.store["train"][key] = {
            "status": "success",
            "global_steps": version,
            "min_global_steps": version,
            "max_global_steps": version,
        }
        if reward is not None:  # verl's per-token rm_scores: the score on the last token
            fields["rm_scores"] = torch.tensor([0.0, 0.0, float(reward)])
        self.values["train"][key] = fields


@pytest.fixture
def tq(monkeypatch: pytest.MonkeyPatch) -> FakeTQ:
    fake = FakeTQ()
    import verl.trainer.ppo.v1.replay_buffer as replay_buffer

    monkeypatch.setattr(replay_buffer, "tq", fake)
    monkeypatch.setattr(sampler_mod, "KVBatchMeta", replay_buffer.KVBatchMeta)
    return fake


def dora_buffer(
    refill_fn: Callable[[int], Any] | None = None,
    *,
    settings: DoraSettings | None = None,
    staleness: int | None = None,
    max_off_policy_threshold: int | None = 4,
) -> DoraReplayBuffer:
    """verl's replay buffer with the DORA sampler, as the dora trainer builds it, polling without waits."""
    return DoraReplayBuffer(
        trainer_mode="dora",
        trainer_config={},
        max_off_policy_threshold=max_off_policy_threshold,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        poll_interval=0.0,
        refill_fn=refill_fn,
        staleness=staleness,
        settings=settings,
    )
