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
    "AgentLoop",
    "Tool",
    "Trainer",
    "Sampler",
    "SchedulePolicy",
    "FusionMethod",
    "COMPONENT_TYPES",
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


@dataclass(frozen=True)
class Component:
    """Base of every descriptor.

    Args:
        name: the name users select it by (in verl keys or the ``longcat:`` section). Lower
            case, ``[a-z0-9_.-]``, unique within its family.
        target: the function or class that implements it.
        config: a dataclass type whose fields are the component's settings, or ``None``.
        summary: one line for ``longcat-plugins list``; defaults to the target's docstring.
        plugin, distribution: filled in by the host; leave them empty.
    """

    family: ClassVar[Family]
    kind: ClassVar[str]
    #: where verl finds it, for humans (``longcat-plugins list``) and docs
    verl_entry: ClassVar[str]

    name: str
    target: Any
    config: type | None = None
    summary: str = ""
    plugin: str = ""
    distribution: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(
                f"{type(self).__name__} name {self.name!r} is invalid: use lower case letters, digits, '_', '.', '-'"
            )
        if self.config is not None and not dataclasses.is_dataclass(self.config):
            raise TypeError(
                f"{type(self).__name__} {self.name!r}: config must be a dataclass type, got {self.config!r}"
            )
        if not self.summary:
            doc = inspect.getdoc(self.target) or ""
            object.__setattr__(self, "summary", doc.strip().splitlines()[0] if doc.strip() else "")

    @property
    def ref(self) -> str:
        """``family:name``, the form used in enable/disable lists and messages."""
        return f"{self.family.value}:{self.name}"

    @property
    def target_path(self) -> str:
        """Import path of the target, e.g. ``pkg.module.func``."""
        return f"{getattr(self.target, '__module__', '?')}.{getattr(self.target, '__qualname__', repr(self.target))}"

    def default_settings(self) -> Any:
        """An instance of the config schema with its defaults, or ``None``."""
        return self.config() if self.config is not None else None


@dataclass(frozen=True)
class PolicyLoss(Component):
    """A verl policy loss: ``fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
    config, rollout_is_weights) -> (loss, metrics)``. Selected by
    ``actor_rollout_ref.actor.policy_loss.loss_mode``."""

    family: ClassVar[Family] = Family.ALGORITHM
    kind: ClassVar[str] = "policy_loss"
    verl_entry: ClassVar[str] = "core_algos.POLICY_LOSS_REGISTRY (actor.policy_loss.loss_mode)"


@dataclass(frozen=True)
class AdvantageEstimator(Component):
    """A verl advantage estimator, selected by ``algorithm.adv_estimator``."""

    family: ClassVar[Family] = Family.ALGORITHM
    kind: ClassVar[str] = "adv_estimator"
    verl_entry: ClassVar[str] = "core_algos.ADV_ESTIMATOR_REGISTRY (algorithm.adv_estimator)"


@dataclass(frozen=True)
class RewardManager(Component):
    """A ``RewardManagerBase`` subclass for verl's reward loop, selected by
    ``reward.reward_manager.name``."""

    family: ClassVar[Family] = Family.REWARD
    kind: ClassVar[str] = "reward_manager"
    verl_entry: ClassVar[str] = "reward_loop REWARD_MANAGER (reward.reward_manager.name)"


@dataclass(frozen=True)
class RewardFunction(Component):
    """A ``compute_score(data_source, solution_str, ground_truth, extra_info, **kw)`` function,
    selected by ``reward.custom_reward_function = {path: pkg://longcat_plugins.reward_functions,
    name: <name>}``."""

    family: ClassVar[Family] = Family.REWARD
    kind: ClassVar[str] = "reward_function"
    verl_entry: ClassVar[str] = "reward.custom_reward_function (pkg://longcat_plugins.reward_functions)"


@dataclass(frozen=True)
class ValidationMetric(Component):
    """Metrics computed from each validation pass of any verl trainer (``val_kwargs.n`` samples
    per prompt), logged beside verl's ``val-core``/``val-aux``: ``target.compute(data_sources,
    sample_uids, reward_extra_infos_dict, settings, expected_counts) -> {key: value}``; an optional
    ``target.check_config(cfg)`` checks the recipe before Ray starts."""

    family: ClassVar[Family] = Family.REWARD
    kind: ClassVar[str] = "val_metric"
    verl_entry: ClassVar[str] = "trainer _val_metrics_update (validation, val_kwargs.n)"


@dataclass(frozen=True)
class AgentLoop(Component):
    """An ``AgentLoopBase`` subclass, selected per sample by ``agent_name``."""

    family: ClassVar[Family] = Family.ENVIRONMENT
    kind: ClassVar[str] = "agent_loop"
    verl_entry: ClassVar[str] = "agent_loop._agent_loop_registry (agent_name)"


@dataclass(frozen=True)
class Tool(Component):
    """A verl ``BaseTool`` subclass, named by ``class_name`` in a ``multi_turn.tool_config_path`` file."""

    family: ClassVar[Family] = Family.ENVIRONMENT
    kind: ClassVar[str] = "tool"
    verl_entry: ClassVar[str] = "multi_turn.tool_config_path (class_name)"


@dataclass(frozen=True)
class Trainer(Component):
    """A v1 ``PPOTrainer`` subclass, selected by ``trainer.v1.trainer_mode``."""

    family: ClassVar[Family] = Family.SCHEDULER
    kind: ClassVar[str] = "trainer"
    verl_entry: ClassVar[str] = "v1 TRAINER_REGISTRY (trainer.v1.trainer_mode)"


@dataclass(frozen=True)
class Sampler(Component):
    """A v1 replay-buffer class, selected by ``trainer.v1.sampler.custom_sampler =
    {path: pkg://longcat_plugins.samplers, name: <name>}``."""

    family: ClassVar[Family] = Family.SCHEDULER
    kind: ClassVar[str] = "sampler"
    verl_entry: ClassVar[str] = "trainer.v1.sampler.custom_sampler (pkg://longcat_plugins.samplers)"


@dataclass(frozen=True)
class SchedulePolicy(Component):
    """A fully-async ``DynamicSchedulePolicyBase`` subclass, selected by
    ``async_training.dynamic_schedule_policy``."""

    family: ClassVar[Family] = Family.SCHEDULER
    kind: ClassVar[str] = "schedule_policy"
    verl_entry: ClassVar[str] = "dynamic_schedule._policy_registry (async_training.dynamic_schedule_policy)"


@dataclass(frozen=True)
class FusionMethod(Component):
    """A checkpoint-fusion method; verl has no counterpart, so it is used through
    ``longcat-plugins fuse`` and :mod:`longcat_plugins.fusion`. If ``config`` is omitted, the
    function's keyword-only parameters (with defaults and annotations) are its schema."""

    family: ClassVar[Family] = Family.FUSION
    kind: ClassVar[str] = "fusion_method"
    verl_entry: ClassVar[str] = "none (longcat-plugins fuse)"

    def __post_init__(self) -> None:
        if self.config is None and callable(self.target):
            object.__setattr__(self, "config", schema_from_signature(self.target, f"{self.name}_config"))
        super().__post_init__()


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
    Family.SCHEDULER: (Trainer, Sampler, SchedulePolicy),
    Family.REWARD: (RewardManager, RewardFunction, ValidationMetric),
    Family.ENVIRONMENT: (AgentLoop, Tool),
    Family.FUSION: (FusionMethod,),
}
