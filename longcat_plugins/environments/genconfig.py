"""The knobs of environment construction (:mod:`.generate`), in a module light enough for the CLI
to build its ``envgen`` options from without importing the generator."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GenConfig:
    """Knobs of environment construction (defaults used for the shipped domains)."""

    min_chain: int = 3
    max_chain: int = 6
    #: a tool used u times more than the least-used candidate is weighted reuse_decay ** u
    reuse_decay: float = 0.7
    #: BFS expansion adds between these many tools per seed chain
    expand_min: int = 4
    expand_max: int = 12
    min_tools: int = 20
    #: growth threshold: another seed chain when f(...) > tau
    tau: float = 0.25
    #: K in c(E) = |V| (1 + density) / K
    size_ref: int = 48
    #: A: chain-sampling attempts (g is the number needed, A when none is found)
    max_attempts: int = 16
    max_seeds: int = 4
    filler_per_entity: int = 2
    #: > 0: stated strings (codes, emails, phones, names, ...) come from a fixed pool of this many
    #: per kind, shared by every seed (:func:`~longcat_plugins.environments.values.value_pool`)
    value_pool: int = 0

    def problems(self) -> list[str]:
        """Every inconsistent knob, each message starting with the knob's name."""
        out = []
        for name in ("min_chain", "max_chain", "min_tools", "size_ref", "max_attempts", "max_seeds"):
            if getattr(self, name) < 1:
                out.append(f"{name}: must be >= 1 (got {getattr(self, name)})")
        for name in ("expand_min", "expand_max", "filler_per_entity"):
            if getattr(self, name) < 0:
                out.append(f"{name}: must be >= 0 (got {getattr(self, name)})")
        if self.value_pool < 0 or 0 < self.value_pool < 20:
            out.append(f"value_pool: must be 0 (off) or >= 20 (got {self.value_pool})")
        if self.max_chain < self.min_chain:
            out.append(f"max_chain: {self.max_chain} < min_chain {self.min_chain}")
        if self.expand_max < self.expand_min:
            out.append(f"expand_max: {self.expand_max} < expand_min {self.expand_min}")
        if not 0 < self.reuse_decay <= 1:
            out.append(f"reuse_decay: must be in (0, 1] (got {self.reuse_decay})")
        if not 0 <= self.tau < 1:
            out.append(f"tau: must be in [0, 1) (got {self.tau})")
        return out
