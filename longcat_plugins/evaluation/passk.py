"""Unbiased pass@k, pass^k and avg@k from n samples per prompt, c of them correct (SPEC V1).

With n samples of which c are correct, and k <= n:

* pass@k = 1 - C(n-c, k) / C(n, k): probability that at least one of k samples drawn without
  replacement is correct (Chen et al. 2021, the Codex paper);
* pass^k = C(c, k) / C(n, k): probability that all k are correct (tau2-bench's form);
* avg@k = c / n: the expected mean correctness of k samples (the same for every k; named per k
  so reports line up with pass@k).

The binomials are never formed: both ratios are products of k (or c) factors in (0, 1], so they
stay accurate for n in the thousands where C(n, k) overflows a float. verl 0.9 reports only
best@N / maj@N by bootstrap; these are the exact unbiased values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "pass_at_k",
    "pass_hat_k",
    "avg_at_k",
    "default_ks",
    "parse_ks",
    "estimate",
]


def _check(n: int, c: int, k: int) -> None:
    """Reject what the formulas do not define, naming the value at fault."""
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {v!r}")
    if n < 1:
        raise ValueError(f"n (samples per prompt) must be >= 1, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"c (correct samples) must be in [0, n], got c={c}, n={n}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got k={k}")
    if k > n:
        raise ValueError(f"k={k} is larger than n={n}: pass@k needs at least k samples per prompt")


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k)/C(n, k) as 1 - prod_{i=n-c+1}^{n} (1 - k/i); 1.0 when n - c < k."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k)/C(n, k) as prod_{i=0}^{k-1} (c-i)/(n-i); 0.0 when c < k."""
    _check(n, c, k)
    if c < k:
        return 0.0
    prod = 1.0
    for i in range(k):
        prod *= (c - i) / (n - i)
    return prod


def avg_at_k(n: int, c: int, k: int) -> float:
    """c / n: the unbiased mean correctness of k of the n samples (k is checked, not used)."""
    _check(n, c, k)
    return c / n


def default_ks(n: int) -> list[int]:
    """Powers of two up to n (1, 2, 4, ...), plus n itself if it is not one."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (samples per prompt) must be an int >= 1, got {n!r}")
    ks = [1 << i for i in range(n.bit_length()) if (1 << i) <= n]
    if ks[-1] != n:
        ks.append(n)
    return ks


def parse_ks(spec: str | Iterable[int], n: int, *, what: str = "k") -> list[int]:
    """``"1,4,16"`` (or a list of ints) -> sorted unique ks, each checked against n; ``what``
    names the option or key in the error."""
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
        try:
            ks = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"{what}: expected comma-separated integers, got {spec!r}") from None
    else:
        ks = list(spec)
        if any(isinstance(k, bool) or not isinstance(k, int) for k in ks):
            raise ValueError(f"{what}: expected integers, got {ks!r}")
    if not ks:
        raise ValueError(f"{what}: no k given")
    for k in ks:
        if k < 1:
            raise ValueError(f"{what}: k must be >= 1, got {k}")
        if k > n:
            raise ValueError(f"{what}: k={k} is larger than n={n} samples per prompt")
    return sorted(set(ks))


def estimate(correct: Sequence[Sequence[bool]], ks: Iterable[int]) -> dict[str, float]:
    """Mean over prompts of pass@k, pass^k and avg@k; ``correct[p]`` are prompt p's samples.

    Keys: ``pass@k``, ``pass^k``, ``avg@k`` for each k. Every prompt must have at least max(ks)
    samples (prompts may differ in n); the error names the first prompt that does not.
    """
    ks = list(ks)
    if not correct:
        raise ValueError("no prompts to estimate pass@k from")
    sums: dict[str, float] = {}
    for p, samples in enumerate(correct):
        n, c = len(samples), sum(bool(s) for s in samples)
        for k in ks:
            if k > n:
                raise ValueError(f"k={k} is larger than n={n} (prompt {p} has only {n} samples)")
            for key, fn in ((f"pass@{k}", pass_at_k), (f"pass^{k}", pass_hat_k), (f"avg@{k}", avg_at_k)):
                sums[key] = sums.get(key, 0.0) + fn(n, c, k)
    return {key: v / len(correct) for key, v in sums.items()}
