"""Noise curriculum (E3, report §3.3.3): start mild, raise the noise level once the policy is robust.

Robustness at level L is the gap ``clean success - success at L`` on the same task pool, each side
tracked as a bias-corrected exponential moving average. The level rises (by one) when both sides
have at least ``min_samples`` outcomes at the current level, the gap is below ``gap_threshold``
and clean success is at least ``min_clean_success``; otherwise it holds. A fraction
``clean_fraction`` of episodes stays clean so the clean side keeps being measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from longcat_plugins.bounds import bounded, check_bounds
from longcat_plugins.environments.noise import CLEAN, NoiseConfig


@dataclass(frozen=True)
class CurriculumConfig:
    start_level: int = 1
    max_level: int = NoiseConfig.MAX_LEVEL
    #: raise the level when clean - noisy success is below this (a difference of two success rates)
    gap_threshold: float = bounded(0.05, ge=-1, le=1)
    #: EMA decay per outcome
    decay: float = bounded(0.95, gt=0, lt=1)
    #: outcomes needed on both sides at the current level before deciding
    min_samples: int = bounded(32, ge=1)
    #: share of episodes run clean (to keep measuring the clean side)
    clean_fraction: float = bounded(0.25, ge=0, le=1)
    #: raise only once clean success reaches this: a policy that fails clean episodes too has a
    #: closed gap without being robust (0: the gap alone decides)
    min_clean_success: float = bounded(0.0, ge=0, le=1)

    def __post_init__(self) -> None:
        if not 0 <= self.start_level <= self.max_level <= NoiseConfig.MAX_LEVEL:
            raise ValueError(f"need 0 <= start_level <= max_level <= {NoiseConfig.MAX_LEVEL}")
        check_bounds(self)


@dataclass
class _Ema:
    value: float = 0.0
    n: int = 0

    def add(self, x: float, decay: float) -> None:
        self.value = decay * self.value + (1 - decay) * x
        self.n += 1

    def mean(self, decay: float) -> float | None:
        return self.value / (1 - decay**self.n) if self.n else None


@dataclass
class NoiseCurriculum:
    """Tracks clean vs noisy success and decides the noise level episodes are built with."""

    config: CurriculumConfig = field(default_factory=CurriculumConfig)
    level: int = -1
    per_level: dict[int, _Ema] = field(default_factory=dict)
    raises: list[dict[str, Any]] = field(default_factory=list)
    seen: int = 0

    def __post_init__(self) -> None:
        if self.level < 0:
            self.level = self.config.start_level

    def noise_config(self) -> NoiseConfig:
        return NoiseConfig.at_level(self.level)

    def sample(self, u: float) -> NoiseConfig:
        """The noise for one episode given a uniform draw ``u``: clean with ``clean_fraction``."""
        return CLEAN if u < self.config.clean_fraction or self.level == 0 else self.noise_config()

    def success(self, level: int) -> float | None:
        ema = self.per_level.get(level)
        return ema.mean(self.config.decay) if ema else None

    def gap(self) -> float | None:
        clean, noisy = self.success(0), self.success(self.level)
        return None if clean is None or noisy is None else clean - noisy

    def update(self, noise_level: int, success: float) -> bool:
        """Record one episode outcome (success in [0, 1]) at ``noise_level``; True when the level rose."""
        self.seen += 1
        self.per_level.setdefault(int(noise_level), _Ema()).add(float(success), self.config.decay)
        cfg = self.config
        if self.level >= cfg.max_level or self.level == 0:
            return False
        clean, noisy = self.per_level.get(0), self.per_level.get(self.level)
        if clean is None or noisy is None or clean.n < cfg.min_samples or noisy.n < cfg.min_samples:
            return False
        gap = self.gap()
        assert gap is not None
        if gap >= cfg.gap_threshold or (clean.mean(cfg.decay) or 0.0) < cfg.min_clean_success:
            return False
        self.raises.append({"from": self.level, "to": self.level + 1, "gap": round(gap, 4), "at": self.seen})
        self.level += 1
        self.per_level.pop(self.level, None)  # the new level is measured from scratch
        return True

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {"noise/level": float(self.level), "noise/raises": float(len(self.raises))}
        for lvl, ema in sorted(self.per_level.items()):
            m = ema.mean(self.config.decay)
            if m is not None:
                out[f"noise/level_{lvl}/success"] = m
                out[f"noise/level_{lvl}/n"] = float(ema.n)
        gap = self.gap()
        if gap is not None:
            out["noise/robustness_gap"] = gap
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "level": self.level,
            "per_level": {str(k): [v.value, v.n] for k, v in self.per_level.items()},
            "raises": list(self.raises),
            "seen": self.seen,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.config = CurriculumConfig(**state["config"])
        self.level = int(state["level"])
        self.per_level = {int(k): _Ema(float(v[0]), int(v[1])) for k, v in state["per_level"].items()}
        self.raises = list(state["raises"])
        self.seen = int(state["seen"])
