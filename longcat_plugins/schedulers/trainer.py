"""DORA on verl's v1 trainer: ``trainer.v1.trainer_mode=dora`` (SPEC S1, S2).

Built on verl's ``separate_async`` trainer, which already has the shape DORA needs: standalone
rollout replicas (the standalone generator group) fed by a streaming replay buffer, training
that starts as soon as a batch is finished, and optional hybrid replicas on the training
devices that switch between generation and training (the elastic group). What it does not do
is DORA's core rule; this trainer changes exactly that:

* **Versions, not partial rollout.** ``separate_async`` aborts every in-flight request at each
  weight sync and resumes it on the new weights, so a sample spans versions. Here a weight sync
  never aborts: each ``hf`` replica keeps the version a running batch started with and loads the
  new one beside it (multi-version instances), and the agent loops' client restarts (never
  resumes) any request that is aborted, so every sample is generated start to finish by one
  version, recorded per trajectory.
* **Single-version engines.** vLLM/SGLang replicas hold one version and swap it in place;
  with ``single_version_replicas`` versions live per replica instead
  (:class:`ReplicaVersionCheckpointEngineManager`, decisions in
  :mod:`~longcat_plugins.schedulers.core.replicas`): a weight sync loads only idle replicas and
  those whose requests left the window, busy ones keep their version until they drain, and new
  requests go to the newest version, so work inside the window is never recomputed.
* **The bound is on that version.** The default sampler is
  :class:`~longcat_plugins.schedulers.sampler.DoraReplayBuffer`: a finished group more than
  ``staleness`` versions older than the weights being trained is dropped and its prompt
  replaced, and the bound is asserted on every batch.
* **Two-phase request cap.** With ``load_balancer: dora`` (the default) requests are routed by
  :class:`~longcat_plugins.schedulers.load_balancer.DoraLoadBalancer`: verl's sticky
  least-loaded routing with the report's per-replica cap, which drops from
  ``cap_before_rebalance`` to ``cap_after_rebalance`` when the core's balancer first calls for
  a rebalance in a step (S3; ``dora/lb/*`` metrics).
* **The core decides what is generated.** With ``dispatch: dora`` verl's per-step batch
  submission and its refills go through :class:`~longcat_plugins.schedulers.dispatch.DispatchPlanner`
  (per-domain rollout quotas, pass-rate oversampling), topping outstanding work up as capacity
  frees; the dataloader stays the source of rows.
* **Elastic colocation.** When ``trainer.v1.separate_async.hybrid_rollout.enable_switch`` is
  on, the hybrid replicas are lent to generation and reclaimed for training by
  :class:`~longcat_plugins.schedulers.elastic.ElasticColocationPolicy` (reclaim at the training
  condition, lend when the saved idle time beats the switch cost).

* **Admission control.** With ``admission`` set (``version_window``, ``length_aware`` or a
  plugin's ``DoraAdmission``) the load balancer holds new requests back on a version with too
  little of its window left (:mod:`~longcat_plugins.schedulers.core.admission`); the trainer tells
  it when a batch is taken (the newest version is about to be superseded) and when a version is
  published.

* **Start-up.** The standalone replicas start as soon as the trainer's devices are reserved,
  beside its engines, and the agent-loop manager before the first weight sync
  (:mod:`~longcat_plugins.schedulers.prestart`), not one after another as verl's setup does.

It logs ``dora/*`` metrics (staleness, versions per batch, prompts still generating when the
batch was taken, the trainer's wait, request load ratio and busy ratio of the replicas, the
trained length distribution ``dora/trained_len_*`` and the length censoring
``dora/censored_share`` / ``dora/censored_len_mean``) and,
with ``LONGCAT_DORA_TRACE`` or ``trace_path`` set, one JSON line per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from omegaconf import DictConfig, OmegaConf
from verl.checkpoint_engine import CheckpointEngineManager
from verl.checkpoint_engine.base import CheckpointEngineWorker
from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup
from verl.trainer.ppo.v1 import replay_buffer as verl_replay_buffer
from verl.trainer.ppo.v1 import trainer_separate_async
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.debug import marked_timer
from verl.utils.import_utils import load_class_from_fqn
from verl.utils.ray_utils import auto_await

from longcat_plugins.data.checks import planned_settings, strategy_problems
from longcat_plugins.data.planned import (
    PlannedData,
    candidates_of,
    columns,
    concat,
    merge_plan_metrics,
    problem_text,
)
from longcat_plugins.data.settings import SETTINGS_PATH as DATA_PATH
from longcat_plugins.data.settings import data_settings
from longcat_plugins.runtime.placement import pin_resource_pools
from longcat_plugins.schedulers.client import DoraLLMServerClient
from longcat_plugins.schedulers.core.replicas import MIN_REPLICAS
from longcat_plugins.schedulers.dispatch import ANY_DOMAIN, DispatchPlanner, dispatch_window
from longcat_plugins.schedulers.elastic import ElasticColocationPolicy
from longcat_plugins.schedulers.lengths import batch_response_lengths, trained_length_metrics
from longcat_plugins.schedulers.load_balancer import create_dora_load_balancer
from longcat_plugins.schedulers.prestart import PrestartedAgentLoopManager, ReplicaPrestart
from longcat_plugins.schedulers.sampler import DoraReplayBuffer, _lookup
from longcat_plugins.schedulers.settings import SETTINGS_PATH, DoraSettings, dora_settings

logger = logging.getLogger(__name__)

MODE = "dora"
#: the dispatch planner's state, beside verl's ``data.pt`` in every checkpoint folder
DISPATCH_STATE = "dora_dispatch.pt"
#: the D2 replay buffer's state (kept group uids, RNG), beside verl's ``transfer_queue`` folder
#: that holds the kept groups' trajectories
REPLAY_STATE = "dora_replay.pt"
#: the step planner's state (data strategies, self-verification), JSON like ``longcat_data``'s
PLANNED_STATE = "longcat_data.json"
ENV_TRACE = "LONGCAT_DORA_TRACE"


def check_config(config: DictConfig) -> list[str]:
    """Problems that stop a ``dora`` run, each naming its key path and what to do."""
    problems: list[str] = []
    rollout = config.actor_rollout_ref.rollout
    v1 = config.trainer.v1
    if not config.trainer.get("use_v1", False):
        problems.append("trainer.use_v1: the dora trainer is a v1 trainer; set trainer.use_v1=true")
    if rollout.checkpoint_engine.backend == "naive":
        problems.append(
            "actor_rollout_ref.rollout.checkpoint_engine.backend: 'naive' cannot reach standalone replicas; "
            "use nccl/nixl/... on accelerators or object_store on the CPU runtime"
        )
    if int(rollout.get("nnodes", 0) or 0) <= 0 or int(rollout.get("n_gpus_per_node", 0) or 0) <= 0:
        problems.append(
            "actor_rollout_ref.rollout.n_gpus_per_node: the standalone generator group needs at least one "
            "device (actor_rollout_ref.rollout.nnodes and n_gpus_per_node both > 0)"
        )
    sync_step = v1.separate_async.parameter_sync_step
    own = v1.get(MODE, {}) or {}
    if own.get("parameter_sync_step", 1) != sync_step:
        problems.append(
            f"trainer.v1.{MODE}.parameter_sync_step: {own.get('parameter_sync_step', 1)} must equal "
            f"trainer.v1.separate_async.parameter_sync_step ({sync_step}); the dora trainer reuses that section"
        )
    mini = config.actor_rollout_ref.actor.ppo_mini_batch_size
    if config.data.train_batch_size != sync_step * mini:
        problems.append(
            f"data.train_batch_size: {config.data.train_batch_size} must equal "
            f"trainer.v1.separate_async.parameter_sync_step ({sync_step}) x "
            f"actor_rollout_ref.actor.ppo_mini_batch_size ({mini})"
        )
    problems.extend(_domain_problems(config))
    problems.extend(_single_version_problems(config))
    problems.extend(_pool_problems(config))
    problems.extend(_planned_problems(config))
    return problems


def _planned_problems(config: DictConfig) -> list[str]:
    """The data strategies under ``dora``: the step planner shapes what the dispatch starts, so
    it needs ``dispatch: dora``; quotas, replay and online filtering are the DORA sampler's own
    here (its ``domain_ratios``, ``reuse_ratio``, ``online_filter`` act on the version window),
    so the planner's copies of them are refused, naming the key to use instead."""
    data = planned_settings(config)
    if data is None or not data.plans():
        return []
    dora = OmegaConf.select(config, SETTINGS_PATH, default=None) or {}
    problems = strategy_problems(config, data, MODE)
    if str(dora.get("dispatch", DoraSettings.dispatch)) != "dora":
        problems.append(
            f"{SETTINGS_PATH}.dispatch: the data strategies of {DATA_PATH} ({', '.join(data.enabled())}) plan "
            "what the dora dispatch starts; set dispatch: dora"
        )
    if data.quotas.enable:
        problems.append(
            f"{DATA_PATH}.quotas.enable: under the dora trainer per-domain rollout quotas are "
            f"{SETTINGS_PATH}.domain_ratios / domain_oversampling (its dispatch and sampler run them)"
        )
    if data.replay.enable:
        problems.append(
            f"{DATA_PATH}.replay.enable: under the dora trainer replay is {SETTINGS_PATH}.reuse_ratio "
            "(stale finished groups of the version window)"
        )
    if data.oversampling.enable and int(dora.get("oversampling_max", DoraSettings.oversampling_max)) > 1:
        problems.append(
            f"{DATA_PATH}.oversampling.enable: the dispatch's own pass-rate oversampling is on too "
            f"({SETTINGS_PATH}.oversampling_max > 1); keep one"
        )
    if data.selfverify.enable and dora.get("domain_ratios"):
        problems.append(f"{DATA_PATH}.selfverify: not combined with {SETTINGS_PATH}.domain_ratios yet (turn one off)")
    if data.pool_factor != 1 and dora.get("domain_ratios"):
        problems.append(
            f"{DATA_PATH}.pool_factor: not combined with {SETTINGS_PATH}.domain_ratios yet under the dora "
            "trainer (the dispatch's quotas choose each prompt's domain); leave pool_factor at 1"
        )
    return problems


