"""Settings of the data strategies: ``longcat.settings.scheduler.longcat_data``.

One section configures every strategy of the step planner, which the ``longcat_data`` sync
trainer and the ``dora`` streaming trainer both run; each built-in strategy is a sub-section
with ``enable``, plugins' strategies are named in ``strategies``. Errors name the sub-key (``budget.value``, ``quotas.domain_ratios``)
after the section path the host prefixes, and stop a run before Ray starts (exit 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass

from longcat_plugins.data.budget import VALUE_FUNCTIONS

SETTINGS_PATH = "longcat.settings.scheduler.longcat_data"


def _fail(key: str, message: str) -> None:
    raise ValueError(f"{key}: {message}")


def _at_least(key: str, value: int, bound: int) -> None:
    """The setting at ``key`` must be at least ``bound``; a ValueError naming it otherwise."""
    if value < bound:
        _fail(key, f"must be >= {bound}, got {value}")


@dataclass(frozen=True)
class BudgetSettings:
    """D4: rollouts per task from a value function under a fixed rollout budget per step.

    Attributes:
        value: ``informative`` (P[group not all equal]) or ``knapsack`` (Knapsack-RL's value).
        budget: rollouts per step; 0 means ``data.train_batch_size × actor_rollout_ref.rollout.n``.
        n_min / n_max: rollouts a task of the step may get.
    """

    enable: bool = False
    value: str = "informative"
    budget: int = 0
    n_min: int = 2
    n_max: int = 16

    def __post_init__(self) -> None:
        if self.value not in VALUE_FUNCTIONS:
            _fail("budget.value", f"unknown value function {self.value!r}; choices: {', '.join(VALUE_FUNCTIONS)}")
        if self.budget < 0:
            _fail(
                "budget.budget", f"must be >= 0 rollouts per step (0: train_batch_size x rollout.n), got {self.budget}"
            )
        if not 1 <= self.n_min <= self.n_max:
            _fail("budget.n_min", f"need 1 <= n_min <= n_max, got n_min={self.n_min}, n_max={self.n_max}")


@dataclass(frozen=True)
class OversamplingSettings:
    """D5 + A5: a task is duplicated into k groups, k from its pass rate (k_min..k_max).

    Attributes:
        group_size: rollouts per group when D4 is off (0: ``actor_rollout_ref.rollout.n``);
            with D4 on, the task's D4 rollouts are split into k groups of >= ``min_group``.
    """

    enable: bool = False
    k_min: int = 1
    k_max: int = 2
    group_size: int = 0
    min_group: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.k_min <= self.k_max:
            _fail("oversampling.k_min", f"need 1 <= k_min <= k_max, got k_min={self.k_min}, k_max={self.k_max}")
        _at_least("oversampling.group_size", self.group_size, 0)
        _at_least("oversampling.min_group", self.min_group, 1)


@dataclass(frozen=True)
class CurriculumSettings:
    """D3: difficulty floors × capability stages (``stage_key``: a dotted path into the row)."""

    enable: bool = False
    stage_key: str = ""
    stages: list[str] = field(default_factory=list)
    floors: list[float] = field(default_factory=lambda: [0.5, 0.2, 0.0])
    advance_at: float = 0.5
    window: int = 2

    def __post_init__(self) -> None:
        if bool(self.stage_key) != bool(self.stages):
            _fail("curriculum.stages", "give both stage_key and stages, or neither (one stage)")
        from longcat_plugins.data.curriculum import TwoAxisCurriculum

        try:
            TwoAxisCurriculum(self.stages, self.floors, self.advance_at, self.window)
        except ValueError as exc:
            _fail("curriculum", str(exc))


@dataclass(frozen=True)
class ContextSettings:
    """D6: per-request response budgets raised when the p90 length nears the current one."""

    enable: bool = False
    budgets: list[int] = field(default_factory=list)
    near: float = 0.9
    percentile: float = 90.0

    def __post_init__(self) -> None:
        if self.enable:
            from longcat_plugins.data.context import ContextCurriculum

            try:
                ContextCurriculum(self.budgets, self.near, self.percentile)
            except ValueError as exc:
                _fail("context", str(exc))


@dataclass(frozen=True)
class ReplaySettings:
    """D2: groups not trained are kept and mixed into later batches at ``reuse_ratio``."""

    enable: bool = False
    reuse_ratio: float = 0.25
    capacity: int = 64
    staleness: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.reuse_ratio < 1.0:
            _fail("replay.reuse_ratio", f"must be in [0, 1), got {self.reuse_ratio!r}")
        _at_least("replay.capacity", self.capacity, 0)
        _at_least("replay.staleness", self.staleness, 0)


@dataclass(frozen=True)
class QuotaSettings:
    """S4: per-domain rollout quotas at generation time; trained batch balanced within tolerance.

    Attributes:
        domain_ratios: each domain's share of the trained batch; must sum to 1.
        domain_oversampling: rollout quota multiplier per domain (slow or rare domains > 1).
    """

    enable: bool = False
    domain_key: str = "data_source"
    domain_ratios: dict[str, float] = field(default_factory=dict)
    domain_oversampling: dict[str, float] = field(default_factory=dict)
    tolerance: float = 0.125

    def __post_init__(self) -> None:
        if not self.enable:
            return
        if not self.domain_ratios:
            _fail("quotas.domain_ratios", "name each domain's share of the trained batch")
        for domain, share in self.domain_ratios.items():
            if isinstance(share, bool) or not isinstance(share, int | float) or share <= 0:
                _fail(f"quotas.domain_ratios.{domain}", f"must be a number > 0, got {share!r}")
        total = float(sum(self.domain_ratios.values()))
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            _fail("quotas.domain_ratios", f"shares must sum to 1, got {total:g} ({dict(self.domain_ratios)})")
        for domain, factor in self.domain_oversampling.items():
            if domain not in self.domain_ratios:
                _fail(
                    f"quotas.domain_oversampling.{domain}",
                    f"not a domain of quotas.domain_ratios {sorted(self.domain_ratios)}",
                )
            if factor < 1.0:
                _fail(f"quotas.domain_oversampling.{domain}", f"must be >= 1, got {factor!r}")
        if not 0.0 <= self.tolerance <= 1.0:
            _fail("quotas.tolerance", f"must be in [0, 1], got {self.tolerance!r}")


#: the agent loops a verification row may run in: verl's single-turn loop and ours (D6's budget)
VERIFY_AGENT_LOOPS = ("single_turn_agent", "longcat_single_turn")


@dataclass(frozen=True)
class SelfVerifySettings:
    """A6: on a reward plateau, the policy judges its own recent rollouts in the same batch.

    Attributes:
        window: steps per window of the plateau detector (mean main-task reward of the last
            ``window`` steps against the ``window`` before).
        min_delta: the detector fires when that mean rose by less than this.
        tasks: verification prompts added to a step of the phase (each ``rollouts`` samples,
            0: ``actor_rollout_ref.rollout.n``); an even number: they come in pairs of one
            incorrect and one correct rollout.
        max_steps: the phase ends after this many steps that trained verification samples ...
        exit_accuracy: ... or earlier, once a step's verification accuracy reaches this (over
            every verification sample judged in the step, trained or dropped by online filtering) ...
        wait_steps: ... or once this many of its steps in a row trained no verification sample
            (under a streaming trainer its prompts train a step or more after they are issued,
            and online filtering drops a group whose verdicts all agree; or no pair to judge).
        recent_steps: candidate solutions come from the main rollouts of the last this many steps.
        prompt: the verification prompt; ``{problem}`` and ``{solution}`` are filled in.
        correct / incorrect: the only two responses that count as a verdict (whole response).
        agent_loop: the agent loop the verification rows run in (their ``agent_name``), one of
            :data:`VERIFY_AGENT_LOOPS`; empty: the run's ``default_agent_loop``. A run whose
            main rows are multi-turn episodes (``longcat_tool_agent``) names a single-turn loop
            here: a verification is one answer to one prompt, and the episode's loop would run
            the row's environment task instead of the verification prompt.
    """

    enable: bool = False
    window: int = 3
    min_delta: float = 0.01
    tasks: int = 2
    rollouts: int = 0
    max_steps: int = 3
    exit_accuracy: float = 0.8
    wait_steps: int = 3
    recent_steps: int = 2
    prompt: str = (
        "Problem: {problem}\nCandidate solution: {solution}\n"
        "Is the candidate solution correct? Reply with exactly 'Verdict: correct.' or 'Verdict: incorrect.'"
    )
    correct: str = "Verdict: correct."
    incorrect: str = "Verdict: incorrect."
    agent_loop: str = ""

    def __post_init__(self) -> None:
        if self.agent_loop and self.agent_loop not in VERIFY_AGENT_LOOPS:
            _fail(
                "selfverify.agent_loop",
                f"verification rows are single-turn: one of {list(VERIFY_AGENT_LOOPS)} (or empty: the run's "
                f"default_agent_loop), got {self.agent_loop!r}",
            )
        if self.window < 1:
            _fail("selfverify.window", f"must be >= 1 step, got {self.window}")
        if not math.isfinite(self.min_delta):
            _fail("selfverify.min_delta", f"must be a finite number, got {self.min_delta!r}")
        if self.tasks < 2 or self.tasks % 2:
            _fail("selfverify.tasks", f"must be an even number >= 2 (pairs of rollouts), got {self.tasks}")
        if self.rollouts < 0:
            _fail("selfverify.rollouts", f"must be >= 0 (0: rollout.n), got {self.rollouts}")
        _at_least("selfverify.max_steps", self.max_steps, 1)
        _at_least("selfverify.wait_steps", self.wait_steps, 1)
        if not 0.0 <= self.exit_accuracy <= 1.0:
            _fail("selfverify.exit_accuracy", f"must be in [0, 1], got {self.exit_accuracy!r}")
        _at_least("selfverify.recent_steps", self.recent_steps, 1)
        for slot in ("{problem}", "{solution}"):
            if slot not in self.prompt:
                _fail("selfverify.prompt", f"has no {slot} slot: {self.prompt!r}")
        if not self.correct.strip() or not self.incorrect.strip() or self.correct.strip() == self.incorrect.strip():
            _fail(
                "selfverify.correct",
                f"need two different non-empty verdicts, got {self.correct!r} and {self.incorrect!r}",
            )


@dataclass(frozen=True)
class DataSettings:
    """The step planner's strategies, under the ``longcat_data`` and ``dora`` trainers.

    Attributes:
        task_key: the row field that identifies a task across epochs (``index``: verl's
            ``extra_info.index``), the key of its statistics.
        pass_rate_key: optional dotted path to a historical pass rate in the row.
        prior_pass_rate: a task's pass rate before anything is known.
        momentum: weight of a new group's accuracy in a task's running pass rate.
        correct_threshold: a reward at least this is a pass.
        pool_factor: prompts drawn from the dataloader per step, × ``data.train_batch_size``;
            the strategies choose among them (the rest are skipped for this epoch).
        strategies: data strategies registered by plugins (``DataStrategy`` components), by
            name, run after the built-in ones in this order.
        strategy_settings: each named strategy's settings (``strategy_settings.<name>``).
    """

    task_key: str = "index"
    pass_rate_key: str = ""
    prior_pass_rate: float = 0.5
    momentum: float = 0.5
    correct_threshold: float = 1.0
    pool_factor: int = 1
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    oversampling: OversamplingSettings = field(default_factory=OversamplingSettings)
    curriculum: CurriculumSettings = field(default_factory=CurriculumSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    replay: ReplaySettings = field(default_factory=ReplaySettings)
    quotas: QuotaSettings = field(default_factory=QuotaSettings)
    selfverify: SelfVerifySettings = field(default_factory=SelfVerifySettings)
    strategies: list[str] = field(default_factory=list)
    strategy_settings: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kind = f.default_factory if f.default_factory is not None and is_dataclass(f.default_factory) else None  # type: ignore[misc]
            if kind is not None and isinstance(value, dict):
                unknown = sorted(set(value) - {x.name for x in fields(kind)})
                if unknown:
                    _fail(f"{f.name}.{unknown[0]}", "unknown key")
                object.__setattr__(self, f.name, kind(**value))
        if not 0.0 <= self.prior_pass_rate <= 1.0:
            _fail("prior_pass_rate", f"must be in [0, 1], got {self.prior_pass_rate!r}")
        if not 0.0 < self.momentum <= 1.0:
            _fail("momentum", f"must be in (0, 1], got {self.momentum!r}")
        _at_least("pool_factor", self.pool_factor, 1)
        if not math.isfinite(self.correct_threshold):
            _fail("correct_threshold", f"must be a finite number, got {self.correct_threshold!r}")
        if not self.task_key:
            _fail("task_key", "must name a row field")
        object.__setattr__(self, "strategies", list(self.strategies))
        if len(set(self.strategies)) != len(self.strategies):
            _fail("strategies", f"names a strategy twice: {self.strategies}")
        for name in self.strategy_settings:
            if name not in self.strategies:
                _fail(f"strategy_settings.{name}", f"not a selected strategy (strategies: {self.strategies})")

    def enabled(self) -> list[str]:
        """Names of the enabled strategies, in the order they act."""
        return [
            n
            for n in ("curriculum", "quotas", "budget", "oversampling", "context", "replay", "selfverify")
            if getattr(self, n).enable
        ] + list(self.strategies)

    def plans(self) -> bool:
        """Whether any strategy is on (under ``dora`` the planner runs only then)."""
        return bool(self.enabled())


def data_settings() -> DataSettings:
    """The enabled ``longcat_data`` trainer's settings from the process-wide host."""
    from longcat_plugins.host import settings_for

    return settings_for("scheduler", "longcat_data", fallback=DataSettings)
