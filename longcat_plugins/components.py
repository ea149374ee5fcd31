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
    "AgentLoop",
    "Tool",
    "Trainer",
    "Sampler",
    "SchedulePolicy",
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
    Family.SCHEDULER: (Trainer, Sampler, SchedulePolicy),
    Family.REWARD: (RewardManager, RewardFunction, ValidationMetric),
    Family.ENVIRONMENT: (AgentLoop, Tool),
    Family.FUSION: (FusionMethod,),
}