def standalone_replicas(config: DictConfig) -> int:
    """Standalone replicas verl builds: the generator group's devices over one replica's world size."""
    rollout = config.actor_rollout_ref.rollout
    devices = int(rollout.get("nnodes", 0) or 0) * int(rollout.get("n_gpus_per_node", 0) or 0)
    world = 1
    for key in ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"):
        world *= int(rollout.get(key, 1) or 1)
    return devices // world


def _single_version_problems(config: DictConfig) -> list[str]:
    """Replica-granular versioning needs a second replica to serve while one loads (see
    :mod:`~longcat_plugins.schedulers.core.replicas`). The elastic group needs nothing more: a
    lent hybrid replica holds the one version it was given when lent and stays outside the
    roller (its requests are restarted when it is reclaimed)."""
    dora = OmegaConf.select(config, SETTINGS_PATH, default=None) or {}
    if not dora.get("single_version_replicas", False):
        name = OmegaConf.select(config, "actor_rollout_ref.rollout.name", default=None)
        if name not in (None, "hf"):
            return [
                f"{SETTINGS_PATH}.single_version_replicas: a {name!r} replica holds one weights version and swaps "
                "it in place, so DORA on it needs single_version_replicas: true (multi-version replicas are the hf "
                "server's); see configs/dora_gpu.yaml"
            ]
        return []
    problems = []
    replicas = standalone_replicas(config)
    if replicas < MIN_REPLICAS:
        problems.append(
            f"{SETTINGS_PATH}.single_version_replicas: needs at least {MIN_REPLICAS} standalone replicas "
            f"(one loads the newest weights while another serves), got {replicas} "
            "(actor_rollout_ref.rollout.nnodes x n_gpus_per_node / tensor x data x pipeline parallel size)"
        )
    return problems


