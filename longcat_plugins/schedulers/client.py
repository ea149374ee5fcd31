"""The agent loops' client to the rollout replicas under DORA: one version per sample, no loss.

verl's ``FullyAsyncLLMServerClient`` resumes an aborted request on whatever replica and weights
are current, concatenating the pieces (partial rollout): one sample then spans several policy
versions, which DORA forbids (SPEC S1). This client instead *restarts* an aborted request from
its prompt, so the sample that comes back was generated start to finish by one version, and
records that version in ``min_global_steps == max_global_steps``. A replica that dies while
serving a request is taken out of the load balancer and the request is restarted on another:
no sample is lost, and because the dead replica's partial output is discarded, none is
duplicated.

A request the load balancer *migrates* comes back ``stop_reason="migrated"`` with its partial
output (tokens, log-probs, the ``global_steps`` of its version): the client asks the balancer
again with that version pinned (acquire field ``dora_version``, routed to a replica holding it)
and continues from the generated prefix there (``dora_prefix``: the server re-prefills prompt +
prefix and generates within the original budget minus the prefix). The output handed to the
agent loop is ONE sample: prefix + continuation tokens and log-probs, one version
(``min_global_steps == max_global_steps``), with ``dora_migrations`` and
``dora_migrated_tokens`` (tokens carried over instead of recomputed). A continuation that
cannot run on its version (no replica holds it any more) or whose replica dies restarts from
the prompt, as an abort does; the carried prefix is then dropped, never joined to another
version's tokens.

For the balancer's admission control every new request names its prompt (acquire field
``dora_prompt``, a digest of its token ids), and every attempt's end is reported to the balancer
(``observe``: the tokens the response reached, the seconds it decoded, whether it completed), so
``length_aware`` admission knows each prompt's length history and the decode rate.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Any

import ray
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

logger = logging.getLogger(__name__)

ABORTED = ("aborted", "abort")
MIGRATED = "migrated"
UNAVAILABLE = "version_unavailable"
#: restarts of one request before the error is raised to the agent loop
MAX_RESTARTS = 8
RESTART_DELAY_S = 0.05


class DoraLLMServerClient(LLMServerClient):
    """Restart-on-abort, fail-over-on-death client; every output carries one weights version."""

    def __init__(self, config: Any, load_balancer_handle: Any = None, **kwargs: Any) -> None:
        super().__init__(config=config, load_balancer_handle=load_balancer_handle, **kwargs)
        self._serving: dict[str, str] = {}  # request_id -> server_id of its current attempt
        self._started: dict[str, float] = {}  # request_id -> when its current attempt was admitted

    async def _acquire_server(self, request_id: str, **extra: Any) -> tuple[str, Any]:
        if extra.get("prompt_ids") is not None:
            extra["dora_prompt"] = prompt_digest(extra["prompt_ids"])
        server_id, handle = await super()._acquire_server(request_id, **extra)
        self._serving[request_id] = server_id
        self._started[request_id] = time.monotonic()
        return server_id, handle

    def _observe(self, request_id: str, prompt_ids: Any, tokens: int, attempt_tokens: int, complete: bool) -> None:
        """Tell the balancer how long this prompt's response got (fire-and-forget, as verl's release)."""
        started = self._started.pop(request_id, None)
        # verl's own router (load_balancer other than dora) has no length history to feed
        if self._load_balancer is None or prompt_ids is None or not hasattr(self._load_balancer, "observe"):
            return
        seconds = time.monotonic() - started if started is not None else 0.0
        self._load_balancer.observe.remote(prompt_digest(prompt_ids), tokens, seconds, complete, attempt_tokens)

    def _vllm_request_id(self, request_id: str) -> str:
        """The agent loop's request id, so the balancer can name a running request to the server
        (verl's default is a fresh id per call)."""
        return request_id

    async def generate(self, request_id: str, **kwargs: Any) -> TokenOutput:  # type: ignore[override]
        restarts = migrations = 0
        prefix: list[int] = []
        prefix_lps: list[float] | None = []
        pin: int | None = None
        while True:
            call = dict(kwargs)
            if pin is not None:
                call.update(dora_version=pin, dora_prefix=list(prefix))
            try:
                output = await super().generate(request_id, **call)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                dead = self._serving.get(request_id)
                if restarts >= MAX_RESTARTS:
                    raise
                logger.warning("rollout replica %s failed serving %s (%s); restarting elsewhere", dead, request_id, exc)
                if dead is not None:
                    await self._load_balancer.remove_servers.remote([dead])
            else:
                version = output.extra_fields.get("global_steps")
                if output.stop_reason == MIGRATED:
                    if version is None or (pin is not None and version != pin):
                        prefix, prefix_lps, pin = [], [], None  # nothing to pin: start over (nothing kept)
                    else:
                        prefix, prefix_lps = prefix + list(output.token_ids), _join(prefix_lps, output.log_probs)
                        pin = version if prefix else None
                    migrations += 1
                    continue
                if output.stop_reason in ABORTED and output.token_ids:  # stopped as stale: a lower bound
                    self._observe(request_id, kwargs.get("prompt_ids"), len(output.token_ids), 0, complete=False)
                if output.stop_reason not in ABORTED and output.stop_reason != UNAVAILABLE:
                    self._serving.pop(request_id, None)
                    attempt = len(output.token_ids)
                    if pin is not None:
                        assert version == pin, f"continuation of {request_id} ran on {version}, not its version {pin}"
                        output.token_ids = prefix + list(output.token_ids)
                        output.log_probs = _join(prefix_lps, output.log_probs)
                    # the whole sample came from one version (one attempt, or a prefix continued on it)
                    output.extra_fields["min_global_steps"] = version
                    output.extra_fields["max_global_steps"] = version
                    output.extra_fields["dora_restarts"] = restarts
                    output.extra_fields["dora_migrations"] = migrations
                    output.extra_fields["dora_migrated_tokens"] = len(prefix)
                    self._observe(request_id, kwargs.get("prompt_ids"), len(output.token_ids), attempt, complete=True)
                    return output
                if restarts >= MAX_RESTARTS:
                    self._serving.pop(request_id, None)
                    return output
            prefix, prefix_lps, pin = [], [], None  # a restart is from the prompt
            restarts += 1
            await asyncio.sleep(RESTART_DELAY_S)


def prompt_digest(prompt_ids: Any) -> str:
    """A prompt's identity for its length history: a digest of its token ids."""
    return hashlib.sha1(",".join(str(int(t)) for t in prompt_ids).encode()).hexdigest()[:16]


def _join(head: list[float] | None, tail: list[float] | None) -> list[float] | None:
    """Log-probs of prefix + continuation (None when the request asked for none)."""
    if tail is None:
        return None
    return list(head or []) + list(tail)
