"""The knobs of environment construction (:mod:`.generate`), in a module light enough for the CLI
to build its ``envgen`` options from without importing the generator."""

from __future__ import annotations

from dataclasses import dataclass

from longcat_plugins.bounds import bounded, out_of_bounds


@dataclass(frozen=True)
class GenConfig:
    """Knobs of environment construction (defaults used for the shipped domains)."""

    min_chain: int = bounded(3, ge=1)
    max_chain: int = bounded(6, ge=1)
    #: a tool used u times more than the least-used candidate is weighted reuse_decay ** u
    reuse_decay: float = bounded(0.7, gt=0, le=1)
    #: BFS expansion adds between these many tools per seed chain
    expand_min: int = bounded(4, ge=0)
    expand_max: int = bounded(12, ge=0)
    min_tools: int = bounded(20, ge=1)
    #: growth threshold: another seed chain when f(...) > tau
    tau: float = bounded(0.25, ge=0, lt=1)
    #: K in c(E) = |V| (1 + density) / K
    size_ref: int = bounded(48, ge=1)
    #: A: chain-sampling attempts (g is the number needed, A when none is found)
    max_attempts: int = bounded(16, ge=1)
    max_seeds: int = bounded(4, ge=1)
    filler_per_entity: int = bounded(2, ge=0)
    #: > 0: stated strings (codes, emails, phones, names, ...) come from a fixed pool of this many
    #: per kind, shared by every seed (:func:`~longcat_plugins.environments.values.value_pool`)
    value_pool: int = 0

    def problems(self) -> list[str]:
        """Every inconsistent knob, each message starting with the knob's name."""
        out = [f"{name}: must be {must} (got {value})" for name, must, value in out_of_bounds(self)]
        if self.value_pool < 0 or 0 < self.value_pool < 20:
            out.append(f"value_pool: must be 0 (off) or >= 20 (got {self.value_pool})")
        if self.max_chain < self.min_chain:
            out.append(f"max_chain: {self.max_chain} < min_chain {self.min_chain}")
        if self.expand_max < self.expand_min:
            out.append(f"expand_max: {self.expand_max} < expand_min {self.expand_min}")
        return out
