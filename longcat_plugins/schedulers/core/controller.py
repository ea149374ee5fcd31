"""``DoraController``: the trainer-independent heart of DORA (S1, S3, S4, D1, D2, D5).

It decides which prompt to generate next, on which instance and with which policy version;
accepts finished samples as they stream in; and hands the trainer a full, staleness-bounded,
domain-balanced, filtered batch as soon as one exists. It owns no threads, clocks or devices:
the caller (the verl integration, the simulator, a test) drives it with ``now`` timestamps
on any monotone clock, so the same code runs on a cluster and in a discrete-event simulation.

Life cycle of a prompt
    drawn (epoch order, retries first) → duplicated into k groups by pass rate (D5), each with
    its own ``group_id``, all on the newest live version → ``group_size`` requests per group,
    issued one at a time by :meth:`next_request` → samples return via
    :meth:`on_sample_finished` → a complete group is filtered (D1) or queued → taken by
    :meth:`ready_batch`, or aged out (regenerated, offered to the replay buffer, D2).

Staleness
    ``ready_batch(c)`` returns samples for the trainer to update policy ``c`` into ``c + 1``;
    a fresh sample of version v is trained only if ``c - v <= staleness``. Right after a batch
    is taken, work that could only be trained at a staleness above the bound (groups on
    versions ``< c + 1 - staleness``) is aborted at once rather than finished in vain, and with
    ``staleness = 0`` no new group starts until the next version is published.

Aborted requests (eviction, staleness)
    The controller forgets them immediately and requeues their prompts; the caller collects
    them with :meth:`take_aborted` and stops them on their instances. A result that still
    arrives for an aborted, lost or unknown request is ignored (``on_sample_finished`` returns
    ``False``), so nothing is trained twice.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from typing import Any

from longcat_plugins.schedulers.core.admission import (
    NO_ADMISSION,
    AdmissionContext,
    DecodeRate,
    LengthHistory,
    admission_policy,
)
from longcat_plugins.schedulers.core.balancer import BalanceContext, TwoPhaseCap, balancer
from longcat_plugins.schedulers.core.config import ConfigError, DoraConfig
from longcat_plugins.schedulers.core.filtering import PromptSampler, filter_verdict
from longcat_plugins.schedulers.core.metrics import LoadMeter, SchedulerStats
from longcat_plugins.schedulers.core.oversampling import PassRateTracker, group_accuracy, oversampling_coefficient
from longcat_plugins.schedulers.core.queue import SampleQueue, is_fresh, sample_staleness
from longcat_plugins.schedulers.core.quotas import DomainQuotas
from longcat_plugins.schedulers.core.replay import ReplayBuffer, replay_count
from longcat_plugins.schedulers.core.types import (
    Group,
    Migration,
    PromptRef,
    PromptSource,
    Request,
    Sample,
    as_source,
)
from longcat_plugins.schedulers.core.versions import VersionSet

STATE_FORMAT = 1


class DoraController:
    """Multi-version streaming scheduler state machine. See the module docstring.

    Not thread-safe: call it from one thread (e.g. inside one Ray actor, which serialises
    calls). ``now`` arguments must not decrease from call to call."""

    def __init__(
        self,
        config: DoraConfig,
        prompts: Sequence[PromptRef] | PromptSource,
        rng_seed: int = 0,
        *,
        initial_version: int = 0,
    ) -> None:
        config.validate()
        self.config = config
        self.source: PromptSource = as_source(prompts)
        if len(self.source) == 0:
            raise ConfigError("DoraController: the prompt source is empty")
        refs = [self.source.ref(i) for i in range(len(self.source))]
        self._uids = [r.uid for r in refs]
        self._domains = [r.domain for r in refs]
        self._priors = [r.pass_rate for r in refs]
        dupes = [u for u, n in Counter(self._uids).items() if n > 1]
        if dupes:
            raise ConfigError(f"DoraController: prompt uids must be unique; repeated: {dupes[:5]}")
        by_domain: dict[str, list[int]] = {}
        for i, d in enumerate(self._domains):
            by_domain.setdefault(d, []).append(i)
        self.rng = random.Random(rng_seed)
        self.versions = VersionSet(initial_version, config.eviction)
        self.quotas = DomainQuotas(config, by_domain)
        self.sampler = PromptSampler(by_domain, self.rng, config.shuffle_prompts)
        self.pass_rates = PassRateTracker(config.default_pass_rate, config.pass_rate_momentum)
        self.queue = SampleQueue()
        self.replay: ReplayBuffer[Group] = ReplayBuffer(config.replay_capacity, self.rng)
        self.cap = TwoPhaseCap(config.cap_before_rebalance, config.cap_after_rebalance)
        self.meter = LoadMeter(config.load_ratio_capacity)
        self.stats = SchedulerStats()
        self.active: dict[str, Group] = {}
        self.pending: deque[tuple[str, int, int]] = deque()
        self.in_flight: dict[str, Request] = {}
        self.instances: dict[str, list[str]] = {}
        self.aborted: list[Request] = []
        self.consumed: Counter[int] = Counter()
        self.serial = 0
        self.batch_version: int | None = None
        self._quota_full = False  # cache: no new group fits until outstanding work changes
        #: groups started on the newest version while the trainer updates it (old_version_start_limit)
        self.started_while_training = 0
        #: admission control (``config.admission``): per-prompt length history and decode rate,
        #: fed by :meth:`observe_length`; not checkpointed (rebuilt from the next responses)
        self.lengths = LengthHistory()
        self.rate = DecodeRate()
        self._admission_blocked = False  # cache: every prompt tried was refused until the phase changes

    # -- introspection ---------------------------------------------------------------------------

    @property
    def latest_version(self) -> int:
        return self.versions.latest

    @property
    def live_versions(self) -> list[int]:
        """Versions every generation instance must hold now (oldest first)."""
        return list(self.versions.live)

    def cap_now(self) -> int:
        """Current per-instance request cap (two-phase, S3)."""
        return self.cap.cap

    def load(self, instance_id: str) -> int:
        """In-flight requests on ``instance_id``."""
        return len(self.instances.get(instance_id, ()))

    def in_flight_requests(self, instance_id: str | None = None) -> list[Request]:
        """In-flight requests, oldest first (of one instance when given)."""
        if instance_id is None:
            return list(self.in_flight.values())
        return [self.in_flight[r] for r in self.instances.get(instance_id, ())]

    def consumed_prompts(self) -> dict[str, int]:
        """uid -> how many of its groups were trained or filtered (its signal was used)."""
        return {self._uids[i]: n for i, n in self.consumed.items()}

    # -- instances -------------------------------------------------------------------------------

    def add_instance(self, instance_id: str, now: float | None = None) -> None:
        """Register a generation instance (also implicit on its first :meth:`next_request`); it
        counts towards the request load ratio and idle time from now on."""
        self._advance(now)
        self.instances.setdefault(instance_id, [])
        self._touch(instance_id)

    def on_instance_lost(self, instance_id: str, now: float | None = None) -> list[Request]:
        """Forget ``instance_id`` (crash, or an elastic device switching to training): its
        in-flight requests go back to the front of the pending work with a new attempt number
        (same group, same version) and are returned. A late result of the old attempt is
        ignored, so no sample is lost or duplicated."""
        self._advance(now)
        lost = [self.in_flight.pop(rid) for rid in self.instances.pop(instance_id, [])]
        self._touch(instance_id)
        for request in reversed(lost):
            self.pending.appendleft((request.group_id, request.index, request.attempt + 1))
        self.stats.counters["requeued_requests"] += len(lost)
        self.stats.counters["instances_lost"] += 1
        return lost

    def drain_instance(self, instance_id: str, now: float | None = None) -> list[Migration]:
        """Take ``instance_id`` out of generation gracefully (an elastic device switching to a
        training role, S2): each of its in-flight requests moves, with its version, to the
        least-loaded remaining instance (the cap may be exceeded for a while; nothing new is
        issued there until it drops below). Returns the migrations for the caller to execute
        (move request + KV cache). With no other instance, the work is requeued as in
        :meth:`on_instance_lost` and the list is empty."""
        self._advance(now)
        others = [k for k in self.instances if k != instance_id]
        if not others:
            self.on_instance_lost(instance_id, now)
            return []
        moves: list[Migration] = []
        for rid in list(self.instances.get(instance_id, [])):
            target = min(others, key=lambda k: (len(self.instances[k]), k))
            self.instances[target].append(rid)
            self.in_flight[rid] = dataclasses.replace(self.in_flight[rid], instance=target)
            moves.append(Migration(rid, instance_id, target))
            self._touch(target)
        self.instances.pop(instance_id, None)
        self._touch(instance_id)
        self.stats.counters["drained_instances"] += 1
        self.stats.counters["migrations"] += len(moves)
        return moves

    # -- generation side -------------------------------------------------------------------------

    def next_request(self, instance_id: str, now: float) -> Request | None:
        """The next trajectory for ``instance_id`` to generate, or ``None`` when the instance is at
        its cap, the quotas/staleness window allow no new group, or no prompt is left.

        Unfinished groups are served first (with the version they started on); a new prompt is
        drawn only when none is pending."""
        self._advance(now)
        if instance_id not in self.instances:
            self.instances[instance_id] = []
            self._touch(instance_id)
        load = self.instances[instance_id]
        if len(load) >= self.cap.cap:
            return None
        if not self.pending and not self._start_groups():
            return None
        group_id, index, attempt = self.pending.popleft()
        group = self.active[group_id]
        request = Request(
            request_id=f"{group_id}/{index}#{attempt}",
            uid=group.uid,
            prompt_index=group.prompt_index,
            group_id=group_id,
            index=index,
            version=group.version,
            domain=group.domain,
            instance=instance_id,
            issued_at=now,
            attempt=attempt,
        )
        self.in_flight[request.request_id] = request
        load.append(request.request_id)
        self._touch(instance_id)
        self.stats.counters["issued_requests"] += 1
        return request

    def on_sample_finished(self, sample: Sample, now: float) -> bool:
        """Accept a finished trajectory. Returns ``False`` (and ignores it) when its request is
        no longer in flight (aborted, lost, already finished); raises if the sample claims a
        version, group or index other than its request's (versions must never mix)."""
        self._advance(now)
        if not sample.request_id:
            raise ValueError(
                f"sample {sample.group_id}/{sample.index} has no request_id; build it with Request.to_sample()"
            )
        request = self.in_flight.get(sample.request_id)
        if request is None:
            self.stats.counters["ignored_results"] += 1
            return False
        if sample.version != request.version:
            raise ValueError(
                f"sample {sample.request_id} reports version {sample.version} but its request named version "
                f"{request.version}: a sample must be generated by one version from start to finish"
            )
        if (sample.group_id, sample.index) != (request.group_id, request.index):
            raise ValueError(
                f"sample {sample.request_id} claims group {sample.group_id}/{sample.index}, "
                f"its request is {request.group_id}/{request.index}"
            )
        del self.in_flight[request.request_id]
        self.instances[request.instance].remove(request.request_id)
        self._touch(request.instance)
        group = self.active[request.group_id]
        group.samples[request.index] = sample
        self.stats.counters["finished_samples"] += 1
        if group.complete:
            self._complete(group)
        return True

    def observe_length(self, uid: str, tokens: int, seconds: float = 0.0) -> None:
        """A response of prompt ``uid`` finished with ``tokens`` response tokens after ``seconds``
        of generation: the length history and decode rate that ``length_aware`` admission reads."""
        self.lengths.observe(uid, int(tokens))
        self.rate.observe(int(tokens), seconds)

    def rebalance(self, now: float | None = None) -> list[Migration]:
        """Ask the balancer for a migration plan; apply it to the bookkeeping and return it for
        the caller to execute (move each request and its KV cache). The first non-empty plan of
        a step switches the per-instance cap to ``cap_after_rebalance``."""
        self._advance(now)
        ctx = BalanceContext(
            {k: tuple(v) for k, v in self.instances.items()},
            self.config.cap_after_rebalance,
            self.config.rebalance_threshold,
        )
        plan = balancer(self.config.balancer)(ctx)
        for move in plan:
            request = self.in_flight.get(move.request_id)
            if request is None or request.instance != move.source or move.target not in self.instances:
                raise ValueError(f"balancer {self.config.balancer!r} proposed an invalid migration {move}")
            self.instances[move.source].remove(move.request_id)
            self.instances[move.target].append(move.request_id)
            self.in_flight[move.request_id] = dataclasses.replace(request, instance=move.target)
            self._touch(move.source, move.target)
        if plan:
            self.cap.on_rebalance()
            self.stats.counters["rebalances"] += 1
            self.stats.counters["migrations"] += len(plan)
        return plan

    def take_aborted(self) -> list[Request]:
        """Requests aborted since the last call (evicted version or doomed by staleness); the
        caller stops them on ``request.instance``. Their prompts are already requeued."""
        out, self.aborted = self.aborted, []
        return out

    # -- training side ---------------------------------------------------------------------------

    def ready_batch(self, current_version: int | None = None, now: float | None = None) -> list[Sample] | None:
        """A full batch (``batch_size`` groups × ``group_size`` samples, groups shuffled) for the
        trainer to update ``current_version`` (default: the newest), or ``None`` if the queue
        cannot yet form one. Fresh samples satisfy ``current_version - version <= staleness``;
        the batch is domain-balanced within ``domain_tolerance``; a share ``reuse_ratio`` comes
        from the replay buffer when it holds enough (those samples have ``replayed=True``)."""
        self._advance(now)
        self._quota_full = False
        c = self.versions.latest if current_version is None else current_version
        if c > self.versions.latest:
            raise ValueError(f"ready_batch({c}): version {c} was never published (latest {self.versions.latest})")
        cfg = self.config
        self._expire(c)
        replayed = self.replay.take(replay_count(cfg.reuse_ratio, cfg.batch_size)) if cfg.reuse_ratio > 0 else []
        fresh = self.quotas.select(
            self.queue.candidates(), cfg.batch_size - len(replayed), Counter(g.domain for g in replayed)
        )
        if fresh is None and replayed:
            self.replay.put_back(replayed)
            replayed = []
            fresh = self.quotas.select(self.queue.candidates(), cfg.batch_size)
        if fresh is None:
            return None
        self.queue.remove(fresh)
        groups = [(g, False) for g in fresh] + [(g, True) for g in replayed]
        self.rng.shuffle(groups)
        batch: list[Sample] = []
        for group, is_replay in groups:
            self.stats.trained_groups[group.domain] += 1
            for sample in group.ordered():
                batch.append(dataclasses.replace(sample, replayed=True) if is_replay else sample)
                self.stats.staleness[sample_staleness(c, sample.version)] += 1
        self.stats.counters["batches"] += 1
        self.stats.counters["trained_samples"] += len(batch)
        self.stats.counters["replayed_groups"] += len(replayed)
        self.batch_version = c
        self._admission_blocked = False
        # work that could only be trained at the next version, where it would no longer be fresh
        self._expire(c + 1)
        self._abort([g for g in self.active.values() if not is_fresh(c + 1, g.version, cfg.staleness)], "stale")
        return batch

    def publish_version(self, version: int, now: float | None = None) -> list[int]:
        """The trainer produced ``version``: new groups start on it, the eviction policy drops old
        versions (returned; instances unload them), and every unfinished group on an evicted
        version is aborted (see :meth:`take_aborted`) and its prompt regenerated. A new step
        begins: the per-instance cap returns to ``cap_before_rebalance``."""
        self._advance(now)
        remaining: Counter[int] = Counter()
        for g in self.active.values():
            remaining[g.version] += g.size - len(g.samples)
        self._quota_full = False
        evicted = self.versions.publish(version, self.config.staleness, remaining)
        gone = set(evicted)
        self._abort([g for g in self.active.values() if g.version in gone], "evicted")
        self.cap.on_new_step()
        self.batch_version = None
        self.started_while_training = 0
        self._admission_blocked = False
        if now is not None:
            self.rate.step(now)
        self.stats.counters["published_versions"] += 1
        self.stats.counters["evicted_versions"] += len(evicted)
        return evicted

    # -- metrics ---------------------------------------------------------------------------------

    def metrics(self, now: float | None = None) -> dict[str, float]:
        """Flat ``dora/...`` metrics: request load ratio, idle time, staleness histogram and
        mean, per-domain trained/filtered groups, counters, queue sizes."""
        self._advance(now)
        out = self.stats.flat()
        out["dora/request_load_ratio"] = self.meter.ratio
        out["dora/idle_time"] = self.meter.idle
        out["dora/instance_time"] = self.meter.span
        out["dora/queued_groups"] = float(len(self.queue))
        out["dora/active_groups"] = float(len(self.active))
        out["dora/in_flight_requests"] = float(len(self.in_flight))
        out["dora/replay_groups"] = float(len(self.replay))
        out["dora/live_versions"] = float(len(self.versions.live))
        out["dora/request_cap"] = float(self.cap.cap)
        out["dora/prompts_consumed_fraction"] = len(self.consumed) / len(self._uids)
        return out

    # -- checkpoint ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly (RNG included), as plain Python values; JSON-able
        when sample payloads are."""
        version, internal, gauss = self.rng.getstate()
        return {
            "format": STATE_FORMAT,
            "config": dataclasses.asdict(self.config),
            "prompts": len(self._uids),
            "rng": [version, list(internal), gauss],
            "versions": self.versions.state_dict(),
            "sampler": self.sampler.state_dict(),
            "pass_rates": self.pass_rates.state_dict(),
            "queue": [_encode_group(g) for g in self.queue],
            "replay": self.replay.state_dict(_encode_group),
            "cap_rebalanced": self.cap.rebalanced,
            "meter": self.meter.state_dict(),
            "stats": self.stats.state_dict(),
            "active": [_encode_group(g) for g in self.active.values()],
            "pending": [list(p) for p in self.pending],
            "in_flight": [dataclasses.asdict(r) for r in self.in_flight.values()],
            "instances": {k: list(v) for k, v in self.instances.items()},
            "aborted": [dataclasses.asdict(r) for r in self.aborted],
            "consumed": {str(k): v for k, v in self.consumed.items()},
            "serial": self.serial,
            "batch_version": self.batch_version,
            "started_while_training": self.started_while_training,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; the config and prompt count must match."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"DORA state format {state.get('format')!r} is not {STATE_FORMAT}")
        mine = dataclasses.asdict(self.config)
        # a field the state predates (admission, added later) was saved at its default
        defaults = {f.name: f.default for f in dataclasses.fields(DoraConfig) if f.default is not dataclasses.MISSING}
        diff = sorted(k for k in mine if mine[k] != state["config"].get(k, defaults.get(k)))
        if diff:
            raise ConfigError(f"DORA state was saved with a different config; fields differ: {diff}")
        if state["prompts"] != len(self._uids):
            raise ValueError(f"DORA state has {state['prompts']} prompts, this source has {len(self._uids)}")
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.versions.load_state_dict(state["versions"])
        self.sampler.load_state_dict(state["sampler"])
        self.pass_rates.load_state_dict(state["pass_rates"])
        self.queue.groups = [_decode_group(g) for g in state["queue"]]
        self.replay.load_state_dict(state["replay"], _decode_group)
        self.cap.rebalanced = bool(state["cap_rebalanced"])
        self.meter.load_state_dict(state["meter"])
        self.stats.load_state_dict(state["stats"])
        self.active = {g["group_id"]: _decode_group(g) for g in state["active"]}
        self.pending = deque((str(g), int(i), int(a)) for g, i, a in state["pending"])
        self.in_flight = {r["request_id"]: Request(**r) for r in state["in_flight"]}
        self.instances = {k: list(v) for k, v in state["instances"].items()}
        self.aborted = [Request(**r) for r in state["aborted"]]
        self.consumed = Counter({int(k): v for k, v in state["consumed"].items()})
        self.serial = int(state["serial"])
        self.batch_version = state["batch_version"]
        self.started_while_training = int(state.get("started_while_training", 0))
        self._quota_full = False

    # -- internals -------------------------------------------------------------------------------

    def _advance(self, now: float | None) -> None:
        t = self.meter.last if now is None else now
        if t is not None:
            self.meter.advance(t)

    def _touch(self, *instance_ids: str) -> None:
        """Report the current load of these instances to the meter (absent: left)."""
        for k in instance_ids:
            load = self.instances.get(k)
            self.meter.set(k, None if load is None else len(load))

    def _start_groups(self) -> bool:
        """Draw one prompt and start its k groups; ``False`` when quotas or staleness forbid."""
        cfg = self.config
        training = self.batch_version is not None and self.batch_version >= self.versions.latest
        if training and cfg.staleness == 0:
            return False
        limit = cfg.old_version_start_limit
        if training and limit is not None and self.started_while_training >= limit * cfg.batch_size:
            return False
        if self._quota_full or self._admission_blocked:
            return False
        outstanding = Counter(g.domain for g in self.active.values()) + self.queue.per_domain()
        domain = self.quotas.choose_domain(outstanding, self.sampler.domains_with_prompts())
        if domain is None:
            self._quota_full = True
            return False
        index = self._admitted_prompt(domain, training)
        if index is None:
            self._admission_blocked = True
            return False
        uid = self._uids[index]
        rate = self.pass_rates.get(uid, self._priors[index])
        k = oversampling_coefficient(rate, cfg.oversampling_min, cfg.oversampling_max)
        for _ in range(k):
            group_id = f"{uid}@{self.serial}"
            self.serial += 1
            self.active[group_id] = Group(group_id, uid, index, domain, self.versions.latest, cfg.group_size)
            self.pending.extend((group_id, i, 0) for i in range(cfg.group_size))
        self.stats.counters["started_groups"] += k
        if training:
            self.started_while_training += k
        self.stats.counters["started_prompts"] += 1
        return True

    def _admitted_prompt(self, domain: str, training: bool) -> int | None:
        """A prompt of ``domain`` the admission policy lets start now on the newest version, or
        None. Up to ``batch_size`` prompts are drawn; those refused go back to be drawn first
        once the version or the trainer's phase changes (``sampler.requeue``)."""
        cfg = self.config
        if cfg.admission == NO_ADMISSION:
            return self.sampler.draw(domain)
        policy = admission_policy(cfg.admission)
        refused: list[int] = []
        chosen = None
        rate = self.rate.tokens_per_step()
        for _ in range(cfg.batch_size):
            if domain not in self.sampler.domains_with_prompts():
                break
            index = self.sampler.draw(domain)
            ctx = AdmissionContext(
                version=self.versions.latest,
                batches_left=cfg.staleness - (1 if training else 0),
                staleness=cfg.staleness,
                window=cfg.admission_window,
                training=training,
                expected_tokens=self.lengths.get(self._uids[index]),
                tokens_per_step=rate,
            )
            if policy(ctx):
                chosen = index
                break
            refused.append(index)
            self.stats.counters["admission_refused"] += 1
        for index in refused:
            self.sampler.requeue(domain, index)
        return chosen

    def _complete(self, group: Group) -> None:
        cfg = self.config
        self._quota_full = False
        del self.active[group.group_id]
        rewards = [s.reward for s in group.ordered()]
        accuracy = group_accuracy(rewards, cfg.correct_threshold)
        if accuracy is not None:
            self.pass_rates.update(group.uid, accuracy, self._priors[group.prompt_index])
        self.consumed[group.prompt_index] += 1
        verdict = filter_verdict(
            rewards,
            correct_threshold=cfg.correct_threshold,
            wrong_threshold=cfg.wrong_threshold,
            drop_all_correct=cfg.filter_all_correct,
            drop_all_wrong=cfg.filter_all_wrong,
        )
        if verdict is not None:
            self.stats.counters[f"filtered_{verdict}"] += 1
            self.stats.filtered_groups[group.domain] += 1
            return
        self.queue.push(group)
        self.stats.counters["queued_groups_total"] += 1

    def _expire(self, current_version: int) -> None:
        """Queued groups no longer fresh for ``current_version``: regenerate their prompts,
        offer them to replay."""
        for group in self.queue.expire(current_version, self.config.staleness):
            self.sampler.requeue(group.domain, group.prompt_index)
            if self.config.reuse_ratio > 0:
                self.replay.add(group)
            self.stats.counters["expired_groups"] += 1

    def _abort(self, groups: list[Group], reason: str) -> None:
        if not groups:
            return
        self._quota_full = False
        ids = {g.group_id for g in groups}
        self.pending = deque(p for p in self.pending if p[0] not in ids)
        for rid, request in list(self.in_flight.items()):
            if request.group_id in ids:
                del self.in_flight[rid]
                self.instances[request.instance].remove(rid)
                self._touch(request.instance)
                self.aborted.append(request)
                self.stats.counters["aborted_requests"] += 1
        for group in groups:
            del self.active[group.group_id]
            self.sampler.requeue(group.domain, group.prompt_index)
            self.stats.counters["discarded_samples"] += len(group.samples)
            self.stats.counters[f"aborted_groups_{reason}"] += 1


def _encode_group(group: Group) -> dict[str, Any]:
    return {
        "group_id": group.group_id,
        "uid": group.uid,
        "prompt_index": group.prompt_index,
        "domain": group.domain,
        "version": group.version,
        "size": group.size,
        "samples": [dataclasses.asdict(s) for s in group.ordered()],
    }


def _decode_group(data: Mapping[str, Any]) -> Group:
    group = Group(
        data["group_id"],
        data["uid"],
        int(data["prompt_index"]),
        data["domain"],
        int(data["version"]),
        int(data["size"]),
    )
    for s in data["samples"]:
        sample = Sample(**s)
        group.samples[sample.index] = sample
    return group
