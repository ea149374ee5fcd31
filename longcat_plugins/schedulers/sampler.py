"""The DORA sample queue on verl's v1 replay buffer: version-bounded, domain-balanced, filtered.

verl's ``ReplayBufferAsync`` already streams: finished prompt groups land in TransferQueue the
moment their last session ends, and ``sample`` returns as soon as ``batch_size`` groups are
finished. This subclass makes it the scheduler core's sample queue, deciding with the core's
rules rather than its own copies:

- **Staleness (S1)** with the core's :func:`~longcat_plugins.schedulers.core.queue.is_fresh`:
  a sample is judged by the weights version that generated it (its oldest, recorded per
  trajectory in ``min_global_steps``), not by its prompt's submission step
  (``max_off_policy_threshold``, disabled here). verl trains step ``s`` with version ``s - 1``.
  Finished groups that are no longer fresh are dropped and verl refills their prompts. Which
  versions' groups are dropped is the selected eviction policy's decision
  (``longcat.settings.scheduler.dora.eviction``, a ``DoraEvictionPolicy`` component; the default
  ``staleness_window`` drops exactly the groups outside the bound, and no policy may keep one).
- **Online filtering (D1)** with the core's :func:`~longcat_plugins.schedulers.core.filtering.filter_verdict`,
  through verl's own group-filter hook (``_dapo_filtered_keys``): verl evicts, refills and
  reports the groups exactly as for its DAPO ``filter_groups``, which verl does not enable for
  custom samplers.
- **Domain balance (S4)** with the core's :class:`~longcat_plugins.schedulers.core.quotas.DomainQuotas`:
  of the finished groups (oldest first), the batch takes a mix within ``domain_tolerance`` of
  ``domain_ratios`` whenever the finished groups allow one, else the closest mix; groups not
  taken stay finished in TransferQueue for the next batch.
- **Replay (D2)** with the core's :class:`~longcat_plugins.schedulers.core.replay.ReplayBuffer`
  and :func:`~longcat_plugins.schedulers.core.replay.replay_count` (``reuse_ratio > 0``): a
  finished group evicted as stale (not one the online filter dropped, nor a failed one) is kept,
  keyed by its TransferQueue prompt uid, instead of dropped; ``round(reuse_ratio * batch)`` of
  the kept groups are drawn at random into each later batch, each once, and the batch's groups
  are shuffled. Its tensors stay where they are: verl clears a stale group's prompt *and*
  trajectory keys at eviction (``_clear_groups``) but a trained batch's trajectory keys only at
  the step's end, so at eviction only the prompt key is cleared (verl refills the prompt, the
  dispatch planner frees its quota) and the trajectory keys are kept in TransferQueue until the
  group is replayed (then the trainer clears them after its step) or leaves the buffer over
  ``replay_capacity`` (cleared then). Replayed samples are older than ``staleness`` by design:
  their staleness is reported apart (``dora/replay/*``) and the bound is asserted on the rest.
  The replay state (kept uids, oldest first, and the draws' RNG) is saved with the trainer
  checkpoint (:meth:`DoraReplayBuffer.replay_state_dict`); the groups' tensors are in
  TransferQueue, which verl checkpoints with its storage, so nothing is dropped at save time
  (:meth:`DoraReplayBuffer.load_replay_state_dict` says what a resume drops, and counts it).

It reports what DORA measures (``dora/*``): staleness, versions mixed in a batch, prompts still
generating when training took the batch, the trainer's wait, filtered groups, domain mix.

Selected by the ``dora`` trainer by default, or explicitly with
``trainer.v1.sampler.custom_sampler = {path: pkg://longcat_plugins.samplers, name: dora_versions}``.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1 import replay_buffer as verl_replay_buffer
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

from longcat_plugins.schedulers.core.config import ConfigError
from longcat_plugins.schedulers.core.filtering import filter_verdict
from longcat_plugins.schedulers.core.queue import is_fresh, sample_staleness
from longcat_plugins.schedulers.core.quotas import DomainQuotas
from longcat_plugins.schedulers.core.replay import ReplayBuffer, replay_count
from longcat_plugins.schedulers.core.versions import EvictionContext, evicted_versions
from longcat_plugins.schedulers.settings import SETTINGS_PATH, DoraSettings

PREFIX = "dora"


def group_uid(key: str) -> str:
    """The prompt group a TransferQueue trajectory key belongs to (verl keys it ``<uid>_<index>``)."""
    return key.split("_")[0]


def trajectory_version(tag: dict[str, Any]) -> int | None:
    """The weights version that generated a trajectory (its oldest, if it spans several)."""
    version = tag.get("min_global_steps")
    return None if version is None else int(version)


def trained_version(global_steps: int) -> int:
    """The weights version verl updates at step ``global_steps`` (verl's own convention)."""
    return global_steps - 1


def version_lag(global_steps: int, version: int) -> int:
    """The core's staleness of a sample of ``version`` trained at verl step ``global_steps``."""
    return sample_staleness(trained_version(global_steps), version)


@dataclass(frozen=True)
class FinishedGroup:
    """What the sampler needs of a finished group beyond its tags: domain and filter verdict."""

    domain: str | None
    verdict: str | None
    rewards: tuple[float, ...] = ()

    @property
    def mean_reward(self) -> float | None:
        return float(np.mean(self.rewards)) if self.rewards else None


def _rng_state(state: Any) -> tuple:
    """A ``random.Random`` state back from a checkpoint (lists where tuples were, after JSON)."""
    version, internal, gauss = state
    return (int(version), tuple(int(x) for x in internal), gauss)


def _column(data: Any, name: str, tensors: bool = False) -> list[Any]:
    """One field of a ``kv_batch_get`` result, one item per key (``[]`` if absent): tensors
    as they are, other values as plain Python (verl's own accessors: ``tolist``, iteration)."""
    try:
        column = data[name]
    except KeyError:
        return []
    if tensors:
        return list(column)
    if hasattr(column, "tolist") and not hasattr(column, "is_nested"):
        return list(column.tolist())
    return [getattr(v, "data", v) if type(v).__name__ == "NonTensorData" else v for v in column]


def _lookup(value: Any, path: list[str]) -> Any:
    for part in path:
        value = getattr(value, "data", value) if type(value).__name__ == "NonTensorData" else value
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


class DoraReplayBuffer(ReplayBufferAsync):
    """``ReplayBufferAsync`` deciding with the DORA core: version bound, online filter, domain mix."""

    def __init__(
        self,
        *args: Any,
        staleness: int | None = None,
        settings: DoraSettings | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if settings is None:
            from longcat_plugins.schedulers.settings import dora_settings

            settings = dora_settings()
        if staleness is None:
            staleness = (self.sampler_kwargs or {}).get("staleness")
        if staleness is None:
            staleness = settings.staleness
        if not isinstance(staleness, int) or staleness < 0:
            raise ValueError(f"dora sampler: staleness must be an integer >= 0, got {staleness!r}")
        self.staleness = staleness
        self.settings = settings
        settings.core_config(1)  # the shared fields, validated by the core with their key path
        # the submission-step bound is replaced by the version bound below
        self.max_off_policy_threshold = None
        self.last_sample: dict[str, Any] = {}
        self._finished_groups: dict[str, dict[str, FinishedGroup]] = {}
        self._filtered_since_sample: Counter[str] = Counter()
        self._filtered_domains_since_sample: Counter[str] = Counter()
        #: D1: the rewards of the groups online filtering dropped since the trainer last took them
        #: (:meth:`take_filtered`): they are not trained, but their outcomes are what the step
        #: planner's pass rates and the verification phase must still learn from
        self._filtered_rewards: dict[str, tuple[float, ...]] = {}
        #: the trainer's test for groups whose rewards are not on the task's pass/fail scale
        #: (verification groups): D1 drops those only when every reward is the same
        self.judged_by_signal: Callable[[str], bool] | None = None
        self._batch_domains: Counter[str] = Counter()
        self._batch_balanced: bool | None = None
        #: the trainer's dispatch hooks: called on every poll while a batch is awaited (capacity
        #: may have freed: top up), and with every training batch taken (its groups leave the quota)
        self.on_poll: Callable[[], None] | None = None
        self.on_sampled: Callable[[KVBatchMeta], None] | None = None
        #: called with the step as soon as a training batch is taken, before ``on_sampled`` refills:
        #: the trainer tells the load balancer's admission control that the newest version is
        #: about to be superseded, so the refill's requests are judged by that
        self.on_taken: Callable[[int], None] | None = None
        #: D2: stale groups kept for replay (prompt uids; their trajectories stay in TransferQueue)
        self.replay: ReplayBuffer[str] | None = None
        if settings.reuse_ratio > 0:
            self.replay = ReplayBuffer(settings.replay_capacity, random.Random(0))
        self._rng = random.Random(0)
        self._keep_trajectories: set[str] = set()
        self._replayed: list[str] = []
        self._replay_counts: Counter[str] = Counter()

    # -- what the core decides -------------------------------------------------------------------

    @property
    def balances_domains(self) -> bool:
        return len(self.settings.domain_ratios) > 1

    def group_versions(self, partition_id: str) -> dict[str, list[int]]:
        """uid -> versions of its finished trajectories, from the current metadata snapshot."""
        versions: dict[str, list[int]] = {}
        for key, tag in self.partitions[partition_id].items():
            version = trajectory_version(tag)
            if version is not None:
                versions.setdefault(group_uid(key), []).append(version)
        return versions

    def _stale_terminal_keys(self, global_steps: int, partition_id: str) -> set[str]:
        """verl's stale-group eviction, decided by the selected eviction policy over the
        versions (oldest per group) of the finished groups waiting for a batch."""
        if partition_id == "val":
            return set()
        versions = self.group_versions(partition_id)
        oldest = {uid: min(versions[uid]) for uid in self.finished_keys[partition_id] if versions.get(uid)}
        evicted = self.evicted_versions(trained_version(global_steps), Counter(oldest.values()))
        return {uid for uid, version in oldest.items() if version in evicted}

    def evicted_versions(self, current: int, waiting: Counter[int]) -> set[int]:
        """Ask ``settings.eviction`` which versions' groups to evict while training ``current``
        (``waiting``: finished groups per version). The policy sees the versions up to
        ``current`` (``latest``; newer ones are never evicted) and must name every one outside
        the staleness window (the bound is the sampler's guarantee); it may name more."""
        live = tuple(sorted({v for v in waiting if v < current} | {current}))
        ctx = EvictionContext(live, current, self.staleness, {v: waiting.get(v, 0) for v in live})
        evicted = set(evicted_versions(self.settings.eviction, ctx))
        kept = sorted(v for v in live if not is_fresh(current, v, self.staleness) and v not in evicted)
        if kept:
            raise RuntimeError(
                f"dora sampler: eviction policy {self.settings.eviction!r} ({SETTINGS_PATH}.eviction) kept "
                f"version(s) {kept} outside the staleness window (bound {self.staleness}, training version "
                f"{current}); a policy may evict more than the window, never less"
            )
        return evicted

    def finished_groups(self, partition_id: str) -> dict[str, FinishedGroup]:
        """Domain and D1 verdict of every finished group, read once from TransferQueue (finished
        groups are immutable) and forgotten once the group leaves the buffer."""
        cache = self._finished_groups.setdefault(partition_id, {})
        finished = self.finished_keys[partition_id]
        for uid in cache.keys() - finished:
            del cache[uid]
        new = finished - cache.keys()
        if not new:
            return cache
        filtering = self.settings.online_filter and partition_id != "val"
        path = self.settings.domain_key.split(".")
        fields = (["rm_scores"] if filtering else []) + ([path[0]] if self.balances_domains else [])
        if not fields:
            cache.update({uid: FinishedGroup(None, None) for uid in new})
            return cache
        keys = self._trajectory_keys(partition_id, new)
        missing = new - {group_uid(key) for key in keys}
        if missing:
            raise RuntimeError(f"dora sampler: finished groups without trajectories: {sorted(missing)[:5]}")
        data = verl_replay_buffer.tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=fields)
        rewards: dict[str, list[float]] = {}
        domains: dict[str, Any] = {}
        if filtering:
            scores = _column(data, "rm_scores", tensors=True)
            if len(scores) != len(keys):
                raise RuntimeError(
                    f"dora sampler: {SETTINGS_PATH}.online_filter needs rewards at rollout time "
                    f"(rm_scores of every trajectory), got {len(scores)} for {len(keys)} trajectories"
                )
            for key, score in zip(keys, scores, strict=True):
                rewards.setdefault(group_uid(key), []).append(float(score.sum().item()))
        if self.balances_domains:
            values = _column(data, path[0])
            if len(values) != len(keys):
                raise ValueError(
                    f"dora sampler: {SETTINGS_PATH}.domain_key={self.settings.domain_key!r}: "
                    f"trajectories have no field {path[0]!r}"
                )
            for key, value in zip(keys, values, strict=True):
                domain = _lookup(value, path[1:]) if len(path) > 1 else value
                uid = group_uid(key)
                if domain is None:
                    raise ValueError(
                        f"dora sampler: {SETTINGS_PATH}.domain_key={self.settings.domain_key!r} "
                        f"is missing in trajectory {key!r}"
                    )
                domains.setdefault(uid, str(domain))
        cfg = self.settings
        for uid in new:
            group_rewards = rewards.get(uid)
            verdict = (
                filter_verdict(
                    group_rewards,
                    correct_threshold=cfg.correct_threshold,
                    wrong_threshold=cfg.wrong_threshold,
                    drop_all_correct=cfg.filter_all_correct,
                    drop_all_wrong=cfg.filter_all_wrong,
                    by_signal=self.judged_by_signal is not None and self.judged_by_signal(uid),
                )
                if group_rewards
                else None
            )
            cache[uid] = FinishedGroup(domains.get(uid), verdict, tuple(group_rewards or ()))
        return cache

    def _dapo_filtered_keys(self, partition_id: str) -> tuple[set[str], Counter]:
        """verl's group-filter hook, answered by the core's D1 verdict (verl then evicts and
        refills these groups as it does DAPO's)."""
        if partition_id == "val" or not self.settings.online_filter:
            return set(), Counter()
        groups = self.finished_groups(partition_id)
        dropped = {uid for uid, group in groups.items() if group.verdict is not None}
        # verl logs {shared reward value: groups}; the core's verdict allows rewards that differ
        return dropped, Counter(groups[uid].mean_reward for uid in dropped)

    def _evict_terminal_groups(
        self, global_steps: int, partition_id: str, eviction_reasons: tuple[set[str], set[str], set[str], Counter]
    ) -> tuple[set[str], int, int, dict]:
        groups = self._finished_groups.get(partition_id, {})
        for uid in eviction_reasons[1]:
            group = groups.get(uid)
            if group is not None and group.verdict is not None:
                self._filtered_since_sample[group.verdict] += 1
                self._filtered_rewards[uid] = group.rewards
                if group.domain is not None:
                    self._filtered_domains_since_sample[group.domain] += 1
        stale, filtered, failed, _ = eviction_reasons
        if self.replay is None or partition_id == "val":
            return super()._evict_terminal_groups(global_steps, partition_id, eviction_reasons)
        self._keep_trajectories = (stale - filtered - failed) & self.finished_keys[partition_id]
        try:
            return super()._evict_terminal_groups(global_steps, partition_id, eviction_reasons)
        finally:
            kept, self._keep_trajectories = self._keep_trajectories, set()
            self._buffer(partition_id, kept)

    def take_filtered(self) -> dict[str, tuple[float, ...]]:
        """The rewards of every group online filtering dropped since the last call, by group uid
        (and forget them)."""
        taken, self._filtered_rewards = self._filtered_rewards, {}
        return taken

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        """verl's eviction; groups kept for replay lose only their prompt key (their trajectory
        keys and tags stay in TransferQueue and in the metadata snapshot)."""
        keep = uids & self._keep_trajectories
        super()._clear_groups(partition_id, uids - keep)
        if keep:
            verl_replay_buffer.tq.kv_clear(partition_id=partition_id, keys=sorted(keep))
            for status_keys in (self.pending_keys, self.running_keys, self.finished_keys, self.failure_keys):
                status_keys[partition_id].difference_update(keep)
            for uid in keep:
                self.prompt_global_steps[partition_id].pop(uid, None)
                self._dapo_classification_cache[partition_id].pop(uid, None)

    def _trajectory_keys(self, partition_id: str, uids: set[str]) -> list[str]:
        return sorted(key for key in self.partitions[partition_id] if group_uid(key) in uids)

    def _buffer(self, partition_id: str, uids: set[str]) -> None:
        """Keep evicted stale groups for replay; clear the trajectories of any the buffer drops."""
        assert self.replay is not None
        before = set(self.replay.items)
        for uid in sorted(uids):
            self.replay.add(uid)
        self._replay_counts["buffered"] += len(uids)
        self._drop_replay(partition_id, (before | uids) - set(self.replay.items))

    def _drop_replay(self, partition_id: str, uids: set[str]) -> None:
        if uids:
            self._replay_counts["dropped"] += len(uids)
            verl_replay_buffer.tq.kv_clear(partition_id=partition_id, keys=self._trajectory_keys(partition_id, uids))

    # -- checkpoint ------------------------------------------------------------------------------

    def replay_state_dict(self) -> dict[str, Any]:
        """D2's state for the trainer checkpoint (plain Python): the kept groups' TransferQueue
        uids, oldest first, the draw and shuffle RNG states and the counts not yet reported. The
        groups' trajectories are not copied: they are in TransferQueue, saved by verl's
        ``tq.save_checkpoint`` (storage included) in the same checkpoint folder."""
        if self.replay is None:
            raise RuntimeError("dora sampler: no replay buffer (reuse_ratio is 0)")
        return {
            "items": list(self.replay.items),
            "dropped": self.replay.dropped,
            "draw_rng": self.replay.rng.getstate(),
            "shuffle_rng": self._rng.getstate(),
            "counts": dict(self._replay_counts),
        }

    def load_replay_state_dict(self, state: dict[str, Any] | None, partition_id: str = "train") -> dict[str, int]:
        """Restore D2 after verl restored TransferQueue (call it after ``tq.load_checkpoint``).

        What a resume drops, each counted in the next batch's metrics: kept groups whose
        trajectories did not come back (``dora/replay/resume_missing``, also in ``dropped``),
        kept groups beyond a smaller ``replay_capacity`` (oldest first, ``dropped``, their
        trajectories cleared), and trajectories with neither a prompt key nor a place in the
        buffer (``dora/replay/resume_cleared``): the batch trained in the checkpointed step,
        which verl saves before it clears the step's keys; they are cleared so they can never be
        replayed or leak. ``state=None`` (a checkpoint without replay state) keeps nothing."""
        if self.replay is None:
            raise RuntimeError("dora sampler: no replay buffer (reuse_ratio is 0)")
        self._sync_metadata_from_transfer_queue()
        present = {group_uid(key) for key in self.partitions[partition_id]}
        prompts = set().union(
            *(
                keys[partition_id]
                for keys in (self.pending_keys, self.running_keys, self.finished_keys, self.failure_keys)
            )
        )
        items = [str(uid) for uid in (state or {}).get("items", [])]
        kept = [uid for uid in items if uid in present and uid not in prompts]
        counts: Counter[str] = Counter({k: int(v) for k, v in (state or {}).get("counts", {}).items()})
        counts["resume_missing"] += len(items) - len(kept)
        counts["dropped"] += len(items) - len(kept)
        self.replay.items = []
        if state is not None:
            self.replay.dropped = int(state["dropped"])
            self.replay.rng.setstate(_rng_state(state["draw_rng"]))
            self._rng.setstate(_rng_state(state["shuffle_rng"]))
        self._replay_counts = counts
        for uid in kept:  # oldest first: a smaller capacity drops the oldest, as add() does
            self.replay.add(uid)
        over = set(kept) - set(self.replay.items)
        self._drop_replay(partition_id, over)
        stray = present - prompts - set(self.replay.items) - over
        if stray:
            verl_replay_buffer.tq.kv_clear(partition_id=partition_id, keys=self._trajectory_keys(partition_id, stray))
        self._replay_counts["resume_cleared"] += len(stray)
        return {
            "restored": len(self.replay.items),
            "missing": len(items) - len(kept),
            "over_capacity": len(over),
            "cleared": len(stray),
        }

    def domain_quotas(self, batch_size: int, domains: Iterable[str]) -> DomainQuotas:
        """The core's quotas for one batch; a domain the settings do not name is an error."""
        try:
            return DomainQuotas(self.settings.core_config(batch_size), domains)
        except ConfigError as exc:
            raise ConfigError(f"dora sampler ({SETTINGS_PATH}): {exc}") from exc

    def _select_prompt_uids(
        self, partition_id: str, sampleable_keys: set[str], batch_size: int
    ) -> tuple[list[str], dict[str, dict], dict[str, int]]:
        """Oldest first (verl's order), then the core's domain-balanced choice of ``batch_size``;
        the groups not chosen stay finished in TransferQueue for the next batch."""
        _, partition, steps = super()._select_prompt_uids(partition_id, sampleable_keys, 0)
        # verl's order (oldest submission first), ties broken by uid so a batch is reproducible
        ordered = sorted(sampleable_keys, key=lambda uid: (steps.get(uid, 0), uid))
        self._batch_domains, self._batch_balanced = Counter(), None
        self._replayed = []
        if self.replay is not None and partition_id != "val":
            present = {group_uid(key) for key in partition}
            gone = {uid for uid in self.replay.items if uid not in present}  # cleared elsewhere
            self.replay.items = [uid for uid in self.replay.items if uid not in gone]
            self._replay_counts["dropped"] += len(gone)
            self._replayed = self.replay.take(replay_count(self.settings.reuse_ratio, batch_size))
            batch_size -= len(self._replayed)
        if partition_id == "val" or not self.balances_domains:
            return ordered[:batch_size], partition, steps
        groups = self.finished_groups(partition_id)
        candidates = [(groups[uid].domain or "", uid) for uid in ordered if uid in groups]
        candidates += [("", uid) for uid in ordered if uid not in groups]  # failed groups: no domain
        quotas = self.domain_quotas(batch_size, {d for d, _ in candidates if d})
        chosen = quotas.select(candidates, batch_size)
        self._batch_balanced = chosen is not None
        if chosen is None:
            chosen = quotas.select(candidates, batch_size, strict=False) or ordered[:batch_size]
        domain_of = dict((uid, d) for d, uid in candidates)
        self._batch_domains = Counter(domain_of[uid] for uid in chosen)
        return chosen, partition, steps

    def _materialize_batch(
        self, partition_id: str, selected_prompt_uids: list[str], partition_snapshot: dict[str, dict]
    ) -> KVBatchMeta:
        """verl's batch of the fresh groups, plus the replayed groups' trajectories, the groups
        shuffled (D2: so a replayed group's place in the batch says nothing of its age)."""
        batch = super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)
        if not self._replayed:
            return batch
        replayed = set(self._replayed)
        rows = list(zip(batch.keys, batch.tags, strict=True))
        rows += [(key, tag) for key, tag in partition_snapshot.items() if group_uid(key) in replayed]
        groups: dict[str, list[tuple[str, dict]]] = {}
        for key, tag in rows:
            groups.setdefault(group_uid(key), []).append((key, tag))
        order = sorted(groups)
        self._rng.shuffle(order)
        rows = [row for uid in order for row in groups[uid]]
        return KVBatchMeta(partition_id=partition_id, keys=[k for k, _ in rows], tags=[t for _, t in rows])

    # -- the batch -------------------------------------------------------------------------------

    def _wait_for_next_poll(self, partition_id: str, last_debug_time: float) -> float:
        if partition_id == "train" and self.on_poll is not None:
            self.on_poll()
        return super()._wait_for_next_poll(partition_id, last_debug_time)

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        start = time.perf_counter()
        batch, metrics = super().sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)
        if partition_id == "val":
            return batch, metrics
        waited = time.perf_counter() - start
        inflight = len(self.pending_keys[partition_id]) + len(self.running_keys[partition_id])
        replayed = set(self._replayed)
        tagged = [
            (group_uid(key) in replayed, trajectory_version(tag))
            for key, tag in zip(batch.keys, batch.tags, strict=True)
        ]
        versions = [v for old, v in tagged if v is not None and not old]  # the fresh: bound by staleness
        replay_lags = np.array([version_lag(global_steps, v) for old, v in tagged if old and v is not None], float)
        lags = np.array([version_lag(global_steps, v) for v in versions], dtype=float)
        if lags.size and not is_fresh(trained_version(global_steps), min(versions), self.staleness):
            raise AssertionError(
                f"dora sampler selected samples {int(lags.max())} versions stale at step {global_steps}, "
                f"bound {self.staleness}: versions {sorted(set(versions))}"
            )
        self.last_sample = {
            "global_steps": global_steps,
            "versions": versions,
            "inflight_prompts": inflight,
            "wait_s": waited,
            "time": time.time(),
        }
        metrics.update(
            {
                f"{PREFIX}/wait_s": waited,
                f"{PREFIX}/inflight_prompts_at_sample": float(inflight),
                f"{PREFIX}/versions_in_batch": float(len(set(versions))),
                f"{PREFIX}/staleness/mean": float(lags.mean()) if lags.size else 0.0,
                f"{PREFIX}/staleness/max": float(lags.max()) if lags.size else 0.0,
                f"{PREFIX}/staleness/bound": float(self.staleness),
            }
        )
        if self.replay is not None:
            metrics.update(
                {
                    f"{PREFIX}/replay/buffered": float(self._replay_counts["buffered"]),
                    f"{PREFIX}/replay/replayed": float(len(replayed)),
                    f"{PREFIX}/replay/dropped": float(self._replay_counts["dropped"]),
                    f"{PREFIX}/replay/size": float(len(self.replay)),
                    f"{PREFIX}/replay/staleness/mean": float(replay_lags.mean()) if replay_lags.size else 0.0,
                    f"{PREFIX}/replay/staleness/max": float(replay_lags.max()) if replay_lags.size else 0.0,
                    f"{PREFIX}/replay/resume_missing": float(self._replay_counts["resume_missing"]),
                    f"{PREFIX}/replay/resume_cleared": float(self._replay_counts["resume_cleared"]),
                }
            )
            self.last_sample["replayed_groups"] = sorted(replayed)
            self._replay_counts = Counter()
            self._replayed = []
        evicted = metrics.get("training/off_policy/evicted_samples")
        if evicted is not None:
            metrics[f"{PREFIX}/evicted_stale_groups"] = float(evicted)
        if self.settings.online_filter:
            filtered = self._filtered_since_sample
            metrics[f"{PREFIX}/filtered_groups"] = float(sum(filtered.values()))
            for verdict in ("all_correct", "all_wrong"):
                metrics[f"{PREFIX}/filtered_groups/{verdict}"] = float(filtered[verdict])
            for domain, count in self._filtered_domains_since_sample.items():
                metrics[f"{PREFIX}/domain/{domain}/filtered_groups"] = float(count)
            self.last_sample["filtered_groups"] = dict(filtered)
        self._filtered_since_sample, self._filtered_domains_since_sample = Counter(), Counter()
        if self._batch_balanced is not None:
            shares = self.settings.core_config(batch_size).target_shares([])
            total = max(1, sum(self._batch_domains.values()))
            for domain in sorted(set(shares) | set(self._batch_domains)):
                metrics[f"{PREFIX}/domain/{domain}/trained_groups"] = float(self._batch_domains[domain])
            error = max(
                abs(self._batch_domains[d] / total - shares.get(d, 0.0)) for d in set(shares) | set(self._batch_domains)
            )
            metrics[f"{PREFIX}/domain/max_share_error"] = float(error)
            metrics[f"{PREFIX}/domain/unbalanced_batch"] = 0.0 if self._batch_balanced else 1.0
            self.last_sample["domains"] = dict(self._batch_domains)
        if self.on_taken is not None:
            self.on_taken(global_steps)
        if self.on_sampled is not None:  # after the batch's own record: it submits new prompts
            self.on_sampled(batch)
        return batch, metrics
