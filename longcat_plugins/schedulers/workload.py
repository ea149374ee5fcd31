"""A long-tailed rollout workload: per-prompt response budgets, for testing and benchmarking DORA.

The skewed-generation problem DORA attacks (a synchronous batch waits for its single longest
response) needs responses of very different lengths. A tiny random model on a CPU almost never
emits EOS, so every response runs to the length limit; this module makes the skew explicit
instead: :func:`write_skewed_dataset` gives every ``long_every``-th prompt a ``long_tokens``
budget and the rest ``short_tokens`` (``extra_info.max_tokens``), and
:class:`SkewedLengthAgentLoop` (verl's single-turn loop) passes that budget to the rollout as
``max_tokens``. Register it with stock verl: ``actor_rollout_ref.rollout.agent.agent_loop_config_path=``
``configs/agent_loops/skewed.yaml`` and ``...agent.default_agent_loop=skewed_single_turn``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from longcat_plugins.atomic import write_parquet_atomic

AGENT_NAME = "skewed_single_turn"


def budget_for(index: int, long_every: int, short_tokens: int, long_tokens: int) -> int:
    """The response budget of the ``index``-th prompt: long for every ``long_every``-th one."""
    if long_every < 1 or short_tokens < 1 or long_tokens < short_tokens:
        raise ValueError(
            f"need long_every >= 1 and 1 <= short_tokens <= long_tokens, got {long_every}, {short_tokens}, {long_tokens}"
        )
    return long_tokens if index % long_every == 0 else short_tokens


def write_skewed_dataset(
    source: Path, target: Path, *, long_every: int = 4, short_tokens: int = 4, long_tokens: int = 48
) -> Path:
    """Copy a verl RL parquet adding ``extra_info.max_tokens`` and ``extra_info.length``
    (``long`` / ``short``) per row (written atomically)."""
    import pandas as pd

    frame = pd.read_parquet(source)
    if "extra_info" not in frame.columns:
        raise ValueError(f"{source}: no 'extra_info' column to carry the per-prompt budget")
    budgets = [budget_for(i, long_every, short_tokens, long_tokens) for i in range(len(frame))]
    # ``length`` names the budget class, a domain for per-domain quotas (``domain_key=extra_info.length``)
    frame["extra_info"] = [
        {**(info or {}), "max_tokens": b, "length": "long" if b == long_tokens else "short"}
        for info, b in zip(frame["extra_info"], budgets, strict=True)
    ]
    return write_parquet_atomic(frame, target)


try:
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
except ImportError:  # pragma: no cover - without verl only the dataset helper exists
    SingleTurnAgentLoop = object  # type: ignore[assignment,misc]


#: if set, every finished sample appends one JSON line (its response tokens and budget) here: the
#: generated length distribution, which is the trained one for verl's sync trainer (it trains every
#: sample it generates), so a bench can compare it with DORA's ``dora/trained_len_*``
ENV_TRACE = "LONGCAT_WORKLOAD_TRACE"


class SkewedLengthAgentLoop(SingleTurnAgentLoop):  # type: ignore[misc,valid-type]
    """verl's single-turn agent loop with the row's ``extra_info.max_tokens`` as response budget."""

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> Any:
        budget = (kwargs.get("extra_info") or {}).get("max_tokens")
        if budget is not None:
            sampling_params = {**sampling_params, "max_tokens": int(budget)}
        output = await super().run(sampling_params, priority=priority, **kwargs)
        trace = os.environ.get(ENV_TRACE)
        if trace:
            with open(trace, "a") as sink:
                sink.write(json.dumps({"len": len(output.response_ids), "budget": budget}) + "\n")
        return output
