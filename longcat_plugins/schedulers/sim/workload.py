"""The simulated RL workload: prompts per domain, long-tailed response lengths, multi-turn
environment latency, pass rates.

Response length of one trajectory (tokens), per domain::

    L = min(max_len, body)            with probability 1 - tail_prob, body ~ LogNormal(ln median, sigma)
    L = min(max_len, tail)            with probability tail_prob,     tail ~ Pareto(tail_alpha) scaled to tail_min

a lognormal body with a Pareto tail clipped at the generation limit, the shape of the report's
"long-tailed, skewed" generation (most responses short, a few hitting the 64K limit). An agentic
domain splits the trajectory into ``turns`` decode segments separated by environment calls whose
latency is LogNormal(ln env_latency_s, env_sigma). Each prompt has a pass rate drawn from
Beta(pass_alpha, pass_beta); a sample's reward is Bernoulli(pass rate).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from longcat_plugins.bounds import bounded, check_bounds
from longcat_plugins.schedulers.core.types import PromptRef


@dataclass(frozen=True)
class DomainSpec:
    """One data domain of the simulated workload (see the module docstring for the formulas)."""

    share: float = bounded(1.0, gt=0)
    median_tokens: float = bounded(3000.0, gt=0)
    sigma: float = 0.7
    tail_prob: float = 0.08
    tail_min: float = 12000.0
    tail_alpha: float = 1.2
    turns: int = bounded(1, ge=1)
    env_latency_s: float = 0.0
    env_sigma: float = 0.8
    pass_alpha: float = 1.0
    pass_beta: float = 1.0
    prompt_tokens: int = 1000


@dataclass(frozen=True)
class Trajectory:
    """Decode segments (tokens) and the environment waits (s) between them."""

    segments: tuple[int, ...]
    env_waits: tuple[float, ...]
    prompt_tokens: int

    @property
    def tokens(self) -> int:
        return sum(self.segments)


@dataclass
class Workload:
    """Prompts and the distributions their trajectories are drawn from."""

    domains: dict[str, DomainSpec] = field(default_factory=lambda: {"default": DomainSpec()})
    prompts: int = 1024
    max_len: int = 65536
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.domains:
            raise ValueError("Workload.domains must name at least one domain")
        for name, d in self.domains.items():
            check_bounds(d, f"Workload.domains.{name}.")
        rng = random.Random(self.seed)
        total = sum(d.share for d in self.domains.values())
        names = sorted(self.domains)
        self.refs: list[PromptRef] = []
        self.pass_rate: dict[str, float] = {}
        counts = {n: max(1, round(self.prompts * self.domains[n].share / total)) for n in names}
        for name in names:
            spec = self.domains[name]
            for i in range(counts[name]):
                uid = f"{name}-{i}"
                self.pass_rate[uid] = rng.betavariate(spec.pass_alpha, spec.pass_beta)
                self.refs.append(PromptRef(uid, name, None))

    def draw(self, domain: str, rng: random.Random) -> Trajectory:
        """One trajectory of ``domain``."""
        d = self.domains[domain]
        if rng.random() < d.tail_prob:
            length = d.tail_min / (1.0 - rng.random()) ** (1.0 / d.tail_alpha)
        else:
            length = math.exp(rng.gauss(math.log(d.median_tokens), d.sigma))
        length = int(max(16, min(self.max_len, length)))
        cuts = sorted(rng.randrange(1, length) for _ in range(d.turns - 1)) if length > d.turns else []
        bounds = [0, *cuts, length]
        segments = tuple(max(1, b - a) for a, b in zip(bounds, bounds[1:], strict=False))
        waits = tuple(
            math.exp(rng.gauss(math.log(d.env_latency_s), d.env_sigma)) if d.env_latency_s > 0 else 0.0
            for _ in range(len(segments) - 1)
        )
        return Trajectory(segments, waits, d.prompt_tokens)

    def reward(self, uid: str, rng: random.Random) -> float:
        return float(rng.random() < self.pass_rate[uid])


def long_tail_workload(seed: int = 0, prompts: int = 2048, tail_prob: float = 0.08) -> Workload:
    """A report-like mix: math (long-tailed reasoning), code, and an agentic tool-use domain
    with multi-turn environment latency (slower, so it gets a larger rollout quota)."""
    return Workload(
        domains={
            "math": DomainSpec(share=0.4, median_tokens=4000, tail_prob=tail_prob, pass_alpha=1.2, pass_beta=1.0),
            "code": DomainSpec(share=0.3, median_tokens=3000, tail_prob=tail_prob, pass_alpha=1.0, pass_beta=1.2),
            "agent": DomainSpec(
                share=0.3, median_tokens=2500, tail_prob=tail_prob / 2, turns=6, env_latency_s=4.0, prompt_tokens=3000
            ),
        },
        prompts=prompts,
        seed=seed,
    )


def constant_workload(seed: int = 0, prompts: int = 1024, tokens: int = 4000) -> Workload:
    """Every response exactly ``tokens`` long, no environment: no long tail at all."""
    return Workload(
        domains={"default": DomainSpec(median_tokens=tokens, sigma=0.0, tail_prob=0.0)}, prompts=prompts, seed=seed
    )
