"""Typed descriptors a plugin returns from its hooks.

A descriptor says *what* a component is (its name, the callable or class that implements
it, the dataclass that is its config schema) and, by its type, *where it lands in verl*.
The host fills in ``plugin`` and ``distribution`` so every component can be traced back to
the package that shipped it.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "Family",
    "Component",
    "PolicyLoss",
    "AdvantageEstimator",
    "RewardManager",
    "RewardFunction",
    "ValidationMetric",
    "RewardGuard",
    "AgentLoop",
    "Tool",
    "Trainer",
    "Sampler",
    "SchedulePolicy",
    "DoraEvictionPolicy",
    "DoraBalancer",
    "DoraAdmission",
    "DataStrategy",
    "FusionMethod",
    "COMPONENT_TYPES",
    "ComponentImportError",
]

_NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]*$")


class Family(str, enum.Enum):
    """The five plugin families; each has one hook in :mod:`longcat_plugins.hookspecs`."""

    ALGORITHM = "algorithm"
    SCHEDULER = "scheduler"
    REWARD = "reward"
    ENVIRONMENT = "environment"
    FUSION = "fusion"

    def __str__(self) -> str:
        return self.value


#: ``package.module:attribute``, a target or config named without importing it
_REF_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
#: fields a descriptor may give as a ``module:attr`` reference, resolved on first access
_LAZY_FIELDS = frozenset({"target", "config", "summary"})
#: ``FusionMethod(config=None)`` with a lazy target: the schema comes from its signature, later
_FROM_SIGNATURE = "<from the target's signature>"


#: called with a component just before one of its lazy fields is imported. The verl bridge
#: adds one that imports the verl registry module the component goes to first: a target
#: module subclasses that registry's classes, so importing the registry first means its import
#: hook never meets the target's module half-initialised.
BEFORE_RESOLVE: list[Callable[[Component], None]] = []


class ComponentImportError(ImportError):
    """A component's ``module:attr`` target or config could not be imported; names both."""


def resolve_ref(ref: str, owner: str) -> Any:
    """Import ``module:attr`` (``attr`` may be dotted) and return the attribute."""
    import importlib
    import sys

    module_name, _, attr = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 - any import failure of plugin code is reported as one
        module = sys.modules.get(module_name)
        half_made = getattr(getattr(module, "__spec__", None), "_initializing", False)
        why = " (its module is still being imported)" if half_made else ""
        raise ComponentImportError(f"{owner}: cannot import {ref!r}{why}: {type(exc).__name__}: {exc}") from exc
    return obj


