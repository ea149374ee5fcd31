"""DORA's per-request control on verl's vLLM server: stop one request, continue it elsewhere.

The ``hf`` server has it built in (``runtime/hf_rollout.py``). On vLLM the same two calls map
onto what verl's ``vLLMHttpServer`` and vLLM already have:

- :meth:`DoraVLLMServer.stop_request` aborts one request through vLLM's ``AsyncLLM.abort`` (vLLM
  hands the waiting ``generate`` the tokens and log-probs generated so far, ``finish_reason``
  abort) and relabels that output ``stop_reason="migrated"`` (or the reason asked), so DORA's
  client continues it instead of restarting it;
- :meth:`DoraVLLMServer.generate` takes ``dora_version`` (the ``global_steps`` the request must
  run on: a vLLM replica holds one version, so any other answers ``version_unavailable``) and
  ``dora_prefix`` (the tokens generated elsewhere: re-prefilled after the prompt, the budget
  is the original one minus the prefix, the output holds the continuation only);
- :meth:`DoraVLLMServer.stop_stale` stops every request of a replica whose version left the
  staleness window (on vLLM all of a replica's requests share its one version).

:class:`DoraVLLMReplica` is verl's ``vLLMReplica`` launching this server; the ``dora`` trainer
uses it for its replicas when ``rollout.name=vllm``.
"""

from __future__ import annotations

from typing import Any

import ray
from verl.workers.rollout.replica import TokenOutput
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

MIGRATED = "migrated"
UNAVAILABLE = "version_unavailable"


class DoraVLLMServer(vLLMHttpServer):
    """verl's vLLM server plus ``stop_request`` / ``stop_stale`` and pinned continuations."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: request id -> the stop_reason its aborted output is handed back with
        self._stopping: dict[str, str] = {}
        self.dora_stats = {"stopped": 0, "stale_stopped": 0, "continued": 0, "unavailable": 0}

    async def generate(  # type: ignore[override]
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        *args: Any,
        dora_version: int | None = None,
        dora_prefix: list[int] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        if dora_version is not None and int(dora_version) != int(self.global_steps or 0):
            self.dora_stats["unavailable"] += 1
            return TokenOutput(
                token_ids=[], log_probs=[], stop_reason=UNAVAILABLE, extra_fields={"global_steps": self.global_steps}
            )
        prefix = [int(t) for t in dora_prefix or []]
        if prefix:
            self.dora_stats["continued"] += 1
            params = dict(sampling_params)
            max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", None))
            if max_tokens is None:
                max_tokens = min(
                    self.config.response_length,
                    self.config.prompt_length + self.config.response_length - len(prompt_ids),
                )
            budget = int(max_tokens) - len(prefix)
            if budget < 1:  # the prefix used the whole budget: nothing left to generate
                return TokenOutput(
                    token_ids=[],
                    log_probs=[],
                    stop_reason="completed",
                    extra_fields={"global_steps": self.global_steps},
                )
            params["max_tokens"] = budget
            sampling_params, prompt_ids = params, [int(t) for t in prompt_ids] + prefix
        output = await super().generate(prompt_ids, sampling_params, request_id, *args, **kwargs)
        reason = self._stopping.pop(request_id, None)
        if reason is not None and output.stop_reason == "aborted":
            output.stop_reason = reason
        return output

    def _running(self) -> dict[str, list[Any]]:
        """The requests in flight: external request id -> vLLM's request states for it (vLLM
        0.32 keys its states by internal ids and maps the caller's ids to them)."""
        processor = self.engine.output_processor
        states = processor.request_states
        external = getattr(processor, "external_req_ids", None)
        if external is None:  # older vLLM: states are keyed by the caller's id
            return {rid: [state] for rid, state in states.items()}
        return {rid: [states[i] for i in ids if i in states] for rid, ids in external.items()}

    async def stop_request(self, request_id: str, reason: str = MIGRATED) -> dict[str, Any]:
        """Stop one running request; its caller gets the partial output (tokens and log-probs so
        far, vLLM's abort output) with ``stop_reason=reason``. A request that already finished (or
        is unknown here) is left alone (``stopped: False``). vLLM's own ``AsyncLLM.abort`` does
        the stop (verl's ``abort_request`` reaches into vLLM internals that 0.32 changed)."""
        states = self._running().get(request_id)
        if not states:
            return {"stopped": False, "tokens": 0}
        tokens = sum(len(getattr(getattr(s, "detokenizer", None), "output_token_ids", None) or []) for s in states)
        self._stopping[request_id] = reason
        await self.engine.abort(request_id)
        self.dora_stats["stopped"] += 1
        return {"stopped": True, "tokens": tokens, "global_steps": self.global_steps}

    async def stop_stale(self, latest: int, staleness: int, reason: str = "aborted") -> dict[str, Any]:
        """Stop every request when this replica's one version left the window of ``latest``."""
        from longcat_plugins.schedulers.core.queue import is_fresh

        if is_fresh(latest, int(self.global_steps or 0), staleness):
            return {"stopped": [], "tokens": []}
        stopped, tokens = [], []
        for request_id in list(self._running()):
            result = await self.stop_request(request_id, reason)
            if result["stopped"]:
                stopped.append(request_id)
                tokens.append(int(result.get("tokens", 0)))
        self.dora_stats["stale_stopped"] += len(stopped)
        return {"stopped": stopped, "tokens": tokens}

    async def get_dora_stats(self) -> dict[str, int]:
        return dict(self.dora_stats)


class DoraVLLMReplica(vLLMReplica):
    """verl's vLLM replica, launching :class:`DoraVLLMServer`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(DoraVLLMServer)
