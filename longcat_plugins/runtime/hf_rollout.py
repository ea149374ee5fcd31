"""The ``hf`` rollout: verl's server-mode rollout contract served by transformers on the CPU.

verl 0.9 generates through *replicas* (``RolloutReplicaRegistry``): each replica launches a
server actor that the agent loops call token-in/token-out (``generate``), and the training
worker holds a *server adapter* (``_ROLLOUT_REGISTRY[(name, "async")]``) that pushes new
weights to that server after every step. ``HFServer`` is that server: requests arriving
together are decoded as one left-padded batch with a KV cache, each with its own sampling
parameters, so multi-turn agent loops and async trainers are not serialised on it.

By default a server holds several weights versions (a batch keeps the version it started with
while the next one loads beside it). :meth:`HFServer.set_single_version` makes it hold exactly
one, as vLLM and SGLang do: a load waits for the running batch and replaces the weights in
place, and an abort also stops the running batch. DORA's replica-granular versioning uses this
to run the single-version engines' path on the CPU.

Per-request control (DORA's migration and stale abort): :meth:`HFServer.stop_request` stops one
queued or running request (the rest of its batch decodes on) and hands its caller the partial
output (tokens, log-probs, the version it ran on) with a distinct ``stop_reason``;
:meth:`HFServer.stop_stale` does that for every request on a version older than a bound. A
stopped request continues elsewhere through ``generate(..., dora_version=, dora_prefix=)``: the
pinned version (by ``global_steps``) and the tokens generated so far, re-prefilled with the
prompt (a KV cache cannot travel between processes). :meth:`HFServer.set_staleness` makes a
multi-version server keep every version inside the staleness window, so any replica can
continue a request of any live version.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput
from verl.workers.rollout.utils import ensure_async_iterator

from longcat_plugins.runtime.later import StartedAhead, later

logger = logging.getLogger(__name__)

SERVER_PREFIX = "hf_server"
#: if set, each server appends one JSON line per weight update here (observability, tests)
ENV_TRACE = "LONGCAT_HF_ROLLOUT_TRACE"
#: how long the batcher waits for requests that arrive together before decoding
BATCH_WINDOW_S = 0.005
#: ``stop_reason`` of a request stopped to move it to another replica (continued from its prefix)
MIGRATED = "migrated"
#: ``stop_reason`` of a pinned continuation whose version this server does not hold
UNAVAILABLE = "version_unavailable"


def server_name(replica_rank: int, node_rank: int = 0, suffix: str = "") -> str:
    return f"{SERVER_PREFIX}_{replica_rank}_{node_rank}{suffix}"


@dataclass
class _Request:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    want_logprobs: bool
    future: asyncio.Future = field(repr=False)
    request_id: str = ""
    #: local weights version this request must run on (a pinned continuation), else the newest
    version: int | None = None
    #: tokens generated so far by the row (the decode thread appends under ``lock``)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finished: bool = False
    #: why the request was stopped early (``stop_request``), None while it may decode on
    stopped: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def _cfg(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


class HFServer:
    """A transformers model behind verl's rollout-server interface (one Ray actor)."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0, max_batch_size: int = 64) -> None:
        from transformers import AutoModelForCausalLM

        self.config = config
        self.replica_rank = replica_rank
        path = _cfg(model_config, "local_path") or _cfg(model_config, "path")
        if not path or not os.path.exists(path):
            raise FileNotFoundError(f"hf rollout: model path {path!r} (actor_rollout_ref.model.path) does not exist")
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
        self.model.eval()
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.model.config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        pad = gen.pad_token_id if gen.pad_token_id is not None else self.model.config.pad_token_id
        self.pad_id = int(pad if pad is not None else 0)
        self.prompt_length = int(_cfg(config, "prompt_length", 512))
        self.response_length = int(_cfg(config, "response_length", 512))
        self.max_model_len = int(_cfg(config, "max_model_len", None) or self.prompt_length + self.response_length)
        self.max_batch_size = max_batch_size
        self.generator = torch.Generator().manual_seed(int(_cfg(config, "seed", 0) or 0) + 1000 * replica_rank)
        self.global_steps: int | None = None
        self.weights_version = 0
        #: weights version -> (model, global_steps it was trained to); the newest is ``self.model``
        self.versions: dict[int, tuple[Any, int | None]] = {0: (self.model, None)}
        self.in_use: dict[int, int] = {}
        self.busy_since: float | None = None
        self.busy_s = 0.0
        #: sum over batches of (requests in the batch x its duration): the request load integral
        self.request_s = 0.0
        self.started_at = time.time()
        self._queue: list[_Request] = []
        self._wake: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._loop_task: asyncio.Task | None = None
        self.stats = {
            "requests": 0,
            "batches": 0,
            "generated_tokens": 0,
            "max_batch": 0,
            "aborted": 0,
            "stopped": 0,
            "stopped_tokens": 0,
            "stale_stopped": 0,
        }
        self.single_version = False
        self.max_versions_held = 1
        #: the batch being decoded, and whether an abort asked it to stop
        self._running: list[_Request] = []
        self._running_version: int | None = None
        self._cancel = False
        #: multi-version: keep every version within this many steps of the newest (None: only in-use ones)
        self.keep_window: int | None = None

    # -- generation ------------------------------------------------------------------------

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        dora_version: int | None = None,
        dora_prefix: list[int] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        """Token-in/token-out generation (verl's ``LLMServerClient`` calls this).

        ``dora_version`` (a ``global_steps``) pins the weights version; ``dora_prefix`` is the
        response generated so far elsewhere: the budget (``max_tokens``, ``max_model_len``) is
        the original request's minus the prefix, and the output holds the continuation only."""
        self._ensure_loop()
        prompt_ids = [int(t) for t in prompt_ids]
        prefix = [int(t) for t in dora_prefix or []]
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens leaves no room within max_model_len {self.max_model_len}"
            )
        params = dict(sampling_params)
        max_tokens = params.get("max_tokens", params.get("max_new_tokens"))
        if max_tokens is None:
            max_tokens = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        version = None
        if dora_version is not None:
            version = self.local_version(int(dora_version))
            if version is None:
                return TokenOutput(token_ids=[], log_probs=[], stop_reason=UNAVAILABLE, extra_fields=self._extra(None))
        budget = max(1, min(int(max_tokens), room)) - len(prefix)
        if budget < 1:  # the prefix already used the whole budget: nothing left to generate
            return TokenOutput(token_ids=[], log_probs=[], stop_reason="completed", extra_fields=self._extra(version))
        request = _Request(
            prompt_ids=prompt_ids + prefix,
            max_tokens=budget,
            temperature=float(params.get("temperature", 1.0) or 0.0),
            top_k=int(params.get("top_k", -1) if params.get("top_k") is not None else -1),
            top_p=float(params.get("top_p", 1.0) if params.get("top_p") is not None else 1.0),
            want_logprobs=bool(params.get("logprobs", False)),
            future=asyncio.get_running_loop().create_future(),
            request_id=str(request_id),
            version=version,
        )
        self._queue.append(request)
        assert self._wake is not None
        self._wake.set()
        return await request.future

    def _ensure_loop(self) -> None:
        """Start the batcher in the running event loop (a Ray actor has one; tests may use several)."""
        loop = asyncio.get_running_loop()
        if self._loop_task is None or self._loop_task.done() or self._loop_task.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._lock = asyncio.Lock()
            self._loop_task = asyncio.get_running_loop().create_task(self._batch_loop())

    async def _batch_loop(self) -> None:
        assert self._wake is not None and self._lock is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(BATCH_WINDOW_S)
            while self._queue:
                async with self._lock:
                    batch, version = self._take_batch()
                    if not batch:
                        continue
                    self.in_use[version] = self.in_use.get(version, 0) + 1
                    self._running, self._running_version, self._cancel = batch, version, False
                    self.busy_since = time.time()
                    try:
                        outputs = await asyncio.to_thread(self._generate_batch, batch, version)
                        self.stats["stopped_tokens"] += sum(len(r.tokens) for r in batch if r.stopped)
                    except Exception as exc:  # noqa: BLE001 - hand the failure to every waiting caller
                        for req in batch:
                            if not req.future.done():
                                req.future.set_exception(exc)
                        continue
                    finally:
                        self._running, self._running_version = [], None
                        self.in_use[version] -= 1
                        elapsed = time.time() - self.busy_since
                        self.busy_s += elapsed
                        self.request_s += elapsed * len(batch)
                        self._trace(
                            {
                                "event": "batch",
                                "version": version,
                                "size": len(batch),
                                "start": self.busy_since,
                                "end": self.busy_since + elapsed,
                            }
                        )
                        self.busy_since = None
                        self._evict_versions()
                for req, out in zip(batch, outputs, strict=True):
                    if not req.future.done():
                        req.future.set_result(out)

    @torch.no_grad()
    def _generate_batch(self, batch: list[_Request], version: int | None = None) -> list[TokenOutput]:
        version = self.weights_version if version is None else version
        model, version_steps = self.versions[version]
        size = len(batch)
        longest = max(len(r.prompt_ids) for r in batch)
        input_ids = torch.full((size, longest), self.pad_id, dtype=torch.long)
        attention = torch.zeros((size, longest), dtype=torch.long)
        for i, req in enumerate(batch):  # left padding: every row's next token is at the end
            input_ids[i, longest - len(req.prompt_ids) :] = torch.tensor(req.prompt_ids)
            attention[i, longest - len(req.prompt_ids) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        temperature = torch.tensor([r.temperature for r in batch], dtype=torch.float32)
        greedy = temperature <= 0
        temperature = torch.where(greedy, torch.ones_like(temperature), temperature)
        top_k = [r.top_k for r in batch]
        top_p = torch.tensor([r.top_p for r in batch], dtype=torch.float32)
        limits = [r.max_tokens for r in batch]

        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1, :].float()
        done = [req.stopped is not None for req in batch]
        for _ in range(max(limits)):
            scaled = logits / temperature[:, None]
            log_dist = torch.log_softmax(scaled, dim=-1)  # "processed" log-probs: after temperature
            sampled = self._sample(scaled, greedy, top_k, top_p)
            chosen_lp = log_dist.gather(-1, sampled[:, None]).squeeze(-1)
            for i, req in enumerate(batch):
                if done[i]:
                    continue
                with req.lock:  # stop_request reads tokens and log-probs as one consistent prefix
                    if req.stopped is not None:
                        done[i] = True
                        continue
                    token = int(sampled[i])
                    req.tokens.append(token)
                    req.logprobs.append(float(chosen_lp[i]))
                    if token in self.eos_ids or len(req.tokens) >= limits[i]:
                        done[i] = req.finished = True
            if all(done) or self._cancel:
                break
            step_ids = torch.where(torch.tensor(done), torch.full_like(sampled, self.pad_id), sampled)
            attention = torch.cat([attention, torch.ones((size, 1), dtype=torch.long)], dim=-1)
            positions = positions[:, -1:] + 1
            out = model(
                input_ids=step_ids[:, None],
                attention_mask=attention,
                position_ids=positions,
                past_key_values=past,
                use_cache=True,
            )
            past, logits = out.past_key_values, out.logits[:, -1, :].float()
        self.stats["requests"] += size
        self.stats["batches"] += 1
        self.stats["max_batch"] = max(self.stats["max_batch"], size)
        self.stats["generated_tokens"] += sum(len(r.tokens) for r in batch)
        return [self._output(req, version, "completed") for req in batch]

    def _output(self, req: _Request, version: int | None, reason: str) -> TokenOutput:
        """``req``'s tokens so far (call with ``req.lock`` held or after its batch ended)."""
        return TokenOutput(
            token_ids=list(req.tokens),
            log_probs=list(req.logprobs) if req.want_logprobs else None,
            stop_reason=reason,
            extra_fields=self._extra(version),
        )

    def _extra(self, version: int | None) -> dict[str, Any]:
        steps = self.versions[version][1] if version in self.versions else None
        return {"global_steps": steps, "weights_version": version, "replica": self.replica_rank}

    def local_version(self, global_steps: int) -> int | None:
        """The held weights version trained to ``global_steps`` (the newest such), else None."""
        held = [v for v, (_, steps) in self.versions.items() if steps == global_steps]
        return max(held) if held else None

    def _take_batch(self) -> tuple[list[_Request], int]:
        """The next batch: queued requests on one version (the oldest request's, pinned or the
        newest), in arrival order; pinned requests whose version is gone get ``UNAVAILABLE``."""
        for req in [r for r in self._queue if r.version is not None and r.version not in self.versions]:
            self._queue.remove(req)
            if not req.future.done():
                req.future.set_result(TokenOutput(token_ids=[], log_probs=[], stop_reason=UNAVAILABLE))
        if not self._queue:
            return [], self.weights_version
        version = self._queue[0].version if self._queue[0].version is not None else self.weights_version
        batch = [r for r in self._queue if (r.version if r.version is not None else self.weights_version) == version]
        batch = batch[: self.max_batch_size]
        taken = {id(r) for r in batch}
        self._queue = [r for r in self._queue if id(r) not in taken]
        return batch, version

    def _sample(
        self, scaled: torch.Tensor, greedy: torch.Tensor, top_k: list[int], top_p: torch.Tensor
    ) -> torch.Tensor:
        filtered = scaled.clone()
        vocab = filtered.shape[-1]
        for i, k in enumerate(top_k):
            if 0 < k < vocab:
                kth = torch.topk(filtered[i], k).values[-1]
                filtered[i][filtered[i] < kth] = float("-inf")
        if bool((top_p < 1.0).any()):
            sorted_logits, order = torch.sort(filtered, descending=True, dim=-1)
            cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
            drop = (cumulative - torch.softmax(sorted_logits, dim=-1)) > top_p[:, None]
            sorted_logits[drop] = float("-inf")
            filtered = torch.full_like(filtered, float("-inf")).scatter(-1, order, sorted_logits)
        sampled = torch.multinomial(torch.softmax(filtered, dim=-1), 1, generator=self.generator).squeeze(-1)
        return torch.where(greedy, scaled.argmax(-1), sampled)

    # -- weights and control ------------------------------------------------------------------

    async def update_weights(self, named_tensors: dict[str, torch.Tensor], global_steps: int | None = None) -> str:
        """Load a (full) state dict from the trainer as a new weights version; returns its digest.

        Never waits for a running batch: if the newest version is in use, the new one is loaded
        into a copy and the running batch finishes on the version it started with. In
        single-version mode it does wait, and replaces the one version in place."""
        self._ensure_loop()
        unexpected = set(named_tensors) - set(self.model.state_dict())
        if unexpected:
            raise KeyError(f"hf rollout: weights not in the model: {sorted(unexpected)[:5]}")
        if self.single_version:
            assert self._lock is not None
            async with self._lock:  # the running batch (if any) ends first
                self._abort_queued()  # a drained replica has none; anything left restarts elsewhere
                return self._load(named_tensors, global_steps)
        return self._load(named_tensors, global_steps)

    def _load(self, named_tensors: dict[str, torch.Tensor], global_steps: int | None) -> str:
        # no await from here to the swap: the batch loop cannot pin the model in between
        current = self.weights_version
        keep = self.in_use.get(current, 0) > 0 or (self.keep_window is not None and not self.single_version)
        model = copy.deepcopy(self.model) if keep else self.model
        model.load_state_dict(named_tensors, strict=False)
        model.eval()
        self.weights_version = current + 1
        if global_steps is not None:
            self.global_steps = global_steps
        self.versions[self.weights_version] = (model, self.global_steps)
        self.model = model
        self._evict_versions()
        self.max_versions_held = max(self.max_versions_held, len(self.versions))
        digest = self.weights_digest()
        self._trace(
            {
                "event": "update",
                "version": self.weights_version,
                "global_steps": global_steps,
                "versions_held": sorted(self.versions),
                "time": time.time(),
                "digest": digest,
                "tensors": len(named_tensors),
            }
        )
        return digest

    def _trace(self, record: dict[str, Any]) -> None:
        """One JSON line per weight update and per decoded batch to ``$LONGCAT_HF_ROLLOUT_TRACE``."""
        trace = os.environ.get(ENV_TRACE)
        if trace:
            with open(trace, "a") as sink:
                sink.write(json.dumps({"replica": self.replica_rank, **record}) + "\n")

    def _evict_versions(self) -> None:
        """Drop the versions the scheduler core's ``idle_or_stale`` eviction policy names, except
        those a running batch still uses (its stale requests are stopped by ``stop_stale``) and,
        after ``set_staleness``, those inside the window. Without a window that is: every version
        that is neither the newest nor in use."""
        from longcat_plugins.schedulers.core.versions import EvictionContext, idle_or_stale

        if self.single_version:
            for version in [v for v in self.versions if v != self.weights_version]:
                del self.versions[version]
                self.in_use.pop(version, None)
            return
        live = tuple(sorted(self.versions))
        ctx = EvictionContext(live, self.weights_version, staleness=len(live), active=dict(self.in_use))
        newest = self.versions[self.weights_version][1]
        for version in idle_or_stale(ctx):
            steps = self.versions[version][1]
            retained = (
                self.keep_window is not None
                and newest is not None
                and steps is not None
                and newest - steps <= self.keep_window
            )
            if self.in_use.get(version, 0) == 0 and not retained:
                del self.versions[version]
                self.in_use.pop(version, None)

    def weights_digest(self) -> str:
        digest = hashlib.sha1()
        for name, tensor in sorted(self.model.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
        return digest.hexdigest()

    def get_stats(self) -> dict[str, Any]:
        busy = self.busy_s + (time.time() - self.busy_since if self.busy_since is not None else 0.0)
        return {
            **self.stats,
            "weights_version": self.weights_version,
            "global_steps": self.global_steps,
            "versions_held": sorted(self.versions),
            "max_versions_held": self.max_versions_held,
            "single_version": self.single_version,
            "busy_s": busy,
            "request_s": self.request_s,
            "uptime_s": time.time() - self.started_at,
            "queued": len(self._queue),
        }

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def set_single_version(self, enabled: bool = True) -> None:
        """Hold exactly one weights version (the engine model of vLLM/SGLang); see the module doc."""
        self.single_version = bool(enabled)
        if self.single_version:
            self._evict_versions()

    def _abort_queued(self) -> int:
        aborted, self._queue = self._queue, []
        for req in aborted:
            if not req.future.done():
                req.future.set_result(TokenOutput(token_ids=[], log_probs=[], stop_reason="aborted"))
        self.stats["aborted"] += len(aborted)
        return len(aborted)

    async def set_staleness(self, staleness: int | None) -> None:
        """Multi-version: keep every version whose ``global_steps`` is within ``staleness`` of the
        newest (the window DORA trains from), so a request of any live version can be continued
        here after a migration; costs one model copy per kept version."""
        self.keep_window = None if staleness is None else int(staleness)
        self._evict_versions()

    def _find(self, request_id: str) -> tuple[_Request | None, int | None]:
        """The queued or running request ``request_id`` and the version it runs on."""
        for req in self._running:
            if req.request_id == request_id and not req.future.done():
                return req, self._running_version
        for req in self._queue:
            if req.request_id == request_id and not req.future.done():
                return req, None
        return None, None

    def _stop(self, req: _Request, version: int | None, reason: str) -> int:
        """Stop ``req`` now and hand its caller the tokens so far (or its full output if it has
        just finished): returns how many tokens it carries, -1 if it had finished."""
        if req in self._queue:
            self._queue.remove(req)
        with req.lock:
            finished = req.finished
            req.stopped = req.stopped or (None if finished else reason)
            out = self._output(req, version, "completed" if finished else reason)
        if not req.future.done():
            req.future.set_result(out)
        if finished:
            return -1
        self.stats["stopped"] += 1
        return len(out.token_ids)

    async def stop_request(self, request_id: str, reason: str = MIGRATED) -> dict[str, Any]:
        """Stop one queued or running request (its batch decodes on without it); its caller gets
        the partial output with ``stop_reason=reason``. A request that already finished gets its
        complete output instead (``stopped: False``), so nothing is generated twice."""
        req, version = self._find(str(request_id))
        if req is None:
            return {"stopped": False, "tokens": 0}
        carried = self._stop(req, version, reason)
        return {
            "stopped": carried >= 0,
            "tokens": max(carried, 0),
            "global_steps": self._extra(version)["global_steps"],
        }

    async def stop_stale(self, latest: int, staleness: int, reason: str = "aborted") -> dict[str, Any]:
        """Stop every queued or running request on a version that left the staleness window of
        ``latest`` (the scheduler core's ``is_fresh``, the rule the sampler trains by: nothing it
        finishes would be trained); their callers restart them from the prompt on the newest.
        Returns their ids and, aligned, the tokens each had generated (the censored lengths)."""
        from longcat_plugins.schedulers.core.queue import is_fresh

        stopped: list[str] = []
        tokens: list[int] = []  # what each stopped request had generated (the censored lengths)
        stale = {
            v for v, (_, steps) in self.versions.items() if steps is not None and not is_fresh(latest, steps, staleness)
        }
        candidates = [(r, self._running_version) for r in self._running] if self._running_version in stale else []
        candidates += [(r, None) for r in self._queue if r.version in stale]
        for req, version in candidates:
            if not req.future.done() and (carried := self._stop(req, version, reason)) >= 0:
                stopped.append(req.request_id)
                tokens.append(carried)
        self.stats["stale_stopped"] += len(stopped)
        return {"stopped": stopped, "tokens": tokens}

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        """Abort the queued requests; in single-version mode also the running batch, which stops
        at its next decode step (its callers get ``aborted`` at once)."""
        count = self._abort_queued()
        if self.single_version:
            self._cancel = True
            for req in self._running:
                if not req.future.done():
                    req.future.set_result(TokenOutput(token_ids=[], log_probs=[], stop_reason="aborted"))
                    count += 1
                    self.stats["aborted"] += 1
        return {"aborted": count}

    async def resume_generation(self) -> None:
        return None

    async def wake_up(self, tags: Iterable[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None  # the KV cache lives only for the duration of a batch

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class HFReplica(RolloutReplica):
    """One ``HFServer`` actor per replica, placed on the node of the replica's workers.

    A server's process can be started ahead (:meth:`start_ahead`, while the trainer's engines are
    still being built: the process imports torch, transformers and verl before it can load
    anything; :func:`~longcat_plugins.runtime.later.later`); :meth:`launch_servers` then constructs
    the server, which loads the model, in that process instead of starting another."""

    #: server name -> (the server started ahead, its node, the Ray job that started it)
    _ahead: ClassVar[StartedAhead] = StartedAhead()

    def _options(self, node_id: str | None) -> dict[str, Any]:
        name = server_name(self.replica_rank, 0, self.name_suffix)
        options: dict[str, Any] = {"name": name, "max_concurrency": self.max_concurrency, "num_cpus": 0}
        if node_id is not None:
            options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False
            )
        return options

    @classmethod
    def start_ahead(cls, replica_rank: int, config: Any, node_id: str) -> None:
        """Start replica ``replica_rank``'s server process on ``node_id`` now, without a model
        (sized from the same rollout ``config`` verl's replica will get)."""
        replica = cls(replica_rank=replica_rank, config=config, model_config=None)
        options = replica._options(node_id)
        if not cls._ahead.holds(options["name"]):
            cls._ahead.put(options["name"], later(HFServer).options(**options).remote(), node_id)

    async def launch_servers(self) -> None:
        node_id = None
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
        options = self._options(node_id)
        ahead, ahead_node = HFReplica._ahead.take(options["name"]) or (None, None)
        if ahead is not None and node_id not in (None, ahead_node):  # started ahead on a one-node cluster only
            raise RuntimeError(
                f"hf rollout: {options['name']} was started ahead on node {ahead_node}, but replica "
                f"{self.replica_rank}'s workers are on {node_id}; set LONGCAT_HF_SERVERS=verl"
            )
        if ahead is not None:
            server = ahead
            await server.longcat_construct.remote(
                config=self.config, model_config=self.model_config, replica_rank=self.replica_rank
            )
        else:
            server = (
                ray.remote(HFServer)
                .options(**options)
                .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
            )
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf-replica-{self.replica_rank}{self.name_suffix}"

    def rollout_worker_use_gpu(self) -> bool:
        return False


class HFServerAdapter(BaseRollout):
    """Lives in the training worker; pushes each step's weights to its replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_leader = rank % world == 0
        self.server_handle: Any = None
        self.last_digest: str | None = None

    @property
    def is_leader_rank(self) -> bool:
        """verl's ``CheckpointEngineWorker`` (standalone replicas) asks the adapter this."""
        return self.is_leader

    def _server(self) -> Any:
        if self.server_handle is None:
            self.server_handle = ray.get_actor(server_name(self.replica_rank))
        return self.server_handle

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None] | AsyncIterator[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        global_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"hf rollout supports wire_format='named_tensors' only, got {wire_format!r}")
        start = time.time()
        # every rank walks the generator (it may gather shards collectively); the leader sends.
        # Hybrid replicas get a generator from the training engine, standalone replicas an async
        # one from their checkpoint engine.
        state = {}
        async for name, tensor in ensure_async_iterator(weights):
            state[name] = tensor.detach().to("cpu", copy=True)
        if not self.is_leader:
            return
        self.last_digest = await self._server().update_weights.remote(ray.put(state), global_steps)
        logger.info("hf rollout: pushed %d tensors in %.2fs", len(state), time.time() - start)