def _pool_problems(config: DictConfig) -> list[str]:
    """``node_resources`` naming a trainer pool this run does not create (the pool would never be
    pinned, and its workers would land wherever Ray puts them)."""
    dora = OmegaConf.select(config, SETTINGS_PATH, default=None) or {}
    pinned = dora.get("node_resources") or {}
    pools = {"global_pool"}
    if OmegaConf.select(config, "reward.reward_model.enable_resource_pool", default=False):
        pools.add("reward_pool")
    if OmegaConf.select(config, "distillation.enabled", default=False):
        pools.add("teacher_pool")
    return [
        f"{SETTINGS_PATH}.node_resources.{pool}: this run has no resource pool {pool!r} (its pools: {sorted(pools)})"
        for pool in sorted(set(map(str, pinned)) - pools)
    ]


def _domain_problems(config: DictConfig) -> list[str]:
    """``domain_ratios`` against the domains of the local training files: a ratio naming a
    domain no row has would hold every batch to a quota that can never fill, so it stops the
    run here instead of at the first batch (files that are not local parquet are not read)."""
    dora = OmegaConf.select(config, SETTINGS_PATH, default=None) or {}
    ratios = dora.get("domain_ratios") or {}
    if not ratios:
        return []
    key = str(dora.get("domain_key") or DoraSettings.domain_key)
    files = config.data.get("train_files")
    files = [files] if isinstance(files, str) else list(files or [])
    found: set[str] = set()
    for name in files:
        path = Path(str(name))
        if path.suffix != ".parquet" or not path.is_file():
            return []
        found |= _column_values(path, key)
    return [
        f"{SETTINGS_PATH}.domain_ratios.{domain}: no row of data.train_files has {key} == {domain!r} "
        f"(domains in the data: {sorted(found)})"
        for domain in sorted(set(map(str, ratios)) - found)
    ]


def _column_values(path: Path, key: str) -> set[str]:
    """The distinct values of ``key`` (a column, or a dotted path into a struct column)."""
    import pyarrow.parquet as pq

    head, *rest = key.split(".")
    if head not in pq.read_schema(path).names:
        return set()
    values: set[str] = set()
    for value in pq.read_table(path, columns=[head]).column(head).to_pylist():
        for part in rest:
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            values.add(str(value))
    return values