@dataclass(frozen=True)
class Component:
    """Base of every descriptor.

    Args:
        name: the name users select it by (in verl keys or the ``longcat:`` section). Lower
            case, ``[a-z0-9_.-]``, unique within its family.
        target: the function or class that implements it, or its ``"package.module:attr"``
            reference: then nothing is imported until something uses the target (the verl
            bridge registering it, a fusion run), so ``longcat-plugins list`` stays fast.
        config: a dataclass type whose fields are the component's settings (or its
            ``"module:attr"`` reference), or ``None``.
        summary: one line for ``longcat-plugins list``; defaults to the target's docstring
            (give it explicitly with a reference target, or ``list`` imports the target).
        plugin, distribution: filled in by the host; leave them empty.
    """

    #: set from :data:`COMPONENT_TYPES`, the one table of which family holds which type
    family: ClassVar[Family]
    kind: ClassVar[str]
    #: where verl finds it, for humans (``longcat-plugins list``) and docs
    verl_entry: ClassVar[str]

    name: str
    target: Any
    config: type | str | None = None
    summary: str = ""
    plugin: str = ""
    distribution: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(
                f"{type(self).__name__} name {self.name!r} is invalid: use lower case letters, digits, '_', '.', '-'"
            )
        raw = self.__dict__
        for key in ("target", "config"):
            value = raw[key]
            if isinstance(value, str) and value != _FROM_SIGNATURE and not _REF_RE.match(value):
                raise ValueError(
                    f"{type(self).__name__} {self.name!r}: {key} {value!r} is not a 'package.module:attribute' reference"
                )
        if raw["config"] is not None and not isinstance(raw["config"], str):
            self._check_config(raw["config"])
        if not raw["summary"] and not self.is_lazy:
            object.__setattr__(self, "summary", _first_line(self.target))

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name in _LAZY_FIELDS and (isinstance(value, str) and (value == "" or name != "summary")):
            return object.__getattribute__(self, "_resolve_field")(name, value)
        return value

    def _resolve_field(self, name: str, value: str) -> Any:
        """Resolve a ``module:attr`` field on first access and keep the result."""
        raw = self.__dict__
        owner = f"{type(self).__name__} {raw['name']!r}"
        if name != "summary" or isinstance(raw["target"], str):
            for hook in BEFORE_RESOLVE:
                hook(self)
        if name == "summary":
            if not isinstance(raw["target"], str):
                return value
            resolved: Any = _first_line(self.target)
        elif name == "config" and value == _FROM_SIGNATURE:
            resolved = self._config_from_target(self.target)
        elif name == "config":
            resolved = resolve_ref(value, f"{owner} config")
            self._check_config(resolved)
        else:
            resolved = resolve_ref(value, owner)
        object.__setattr__(self, name, resolved)
        return resolved

    def _check_config(self, config: Any) -> None:
        if not (isinstance(config, type) and dataclasses.is_dataclass(config)):
            raise TypeError(f"{type(self).__name__} {self.name!r}: config must be a dataclass type, got {config!r}")

    def _config_from_target(self, target: Any) -> type | None:
        return None

    @property
    def is_lazy(self) -> bool:
        """Is the target still an unimported ``module:attr`` reference?"""
        return isinstance(self.__dict__["target"], str)

    def tagged(self, plugin: str, distribution: str) -> Component:
        """A copy owned by ``plugin`` (the host's tag), without importing a lazy target."""
        import copy

        out = copy.copy(self)
        object.__setattr__(out, "plugin", plugin)
        object.__setattr__(out, "distribution", distribution)
        return out

    @property
    def ref(self) -> str:
        """``family:name``, the form used in enable/disable lists and messages."""
        return f"{self.family.value}:{self.name}"

    @property
    def target_path(self) -> str:
        """Import path of the target, e.g. ``pkg.module.func`` (a lazy target is not imported)."""
        raw = self.__dict__["target"]
        if isinstance(raw, str):
            return raw.replace(":", ".")
        return f"{getattr(raw, '__module__', '?')}.{getattr(raw, '__qualname__', repr(raw))}"

    def default_settings(self) -> Any:
        """An instance of the config schema with its defaults, or ``None``."""
        return self.config() if self.config is not None else None


