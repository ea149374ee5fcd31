"""The simulated devices: decode and prefill cost, the KV budget, training and weight-sync cost.

Every cost applies to every mode alike; only what a mode does differs (how many weight
versions a device holds, when it prefills, when it pauses).

Decode (memory-bound, continuous batching): an instance whose admitted, decoding requests
number b and hold C context tokens (prompt + generated) runs one decode step in
``step_base_s + step_per_request_s * b + step_per_ktoken_s * C / 1000`` seconds (weights read
once per step, a per-sequence cost, and attention reading every decoding request's KV), and
every decoding request gains one token per step: per-request speed falls with b and with the
context length.

KV budget: an instance holds at most :meth:`ClusterSpec.kv_budget` tokens of KV:
``kv_capacity_tokens`` (one weight version resident) less ``version_kv_tokens`` for every
further version it holds. A dispatched request waits on its instance until its whole context
fits (admission control); when running requests outgrow the budget, the most recently admitted
one is preempted (its KV dropped) and goes back to the front of the instance's queue, to be
re-prefilled from prompt + generated tokens when it fits again (recomputation).

Prefill: admitting a request prefills its context at ``prefill_tokens_per_s``; the instance
decodes nothing meanwhile (prefill and decode share the device). A migrated request's KV
travels at ``kv_transfer_tokens_per_s`` instead (it stalls, the device does not).

Training a batch takes ``train_overhead_s + train_device_s_per_ktoken * ktokens / devices``
(prompt + response tokens); publishing new weights to generators takes ``weight_sync_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from longcat_plugins.bounds import bounded, check_bounds


@dataclass(frozen=True)
class ClusterSpec:
    """Device counts and cost constants of the simulated cluster."""

    devices: int = 32
    #: devices that train in the disaggregated modes (the elastic group in ``dora_elastic``)
    train_devices: int = 8
    step_base_s: float = bounded(0.025, gt=0)
    step_per_request_s: float = bounded(0.0025, ge=0)
    #: decode-step seconds per 1K context tokens of the decoding requests (attention KV reads)
    step_per_ktoken_s: float = bounded(0.0001, ge=0)
    #: KV tokens an instance holds with one weight version resident (report footnote: ~4 × 64K)
    kv_capacity_tokens: int = bounded(4 * 65536, gt=0)
    #: KV tokens displaced by each further weight version an instance holds
    version_kv_tokens: int = bounded(65536, ge=0)
    prefill_tokens_per_s: float = bounded(20000.0, gt=0)
    kv_transfer_tokens_per_s: float = bounded(50000.0, gt=0)
    train_device_s_per_ktoken: float = 2.0
    train_overhead_s: float = 20.0
    weight_sync_s: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.train_devices < self.devices:
            raise ValueError(
                f"ClusterSpec.train_devices must be in [1, devices - 1] = [1, {self.devices - 1}], got {self.train_devices}"
            )
        check_bounds(self, "ClusterSpec.")

    def step_seconds(self, decoding: int, context_tokens: float) -> float:
        """Seconds of one decode step of ``decoding`` requests holding ``context_tokens`` of KV."""
        return self.step_base_s + self.step_per_request_s * decoding + self.step_per_ktoken_s * context_tokens / 1000.0

    def decode_rate(self, decoding: int, context_tokens: float) -> float:
        """Tokens per second of each decoding request on an instance."""
        if decoding <= 0:
            return 0.0
        return 1.0 / self.step_seconds(decoding, context_tokens)

    def kv_budget(self, versions_held: int) -> float:
        """KV tokens an instance can hold while ``versions_held`` weight versions are resident."""
        return max(0.0, self.kv_capacity_tokens - self.version_kv_tokens * max(0, versions_held - 1))

    def prefill_seconds(self, tokens: float) -> float:
        return tokens / self.prefill_tokens_per_s

    def train_seconds(self, tokens: int, devices: int) -> float:
        return self.train_overhead_s + self.train_device_s_per_ktoken * tokens / 1000.0 / devices