class _DropFlushLogger(logging.LoggerAdapter):
    """verl 0.9.1's ``separate_async`` calls ``logger.info(..., flush=True)`` (a ``print``
    keyword) when ``actor_rollout_ref.hybrid_engine=False``, which raises ``TypeError`` in
    ``logging``; this adapter drops the keyword so a trainer without hybrid replicas can start."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("flush", None)
        super().log(level, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return msg, kwargs


if not isinstance(trainer_separate_async.logger, _DropFlushLogger):
    trainer_separate_async.logger = _DropFlushLogger(trainer_separate_async.logger, {})


class MultiVersionCheckpointEngineManager(CheckpointEngineManager):
    """verl's weight-sync manager minus the abort: in-flight requests finish on their version.

    Only valid with rollout servers that keep the running version while loading the new one
    (the ``hf`` server does; vLLM/SGLang swap in place and need ``abort`` + restart instead)."""

    @auto_await
    async def abort_replicas(self, reject_request: bool = False) -> None:
        return None


#: weight transports from which a replica can load a published version later, without the
#: trainer sending it again (the object-store board keeps recent versions); with the others a
#: drained replica loads at the next weight sync
CATCH_UP_BACKENDS = ("object_store",)
_CHECKPOINT_WORKER = ray.remote(CheckpointEngineWorker)


class ReplicaVersionCheckpointEngineManager(CheckpointEngineManager):
    """verl's weight-sync manager for replica-granular versioning (one version per replica).

    A weight sync never touches all replicas: the load balancer's
    :class:`~longcat_plugins.schedulers.core.replicas.ReplicaRoller` says which replicas abort
    (only those whose version left the staleness window) and which load now (drained or idle
    ones, never the last one able to generate); the others keep serving their version. Loads
    go through verl's checkpoint-engine workers of just those replicas. A replica that drains
    between syncs loads at once from a transport that keeps versions (``object_store``; a
    background thread takes the balancer's queued loads), else at the next sync."""

    def __init__(
        self,
        config: Any,
        actor_wg: Any,
        replicas: list[Any],
        load_balancer: Any,
        staleness: int,
    ) -> None:
        super().__init__(config=config, actor_wg=actor_wg, replicas=replicas)
        self.load_balancer = load_balancer
        self.staleness = staleness
        self.by_address = {replica.server_address: replica for replica in replicas}
        self.catch_up = config.backend in CATCH_UP_BACKENDS
        self.latest: int | None = None
        self.counters = {"sync_loads": 0, "catch_up_loads": 0, "aborted_replicas": 0}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def stop_catch_up(self) -> None:
        """End the catch-up loop before Ray shuts down with the run: a Ray call from it after the
        shutdown makes Ray end the process with status 1 (the TaskRunner runs in the driver)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)

    @auto_await
    async def abort_replicas(self, reject_request: bool = False) -> None:
        return None  # never all at once: the roller names the replicas to abort

    async def _load(self, replicas: list[Any], version: int, send: bool) -> dict:
        """Load ``version`` into ``replicas``; ``send``: the training workers send it now."""
        refs, sync_metrics = [], {}
        rollout = None
        if replicas:
            workers = [worker for replica in replicas for worker in replica.workers]
            rollout = RayWorkerGroup(worker_handles=workers, ray_cls_with_init=RayClassWithInitArgs(_CHECKPOINT_WORKER))
            await asyncio.gather(*[r.release_kv_cache() for r in replicas])
            if send:
                self.build_process_group(rollout)
        if send:
            refs = self.actor_wg.update_weights(global_steps=version, mode=self.backend)
        if rollout is not None:
            refs = refs + rollout.update_weights(global_steps=version)
        results = ray.get(refs)
        if send:
            for result in results[: self.actor_wg.world_size]:
                if isinstance(result, dict):
                    sync_metrics.update(result)
            finalize = self.actor_wg.execute_checkpoint_engine(["finalize"] * self.actor_wg.world_size)
            if rollout is not None:
                finalize = finalize + rollout.execute_checkpoint_engine(["finalize"] * rollout.world_size)
            ray.get(finalize)
        if replicas:
            await asyncio.gather(*[r.resume_kv_cache() for r in replicas])
        return sync_metrics

    @auto_await
    async def update_weights(self, global_steps: int | None = None) -> dict:
        version = int(global_steps or 0)
        if self.latest is None:  # the initial sync: every replica loads the starting weights
            with self._lock:
                metrics = await self._load(self.replicas, version, send=True)
                self.latest = version
            await self.load_balancer.enable_single_version.remote(self.staleness, version, sorted(self.by_address))
            if self.catch_up:
                self._thread = threading.Thread(target=self._catch_up_loop, name="dora-replica-loads", daemon=True)
                self._thread.start()
            return metrics
        metrics: dict = {}
        # held from the publish to the end of the load: a catch-up load never sees the roller's
        # newest version before the weights of that version were sent
        with self._lock:
            plan = await self.load_balancer.publish.remote(version)
            aborted = [self.by_address[name] for name in plan["aborted"]]
            await asyncio.gather(*[r.abort_all_requests() for r in aborted])
            load = [self.by_address[name] for name in plan["load"]]
            if load or self.catch_up:
                metrics = await self._load(load, version, send=True)
                self.latest = version
        await asyncio.gather(*[r.resume_generation() for r in aborted])
        await self.load_balancer.loaded.remote(plan["load"], version)
        self.counters["sync_loads"] += len(load)
        self.counters["aborted_replicas"] += len(aborted)
        return {**metrics, **{f"dora/replica/{k}": float(v) for k, v in self.counters.items()}}

    def _catch_up_loop(self) -> None:
        """Load replicas that drained between weight syncs with the latest sent version."""
        while not self._stop.is_set():
            try:
                names = ray.get(self.load_balancer.take_loads.remote(1.0))
                if not names:
                    continue
                with self._lock:
                    version = self.latest
                    assert version is not None
                    asyncio.run(self._load([self.by_address[n] for n in names], version, send=False))
                    self.counters["catch_up_loads"] += len(names)
                    ray.get(self.load_balancer.loaded.remote(names, version))
            except Exception:  # noqa: BLE001 - Ray shut down with the run, or a load failed
                if not ray.is_initialized():
                    return
                logger.exception("dora: loading drained replicas failed")
                time.sleep(1.0)


class DoraTrainer(PPOTrainerSeparateAsync):
    """Multi-version streaming trainer: one version per sample, version-bounded staleness."""

    #: run by ``longcat-plugins validate`` and the Hydra callback before Ray starts
    check_config = staticmethod(check_config)

    def __init__(self, config: DictConfig) -> None:
        problems = check_config(config)
        if problems:
            raise ValueError("dora trainer: invalid configuration:\n  " + "\n  ".join(problems))
        self.dora: DoraSettings = dora_settings()
        super().__init__(config)
        self.elastic = ElasticColocationPolicy(
            reclaim_ratio=self.dora.reclaim_ratio, min_gain_s=self.dora.min_lend_gain_s
        )
        self.trace_path = os.environ.get(ENV_TRACE) or self.dora.trace_path
        self._replica_stats: dict[str, dict[str, Any]] = {}
        self._step_record: dict[str, Any] = {}
        self._planner: DispatchPlanner | None = None
        data = data_settings()
        #: the data strategies' step planner, shaping each dispatched chunk (None: none enabled)
        self.planned: PlannedData | None = PlannedData(data, config) if data.plans() else None
        self._data_metrics: dict[str, float] = {}
        self._verify_due = False
        #: a prompt row the verification rows are shaped like (the last chunk's first row)
        self._verify_template: Any = None
        #: logged with step 1: what started ahead of verl's setup order, and how long the replicas took
        self._startup_metrics: dict[str, float] = {}
        #: the standalone replicas' early start (set by ``_setup``, watched in ``_init_resource_pool_mgr``)
        self._prestart: ReplicaPrestart | None = None

    # -- construction ---------------------------------------------------------------------------

    def fit(self, agent_loop_manager: Any) -> Any:
        try:
            return super().fit(agent_loop_manager)
        finally:
            manager = getattr(self, "standalone_checkpoint_manager", None)
            if isinstance(manager, ReplicaVersionCheckpointEngineManager):
                manager.stop_catch_up()

    def _build_replay_buffer(self) -> Any:
        custom = self.config.trainer.v1.sampler.get("custom_sampler", None)
        if custom is not None and custom.get("path") and custom.get("name"):
            return super()._build_replay_buffer()
        sampler = self.config.trainer.v1.sampler
        return DoraReplayBuffer(
            trainer_mode=self.trainer_mode,
            trainer_config=self.config.trainer.v1.get(self.trainer_mode, {}),
            max_off_policy_threshold=None,
            max_off_policy_strategy="drop",
            sampler_kwargs=sampler.sampler_kwargs,
            refill_fn=self._add_prompts_to_generate,
            staleness=self.dora.staleness,
        )

    # -- dispatch: the core decides which prompts verl generates, and when ------------------------

    @property
    def planner(self) -> DispatchPlanner:
        """The dispatch planner over verl's dataloader (built on first use, after the dataloader)."""
        if self._planner is None:
            batch = int(self.config.data.train_batch_size)
            warmup = self.config.trainer.v1.separate_async.num_warmup_batches
            window = dispatch_window(batch, warmup)
            self._planner = DispatchPlanner(
                self.dora.dispatch_config(batch, window), self._fetch_row, window=window, lookahead=4 * window
            )
        return self._planner

    def _fetch_row(self) -> tuple[str, str, Any]:
        """The dataloader's next row (verl's fetch, one prompt: gen_batch_size is 1 in async
        modes) as (domain, task id, row)."""
        row = self._fetch_one_gen_batch()
        if len(row) != 1:
            raise RuntimeError(f"dora dispatch: expected one-prompt dataloader fetches, got {len(row)}")
        path = self.dora.domain_key.split(".")
        value: Any = list(row[path[0]])[0] if path[0] in row.keys() else None
        domain = _lookup(value, path[1:]) if len(path) > 1 else value
        if domain is None and self.dora.domain_ratios:
            raise ValueError(f"{SETTINGS_PATH}.domain_key={self.dora.domain_key!r}: a training row has no such field")
        task = hashlib.sha1(problem_text(list(row["raw_prompt"])[0]).encode()).hexdigest()[:16]
        return str(domain), task, row

    def _dispatch(self) -> int:
        """Submit what the planner issues now (outstanding work topped up to the quotas)."""
        buffer = self.replay_buffer
        buffer._sync_metadata_from_transfer_queue()
        live = set().union(
            *(
                keys["train"]
                for keys in (buffer.pending_keys, buffer.running_keys, buffer.finished_keys, buffer.failure_keys)
            )
        )
        issues = self.planner.plan(live)
        if self.planned is not None:
            self.planned.retain(live)
            batch = self._planned_batch(issues)
            if batch is None:
                return 0
        else:
            if not issues:
                return 0
            rows = [issue.payload.clone() for issue in issues]
            batch = rows[0] if len(rows) == 1 else tu.concat_tensordict(rows)
            batch.update(tu.get_tensordict({"uid": np.array([issue.uid for issue in issues], dtype=object)}))
        tu.assign_non_tensor_data(batch, "global_steps", self.global_steps)
        return self._submit_batch_to_rollout(batch)

    def _planned_batch(self, issues: list[Any]) -> Any:
        """The step planner's shape of the prompts the dispatch chose now: which prompts (among
        ``pool_factor`` x as many rows: the curriculum, the plugins' order), rollouts per prompt
        (D4, against the step's recently planned tasks, the step's budget kept by a ledger
        across chunks: ``DataPlanner.plan(streaming=True)``), groups per prompt (D5/A5),
        response budgets (D6), the plugins' shape; plus the verification rows (A6) once per
        trained step. Rows the planner leaves out go back to the front of the pool."""
        planned, dispatch = self.planned, self.planner
        assert planned is not None
        if planned.tokenizer is None:
            planned.tokenizer = self.tokenizer
        chunks: list[dict[str, Any]] = []
        if issues:
            # pool_factor: the planner chooses the chunk's prompts among this many times as many rows
            extra = dispatch.borrow((planned.settings.pool_factor - 1) * len(issues))
            sources = [(i.domain, i.task, i.payload) for i in issues] + extra
            pool = concat([columns(payload) for _, _, payload in sources])
            candidates = candidates_of(pool, planned.settings)
            # streaming: D4 allocates against the step's recent tasks with a ledger of the step's budget
            plan, metrics = planned.planner.plan(candidates, prompts=len(issues), streaming=True)
            merge_plan_metrics(self._data_metrics, metrics)
            chosen = {r.row for r in plan}
            dispatch.give_back([row for j, row in enumerate(extra, len(issues)) if j not in chosen])
            for i, issue in reversed(list(enumerate(issues))):  # back to the pool's front in source order
                dispatch.withdraw(issue, back_to_pool=i not in chosen)
            if plan:
                rows = planned.rows(pool, plan, self.global_steps, verify=False)
                first = set()
                for uid, r in zip(rows["uid"], plan, strict=True):
                    domain, task, _ = sources[r.row]
                    dispatch.register(str(uid), domain, task, prompt=r.row >= len(issues) and r.row not in first)
                    first.add(r.row)
                chunks.append(rows)
        if self._verify_due:
            self._verify_due = False
            template = issues[0].payload if issues else self._verify_template
            if template is not None:
                verify = planned.verification_rows(
                    columns(template), planned.planner.context_budget(), self.global_steps
                )
                if verify is not None:
                    for uid in verify["uid"]:
                        dispatch.register(str(uid), ANY_DOMAIN, "selfverify")
                    chunks.append(verify)
        if issues:
            self._verify_template = issues[0].payload
        if not chunks:
            return None
        return tu.get_tensordict(concat(chunks))

    def _add_prompts_to_generate(self, num_prompts: int) -> int:
        """verl's refill and warm-up entry: with ``dispatch: dora`` the planner decides how many
        (what freed) and which, not ``num_prompts``."""
        if self.dora.dispatch != "dora":
            return super()._add_prompts_to_generate(num_prompts)
        return self._dispatch()

    def _add_batch_to_generate(self) -> None:
        """The step's submission: with ``dispatch: dora`` a top-up, not a whole batch."""
        if self.dora.dispatch != "dora":
            return super()._add_batch_to_generate()
        self._dispatch()

    def _on_sampled(self, batch: Any) -> None:
        """A training batch was taken: its groups' rewards feed the pass rates (D5), they leave
        the quota, and the freed capacity is refilled at once (not at the next step)."""
        planner = self.planner
        if self.planned is not None:
            filtered = self.replay_buffer.take_filtered() if isinstance(self.replay_buffer, DoraReplayBuffer) else {}
            self._data_metrics.update(
                self.planned.observe(verl_replay_buffer.tq, batch, set(), self.global_steps, filtered=filtered)
            )
            self._verify_due = self.planned.selfverify is not None
        if self.dora.oversampling_max > 1:
            data = verl_replay_buffer.tq.kv_batch_get(
                keys=batch.keys, partition_id=batch.partition_id, select_fields=["rm_scores"]
            )
            per_uid: dict[str, list[float | None]] = {}
            for key, score in zip(batch.keys, list(data["rm_scores"]), strict=True):
                value = float(score.sum().item())
                per_uid.setdefault(key.split("_")[0], []).append(value if math.isfinite(value) else None)
            for uid, rewards in per_uid.items():
                planner.observe(uid, rewards)
        planner.take({key.split("_")[0] for key in batch.keys})
        self._dispatch()

    def _replay(self) -> DoraReplayBuffer | None:
        """The sampler when it keeps a D2 replay buffer (``reuse_ratio > 0``)."""
        buffer = self.replay_buffer
        return buffer if isinstance(buffer, DoraReplayBuffer) and buffer.replay is not None else None

    def _save_checkpoint(self) -> None:
        super()._save_checkpoint()
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        if self._planner is not None:
            torch.save(self._planner.state_dict(), os.path.join(folder, DISPATCH_STATE))
        replay = self._replay()
        if replay is not None:
            torch.save(replay.replay_state_dict(), os.path.join(folder, REPLAY_STATE))
        if self.planned is not None:
            tmp = os.path.join(folder, PLANNED_STATE + ".tmp")
            with open(tmp, "w") as sink:
                json.dump(self.planned.state_dict(in_flight=True), sink)
            os.replace(tmp, os.path.join(folder, PLANNED_STATE))

    def _load_checkpoint(self) -> None:
        super()._load_checkpoint()  # restores TransferQueue (the kept groups' trajectories) first
        if self.global_steps <= 0:
            return
        folder = self.config.trainer.resume_from_path
        if self.config.trainer.resume_mode == "auto" or not folder:
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        folder = os.path.abspath(folder)
        if self.dora.dispatch == "dora":
            path = os.path.join(folder, DISPATCH_STATE)
            if os.path.exists(path):
                self.planner.load_state_dict(torch.load(path, weights_only=False))
            else:
                logger.warning("dora dispatch: no %s in %s; the planner starts empty", DISPATCH_STATE, folder)
        if self.planned is not None:
            path = os.path.join(folder, PLANNED_STATE)
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"dora trainer: resuming from {folder} without the planner state {PLANNED_STATE}"
                )
            with open(path) as source:
                self.planned.load_state_dict(json.load(source))
        replay = self._replay()
        if replay is not None:
            path = os.path.join(folder, REPLAY_STATE)
            state = torch.load(path, weights_only=False) if os.path.exists(path) else None
            if state is None:
                logger.warning("dora replay: no %s in %s; the replay buffer starts empty", REPLAY_STATE, folder)
            logger.info("dora replay: resumed %s", replay.load_replay_state_dict(state))

    def _init_resource_pool_mgr(self) -> None:
        """verl's pools, with those named in ``node_resources`` pinned to the nodes carrying
        their resource (multi-node: trainer on its nodes, the rollout replicas on the rest)."""
        super()._init_resource_pool_mgr()
        self.resource_pool_manager = pin_resource_pools(
            self.resource_pool_manager, dict(self.dora.node_resources), f"{SETTINGS_PATH}.node_resources"
        )
        if self._prestart is not None:
            self._prestart.watch_pools(self.resource_pool_manager)

    def _setup(self) -> None:
        from verl.workers.rollout.llm_server import LLMServerManager

        vllm = self.config.actor_rollout_ref.rollout.name == "vllm"
        if vllm:
            # verl's hook "for recipe to change" the replica class: ours launches DoraVLLMServer
            # (per-request stop and pinned continuation); only while this trainer builds its managers
            from longcat_plugins.schedulers.vllm_server import DoraVLLMReplica

            LLMServerManager.rollout_replica_class = DoraVLLMReplica  # type: ignore[attr-defined]
        # the balancer's process starts now, while verl starts the checkpoint engine and the
        # replicas (each actor's process is seconds of imports: on the lent H100 15-25 s, and verl
        # starts them one after another); it gets its servers once they exist
        balancer = self._spawn_load_balancer() if self.dora.load_balancer == "dora" else None
        self._prestart = (
            ReplicaPrestart(LLMServerManager.create, self.config, self._enable_hybrid_replicas)
            if self.dora.prestart_replicas
            else None
        )
        try:
            with self._prestart.handing_over() if self._prestart is not None else contextlib.nullcontext():
                super()._setup()
        finally:
            if vllm:
                del LLMServerManager.rollout_replica_class  # type: ignore[attr-defined]
        prestart = self._prestart
        self._startup_metrics = {"dora/startup/replicas_prestarted": float(prestart is not None and prestart.ahead)}
        if prestart is not None and prestart.create_s is not None:
            self._startup_metrics["dora/startup/replicas_create_s"] = prestart.create_s
        if self.config.actor_rollout_ref.rollout.name == "hf":
            self.standalone_checkpoint_manager = MultiVersionCheckpointEngineManager(
                config=omega_conf_to_dataclass(self.config.actor_rollout_ref.rollout.checkpoint_engine),
                actor_wg=self.actor_rollout_wg,
                replicas=self.standalone_server_manager.get_replicas(),
            )
        if balancer is not None:
            self._install_load_balancer(balancer)
        self._prestart_agent_loops()  # the client's router is final: before anything waits for the servers
        if balancer is not None:
            if self._stop_requests() and not self.dora.single_version_replicas:  # multi-version: keep the window
                manager = self.standalone_server_manager
                ray.get([h.set_staleness.remote(self.dora.staleness) for h in manager.server_handles])
        if self.dora.single_version_replicas:
            self._install_single_version()
        if self.dora.load_balancer == "dora" and isinstance(self.replay_buffer, DoraReplayBuffer):
            self.replay_buffer.on_taken = self._begin_training  # before the batch's refills are submitted
        if self.dora.dispatch == "dora" and isinstance(self.replay_buffer, DoraReplayBuffer):
            self.replay_buffer.on_poll = self._dispatch
            self.replay_buffer.on_sampled = self._on_sampled
            planned = self.planned
            if planned is not None:
                self.replay_buffer.judged_by_signal = lambda uid: uid in planned.verify_uids

    def _prestart_agent_loops(self) -> None:
        """Create the agent-loop manager now when the recipe names :class:`PrestartedAgentLoopManager`
        (or a subclass): its workers' processes start while the replicas come up and take their
        first weights; verl's ``main_ppo`` then gets it, built from the same methods' results."""
        self._startup_metrics["dora/startup/agent_loops_prestarted"] = 0.0
        fqn = self.config.actor_rollout_ref.rollout.get("agent", {}).get("agent_loop_manager_class")
        manager_cls = load_class_from_fqn(fqn, "AgentLoopManager") if fqn else None
        if not (isinstance(manager_cls, type) and issubclass(manager_cls, PrestartedAgentLoopManager)):
            return
        manager_cls.prestart(
            config=self.config,
            llm_client=self.get_llm_client(),
            teacher_client=self.get_teacher_client(),
            reward_loop_worker_handles=self.get_reward_handles(),
        )
        self._startup_metrics["dora/startup/agent_loops_prestarted"] = 1.0

    def _install_single_version(self) -> None:
        """Replica-granular versioning: ``hf`` servers hold one version, and weight syncs go
        through :class:`ReplicaVersionCheckpointEngineManager` driven by the balancer's roller."""
        manager = self.standalone_server_manager
        if self.config.actor_rollout_ref.rollout.name == "hf":
            # the elastic group's hybrid replicas too: lent, each holds the version it was given
            handles = list(manager.server_handles)
            if self._enable_hybrid_replicas:
                handles += list(self.llm_server_manager.server_handles)
            ray.get([handle.set_single_version.remote(True) for handle in handles])
        self.standalone_checkpoint_manager = ReplicaVersionCheckpointEngineManager(
            config=omega_conf_to_dataclass(self.config.actor_rollout_ref.rollout.checkpoint_engine),
            actor_wg=self.actor_rollout_wg,
            replicas=manager.get_replicas(),
            load_balancer=manager.global_load_balancer,
            staleness=self.dora.staleness,
        )

    def _spawn_load_balancer(self) -> Any:
        """A :class:`DoraLoadBalancer` actor with no servers yet (:meth:`_install_load_balancer`
        gives it the standalone replicas)."""
        return create_dora_load_balancer(
            {},
            self.dora.balancer_config(),
            stop_requests=self._stop_requests(),
            staleness=self.dora.staleness,
            length_momentum=self.dora.length_momentum,
        )

    def _install_load_balancer(self, balancer: Any) -> None:
        """Route through :class:`DoraLoadBalancer` (S3's two-phase cap).

        ``separate_async`` builds its standalone ``LLMServerManager`` inside ``_setup`` without a
        ``load_balancer_cls`` argument, so the router verl made is replaced here by ``balancer``
        (spawned before verl's setup), before any client exists (``main_ppo`` asks for the client
        after construction). That one router serves both groups: the hybrid (elastic) replicas
        are added to the standalone manager's balancer, and the hybrid manager's own router is
        never asked for a server."""
        manager = self.standalone_server_manager
        servers = dict(zip(manager.server_addresses, manager.server_handles, strict=True))
        previous = manager.global_load_balancer
        ray.get(balancer.add_servers.remote(servers))
        manager.global_load_balancer = balancer
        ray.kill(previous)
        self.add_replicas_to_balancer()  # no-op without hybrid replicas; verl added them to the old one
        # a dead replica is dropped between requests, not only when a request to it fails
        ray.get(manager.global_load_balancer.start_health_probe.remote(float(self.dora.health_probe_s)))

    def _stop_requests(self) -> bool:
        """Migrations and stale aborts are executed where the servers stop single requests (``hf``,
        and vLLM through :mod:`.vllm_server`)."""
        return self.dora.migrate_requests and self.config.actor_rollout_ref.rollout.name in ("hf", "vllm")

    def get_llm_client(self) -> DoraLLMServerClient:
        return self.standalone_server_manager.get_client(client_cls=DoraLLMServerClient)

    # -- elastic colocation (hybrid replicas) ---------------------------------------------------

    def _switch_threshold(self) -> int:
        """Reclaim the elastic group once the training condition holds (a full batch)."""
        train_batch_size = self.config.data.train_batch_size
        mini_batch_size = train_batch_size // self.parameter_sync_step
        return max(mini_batch_size, self.elastic.reclaim_threshold(train_batch_size))

    def _adapt_switch_threshold(self, had_idle: bool) -> None:
        return None  # the threshold is the training condition, not a tuned ratio

    def _elastic_share(self) -> float:
        return 1.0 - 1.0 / self._scaling_factor

    # -- per-step hooks ---------------------------------------------------------------------------

    def on_sample_end(self) -> None:
        super().on_sample_end()
        info = dict(getattr(self.replay_buffer, "last_sample", {}) or {})
        self._step_record = {"step": self.global_steps, "sampled_at": info.pop("time", time.time()), **info}
        if self.dora.load_balancer == "dora" and getattr(self.replay_buffer, "on_taken", None) is None:
            self._begin_training(self.global_steps)  # a custom sampler: told here, after its refills

    def _begin_training(self, step: int) -> None:
        """The batch of ``step`` is taken and the weights update: the load balancer's admission
        control sees the newest version's window shrink (the version is about to be superseded).
        With ``parameter_sync_step > 1`` only at the step's last mini-batch: the earlier ones
        still need fresh samples, which a hold until the next version would never let finish."""
        if int(getattr(self, "local_trigger_step", 0)) < int(self.parameter_sync_step) - 1:
            return
        ray.get(self.standalone_server_manager.global_load_balancer.begin_training.remote(step))

    def step(self, metrics: dict, timing_raw: dict) -> Any:
        """verl's step, then the trained length distribution (``dora/trained_len_*``) of its batch
        (read before verl clears the batch from TransferQueue; also in the trace record)."""
        batch = super().step(metrics, timing_raw)
        metrics.update(self._startup_metrics)  # once, with the first step
        self._startup_metrics = {}
        lengths = batch_response_lengths(batch, verl_replay_buffer.tq.kv_batch_get)
        metrics.update(trained_length_metrics(lengths))
        self._step_record["trained_lengths"] = lengths
        return batch

    def on_step_end(self) -> None:
        if self.prev_step_profile:
            self._stop_rollout_profiling()
        switch = self.hybrid_rollout_config.enable_switch
        lend, decision = False, {}
        if switch:
            self.elastic.observe_wait(self._step_sample_wait_seconds, self._step_wait_samples)
            if self._to_rollout_costs and self._to_trainer_costs:
                self.elastic.observe_switch(self._to_rollout_costs[-1] + self._to_trainer_costs[-1])
            ready = self.replay_buffer.get_sampleable_count(self.global_steps + 1, "train")
            threshold = self._switch_threshold()
            lend = self.global_steps < self.total_training_steps and self.elastic.should_lend(
                ready, threshold, self._elastic_share()
            )
            gain = self.elastic.expected_gain_s(ready, threshold, self._elastic_share())
            cost = self.elastic.switch_cost_s()
            decision = {
                "dora/elastic/ready_groups": float(ready),
                "dora/elastic/reclaim_threshold": float(threshold),
                "dora/elastic/lend": float(lend),
                **({"dora/elastic/expected_gain_s": gain} if gain is not None else {}),
                **({"dora/elastic/switch_cost_s": cost} if cost is not None else {}),
            }
        start = time.perf_counter()
        if lend:
            with marked_timer("switch_to_rollout", self.timing_raw, color="cyan"):
                self.add_replicas_to_balancer()
                self.clear_sticky_cache()
        prepare_s = time.perf_counter() - start
        with marked_timer("update_weights", self.timing_raw, color="red"):
            self._pending_sync_metrics = dict(
                self.standalone_checkpoint_manager.update_weights(self.global_steps) or {}
            )
        if lend:
            start = time.perf_counter()
            with marked_timer("switch_to_rollout", self.timing_raw, color="cyan"):
                self.switch_to_rollout(already_registered=True)
            self._to_rollout_costs.append(prepare_s + time.perf_counter() - start)
        self._pending_sync_metrics.update(decision)
        if self.dora.load_balancer == "dora":
            # a new version is published: the step's cap phase ends, the next starts at cap_before_rebalance
            lb = self.standalone_server_manager.global_load_balancer
            self._pending_sync_metrics.update(ray.get(lb.end_step.remote(self.global_steps)))
        self._pending_sync_metrics.update(self._replica_metrics())
        if self._planner is not None:
            self._pending_sync_metrics.update(self._planner.metrics())
        self._pending_sync_metrics.update(self._data_metrics)
        self._data_metrics = {}
        self._write_trace()

    # -- observability --------------------------------------------------------------------------

    def _replica_handles(self) -> dict[str, Any]:
        managers = [self.standalone_server_manager]
        if self._enable_hybrid_replicas:
            managers.append(self.llm_server_manager)
        return {
            address: handle
            for manager in managers
            for address, handle in zip(manager.server_addresses, manager.server_handles, strict=True)
        }

    def _replica_metrics(self) -> dict[str, float]:
        """Request load ratio and busy ratio of the replicas since the previous step."""
        handles = self._replica_handles()
        if self.config.actor_rollout_ref.rollout.name == "vllm" and handles:
            stats = ray.get([h.get_dora_stats.remote() for h in handles.values()])
            return {f"dora/vllm/{k}": float(sum(s[k] for s in stats)) for k in stats[0]}
        if self.config.actor_rollout_ref.rollout.name != "hf" or not handles:
            return {}
        stats = dict(zip(handles, ray.get([h.get_stats.remote() for h in handles.values()]), strict=True))
        standalone = set(self.standalone_server_manager.server_addresses)
        request_s = busy_s = uptime_s = 0.0
        for address, now in stats.items():
            before = self._replica_stats.get(address, {"request_s": 0.0, "busy_s": 0.0, "uptime_s": 0.0})
            request_s += now["request_s"] - before["request_s"]
            busy_s += now["busy_s"] - before["busy_s"]
            uptime_s += now["uptime_s"] - before["uptime_s"]
        self._replica_stats = stats
        self._step_record["replicas"] = {
            address: {"versions_held": s["versions_held"], "weights_version": s["weights_version"]}
            for address, s in stats.items()
        }
        if uptime_s <= 0:
            return {}
        return {
            "dora/request_load_ratio": min(1.0, request_s / (uptime_s * self.dora.load_ratio_capacity)),
            "dora/rollout_busy_ratio": busy_s / uptime_s,
            "dora/versions_held/max": float(max(len(s["versions_held"]) for s in stats.values())),
            "dora/replica/max_versions_held": float(max(s.get("max_versions_held", 1) for s in stats.values())),
            # the standalone replicas' aborts (the roller's to account for) apart from the elastic
            # group's (every request it held when reclaimed)
            "dora/replica/server_aborts": float(sum(s.get("aborted", 0) for a, s in stats.items() if a in standalone)),
            "dora/replica/elastic_aborts": float(
                sum(s.get("aborted", 0) for a, s in stats.items() if a not in standalone)
            ),
            "dora/replica_versions_distinct": float(len({s["weights_version"] for s in stats.values()})),
        }

    def _write_trace(self) -> None:
        if not self.trace_path:
            return
        record = {**self._step_record, "step": self.global_steps, "step_end": time.time()}
        with open(self.trace_path, "a") as sink:
            sink.write(json.dumps(record, default=float) + "\n")


__all__ = [
    "DoraTrainer",
    "MultiVersionCheckpointEngineManager",
    "ReplicaVersionCheckpointEngineManager",
    "check_config",
    "SETTINGS_PATH",
]
