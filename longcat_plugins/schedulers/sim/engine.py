"""The discrete-event engine: devices prefill and decode, environments answer, the trainer
trains, weights sync; a :class:`~.policies.RolloutPolicy` decides what runs where.

Between two events every admitted, decoding request progresses at its instance's current rate
(:meth:`ClusterSpec.decode_rate`, which falls with the batch and its context); the next event is
the earliest of: a decode segment ends, an environment call or a stall (KV transfer) ends, a
prefill ends, an instance's KV fills up, training ends, new weights arrive, a paused device
resumes. After each event the engine fills every generation device with the policy's requests,
lets it rebalance, removes aborted work, preempts and admits requests against each instance's
KV budget (:meth:`ClusterSpec.kv_budget` of the weight versions it holds), and starts training
when the policy hands over a batch.

Versions held by an instance: one for the single-version modes; for a multi-version policy the
newest published version, every version its requests (running or queued) use, and the next
version while it is loading.

Modes (device roles): ``sync`` colocates everything (all devices generate, then all train);
``one_step_off``, ``partial`` and ``dora`` split ``devices - train_devices`` generators from
``train_devices`` trainers; ``dora_elastic`` lets the ``train_devices`` generate until a batch
is ready, drains their requests to the standalone generators (KV transfer), trains, and returns
them to generation with the new weights.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from longcat_plugins.schedulers.core.config import DoraConfig
from longcat_plugins.schedulers.core.types import Request
from longcat_plugins.schedulers.sim.cluster import ClusterSpec
from longcat_plugins.schedulers.sim.policies import BatchPolicy, DoraPolicy, PartialRolloutPolicy, RolloutPolicy
from longcat_plugins.schedulers.sim.workload import Trajectory, Workload

MODES = ("sync", "one_step_off", "partial", "dora", "dora_elastic")
EPS = 1e-9
#: decoding advances at most this many tokens per request between two rate evaluations
DECODE_CHUNK_TOKENS = 512.0


@dataclass
class Flight:
    """A trajectory being generated on a device."""

    request: Request
    trajectory: Trajectory
    remaining: float
    context: float
    segment: int = 0
    wake_at: float = 0.0
    generated: float = 0.0
    versions: list[int] = field(default_factory=list)
    #: its KV is on the device (admitted); otherwise it waits in the device's queue
    admitted: bool = False
    #: admission order on its device (the newest admitted is preempted first)
    seq: int = 0
    #: its context must be prefilled when admitted (false only while its KV travelled with it)
    needs_prefill: bool = True
    #: it has been prefilled once (a later prefill recomputes)
    prefilled: bool = False


@dataclass
class Device:
    name: str
    role: str  # "gen" | "train" | "off"
    flights: dict[str, Flight] = field(default_factory=dict)
    paused_until: float = 0.0
    #: prefilling until then (no decoding)
    busy_until: float = 0.0
    #: dispatched requests not yet admitted, front first
    waiting: deque[str] = field(default_factory=deque)
    admissions: int = 0


@dataclass
class SimResult:
    """What one simulated run measured (window: after ``warmup_steps`` to the last step)."""

    mode: str
    steps: int
    window_s: float
    trained_samples: int
    throughput: float
    device_utilisation: float
    request_load_ratio: float
    staleness: dict[int, int]
    wasted_token_fraction: float
    step_seconds: list[float]
    timeline: list[tuple[float, float, float]]
    controller: dict[str, float]
    mixed_version_samples: int
    #: response+prompt tokens of trained samples: mean and 99th percentile (length censoring shows here)
    trained_tokens_mean: float = 0.0
    trained_tokens_p99: float = 0.0
    #: response tokens only of trained samples: mean and 90th percentile (lower rank)
    trained_response_tokens_mean: float = 0.0
    trained_response_tokens_p90: float = 0.0
    #: tokens prefilled again (preemption, version switch) over generated tokens
    recomputed_token_fraction: float = 0.0
    #: requests preempted for KV space, per trained sample
    preemptions_per_sample: float = 0.0
    #: time-averaged weight versions held per generation instance
    versions_held_mean: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["staleness"] = {str(k): v for k, v in sorted(self.staleness.items())}
        return out


def make_policy(mode: str, config: DoraConfig, workload: Workload, seed: int) -> RolloutPolicy:
    """The policy for ``mode`` (one of :data:`MODES`)."""
    if mode == "sync":
        return BatchPolicy(config, workload.refs, seed, lag=0)
    if mode == "one_step_off":
        return BatchPolicy(config, workload.refs, seed, lag=1)
    if mode == "partial":
        return PartialRolloutPolicy(config, workload.refs, seed)
    if mode in ("dora", "dora_elastic"):
        return DoraPolicy(config, workload.refs, seed, name=mode)
    raise ValueError(f"unknown simulation mode {mode!r}; modes: {MODES}")


class Simulation:
    """One run of one mode; :meth:`run` returns a :class:`SimResult`."""

    def __init__(
        self,
        mode: str,
        workload: Workload,
        cluster: ClusterSpec,
        config: DoraConfig,
        seed: int = 0,
        timeline_every_s: float = 30.0,
        resolution_s: float = 1.0,
    ) -> None:
        self.mode = mode
        self.workload = workload
        self.cluster = cluster
        self.config = config
        self.policy = make_policy(mode, config, workload, seed)
        self.rng = random.Random(seed + 1)
        self.timeline_every_s = timeline_every_s
        #: events closer than this are processed together (the clock moves at least this far)
        self.resolution_s = resolution_s
        d, tr = cluster.devices, cluster.train_devices
        self.devices = [Device(f"dev{i:03d}", "gen") for i in range(d)]
        if mode in ("one_step_off", "partial", "dora"):
            for dev in self.devices[:tr]:
                dev.role = "off"  # dedicated trainers, idle until a batch arrives
        self.trainers = self.devices if mode == "sync" else self.devices[:tr]
        self.t = 0.0
        self.version = 0
        self.publish_at: float | None = None
        self.wasted = self.recomputed = 0.0
        self.preemptions = 0
        for dev in self.devices:
            if dev.role == "gen":
                self.policy.add_instance(dev.name, 0.0)

    # -- helpers ---------------------------------------------------------------------------------

    def _gen_devices(self) -> list[Device]:
        return [d for d in self.devices if d.role == "gen"]

    def _start(self, dev: Device, req: Request) -> None:
        traj = self.workload.draw(req.domain, self.rng)
        dev.flights[req.request_id] = Flight(
            req, traj, float(traj.segments[0]), float(traj.prompt_tokens), versions=[req.version]
        )
        dev.waiting.append(req.request_id)

    def _remove(self, dev: Device, request_id: str) -> Flight:
        flight = dev.flights.pop(request_id)
        if not flight.admitted:
            dev.waiting.remove(request_id)
        return flight

    def versions_held(self, dev: Device) -> int:
        """Weight versions resident on ``dev`` (see the module docstring)."""
        if not self.policy.multi_version:
            return 1
        held = {self.version} | {f.request.version for f in dev.flights.values()}
        if self.publish_at is not None and dev.paused_until <= self.t + EPS:
            held.add(self.version + 1)
        return len(held)

    def _schedule(self, dev: Device) -> None:
        """Preempt the newest admitted requests while the admitted KV exceeds the budget, then
        admit queued ones, front first, while they fit (one always runs on an empty device)."""
        budget = self.cluster.kv_budget(self.versions_held(dev))
        admitted = [f for f in dev.flights.values() if f.admitted]
        usage = sum(f.context for f in admitted)
        while usage > budget + EPS and len(admitted) > 1:
            victim = max(admitted, key=lambda f: f.seq)
            admitted.remove(victim)
            usage -= victim.context
            victim.admitted = False
            victim.needs_prefill = True
            dev.waiting.appendleft(victim.request.request_id)
            self.preemptions += 1
        while dev.waiting:
            f = dev.flights[dev.waiting[0]]
            if admitted and usage + f.context > budget + EPS:
                break
            dev.waiting.popleft()
            f.admitted = True
            dev.admissions += 1
            f.seq = dev.admissions
            admitted.append(f)
            usage += f.context
            if f.needs_prefill:
                self._prefill(dev, f, f.context)
            f.needs_prefill = False

    def _prefill(self, dev: Device, f: Flight, tokens: float) -> None:
        """Prefill ``tokens`` of ``f`` on ``dev``: the device decodes nothing meanwhile."""
        if f.prefilled:
            self.recomputed += tokens
        f.prefilled = True
        dev.busy_until = max(dev.busy_until, dev.paused_until, self.t) + self.cluster.prefill_seconds(tokens)
        f.wake_at = max(f.wake_at, dev.busy_until)

    def _rate(self, dev: Device) -> float:
        now = self.t + EPS
        if dev.role != "gen" or dev.paused_until > now or dev.busy_until > now or not dev.flights:
            return 0.0
        decoding = 0
        context = 0.0
        for f in dev.flights.values():
            if f.admitted and f.wake_at <= now:
                decoding += 1
                context += f.context
        return self.cluster.decode_rate(decoding, context)

    def _fill(self) -> None:
        """Dispatch new requests one at a time to the least-loaded generation device first. The
        per-instance cap is the same for every device, so once the least-loaded device gets
        nothing (at its cap, or no work at all) no other device would: stop there."""
        heap = [(len(d.flights), d.name, d) for d in self.devices if d.role == "gen" and d.paused_until <= self.t + EPS]
        heapq.heapify(heap)
        while heap:
            load, name, dev = heapq.heappop(heap)
            req = self.policy.next_request(dev.name, self.t)
            if req is None:
                break
            self._start(dev, req)
            heapq.heappush(heap, (load + 1, name, dev))

    def _move(self, request_id: str, source: str, target: str) -> None:
        src = next(d for d in self.devices if d.name == source)
        dst = next(d for d in self.devices if d.name == target)
        flight = self._remove(src, request_id)
        flight.request = Request(**{**flight.request.__dict__, "instance": target})
        if flight.admitted:  # its KV cache travels with it
            flight.wake_at = max(flight.wake_at, self.t) + flight.context / self.cluster.kv_transfer_tokens_per_s
            flight.needs_prefill = False
        flight.admitted = False
        dst.flights[request_id] = flight
        dst.waiting.append(request_id)

    def _drop_aborted(self) -> None:
        for req in self.policy.take_aborted():
            for dev in self.devices:
                if req.request_id in dev.flights:
                    self.wasted += self._remove(dev, req.request_id).generated
                    break

    # -- run -------------------------------------------------------------------------------------

    def run(self, steps: int, warmup_steps: int = 2, max_time_s: float = 1e7) -> SimResult:
        """Simulate until ``steps`` training steps finished; measure after ``warmup_steps``."""
        cl = self.cluster
        self.version = 0
        self.publish_at = None
        train_end: float | None = None
        done_steps = 0
        step_ends: list[float] = []
        trained_in_window = 0
        staleness: Counter[int] = Counter()
        mixed = 0
        trained_tokens: list[int] = []
        trained_response: list[int] = []
        self.wasted = 0.0
        self.recomputed = 0.0
        self.preemptions = 0
        generated = 0.0
        held_time = 0.0
        trained_total = 0
        window_start: float | None = 0.0 if warmup_steps == 0 else None
        busy = loaded = gen_time = 0.0
        timeline: list[tuple[float, float, float]] = []
        next_sample = 0.0
        cap = self.config.load_ratio_capacity

        while done_steps < steps:
            if self.t > max_time_s:
                raise RuntimeError(f"{self.mode}: simulation exceeded {max_time_s} s after {done_steps} steps")
            self._fill()
            # training starts when the trainer is free and the policy hands over a batch
            if train_end is None and self.publish_at is None:
                batch = self.policy.ready_batch(self.version, self.t)
                if batch is not None:
                    self._drop_aborted()
                    tokens = sum(int(s.payload["tokens"]) for s in batch)
                    if self.mode == "dora_elastic":
                        for dev in self.trainers:
                            for move in self.policy.drain(dev.name, self.t):
                                self._move(move.request_id, move.source, move.target)
                    for dev in self.trainers:
                        if dev.flights:
                            raise RuntimeError(f"{self.mode}: trainer {dev.name} still holds requests")
                        dev.role = "train"
                    train_end = self.t + cl.train_seconds(tokens, len(self.trainers))
                    trained_total += len(batch)
                    if window_start is not None:
                        trained_in_window += len(batch)
                        for s in batch:
                            staleness[self.version - s.version] += 1
                            mixed += len(set(s.payload["versions"])) > 1
                            trained_tokens.append(int(s.payload["tokens"]))
                            trained_response.append(int(s.payload["response_tokens"]))
            for move in self.policy.rebalance(self.t):
                self._move(move.request_id, move.source, move.target)
            self._drop_aborted()
            self._fill()
            for dev in self.devices:
                if dev.role == "gen" and dev.paused_until <= self.t + EPS:
                    self._schedule(dev)

            # next event
            rates = {dev.name: self._rate(dev) for dev in self.devices}
            horizon = math.inf
            for dev in self.devices:
                for until in (dev.paused_until, dev.busy_until):
                    if until > self.t + EPS:
                        horizon = min(horizon, until - self.t)
                r = rates[dev.name]
                decoding = 0
                usage = 0.0
                for f in dev.flights.values():
                    if f.wake_at > self.t + EPS:
                        horizon = min(horizon, f.wake_at - self.t)
                    elif r > 0 and f.admitted:
                        horizon = min(horizon, f.remaining / r)
                        decoding += 1
                    usage += f.context if f.admitted else 0.0
                if decoding:
                    # contexts grow: re-evaluate the context-dependent rate every few tokens
                    horizon = min(horizon, DECODE_CHUNK_TOKENS / r)
                    room = self.cluster.kv_budget(self.versions_held(dev)) - usage
                    if room > 0:  # the KV budget fills up: preemption
                        horizon = min(horizon, room / (decoding * r))
            for when in (train_end, self.publish_at):
                if when is not None:
                    horizon = min(horizon, max(0.0, when - self.t))
            if math.isinf(horizon):
                raise RuntimeError(f"{self.mode}: no event can happen (stalled at t={self.t:.1f}, step {done_steps})")
            dt = max(horizon, self.resolution_s)

            # integrate metrics over [t, t + dt)
            if window_start is not None and dt > 0:
                for dev in self.devices:
                    if dev.role == "train" and train_end is not None:
                        busy += dt
                    elif dev.role == "gen":
                        n = len(dev.flights)
                        gen_time += dt
                        loaded += min(n, cap) / cap * dt
                        held_time += self.versions_held(dev) * dt
                        if rates[dev.name] > 0 or dev.busy_until > self.t + EPS:
                            busy += dt
            while self.t + dt >= next_sample:
                active = sum(1 for d in self.devices if (d.role == "gen" and rates[d.name] > 0) or d.role == "train")
                inflight = sum(len(d.flights) for d in self.devices)
                timeline.append((next_sample, active / len(self.devices), float(inflight)))
                next_sample += self.timeline_every_s

            # advance
            for dev in self.devices:
                r = rates[dev.name]
                if r <= 0:
                    continue
                now = self.t + EPS
                for f in dev.flights.values():
                    if f.admitted and f.wake_at <= now:
                        # a request waking inside the interval starts at the next event (<= resolution_s late)
                        tokens = min(f.remaining, r * dt)
                        f.remaining -= tokens
                        f.context += tokens
                        f.generated += tokens
                        generated += tokens
            self.t += dt

            # events: decode segments and environment calls
            for dev in self.devices:
                for rid, f in list(dev.flights.items()):
                    if not f.admitted or f.wake_at > self.t + EPS or f.remaining > 1e-6:
                        continue
                    if f.segment + 1 < len(f.trajectory.segments):
                        f.wake_at = self.t + f.trajectory.env_waits[f.segment]
                        f.segment += 1
                        f.remaining = float(f.trajectory.segments[f.segment])
                        continue
                    del dev.flights[rid]
                    reward = self.workload.reward(f.request.uid, self.rng)
                    payload = {
                        "tokens": f.trajectory.tokens + f.trajectory.prompt_tokens,
                        "response_tokens": f.trajectory.tokens,
                        "versions": tuple(f.versions),
                    }
                    self.policy.on_finished(f.request, reward, payload, self.t)

            # training end and weight sync
            if train_end is not None and self.t >= train_end - EPS:
                train_end = None
                done_steps += 1
                step_ends.append(self.t)
                if done_steps == warmup_steps:
                    window_start = self.t
                for dev in self.trainers:
                    dev.role = "off" if self.mode in ("one_step_off", "partial", "dora") else "gen"
                    if dev.role == "gen":
                        self.policy.add_instance(dev.name, self.t)
                if self.policy.multi_version:
                    self.publish_at = self.t + cl.weight_sync_s
                    for dev in self.trainers:  # the elastic devices trained the weights: they have them
                        dev.paused_until = self.publish_at
                else:
                    resume = self.t + cl.weight_sync_s
                    for dev in self._gen_devices():
                        dev.paused_until = resume
                    self.version += 1
                    self.policy.publish(self.version, self.t)
                    if self.policy.switches_version:  # partial: every unfinished trajectory re-prefills
                        for dev in self._gen_devices():
                            for f in dev.flights.values():
                                if f.generated == 0 and not f.admitted:
                                    f.versions = [self.version]
                                    continue
                                f.versions.append(self.version)
                                if f.admitted:
                                    self._prefill(dev, f, f.context)
                                else:
                                    f.needs_prefill = True
            if self.publish_at is not None and self.t >= self.publish_at - EPS:
                self.publish_at = None
                self.version += 1
                self.policy.publish(self.version, self.t)
                self._drop_aborted()

        start = window_start if window_start is not None else 0.0
        window = self.t - start
        n_dev = len(self.devices)
        steps_s = [b - a for a, b in zip([0.0, *step_ends], step_ends, strict=False)]
        return SimResult(
            mode=self.mode,
            steps=done_steps,
            window_s=window,
            trained_samples=trained_in_window,
            throughput=trained_in_window / window if window > 0 else 0.0,
            device_utilisation=busy / (n_dev * window) if window > 0 else 0.0,
            request_load_ratio=loaded / gen_time if gen_time > 0 else 0.0,
            staleness=dict(staleness),
            wasted_token_fraction=self.wasted / generated if generated else 0.0,
            recomputed_token_fraction=self.recomputed / generated if generated else 0.0,
            preemptions_per_sample=self.preemptions / trained_total if trained_total else 0.0,
            versions_held_mean=held_time / gen_time if gen_time > 0 else 1.0,
            step_seconds=steps_s,
            timeline=timeline,
            controller=self.policy.metrics(self.t),
            mixed_version_samples=mixed,
            trained_tokens_mean=sum(trained_tokens) / len(trained_tokens) if trained_tokens else 0.0,
            trained_tokens_p99=float(sorted(trained_tokens)[int(0.99 * (len(trained_tokens) - 1))])
            if trained_tokens
            else 0.0,
            trained_response_tokens_mean=sum(trained_response) / len(trained_response) if trained_response else 0.0,
            trained_response_tokens_p90=float(sorted(trained_response)[int(0.9 * (len(trained_response) - 1))])
            if trained_response
            else 0.0,
        )


def simulate(
    mode: str,
    workload: Workload,
    cluster: ClusterSpec | None = None,
    config: DoraConfig | None = None,
    steps: int = 12,
    warmup_steps: int = 2,
    seed: int = 0,
) -> SimResult:
    """Run ``mode`` on ``workload`` and return its measurements."""
    sim = Simulation(mode, workload, cluster or ClusterSpec(), config or DoraConfig(), seed=seed)
    return sim.run(steps, warmup_steps=warmup_steps)
