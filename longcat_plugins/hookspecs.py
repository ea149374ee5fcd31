"""Every hook a longcat plugin can implement: the plugin author's contract.

A plugin is any module or object with functions decorated by ``@longcat_plugins.hookimpl``
named after the hooks below, published in the entry-point group ``longcat_plugins``::

    # pyproject.toml of your package
    [project.entry-points.longcat_plugins]
    my_plugin = "my_package.plugin"

Each hook returns a list of component descriptors (:mod:`longcat_plugins.components`) of its
family. The host tags them with your plugin's name and distribution, checks names are unique
within the family, and the verl bridge registers the enabled ones into verl's own registries
in every process (driver, Ray workers) that imports verl. Hooks take no arguments and must be
cheap and side-effect free: they may run in every verl process.

Below each hook, each component type says what verl passes it, what verl expects back, and
where its settings live. A component reads its settings (its ``config`` dataclass filled from
``longcat.settings.<family>.<name>``) with ``longcat_plugins.settings_for(family, name)``; a
policy loss reads its knobs from ``config.policy_loss`` instead, the one place verl gives it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pluggy

from longcat_plugins import components

PROJECT_NAME = "longcat_plugins"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def register_algorithms() -> Sequence[components.PolicyLoss | components.AdvantageEstimator]:
    """Policy losses and advantage estimators.

    A policy loss is a plain function of tensors with verl's ``PolicyLossFn`` signature; it is
    registered in ``verl.trainer.ppo.core_algos.POLICY_LOSS_REGISTRY`` and selected with
    ``actor_rollout_ref.actor.policy_loss.loss_mode``. Extra knobs belong in a subclass of
    verl's ``PolicyLossConfig`` chosen by ``policy_loss._target_`` (verl rejects unknown keys).

    Example::

        @hookimpl
        def register_algorithms():
            return [PolicyLoss("truncated_reinforce", compute_truncated_reinforce)]
    """


@hookspec
def register_schedulers() -> Sequence[
    components.Trainer
    | components.Sampler
    | components.SchedulePolicy
    | components.DoraEvictionPolicy
    | components.DoraBalancer
    | components.DoraAdmission
    | components.DataStrategy
]:
    """Rollout/training schedulers: v1 trainers (``trainer.v1.trainer_mode``), v1 replay-buffer
    samplers (``trainer.v1.sampler.custom_sampler``), fully-async dynamic-schedule policies
    (``async_training.dynamic_schedule_policy``), and DORA's policies: eviction policies
    (``longcat.settings.scheduler.dora.eviction``), load-balancer strategies
    (``longcat.settings.scheduler.dora.balancer``) and admission policies
    (``longcat.settings.scheduler.dora.admission``), plain functions of the scheduler core's
    ``EvictionContext`` / ``BalanceContext`` / ``AdmissionContext`` that the ``dora`` trainer's
    sampler and load balancer call (and the Python ``DoraController``); and data strategies
    (``longcat.settings.scheduler.longcat_data.strategies``), which the step planner runs under
    the ``longcat_data`` and ``dora`` trainers alike. An unknown name exits 2 before Ray,
    listing the registered ones.

    Example::

        def keep_newest_two(ctx):  # an EvictionContext: live, latest, staleness, active
            return [v for v in ctx.live if v < ctx.latest - 1 or v < ctx.latest - ctx.staleness]

        @hookimpl
        def register_schedulers():
            return [
                Trainer("dora", DoraTrainer, config=DoraConfig),
                DoraEvictionPolicy("keep_newest_two", keep_newest_two),
                DoraBalancer("never", lambda ctx: []),
                DoraAdmission("newest_only", lambda ctx: not ctx.training),
            ]
    """


@hookspec
def register_rewards() -> Sequence[
    components.RewardManager | components.RewardFunction | components.ValidationMetric | components.RewardGuard
]:
    """Reward managers for verl's reward loop (``reward.reward_manager.name``), reward
    functions for ``reward.custom_reward_function`` (path ``pkg://longcat_plugins.reward_functions``)
    and validation metrics computed from the rewards of every validation pass (``ValidationMetric``).

    Example::

        @hookimpl
        def register_rewards():
            return [RewardFunction("math", compute_math_score, config=MathRewardConfig)]
    """


@hookspec
def register_environments() -> Sequence[components.AgentLoop | components.Tool]:
    """Agent loops (selected per sample by ``agent_name``) and tools (``BaseTool`` subclasses
    named in a ``multi_turn.tool_config_path`` file).

    Example::

        @hookimpl
        def register_environments():
            return [AgentLoop("tool_env", ToolEnvironmentAgentLoop)]
    """


@hookspec
def register_fusion_methods() -> Sequence[components.FusionMethod]:
    """Checkpoint-fusion methods for ``longcat-plugins fuse``. The function's keyword-only
    parameters are its config schema unless ``config`` is given.

    Example::

        @hookimpl
        def register_fusion_methods():
            return [FusionMethod("task_arithmetic", task_arithmetic)]
    """
