"""Dynamic rollout-budget allocation (D4, 2601 report §3.3.1, Eq. 2).

The report maps each task and the live training metrics to a value, v_{i,t} = V(τ_i | π_θt, m_t),
and "employ[s] a heap-based greedy algorithm to compute the rollout allocation that maximizes the
aggregate learning value of the current training batch". It does not publish V, so two are
offered, both functions of the number of rollouts N a task gets and its live pass rate p
(:mod:`.stats`):

- ``informative`` (default): V(N, p) = 1 − p^N − (1 − p)^N, the probability that a group of N
  rollouts is not all right or all wrong, i.e. that GRPO gets a non-zero advantage from it.
- ``knapsack``: Knapsack-RL (Li et al., arXiv 2509.25849) Value(N, p) = [1 − p^N − (1 − p)^N] ·
  p(1 − p)², the same probability weighted by the expected gradient size of a task at p.

Both are concave in N for N ≥ 1 (the marginal gain p^N(1 − p) + (1 − p)^N p falls with N), so
the greedy on marginal gains returns an optimal allocation whenever every task starts at
``n_min ≥ 1``; Knapsack-RL solves the same problem by dynamic programming (tests compare the two).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

#: a value function: (rollouts N, pass rate p) -> learning value
ValueFn = Callable[[int, float], float]


def informative_value(n: int, p: float) -> float:
    """Probability that ``n`` rollouts of a task with pass rate ``p`` are not all equal."""
    if n <= 0:
        return 0.0
    return 1.0 - p**n - (1.0 - p) ** n


def knapsack_value(n: int, p: float) -> float:
    """Knapsack-RL's value: ``[1 - p^n - (1 - p)^n] * p * (1 - p)^2``."""
    return informative_value(n, p) * p * (1.0 - p) ** 2


VALUE_FUNCTIONS: dict[str, ValueFn] = {"informative": informative_value, "knapsack": knapsack_value}


def value_function(name: str) -> ValueFn:
    """The value function called ``name``; a ``ValueError`` listing the choices otherwise."""
    try:
        return VALUE_FUNCTIONS[name]
    except KeyError:
        raise ValueError(f"unknown value function {name!r}; choices: {', '.join(VALUE_FUNCTIONS)}") from None


def greedy_allocate(pass_rates: Sequence[float], budget: int, n_min: int, n_max: int, value: ValueFn) -> list[int]:
    """Rollouts per task maximising ``sum_i value(N_i, p_i)`` with ``n_min <= N_i <= n_max`` and
    ``sum_i N_i <= budget``: every task starts at ``n_min``, then a max-heap of marginal gains
    hands out one rollout at a time to the task that gains most (ties: lower index), while a
    positive gain and budget remain. Optimal when ``value`` is concave in N from ``n_min`` on."""
    tasks = len(pass_rates)
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if not 0 <= n_min <= n_max:
        raise ValueError(f"need 0 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    if n_min * tasks > budget:
        raise ValueError(f"budget {budget} cannot give {tasks} tasks n_min={n_min} rollouts each")
    alloc = [n_min] * tasks
    left = budget - n_min * tasks
    heap = [(-(value(n_min + 1, p) - value(n_min, p)), i) for i, p in enumerate(pass_rates) if n_min < n_max]
    heapq.heapify(heap)
    while left > 0 and heap:
        neg_gain, i = heapq.heappop(heap)
        if -neg_gain <= 0.0:
            break
        alloc[i] += 1
        left -= 1
        if alloc[i] < n_max:
            p = pass_rates[i]
            heapq.heappush(heap, (-(value(alloc[i] + 1, p) - value(alloc[i], p)), i))
    return alloc


def spend_remainder(alloc: list[int], budget: int, n_max: int) -> list[int]:
    """Give rollouts the value function left unspent (tasks at p = 0 or 1 gain nothing) round
    robin to tasks below ``n_max``, so every allocation spends the same budget as uniform n."""
    out = list(alloc)
    left = budget - sum(out)
    i = 0
    while left > 0 and any(n < n_max for n in out):
        if out[i % len(out)] < n_max:
            out[i % len(out)] += 1
            left -= 1
        i += 1
    return out