@dataclass(frozen=True)
class PolicyLoss(Component):
    """A verl policy loss, selected by ``actor_rollout_ref.actor.policy_loss.loss_mode``.

    What verl 0.9 passes (``verl.workers.utils.losses.ppo_loss``, keyword arguments):
    ``old_log_prob``, ``log_prob``, ``advantages`` (float, batch × response length),
    ``response_mask`` (**bool**), ``loss_agg_mode`` (``actor.loss_agg_mode``), ``config`` (the
    whole ``ActorConfig``, not the ``policy_loss`` section) and ``rollout_is_weights`` (a tensor
    when ``algorithm.rollout_correction`` computes IS weights, else ``None``).

    - **Knobs** have one home: ``config.policy_loss``, an instance of your ``PolicyLossConfig``
      subclass (``loss_mode`` plus your fields), chosen by ``policy_loss._target_`` (verl rejects
      plain extra keys). Give the same class as ``config=`` here; ``longcat.settings`` is not read
      for losses (validation refuses it).
    - **Aggregation**: ``config.global_batch_info`` holds ``dp_size``, ``batch_num_tokens``,
      ``global_batch_size``, ``loss_scale_factor``; pass it on as
      ``agg_loss(loss_mat, response_mask, loss_agg_mode, **config.global_batch_info)``.
    - **Returns** ``(loss, metrics)``: a scalar tensor and a ``dict[str, float]``. verl logs the
      keys as given (averaged over micro-batches) and adds ``actor/pg_loss`` itself; stock losses
      name theirs ``actor/...`` (``actor/pg_clipfrac``), so use that prefix to sit beside them.

    Example::

        @dataclass
        class ClippedConfig(PolicyLossConfig):
            loss_mode: str = "clipped_reinforce"
            max_ratio: float = 2.0

        def clipped_reinforce(old_log_prob, log_prob, advantages, response_mask,
                              loss_agg_mode="token-mean", config=None, rollout_is_weights=None):
            ratio = (log_prob - old_log_prob).exp().clamp(max=config.policy_loss.max_ratio)
            loss = agg_loss(-advantages * ratio, response_mask, loss_agg_mode, **config.global_batch_info)
            return loss, {"actor/ratio_mean": ratio[response_mask].mean().item()}

        PolicyLoss("clipped_reinforce", clipped_reinforce, config=ClippedConfig)
    """

    kind: ClassVar[str] = "policy_loss"
    verl_entry: ClassVar[str] = "core_algos.POLICY_LOSS_REGISTRY (actor.policy_loss.loss_mode)"


@dataclass(frozen=True)
class AdvantageEstimator(Component):
    """A verl advantage estimator, selected by ``algorithm.adv_estimator`` (``gae`` and ``grpo``
    are hard-wired in verl and cannot be replaced). verl calls it in the trainer process as
    ``fn(token_level_rewards, response_mask, index=uids, config=AlgoConfig, ...)`` and expects
    ``(advantages, returns)``, both batch × response length; accept ``**kwargs`` for the rest.
    Its ``config`` dataclass is read with :func:`longcat_plugins.settings_for` from
    ``longcat.settings.algorithm.<name>``."""

    kind: ClassVar[str] = "adv_estimator"
    verl_entry: ClassVar[str] = "core_algos.ADV_ESTIMATOR_REGISTRY (algorithm.adv_estimator)"


@dataclass(frozen=True)
class RewardManager(Component):
    """A ``RewardManagerBase`` subclass for verl's reward loop, selected by
    ``reward.reward_manager.name``; it runs in verl's reward-loop workers.

    verl constructs it as ``cls(config=<the whole trainer DictConfig>, tokenizer=...,
    compute_score=<reward.custom_reward_function or verl's default>, reward_router_address=...,
    reward_model_tokenizer=...)`` (accept ``**kwargs``) and awaits ``run_single(data)`` once per
    sample: ``data`` is a ``DataProto`` of that sample's sequences (several when an agent loop
    returned several outputs; stock managers score the last), with ``batch["responses"]``,
    ``batch["attention_mask"]`` and ``non_tensor_batch`` (``data_source``, ``reward_model``
    with ``ground_truth``, ``extra_info``). It must return
    ``{"reward_score": float, "reward_extra_info": dict}``; NaN is an incomplete signal (masked
    by ``longcat_grpo``). Read settings with :func:`longcat_plugins.settings_for` in ``__init__``.

    Example::

        class LengthPenalty(RewardManagerBase):
            def __init__(self, config, tokenizer, compute_score, **kwargs):
                super().__init__(config, tokenizer, compute_score)
                self.settings = settings_for("reward", "length_penalty")

            async def run_single(self, data):
                text = self.tokenizer.decode(data[-1].batch["responses"], skip_special_tokens=True)
                words = len(text.split())
                return {"reward_score": -words / self.settings.max_words, "reward_extra_info": {"words": words}}

        RewardManager("length_penalty", LengthPenalty, config=LengthPenaltyConfig)
    """

    kind: ClassVar[str] = "reward_manager"
    verl_entry: ClassVar[str] = "reward_loop REWARD_MANAGER (reward.reward_manager.name)"


