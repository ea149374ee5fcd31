"""The built-in schedulers family (DORA: first report, "DORA"; 2601 report §3.2); exposed as plugin ``longcat.schedulers`` by :mod:`longcat_plugins.builtins`."""

from __future__ import annotations

from longcat_plugins.components import Component


def components() -> list[Component]:
    """The schedulers components this package ships; the family's modules are imported here, lazily."""
    from longcat_plugins.components import Sampler, SchedulePolicy, Trainer

    try:  # the verl integration subclasses verl's trainer, replay buffer and schedule policy
        # import verl's registries first: importing them fires the bridge (which may build the
        # process-wide host and so call this function again) before our modules are half-initialised
        import verl.experimental.fully_async_policy.dynamic_schedule.base  # noqa: F401
        import verl.trainer.ppo.v1.trainer_base  # noqa: F401

        from longcat_plugins.schedulers import elastic, sampler, settings, trainer
    except ImportError:
        return []
    return [
        Trainer("dora", trainer.DoraTrainer, config=settings.DoraSettings),
        Sampler("dora_versions", sampler.DoraReplayBuffer),
        SchedulePolicy("dora_elastic", elastic.DoraSchedulePolicy),
    ]
