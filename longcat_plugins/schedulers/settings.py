"""Settings of the DORA verl integration: ``longcat.settings.scheduler.dora``.

The trainer (``trainer.v1.trainer_mode=dora``), its sampler and the elastic schedule policy
all read this one section, so one YAML block configures the scheduler end to end. Errors name
the key path (``longcat.settings.scheduler.dora.<key>``) through the host's settings check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from longcat_plugins.schedulers.core.config import DoraConfig
from longcat_plugins.schedulers.core.replicas import MIN_STALENESS

SETTINGS_PATH = "longcat.settings.scheduler.dora"
#: ``load_balancer`` values: verl's router unchanged, or DORA's capped one
LOAD_BALANCERS = ("dora", "verl")
#: ``dispatch`` values: the core decides which prompts verl generates, or verl's dataloader order
DISPATCH_MODES = ("dora", "verl")
#: the trainer's verl resource pools ``node_resources`` may pin (``trainer.v1`` names them so)
TRAINER_POOLS = ("global_pool", "reward_pool", "teacher_pool")


@dataclass(frozen=True)
class DoraSettings:
    """DORA on verl's v1 trainer.

    Attributes:
        staleness: a trained sample's generating version may lag the weights being trained
            by at most this many versions (instances hold up to ``staleness + 1``
            versions). Finished groups beyond it are dropped and their prompts regenerated.
        reclaim_ratio: the elastic group is taken back for training once this fraction of a
            training batch is ready (1.0: the training condition, a full batch).
        min_lend_gain_s: lend the elastic group to generation only if the idle time it is
            expected to save exceeds the measured switch cost by this many seconds.
        load_ratio_capacity: requests one generation replica serves at full load, the
            denominator of the request load ratio (the report's footnote: about 4 on its devices;
            ``DoraConfig.load_ratio_capacity`` in the core).
        trace_path: if set, one JSON line per trained step (versions, staleness, in-flight
            prompts when training began) is appended here; ``LONGCAT_DORA_TRACE`` overrides.
        domain_ratios: target share of each domain in a trained batch (normalised; 2601 report §3.3.3, the
            core's ``DoraConfig.domain_ratios``). Empty: batches are taken oldest first. Every
            domain met in the data must be named.
        domain_tolerance: largest allowed ``|share - target|`` per domain in a batch, as a
            fraction of the batch (``DoraConfig.domain_tolerance``).
        domain_key: the sample field naming its domain: a dataset column stored with every
            trajectory (``data_source``) or a dotted path into one (``extra_info.domain``).
        online_filter: drop finished groups with no group-relative signal (online filtering) and regenerate
            their prompts, as stale groups are; needs rewards at rollout time (``rm_scores``).
        filter_all_correct / filter_all_wrong / correct_threshold / wrong_threshold: which
            groups the filter drops, as in the core's ``DoraConfig`` (a group is all correct when
            every reward ``>= correct_threshold``, all wrong when every reward ``<= wrong_threshold``).
        single_version_replicas: replica-granular versioning (``core/replicas.py``): every
            standalone replica holds exactly one weights version, as vLLM and SGLang do, and
            updates roll across replicas (a replica loads the newest weights once its in-flight
            requests drained or left the window). Forces ``hf`` replicas to hold one version, so
            the path runs on the CPU. Needs ``staleness >= 1``, at least two standalone replicas
            and ``load_balancer: dora``.
        migrate_requests: with ``hf`` replicas and ``load_balancer: dora``, execute the
            balancer's migration plans (stop the request, continue it from its generated prefix
            on a replica holding its version) and stop requests whose version left the window at
            each weight sync. Multi-version ``hf`` servers then keep every version of the window
            (``staleness + 1`` model copies) so any replica can continue any live request.
        health_probe_s: with ``load_balancer: dora``, ping every replica this often (seconds;
            0: off) and drop a dead one at once, not only when a request to it fails.
        node_resources: a custom Ray resource per trainer resource pool (``global_pool``, and
            ``reward_pool`` / ``teacher_pool`` where the run has them): the pool's placement
            groups require it, so its workers start only on nodes that declare it (``ray start
            --resources``). Pinning the trainer is what separates the groups on a multi-node
            cluster: the standalone rollout replicas take the devices the trainer leaves.
        dispatch: ``dora``: the core decides which prompts verl generates and when
            (:mod:`~longcat_plugins.schedulers.dispatch`: per-domain rollout quotas, pass-rate
            oversampling, outstanding work topped up as capacity frees); ``verl``: verl's
            dataloader order, a whole batch at every step's start.
        domain_oversampling: rollout-quota multiplier per domain (slow or rare domains get more
            groups outstanding; the core's ``DoraConfig.domain_oversampling``); needs
            ``domain_ratios`` naming the domain.
        oversampling_min / oversampling_max: the pass-rate oversampling coefficient's range (D5):
            a prompt starts ``k_min + round((k_max - k_min) * (1 - pass_rate))`` groups.
        default_pass_rate / pass_rate_momentum: a prompt's pass rate before its first trained
            group, and the weight of every trained group's accuracy in it.
        reuse_ratio / replay_capacity: replay (D2): finished groups that went stale before a
            batch took them are kept (up to ``replay_capacity`` groups, oldest dropped first)
            and ``round(reuse_ratio * batch)`` of them are mixed into each later batch, each
            once (the core's ``DoraConfig.reuse_ratio``); 0: dropped and regenerated.
        eviction: the eviction policy (a ``DoraEvictionPolicy`` component, built-in or a
            plugin's) the sampler asks, before every batch, which versions' finished groups to
            evict; the default ``staleness_window`` evicts exactly those outside ``staleness``.
        balancer: the load-balancer strategy (a ``DoraBalancer`` component) the ``dora`` load
            balancer asks for migration plans (``load_balancer: dora``); default ``greedy``.
        admission: the admission policy (a ``DoraAdmission`` component, built-in or a plugin's)
            the ``dora`` load balancer asks before every new request starts (``load_balancer:
            dora``): ``none`` (default) starts at once; ``version_window`` holds new requests on
            a version with fewer than ``admission_window`` later batches left in its window;
            ``length_aware`` starts a prompt only where its length history says it can finish.
        admission_window: later batches (after the one being filled) a version must have left
            in its staleness window for a new request to start on it, in ``[1, staleness]``.
        length_momentum: weight of a finished response in its prompt's expected length
            (``length_aware``'s history, an EMA).
        prestart_replicas: start the standalone rollout replicas as soon as the trainer's
            devices are reserved, beside its engines' start, instead of after verl's whole setup
            (:mod:`~longcat_plugins.schedulers.prestart`); the same replicas, sooner.
    """

    staleness: int = 1
    reclaim_ratio: float = 1.0
    min_lend_gain_s: float = 0.0
    load_ratio_capacity: int = 4
    trace_path: str = ""
    domain_ratios: dict[str, float] = field(default_factory=dict)
    domain_tolerance: float = 0.125
    domain_key: str = "data_source"
    online_filter: bool = False
    filter_all_correct: bool = True
    filter_all_wrong: bool = True
    correct_threshold: float = 1.0
    wrong_threshold: float = 0.0
    load_balancer: str = "dora"
    cap_before_rebalance: int = 8
    cap_after_rebalance: int = 4
    rebalance_threshold: float = 0.5
    single_version_replicas: bool = False
    migrate_requests: bool = True
    health_probe_s: float = 5.0
    node_resources: dict[str, str] = field(default_factory=dict)
    dispatch: str = "dora"
    domain_oversampling: dict[str, float] = field(default_factory=dict)
    oversampling_min: int = DoraConfig.oversampling_min
    oversampling_max: int = DoraConfig.oversampling_max
    default_pass_rate: float = DoraConfig.default_pass_rate
    pass_rate_momentum: float = DoraConfig.pass_rate_momentum
    reuse_ratio: float = DoraConfig.reuse_ratio
    replay_capacity: int = DoraConfig.replay_capacity
    eviction: str = DoraConfig.eviction
    balancer: str = DoraConfig.balancer
    admission: str = DoraConfig.admission
    admission_window: int = DoraConfig.admission_window
    length_momentum: float = 0.5
    prestart_replicas: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.staleness, int) or self.staleness < 0:
            raise ValueError(f"staleness must be an integer >= 0, got {self.staleness!r}")
        if not 0.0 < float(self.reclaim_ratio) <= 1.0:
            raise ValueError(f"reclaim_ratio must be in (0, 1], got {self.reclaim_ratio!r}")
        if not self.min_lend_gain_s >= 0:  # NaN too
            raise ValueError(f"min_lend_gain_s must be >= 0, got {self.min_lend_gain_s!r}")
        if not isinstance(self.load_ratio_capacity, int) or self.load_ratio_capacity < 1:
            raise ValueError(f"load_ratio_capacity must be an integer >= 1, got {self.load_ratio_capacity!r}")
        for domain, weight in dict(self.domain_ratios).items():
            if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
                raise ValueError(f"domain_ratios.{domain} must be a number > 0, got {weight!r}")
        if not 0.0 <= float(self.domain_tolerance) <= 1.0:
            raise ValueError(f"domain_tolerance must be in [0, 1], got {self.domain_tolerance!r}")
        if not self.domain_key or any(not part for part in self.domain_key.split(".")):
            raise ValueError(f"domain_key must be a field name or dotted path, got {self.domain_key!r}")
        for name in ("correct_threshold", "wrong_threshold"):
            if not math.isfinite(float(getattr(self, name))):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)!r}")
        if self.load_balancer not in LOAD_BALANCERS:
            raise ValueError(f"load_balancer must be one of {list(LOAD_BALANCERS)}, got {self.load_balancer!r}")
        if not isinstance(self.single_version_replicas, bool):
            raise ValueError(f"single_version_replicas must be true or false, got {self.single_version_replicas!r}")
        if not isinstance(self.migrate_requests, bool):
            raise ValueError(f"migrate_requests must be true or false, got {self.migrate_requests!r}")
        probe = self.health_probe_s
        if isinstance(probe, bool) or not isinstance(probe, int | float) or not math.isfinite(probe) or probe < 0:
            raise ValueError(f"health_probe_s must be a number of seconds >= 0 (0: off), got {probe!r}")
        if self.single_version_replicas and self.staleness < MIN_STALENESS:
            raise ValueError(
                f"staleness must be >= {MIN_STALENESS} with single_version_replicas (got {self.staleness}): "
                "while one replica loads the newest weights another serves the previous version, "
                "which must still be inside the window"
            )
        if self.single_version_replicas and self.load_balancer != "dora":
            raise ValueError(
                "load_balancer must be 'dora' with single_version_replicas (the dora balancer routes by replica version)"
            )
        for pool, resource in dict(self.node_resources).items():
            if pool not in TRAINER_POOLS:
                raise ValueError(f"node_resources.{pool}: not a trainer resource pool (one of {list(TRAINER_POOLS)})")
            if not isinstance(resource, str) or not resource.strip():
                raise ValueError(f"node_resources.{pool} must name a custom Ray resource, got {resource!r}")
        if self.dispatch not in DISPATCH_MODES:
            raise ValueError(f"dispatch must be one of {list(DISPATCH_MODES)}, got {self.dispatch!r}")
        if not isinstance(self.prestart_replicas, bool):
            raise ValueError(f"prestart_replicas must be true or false, got {self.prestart_replicas!r}")
        momentum = self.length_momentum
        if isinstance(momentum, bool) or not isinstance(momentum, int | float) or not 0.0 < momentum <= 1.0:
            raise ValueError(f"length_momentum must be a number in (0, 1], got {momentum!r}")
        if self.admission != "none" and self.load_balancer != "dora":
            raise ValueError(
                f"admission {self.admission!r} needs load_balancer: dora (the dora load balancer admits requests)"
            )
        if self.domain_oversampling and not self.domain_ratios:
            first = sorted(map(str, self.domain_oversampling))[0]
            raise ValueError(f"domain_oversampling.{first}: needs domain_ratios naming the domain (none are set)")
        self.core_config(1)  # the shared fields (quotas, oversampling range), validated by the core
        self.balancer_config()  # the cap and threshold, validated by the core with their key path

    def balancer_config(self) -> Any:
        """The core's ``DoraConfig`` carrying the load-balancing settings (cap phases, threshold, capacity)."""
        from longcat_plugins.schedulers.core.config import DoraConfig

        return DoraConfig.from_mapping(
            {
                "cap_before_rebalance": self.cap_before_rebalance,
                "cap_after_rebalance": self.cap_after_rebalance,
                "rebalance_threshold": self.rebalance_threshold,
                "load_ratio_capacity": self.load_ratio_capacity,
                "balancer": self.balancer,
                "staleness": self.staleness,
                "admission": self.admission,
                "admission_window": self.admission_window,
            },
            path=SETTINGS_PATH,
        )

    def core_config(self, batch_size: int) -> Any:
        """The core's ``DoraConfig`` for a batch of ``batch_size`` groups, with these settings'
        shared fields (one vocabulary, one validation)."""
        from longcat_plugins.schedulers.core.config import DoraConfig

        return DoraConfig.from_mapping(
            {
                "staleness": self.staleness,
                "batch_size": batch_size,
                "domain_ratios": dict(self.domain_ratios),
                "domain_tolerance": float(self.domain_tolerance),
                "load_ratio_capacity": self.load_ratio_capacity,
                "filter_all_correct": self.filter_all_correct,
                "filter_all_wrong": self.filter_all_wrong,
                "correct_threshold": float(self.correct_threshold),
                "wrong_threshold": float(self.wrong_threshold),
                "cap_before_rebalance": self.cap_before_rebalance,
                "cap_after_rebalance": self.cap_after_rebalance,
                "rebalance_threshold": self.rebalance_threshold,
                "domain_oversampling": dict(self.domain_oversampling),
                "oversampling_min": self.oversampling_min,
                "oversampling_max": self.oversampling_max,
                "default_pass_rate": float(self.default_pass_rate),
                "pass_rate_momentum": float(self.pass_rate_momentum),
                "reuse_ratio": self.reuse_ratio,
                "replay_capacity": self.replay_capacity,
                "eviction": self.eviction,
                "balancer": self.balancer,
                "admission": self.admission,
                "admission_window": self.admission_window,
            },
            path=SETTINGS_PATH,
        )

    def dispatch_config(self, batch_size: int, window: int) -> Any:
        """The core's config for dispatch: quotas over ``window`` outstanding groups."""
        import dataclasses

        return dataclasses.replace(self.core_config(batch_size), max_outstanding_batches=window / batch_size)


def dora_settings() -> DoraSettings:
    """The enabled ``dora`` trainer's settings from the process-wide host (defaults if unset)."""
    from longcat_plugins.host import get_host

    return get_host().settings_for("scheduler", "dora")
