"""The per-request response budget of the context-length curriculum (D6) in verl's agent loop.

verl's agent-loop worker hands every sample of a prompt the same ``sampling_params``; the
per-prompt fields of the row arrive as keyword arguments. This loop is verl's single-turn loop
that turns the row's ``longcat_max_tokens`` (set by the ``longcat_data`` trainer) into the
request's ``max_tokens``, which verl's rollout servers (vLLM, SGLang, the CPU ``hf`` server)
honour, capped by ``data.max_response_length``.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

MAX_TOKENS_KEY = "longcat_max_tokens"


class BudgetedSingleTurnAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn agent loop with a per-request response budget (``longcat_max_tokens``)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        budget = kwargs.get(MAX_TOKENS_KEY)
        if budget is not None:
            sampling_params = {**sampling_params, "max_tokens": min(int(budget), int(self.response_length))}
        return await super().run(sampling_params, **kwargs)
