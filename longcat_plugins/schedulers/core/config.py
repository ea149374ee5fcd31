"""``DoraConfig``: every knob of the DORA scheduler core, validated up front.

A bad value raises :class:`ConfigError` naming the field (and the key path it came from when
built with :meth:`DoraConfig.from_mapping`), never a silent default.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A DORA setting is wrong; the message names the field."""


@dataclass
class DoraConfig:
    """Settings of :class:`~longcat_plugins.schedulers.core.controller.DoraController`.

    Staleness of a sample = (version the trainer is about to update) - (version that generated
    it). ``staleness=0`` is on-policy; ``1`` allows one step off; instances hold up to
    ``staleness + 1`` live versions.
    """

    #: maximum staleness of a trained (non-replayed) sample, in policy versions (S1)
    staleness: int = 1
    #: groups per trained batch
    batch_size: int = 8
    #: samples per group (``rollout.n``)
    group_size: int = 4
    #: target share of each domain in a trained batch (normalised); empty: no balancing (S4)
    domain_ratios: dict[str, float] = field(default_factory=dict)
    #: largest allowed |share - target| per domain in a batch, as a fraction of the batch
    domain_tolerance: float = 0.125
    #: per-domain rollout quota multiplier (slow or rare domains > 1), default 1.0 (S4)
    domain_oversampling: dict[str, float] = field(default_factory=dict)
    #: outstanding (in flight + queued) groups allowed, in batches; None: ``staleness + 1``
    max_outstanding_batches: float | None = None
    #: while the trainer updates the newest version, at most this many batches' worth of new
    #: groups start on it (the 2601 report: "we limit new requests to the older model version
    #: to control average staleness at the expense of efficiency"); None: only the quotas limit
    old_version_start_limit: float | None = None
    #: per-instance in-flight request cap before the first rebalance of a step (S3)
    cap_before_rebalance: int = 8
    #: per-instance in-flight request cap after it (S3)
    cap_after_rebalance: int = 4
    #: rebalance when max - min load (as fractions of the cap) reaches this (S3)
    rebalance_threshold: float = 0.5
    #: balancer strategy name (see :mod:`.balancer`)
    balancer: str = "greedy"
    #: requests one device holds at max length without recomputation (report footnote: ~4)
    load_ratio_capacity: int = 4
    #: eviction policy name (see :mod:`.versions`)
    eviction: str = "staleness_window"
    #: admission policy name (see :mod:`.admission`): may a new request start on a version now
    admission: str = "none"
    #: later batches a version must have left in its window for a new request to start on it
    #: (``version_window``; ``length_aware`` for prompts with no history), in ``[1, staleness]``
    admission_window: int = 1
    #: drop groups whose samples are all correct (D1)
    filter_all_correct: bool = True
    #: drop groups whose samples are all wrong (D1)
    filter_all_wrong: bool = True
    #: reward >= this counts as correct
    correct_threshold: float = 1.0
    #: reward <= this counts as wrong
    wrong_threshold: float = 0.0
    #: smallest and largest oversampling coefficient k (D5); max 1 disables duplication
    oversampling_min: int = 1
    oversampling_max: int = 1
    #: pass rate assumed for a prompt with no history
    default_pass_rate: float = 0.5
    #: weight of a new group's accuracy in the running pass rate
    pass_rate_momentum: float = 0.5
    #: fraction of each batch taken from the replay buffer when it has enough groups (D2)
    reuse_ratio: float = 0.0
    #: replay buffer size in groups (oldest dropped first)
    replay_capacity: int = 64
    #: shuffle prompt order each epoch
    shuffle_prompts: bool = True

    def __post_init__(self) -> None:
        self.validate()

    # -- validation ------------------------------------------------------------------------------

    def validate(self, prefix: str = "DoraConfig") -> None:
        def fail(name: str, why: str) -> None:
            raise ConfigError(f"{prefix}.{name} {why}, got {getattr(self, name)!r}")

        def integer(name: str, low: int) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                fail(name, f"must be an integer >= {low}")

        def number(name: str, low: float, high: float = math.inf) -> None:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not (low <= value <= high):
                fail(name, f"must be a number in [{low}, {high}]")

        integer("staleness", 0)
        integer("batch_size", 1)
        integer("group_size", 1)
        integer("cap_before_rebalance", 1)
        integer("cap_after_rebalance", 1)
        integer("load_ratio_capacity", 1)
        integer("oversampling_min", 1)
        integer("oversampling_max", 1)
        integer("replay_capacity", 0)
        integer("admission_window", 1)
        if self.oversampling_max < self.oversampling_min:
            fail("oversampling_max", f"must be >= oversampling_min ({self.oversampling_min})")
        if self.cap_after_rebalance > self.cap_before_rebalance:
            fail("cap_after_rebalance", f"must be <= cap_before_rebalance ({self.cap_before_rebalance})")
        number("domain_tolerance", 0.0, 1.0)
        number("rebalance_threshold", 0.0, 1.0)
        number("default_pass_rate", 0.0, 1.0)
        number("pass_rate_momentum", 0.0, 1.0)
        number("reuse_ratio", 0.0, 1.0)
        number("correct_threshold", -math.inf)
        number("wrong_threshold", -math.inf)
        if self.max_outstanding_batches is not None:
            number("max_outstanding_batches", 1.0)
        if self.old_version_start_limit is not None:
            number("old_version_start_limit", 0.0)
        for name in ("domain_ratios", "domain_oversampling"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                fail(name, "must be a mapping of domain name to number")
            for domain, weight in value.items():
                if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight <= 0:
                    raise ConfigError(f"{prefix}.{name}.{domain} must be a number > 0, got {weight!r}")
        unknown = sorted(set(self.domain_oversampling) - set(self.domain_ratios)) if self.domain_ratios else []
        if unknown:
            raise ConfigError(
                f"{prefix}.domain_oversampling.{unknown[0]}: no such domain; domain_ratios names "
                f"{sorted(self.domain_ratios)}"
            )
        if self.reuse_ratio > 0 and self.replay_capacity == 0:
            fail("replay_capacity", "must be > 0 when reuse_ratio > 0")
        from longcat_plugins.schedulers.core.admission import admission_names
        from longcat_plugins.schedulers.core.balancer import balancer_names
        from longcat_plugins.schedulers.core.versions import eviction_policy_names

        if self.balancer not in (balancers := balancer_names()):
            fail("balancer", f"must be one of {balancers}")
        if self.eviction not in (policies := eviction_policy_names()):
            fail("eviction", f"must be one of {policies}")
        if self.admission not in (admissions := admission_names()):
            fail("admission", f"must be one of {admissions}")
        if self.admission != "none" and self.admission_window > self.staleness:
            fail(
                "admission_window",
                f"must be <= staleness ({self.staleness}): a version never has more later batches left in its "
                "window, so every request would be held for ever",
            )

    # -- derived ---------------------------------------------------------------------------------

    @property
    def outstanding_batches(self) -> float:
        """Outstanding groups allowed, in batches (default ``staleness + 1``)."""
        return float(self.staleness + 1) if self.max_outstanding_batches is None else self.max_outstanding_batches

    def target_shares(self, domains: list[str]) -> dict[str, float]:
        """Normalised target share per domain; uniform over ``domains`` when no ratios are set."""
        if not self.domain_ratios:
            return {d: 1.0 / len(domains) for d in domains} if domains else {}
        total = float(sum(self.domain_ratios.values()))
        return {d: w / total for d, w in self.domain_ratios.items()}

    # -- construction ----------------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None, path: str = "DoraConfig") -> DoraConfig:
        """Build from a config mapping (e.g. the ``longcat:`` YAML section); unknown keys and
        bad values raise :class:`ConfigError` naming ``path.key``."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {unknown}; known: {sorted(known)}")
        config = cls.__new__(cls)
        for f in dataclasses.fields(cls):
            if f.name in values:
                value = values[f.name]
                if f.name in ("domain_ratios", "domain_oversampling") and isinstance(value, Mapping):
                    value = dict(value)
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                value = f.default_factory()  # type: ignore[misc]
            else:
                value = f.default
            setattr(config, f.name, value)
        config.validate(prefix=path)
        return config