@dataclass(frozen=True)
class RewardFunction(Component):
    """A ``compute_score(data_source, solution_str, ground_truth, extra_info, **kw)`` function,
    selected by ``reward.custom_reward_function = {path: pkg://longcat_plugins.reward_functions,
    name: <name>}``. verl's reward manager calls it per sample with keyword arguments (plus
    ``reward.custom_reward_function.reward_kwargs`` and, with a reward model, the router
    address); it returns a float, or a dict with ``"score"`` and extra logged keys. May be
    ``async``. Read settings with ``settings_for("reward", name, overrides=kw)``.

    Example::

        def exact(data_source, solution_str, ground_truth, extra_info=None, **kw):
            s = settings_for("reward", "exact", overrides=kw)
            answer = solution_str.strip().lower() if s.ignore_case else solution_str.strip()
            return 1.0 if answer == ground_truth else 0.0

        RewardFunction("exact", exact, config=ExactConfig)
    """

    kind: ClassVar[str] = "reward_function"
    verl_entry: ClassVar[str] = "reward.custom_reward_function (pkg://longcat_plugins.reward_functions)"


@dataclass(frozen=True)
class ValidationMetric(Component):
    """Metrics computed from each validation pass of any verl trainer (``val_kwargs.n`` samples
    per prompt), logged beside verl's ``val-core``/``val-aux``: ``target.compute(data_sources,
    sample_uids, reward_extra_infos_dict, settings, expected_counts) -> {key: value}``; an optional
    ``target.check_config(cfg)`` checks the recipe before Ray starts."""

    kind: ClassVar[str] = "val_metric"
    verl_entry: ClassVar[str] = "trainer _val_metrics_update (validation, val_kwargs.n)"


@dataclass(frozen=True)
class RewardGuard(Component):
    """A check on what rewards produced in each training step, active in every recipe (not selected
    by a key). The built-in ``reward:failures`` counts samples whose reward raised and stops the run
    above ``longcat.settings.reward.failures.max_failed_share``; disabling it keeps the counting
    and the masking but never stops a run."""

    kind: ClassVar[str] = "reward_guard"
    verl_entry: ClassVar[str] = "trainer step, before the advantages (every recipe)"


@dataclass(frozen=True)
class AgentLoop(Component):
    """An ``AgentLoopBase`` subclass, selected per sample by the dataset's ``agent_name`` column
    (or ``actor_rollout_ref.rollout.agent.default_agent_loop``); it runs in agent-loop workers.

    verl constructs it with ``trainer_config`` (``.config`` is the trainer config),
    ``server_manager``, ``tokenizer``, ``processor``, ``dataset_cls``, ``data_config`` and
    ``hf_model_type`` (pass ``*args, **kwargs`` to ``super().__init__``), then awaits
    ``run(sampling_params, **row)`` per sample, where ``row`` holds the dataset fields
    (``raw_prompt``, ``extra_info``, ...). Generate with ``await self.server_manager.generate(
    request_id=..., prompt_ids=..., sampling_params=sampling_params)`` (a ``TokenOutput`` with
    ``token_ids`` and ``log_probs``). Return an ``AgentLoopOutput`` (``prompt_ids``,
    ``response_ids``, ``response_mask``: 1 for model tokens, 0 for tool/user tokens,
    ``response_logprobs``, ``num_turns``, ``metrics=AgentLoopMetrics(...)``), or a list of them
    for several training segments.

    Example::

        class EchoOnce(AgentLoopBase):
            async def run(self, sampling_params, **row):
                prompt_ids = await self.ct_build_initial_tokens(list(row["raw_prompt"]))
                out = await self.server_manager.generate(
                    request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params)
                return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=out.token_ids,
                                       response_mask=[1] * len(out.token_ids), response_logprobs=out.log_probs,
                                       num_turns=2, metrics=AgentLoopMetrics())

        AgentLoop("echo_once", EchoOnce)
    """

    kind: ClassVar[str] = "agent_loop"
    verl_entry: ClassVar[str] = "agent_loop._agent_loop_registry (agent_name)"


