"""The step planner: what each data strategy decides, composed, over the shared task statistics.

It is the one seam every planning trainer calls (``longcat_data`` once per step, ``dora`` per
chunk of freed capacity through :meth:`DataPlanner.plan`'s ``prompts`` and ``streaming``); the
plugins' strategies (:class:`~longcat_plugins.data.strategy.PlanningStrategy`) run in it after
the built-in ones.

:meth:`DataPlanner.plan` turns a pool of candidate prompts into prompt rows for verl's agent
loop: which tasks (D3 curriculum order, S4 per-domain rollout quotas), how many rollouts each
(D4 budget allocation, else uniform ``rollout.n``), split into how many independently normalised
groups (D5/A5), with which response budget (D6). :meth:`DataPlanner.choose` picks the trained
batch from the finished groups (S4 balance, D2 replay). :meth:`DataPlanner.observe` folds the
trained groups' rewards and lengths back into :class:`~longcat_plugins.data.stats.TaskStats`,
the curriculum and the context budget. Everything it decides is a ``longcat/data/*`` metric,
and its whole state is plain JSON (:meth:`state_dict`), so a resumed run plans sample for sample
what an uninterrupted one would.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from longcat_plugins.data.budget import greedy_allocate, spend_remainder, value_function
from longcat_plugins.data.context import ContextCurriculum
from longcat_plugins.data.curriculum import TwoAxisCurriculum
from longcat_plugins.data.oversampling import group_sizes, oversampling_coefficient, plan_groups
from longcat_plugins.data.replay import BatchChoice, GroupRef, ReplayBuffer, choose_batch
from longcat_plugins.data.settings import DataSettings
from longcat_plugins.data.stats import TaskStats
from longcat_plugins.data.strategy import Candidate, GroupResult, PlanningStrategy, RowPlan  # noqa: F401 (re-exported)

PREFIX = "longcat/data"


class DataPlanner:
    """Plans the prompts of each step and learns from the trained groups."""

    def __init__(
        self,
        settings: DataSettings,
        batch_prompts: int,
        rollout_n: int,
        seed: int = 0,
        strategies: Sequence[PlanningStrategy] = (),
    ) -> None:
        self.settings = settings
        #: the plugins' strategies (``settings.strategies``), run after the built-in ones
        self.strategies = list(strategies)
        self.batch_prompts = batch_prompts
        self.rollout_n = rollout_n
        self.stats = TaskStats(settings.prior_pass_rate, settings.momentum)
        cur = settings.curriculum
        self.curriculum = TwoAxisCurriculum(cur.stages, cur.floors, cur.advance_at, cur.window) if cur.enable else None
        ctx = settings.context
        self.context = ContextCurriculum(ctx.budgets, ctx.near, ctx.percentile) if ctx.enable else None
        self.rng = random.Random(seed)
        self.replay: ReplayBuffer[GroupRef] | None = (
            ReplayBuffer(settings.replay.capacity, self.rng) if settings.replay.enable else None
        )
        self.rollout_tokens = 0
        self.steps = 0
        #: streaming D4: (task, historical rate) of the tasks planned most recently, oldest first
        #: (at most ``batch_prompts - 1``), the rest of the step a chunk is allocated against
        self.window: list[tuple[str, float | None]] = []
        #: streaming D4's ledger: rollouts allocated minus the budget share of the prompts
        #: planned, in units of 1 / ``batch_prompts`` rollout (exact integers)
        self.ledger = 0
        #: the most the ledger may owe or be owed, in rollouts: a step's ``batch_prompts``
        #: prompts then spend the budget within ``2 × carry_limit = n_max`` rollouts
        self.carry_limit = settings.budget.n_max / 2

    # -- the budget ----------------------------------------------------------------------------

    @property
    def budget(self) -> int:
        """Rollouts per step: D4's ``budget``, else ``batch_prompts × rollout.n`` (uniform n)."""
        return self.settings.budget.budget or self.batch_prompts * self.rollout_n

    def context_budget(self) -> int | None:
        """The D6 response budget of requests started now (``None``: the rollout's ceiling)."""
        return self.context.max_tokens if self.context is not None else None

    def quotas(self, batch_groups: int) -> Any:
        """The core's ``DomainQuotas`` for a trained batch of ``batch_groups`` groups."""
        from longcat_plugins.schedulers.core.config import DoraConfig
        from longcat_plugins.schedulers.core.quotas import DomainQuotas

        q = self.settings.quotas
        config = DoraConfig.from_mapping(
            {
                "batch_size": max(1, batch_groups),
                "domain_ratios": dict(q.domain_ratios),
                "domain_tolerance": float(q.tolerance),
                "domain_oversampling": dict(q.domain_oversampling),
            },
            path="longcat.settings.scheduler.longcat_data.quotas",
        )
        return DomainQuotas(config, q.domain_ratios)

    # -- planning ------------------------------------------------------------------------------

    def order(self, candidates: Sequence[Candidate], prompts: int | None = None) -> tuple[list[int], dict[str, float]]:
        """Candidate indices in the order to start them: the D3 curriculum, then each plugin
        strategy's ``order``. ``prompts``: how many will be started (for the metrics)."""
        prompts = self.batch_prompts if prompts is None else prompts
        metrics: dict[str, float] = {}
        rates = [self.stats.pass_rate(c.task, c.historical) for c in candidates]
        order = list(range(len(candidates)))
        if self.curriculum is not None:
            order, n_open = self.curriculum.order([c.stage for c in candidates], rates)
            metrics[f"{PREFIX}/curriculum/stage"] = float(self.curriculum.stage)
            metrics[f"{PREFIX}/curriculum/level"] = float(self.curriculum.level)
            metrics[f"{PREFIX}/curriculum/floor"] = self.curriculum.floors[self.curriculum.level]
            metrics[f"{PREFIX}/curriculum/open_candidates"] = float(n_open)
            metrics[f"{PREFIX}/curriculum/filled_not_open"] = float(max(0, min(prompts, len(order)) - n_open))
        for strategy in self.strategies:
            reordered = list(strategy.order(candidates, rates, list(order)))
            if not set(reordered) <= set(order) or len(set(reordered)) != len(reordered):
                raise ValueError(
                    f"data strategy {strategy.name!r}: order() must return a subset of the candidate indices it "
                    f"was given, each once; got {reordered[:8]}"
                )
            order = reordered
        return order, metrics

    def plan(
        self,
        candidates: Sequence[Candidate],
        prompts: int | None = None,
        budget: int | None = None,
        *,
        streaming: bool = False,
    ) -> tuple[list[RowPlan], dict[str, float]]:
        """Rows to submit, and the decisions as metrics: for a whole step (``longcat_data``), or,
        with ``prompts`` and ``budget``, for a part of one. ``streaming``: the ``prompts`` a
        streaming trainer starts now, one chunk of a step it plans in chunks; D4 then allocates
        against the step's recent tasks and keeps a ledger (:meth:`_stream_allocate`), and the
        other strategies get the chunk's share of the budget, ``budget × prompts / batch_prompts``."""
        s = self.settings
        if streaming and budget is not None:
            raise ValueError("plan(streaming=True) derives the chunk's budget itself; pass no budget")
        prompts = self.batch_prompts if prompts is None else prompts
        rates = [self.stats.pass_rate(c.task, c.historical) for c in candidates]
        order, metrics = self.order(candidates, prompts)
        if s.quotas.enable:
            chosen = self._quota_selection(candidates, order, metrics)
        else:
            chosen = order[:prompts]
        chosen_rates = [rates[i] for i in chosen]
        if streaming:
            budget = max(1, round(self.budget * prompts / self.batch_prompts))
        else:
            budget = self.budget if budget is None else budget
        budget_metric = float(budget)
        if s.budget.enable:
            b = s.budget
            if streaming:
                alloc = self._stream_allocate([candidates[i] for i in chosen], chosen_rates, metrics)
                budget_metric = self.budget * len(chosen) / self.batch_prompts
            else:
                if len(chosen) * b.n_min > budget:
                    chosen = chosen[: budget // b.n_min]
                    chosen_rates = chosen_rates[: len(chosen)]
                alloc = greedy_allocate(chosen_rates, budget, b.n_min, b.n_max, value_function(b.value))
                alloc = spend_remainder(alloc, budget, b.n_max)
            if s.oversampling.enable:
                o = s.oversampling
                splits = [
                    group_sizes(n, oversampling_coefficient(p, o.k_min, o.k_max), o.min_group)
                    for n, p in zip(alloc, chosen_rates, strict=True)
                ]
            else:
                splits = [[n] for n in alloc]
        elif s.oversampling.enable:
            o = s.oversampling
            g = o.group_size or self.rollout_n
            ks = plan_groups(chosen_rates, o.k_min, o.k_max, g, budget)
            splits = [[g] * k for k in ks]
        else:
            splits = [[self.rollout_n] for _ in chosen]
        max_tokens = self.context.max_tokens if self.context is not None else None
        rows = [
            RowPlan(i, candidates[i].task, candidates[i].domain, j, n, max_tokens)
            for i, sizes in zip(chosen, splits, strict=True)
            for j, n in enumerate(sizes)
            if n > 0
        ]
        for strategy in self.strategies:
            rows = [self._shaped(strategy, row) for row in rows]
        # what is submitted: the rows as the plugins shaped them
        totals: Counter[int] = Counter()
        for r in rows:
            totals[r.row] += r.rollouts
        per_task = list(totals.values())
        metrics.update(
            {
                f"{PREFIX}/plan/tasks": float(len(per_task)),
                f"{PREFIX}/plan/groups": float(len(rows)),
                f"{PREFIX}/plan/rollouts": float(sum(r.rollouts for r in rows)),
                f"{PREFIX}/plan/budget": budget_metric,
                f"{PREFIX}/plan/rollouts_per_task/max": float(max(per_task, default=0)),
                f"{PREFIX}/plan/rollouts_per_task/min": float(min(per_task, default=0)),
                f"{PREFIX}/plan/groups_per_task/max": float(max(Counter(r.row for r in rows).values(), default=0)),
                f"{PREFIX}/plan/pass_rate/mean": float(np.mean(chosen_rates)) if chosen_rates else 0.0,
                f"{PREFIX}/plan/tasks_seen_before": float(sum(self.stats.seen(candidates[i].task) for i in chosen)),
            }
        )
        if max_tokens is not None:
            metrics[f"{PREFIX}/context/max_tokens"] = float(max_tokens)
        return rows, metrics

    def _stream_allocate(self, chunk: Sequence[Candidate], rates: list[float], metrics: dict[str, float]) -> list[int]:
        """D4 for one chunk of a streamed step: rollouts per chunk task, as if the whole step's
        tasks competed for the step's budget (report Eq. 2's batch-wide greedy), not only the
        chunk's (a one-prompt chunk's own share is exactly ``rollout.n`` whatever its rate).

        The step's other tasks are not known yet, so the tasks planned most recently stand in for
        them: the pool is the chunk followed by the last ``batch_prompts - len(chunk)`` of
        :attr:`window`, each at its current pass rate, and the greedy (with
        :func:`spend_remainder`, as a whole step) spends the pool's share of the budget less the
        ledger's carry (what was allocated beyond the share of the prompts planned so far). The
        chunk takes its part: in the price view of the greedy, the window sets the marginal gain
        a rollout must beat, and the carry raises or lowers that price. When the window holds
        exactly the rest of the step (in the step's order) and the carry is zero at its start,
        the pool is what is left of the step and its budget what the step's allocation has left;
        the whole-step greedy's choices among those tasks are the top marginal gains among them
        (and :func:`spend_remainder`'s round robin lands the same), so each chunk gets its
        whole-step allocation.

        A streamed step cannot take rollouts back, so the carry is bounded: the chunk's total is
        kept where the carry stays within ``±carry_limit`` (``n_max / 2``: any ``batch_prompts``
        prompts planned in whole chunks spend the budget within ``n_max``), redistributing the
        chunk's total by the greedy over the chunk alone. This bound is the one place the streamed
        allocation may differ from the whole-step one above. Per-task bounds ``n_min``..``n_max``
        always hold; with a budget outside ``batch_prompts × [n_min, n_max]`` they win over the
        ledger, which then stays at its bound."""
        b = self.settings.budget
        value = value_function(b.value)
        per_step, prompts, k = self.budget, self.batch_prompts, len(chunk)
        bound = math.floor(self.carry_limit * prompts)
        room = max(0, prompts - k)
        window = self.window[max(0, len(self.window) - room) :] if room else []
        pool_rates = rates + [self.stats.pass_rate(task, historical) for task, historical in window]
        size = len(pool_rates)
        # the pool's share of the step's budget less the carry, rounded half up (units: 1 / prompts)
        pool_budget = (2 * (per_step * size - self.ledger) + prompts) // (2 * prompts)
        pool_budget = min(max(pool_budget, size * b.n_min), size * b.n_max)
        alloc = greedy_allocate(pool_rates, pool_budget, b.n_min, b.n_max, value)
        alloc = spend_remainder(alloc, pool_budget, b.n_max)[:k]
        # the ledger bound: this chunk's share, less the carry, within ±bound
        share = per_step * k
        low = -((self.ledger + bound - share) // prompts)  # ceil((share - ledger - bound) / prompts)
        high = (share - self.ledger + bound) // prompts
        total = min(max(sum(alloc), low), high)
        total = min(max(total, k * b.n_min), k * b.n_max)
        if total != sum(alloc):
            alloc = spend_remainder(greedy_allocate(rates, total, b.n_min, b.n_max, value), total, b.n_max)
        self.ledger = min(max(self.ledger + prompts * total - share, -bound), bound)
        self.window = (self.window + [(c.task, c.historical) for c in chunk])[-(prompts - 1) :] if prompts > 1 else []
        metrics[f"{PREFIX}/plan/window_tasks"] = float(len(window))
        metrics[f"{PREFIX}/plan/carry"] = self.ledger / prompts
        return alloc

    @staticmethod
    def _shaped(strategy: PlanningStrategy, row: RowPlan) -> RowPlan:
        out = strategy.shape(row)
        if not isinstance(out, RowPlan) or (out.row, out.task, out.group) != (row.row, row.task, row.group):
            raise ValueError(
                f"data strategy {strategy.name!r}: shape() must return the RowPlan it was given with only "
                f"rollouts / max_tokens changed; got {out!r} for {row!r}"
            )
        if out.rollouts < 1:
            raise ValueError(f"data strategy {strategy.name!r}: shape() gave {out.task!r} {out.rollouts} rollouts")
        return out

    def _quota_selection(
        self, candidates: Sequence[Candidate], order: list[int], metrics: dict[str, float]
    ) -> list[int]:
        """S4 at generation time: each domain may start ``ceil(share × prompts × oversampling)``
        prompts this step (slow or rare domains more than their share of the trained batch)."""
        q = self.settings.quotas
        unknown = sorted({candidates[i].domain for i in order} - set(q.domain_ratios))
        if unknown:
            raise ValueError(
                f"longcat.settings.scheduler.longcat_data.quotas.domain_ratios has no share for domain(s) {unknown} "
                f"(read from the row field {q.domain_key!r}); it names {sorted(q.domain_ratios)}"
            )
        quota = {
            d: math.ceil(share * self.batch_prompts * q.domain_oversampling.get(d, 1.0) - 1e-9)
            for d, share in q.domain_ratios.items()
        }
        taken: Counter[str] = Counter()
        chosen = []
        for i in order:
            d = candidates[i].domain
            if taken[d] < quota[d]:
                chosen.append(i)
                taken[d] += 1
        for d in sorted(quota):
            metrics[f"{PREFIX}/quotas/{d}/rollout_quota"] = float(quota[d])
            metrics[f"{PREFIX}/quotas/{d}/prompts_started"] = float(taken[d])
        return chosen

    # -- the trained batch ---------------------------------------------------------------------

    def choose(self, fresh: list[GroupRef], step: int) -> tuple[BatchChoice, dict[str, float]]:
        """The trained batch among this step's finished groups (and the replay buffer)."""
        s = self.settings
        size = len(fresh)
        quotas = None
        if s.quotas.enable:
            size = min(len(fresh), self._trained_groups(fresh))
            quotas = self.quotas(size)
        choice = choose_batch(
            fresh, size, step, self.replay, s.replay.reuse_ratio, s.replay.staleness, quotas, self.rng
        )
        metrics = {
            f"{PREFIX}/batch/groups": float(len(choice.train)),
            f"{PREFIX}/batch/surplus_groups": float(len(fresh) - (len(choice.train) - len(choice.replayed))),
        }
        if self.replay is not None:
            metrics[f"{PREFIX}/replay/reused_groups"] = float(len(choice.replayed))
            metrics[f"{PREFIX}/replay/buffered_groups"] = float(len(self.replay))
            metrics[f"{PREFIX}/replay/dropped_groups"] = float(len(choice.dropped))
            metrics[f"{PREFIX}/replay/staleness/max"] = float(max((step - g.step for g in choice.replayed), default=0))
        if quotas is not None:
            counts = Counter(g.domain for g in choice.train)
            total = max(1, sum(counts.values()))
            for d in sorted(quotas.shares):
                metrics[f"{PREFIX}/quotas/{d}/trained_groups"] = float(counts[d])
            metrics[f"{PREFIX}/quotas/max_share_error"] = float(
                max(abs(counts[d] / total - quotas.shares[d]) for d in quotas.shares)
            )
        return choice, metrics

    def _trained_groups(self, fresh: list[GroupRef]) -> int:
        """Groups a quota-balanced batch holds: the groups of ``batch_prompts`` prompts at the
        step's mean groups per prompt (the rest of what the quotas started is surplus)."""
        prompts = len({(g.task, g.step) for g in fresh}) or 1
        return max(1, round(len(fresh) * min(1.0, self.batch_prompts / prompts)))

    # -- learning from the trained groups ------------------------------------------------------

    def observe(
        self,
        groups: Sequence[GroupResult],
        historical: Mapping[str, float] | None = None,
        filtered: Sequence[GroupResult] = (),
    ) -> dict[str, float]:
        """Fold the trained groups in (sorted, so the order TransferQueue returns them in does not
        matter). ``filtered``: groups online filtering dropped untrained; they move their tasks'
        pass rates only (not the step's accuracy, curriculum, lengths or strategies, which
        describe what was trained)."""
        s = self.settings
        historical = historical or {}
        for g in sorted(filtered, key=lambda g: (g.task, g.group)):
            self.stats.observe(g.task, g.rewards, s.correct_threshold, historical.get(g.task))
        ordered = sorted(groups, key=lambda g: (g.task, g.group, g.replayed))
        accs, zero_var, lengths = [], 0, []
        for g in ordered:
            valid = [r for r in g.rewards if r is not None]
            if len(valid) > 1 and max(valid) == min(valid):
                zero_var += 1
            lengths += g.lengths
            if g.replayed:
                continue  # its task's rate already counted these rewards when they were fresh
            acc = self.stats.observe(g.task, g.rewards, s.correct_threshold, historical.get(g.task))
            if acc is not None:
                accs.extend([r >= s.correct_threshold for r in valid])
        accuracy = float(np.mean(accs)) if accs else None
        metrics: dict[str, float] = {
            f"{PREFIX}/zero_variance_group_frac": zero_var / len(ordered) if ordered else 0.0,
            f"{PREFIX}/trained_groups": float(len(ordered)),
            f"{PREFIX}/filtered_groups_observed": float(len(filtered)),
            f"{PREFIX}/trained_samples": float(sum(len(g.rewards) for g in ordered)),
        }
        fresh_tokens = sum(sum(g.lengths) for g in ordered if not g.replayed)
        self.rollout_tokens += fresh_tokens
        metrics[f"{PREFIX}/rollout_tokens"] = float(fresh_tokens)
        metrics[f"{PREFIX}/rollout_tokens/total"] = float(self.rollout_tokens)
        if accuracy is not None:
            metrics[f"{PREFIX}/batch_accuracy"] = accuracy
            metrics[f"{PREFIX}/live_pass_rate"] = self.stats.observe_batch(accuracy)
            if self.curriculum is not None:
                metrics[f"{PREFIX}/curriculum/advanced"] = float(self.curriculum.observe(accuracy))
        if self.context is not None and lengths:
            raised = self.context.observe(lengths)
            metrics[f"{PREFIX}/context/p{self.context.percentile:g}_length"] = float(
                self.context.last_percentile or 0.0
            )
            metrics[f"{PREFIX}/context/raised"] = float(raised)
        metrics[f"{PREFIX}/tasks_tracked"] = float(len(self.stats.rates.rates))
        for strategy in self.strategies:
            for key, value in strategy.observe(ordered).items():
                metrics[f"{PREFIX}/{strategy.name}/{key}"] = float(value)
        self.steps += 1
        return metrics

    # -- checkpoint ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss = self.rng.getstate()
        return {
            "stats": self.stats.state_dict(),
            "curriculum": self.curriculum.state_dict() if self.curriculum is not None else None,
            "context": self.context.state_dict() if self.context is not None else None,
            "replay": self.replay.state_dict(lambda g: g.__dict__) if self.replay is not None else None,
            "rng": [version, list(internal), gauss],
            "rollout_tokens": self.rollout_tokens,
            "steps": self.steps,
            "strategies": {strategy.name: strategy.state_dict() for strategy in self.strategies},
            "stream_window": [[task, historical] for task, historical in self.window],
            "stream_carry": self.ledger / self.batch_prompts,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.stats.load_state_dict(state["stats"])
        if self.curriculum is not None and state.get("curriculum") is not None:
            self.curriculum.load_state_dict(state["curriculum"])
        if self.context is not None and state.get("context") is not None:
            self.context.load_state_dict(state["context"])
        if self.replay is not None and state.get("replay") is not None:
            self.replay.load_state_dict(state["replay"], lambda d: GroupRef(**d))  # type: ignore[arg-type]
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.rollout_tokens = int(state["rollout_tokens"])
        self.steps = int(state["steps"])
        # states saved before streaming D4 had no window and no carry
        self.window = [
            (str(task), None if historical is None else float(historical))
            for task, historical in state.get("stream_window", [])
        ]
        self.ledger = round(float(state.get("stream_carry", 0.0)) * self.batch_prompts)
        saved = state.get("strategies", {})
        for strategy in self.strategies:
            if strategy.name in saved:
                strategy.load_state_dict(saved[strategy.name])