@dataclass(frozen=True)
class Tool(Component):
    """A verl ``BaseTool`` subclass, named by ``class_name`` in a ``multi_turn.tool_config_path`` file."""

    kind: ClassVar[str] = "tool"
    verl_entry: ClassVar[str] = "multi_turn.tool_config_path (class_name)"


@dataclass(frozen=True)
class Trainer(Component):
    """A v1 ``PPOTrainer`` subclass (``verl.trainer.ppo.v1.trainer_base``), selected by
    ``trainer.v1.trainer_mode`` (verl's ``main_ppo`` with ``trainer.use_v1=true``). verl builds
    it as ``cls(config)`` with the whole trainer ``DictConfig`` in the TaskRunner (the driver's process
    when the driver starts the cluster, ``runtime/in_driver.py``; else verl's TaskRunner actor) and
    calls ``fit(agent_loop_manager)``; subclass an existing mode (``separate_async``,
    ``colocate_async``) and override what differs; ``self.config.trainer.v1.<mode>`` is the
    mode's own section. Settings: ``settings_for("scheduler", name)``.

    Example::

        class LoggingTrainer(PPOTrainerColocateAsync):
            def on_step_end(self):
                super().on_step_end()
                print("step done")

        Trainer("logging", LoggingTrainer)
    """

    kind: ClassVar[str] = "trainer"
    verl_entry: ClassVar[str] = "v1 TRAINER_REGISTRY (trainer.v1.trainer_mode)"


@dataclass(frozen=True)
class Sampler(Component):
    """A v1 replay-buffer class, selected by ``trainer.v1.sampler.custom_sampler =
    {path: pkg://longcat_plugins.samplers, name: <name>}``. Subclass verl's ``ReplayBuffer``
    (or ``ReplayBufferAsync``): verl constructs it with ``trainer_mode``, ``trainer_config``,
    ``max_off_policy_threshold``, ``max_off_policy_strategy``, ``sampler_kwargs``
    (``trainer.v1.sampler.sampler_kwargs``) and ``refill_fn``, and the trainer calls
    ``sample(global_steps, partition_id, batch_size) -> (KVBatchMeta, metrics dict)`` for each
    batch. Settings: ``settings_for("scheduler", name)`` or ``sampler_kwargs``.

    Example::

        class LoudReplayBuffer(ReplayBufferAsync):
            def sample(self, global_steps, partition_id, batch_size):
                batch, metrics = super().sample(global_steps, partition_id, batch_size)
                return batch, {**metrics, "loud/batch_keys": len(batch.keys)}

        Sampler("loud", LoudReplayBuffer)
    """

    kind: ClassVar[str] = "sampler"
    verl_entry: ClassVar[str] = "trainer.v1.sampler.custom_sampler (pkg://longcat_plugins.samplers)"


@dataclass(frozen=True)
class SchedulePolicy(Component):
    """A fully-async ``DynamicSchedulePolicyBase`` subclass, selected by
    ``async_training.dynamic_schedule_policy``. verl calls, per step,
    ``should_deactivate(global_steps, is_hybrid_active, ctx)``, ``deactivate_wait_samples(ctx)``,
    ``should_activate_after_step(global_steps, is_hybrid_active, ctx)`` and
    ``update_after_step(global_steps, ctx)`` (``ctx`` a ``DynamicScheduleContext``)."""

    kind: ClassVar[str] = "schedule_policy"
    verl_entry: ClassVar[str] = "dynamic_schedule._policy_registry (async_training.dynamic_schedule_policy)"


@dataclass(frozen=True)
class DoraEvictionPolicy(Component):
    """A DORA eviction policy, selected by ``longcat.settings.scheduler.dora.eviction`` (verl's
    ``dora`` trainer) or ``DoraConfig.eviction`` (the Python ``DoraController``); the built-in
    ``staleness_window`` is the default. A function ``fn(ctx) -> iterable of versions`` of an
    :class:`~longcat_plugins.schedulers.core.versions.EvictionContext` (``live`` versions,
    ``latest``, ``staleness``, ``active`` work per version); it may not name ``latest`` or a
    version that is not live. In verl's ``dora`` trainer the sampler calls it before every batch
    with the versions of the finished groups waiting for a batch (``active``: groups per
    version) and ``latest`` the version being trained: the groups of every version it names are
    evicted (replayed later with ``reuse_ratio > 0``, else regenerated). It must evict at least
    the versions outside the staleness window, or the sampler stops the run (the bound is a
    guarantee, not a policy); it may evict more. In the controller it decides which versions
    leave the generation instances (their work is aborted).

    Example::

        def freshest_only(ctx):
            return [v for v in ctx.live if v != ctx.latest]

        DoraEvictionPolicy("freshest_only", freshest_only)
    """

    kind: ClassVar[str] = "dora_eviction_policy"
    verl_entry: ClassVar[str] = "schedulers.core.versions.EVICTION_POLICIES (longcat.settings.scheduler.dora.eviction)"


@dataclass(frozen=True)
class DoraBalancer(Component):
    """A DORA load-balancer strategy, selected by ``longcat.settings.scheduler.dora.balancer``
    (verl's ``dora`` trainer with ``load_balancer: dora``) or ``DoraConfig.balancer`` (the Python
    ``DoraController``); the built-in ``greedy`` is the default. A function ``fn(ctx) ->
    list[Migration]`` of a :class:`~longcat_plugins.schedulers.core.balancer.BalanceContext`
    (in-flight request ids per replica, oldest first, the cap after a rebalance, the trigger
    threshold). The ``DoraLoadBalancer`` actor calls it after every load change; the first
    non-empty plan of a step switches the two-phase cap, and with ``migrate_requests`` each move
    is executed on a replica holding the request's version (or dropped when none has room).

    Example::

        def never(ctx):
            return []

        DoraBalancer("never", never)
    """

    kind: ClassVar[str] = "dora_balancer"
    verl_entry: ClassVar[str] = "schedulers.core.balancer.BALANCERS (longcat.settings.scheduler.dora.balancer)"


@dataclass(frozen=True)
class DataStrategy(Component):
    """A data strategy the step planner runs under every trainer that plans its prompts (the
    ``longcat_data`` sync trainer and the ``dora`` streaming trainer), selected by name in
    ``longcat.settings.scheduler.longcat_data.strategies`` with its settings under
    ``...longcat_data.strategy_settings.<name>``. The target is a subclass of
    :class:`~longcat_plugins.data.strategy.PlanningStrategy`: it may reorder the candidate
    prompts (``order``), reshape each planned row (``shape``: rollouts, response budget), learn
    from the trained groups (``observe``) and checkpoint its state (``state_dict``); the built-in
    strategies (budget, oversampling, curricula, replay, quotas, self-verification) run in the
    same planner. An unknown name, or a strategy whose ``trainers`` exclude the chosen trainer,
    exits 2 before Ray.

    Example::

        class ShortestFirst(PlanningStrategy):
            def order(self, candidates, rates, order):
                return sorted(order, key=lambda i: len(candidates[i].task))

        DataStrategy("shortest_first", ShortestFirst)
    """

    kind: ClassVar[str] = "data_strategy"
    verl_entry: ClassVar[str] = "data.planner.DataPlanner (longcat.settings.scheduler.longcat_data.strategies)"


@dataclass(frozen=True)
class DoraAdmission(Component):
    """A DORA admission policy, selected by ``longcat.settings.scheduler.dora.admission`` (verl's
    ``dora`` trainer with ``load_balancer: dora``); the built-in ``none`` is the default, the
    others are ``version_window`` and ``length_aware``. A function ``fn(ctx) -> bool`` of an
    :class:`~longcat_plugins.schedulers.core.admission.AdmissionContext` (the version the request
    would run on, the batches its window has left, ``staleness``, ``window``, whether the trainer
    is updating, the prompt's expected length and the tokens a request decodes per step). The
    ``DoraLoadBalancer`` actor asks it for every new request (a restart too, never a migrated
    continuation): ``False`` holds the request until the next version or step phase, so long
    answers start where they can finish instead of being stopped as stale (length censoring).

    Example::

        def newest_only(ctx):
            return not ctx.training

        DoraAdmission("newest_only", newest_only)
    """

    kind: ClassVar[str] = "dora_admission"
    verl_entry: ClassVar[str] = "schedulers.core.admission.ADMISSIONS (longcat.settings.scheduler.dora.admission)"


@dataclass(frozen=True)
class FusionMethod(Component):
    """A checkpoint-fusion method; verl has no counterpart, so it is used through
    ``longcat-plugins fuse`` and :mod:`longcat_plugins.fusion`. If ``config`` is omitted, the
    function's keyword-only parameters (with defaults and annotations) are its schema."""

    kind: ClassVar[str] = "fusion_method"
    verl_entry: ClassVar[str] = "none (longcat-plugins fuse)"

    def __post_init__(self) -> None:
        raw = self.__dict__
        if raw["config"] is None and isinstance(raw["target"], str):
            object.__setattr__(self, "config", _FROM_SIGNATURE)  # derived once the target is imported
        elif raw["config"] is None and callable(raw["target"]):
            object.__setattr__(self, "config", self._config_from_target(raw["target"]))
        super().__post_init__()

    def _config_from_target(self, target: Any) -> type | None:
        return schema_from_signature(target, f"{self.name}_config") if callable(target) else None


def _first_line(target: Any) -> str:
    doc = (inspect.getdoc(target) or "").strip()
    return doc.splitlines()[0] if doc else ""


def schema_from_signature(fn: Any, schema_name: str) -> type | None:
    """A dataclass whose fields are ``fn``'s keyword-only parameters (mergekit-style: the typed
    signature is the config). Every such parameter needs an annotation and a default."""
    fields: list[tuple[str, Any, Any]] = []
    try:  # resolve string annotations (modules using `from __future__ import annotations`)
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an unresolvable hint is reported below as missing
        hints = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        param = param.replace(annotation=hints.get(param.name, param.annotation))
        if param.annotation is inspect.Parameter.empty or param.default is inspect.Parameter.empty:
            raise TypeError(
                f"{getattr(fn, '__qualname__', fn)}: keyword-only parameter {param.name!r} needs a type annotation "
                "and a default to be part of the config schema"
            )
        fields.append((param.name, param.annotation, dataclasses.field(default=param.default)))
    return dataclasses.make_dataclass(schema_name, fields, frozen=True) if fields else None


COMPONENT_TYPES: dict[Family, tuple[type[Component], ...]] = {
    Family.ALGORITHM: (PolicyLoss, AdvantageEstimator),
    Family.SCHEDULER: (
        Trainer,
        Sampler,
        SchedulePolicy,
        DoraEvictionPolicy,
        DoraBalancer,
        DoraAdmission,
        DataStrategy,
    ),
    Family.REWARD: (RewardManager, RewardFunction, ValidationMetric, RewardGuard),
    Family.ENVIRONMENT: (AgentLoop, Tool),
    Family.FUSION: (FusionMethod,),
}
for _family, _types in COMPONENT_TYPES.items():
    for _type in _types:
        _type.family = _family
del _family, _types, _type
