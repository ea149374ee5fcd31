"""The built-in schedulers family (DORA: first report, "DORA"; 2601 report §3.2); exposed as plugin ``longcat.schedulers`` by :mod:`longcat_plugins.builtins`."""

from __future__ import annotations

from longcat_plugins.components import Component


def components() -> list[Component]:
    """The schedulers components this package ships, named by ``module:attr``: the verl
    integration (subclasses of verl's trainer, replay buffer and schedule policy) is imported
    only when verl's registry or a recipe uses it."""
    from longcat_plugins.components import (
        DoraAdmission,
        DoraBalancer,
        DoraEvictionPolicy,
        Sampler,
        SchedulePolicy,
        Trainer,
    )

    mod = "longcat_plugins.schedulers"
    return [
        Trainer(
            "dora",
            f"{mod}.trainer:DoraTrainer",
            config=f"{mod}.settings:DoraSettings",
            summary="Multi-version streaming trainer: one version per sample, version-bounded staleness.",
        ),
        Sampler(
            "dora_versions",
            f"{mod}.sampler:DoraReplayBuffer",
            summary="``ReplayBufferAsync`` deciding with the DORA core: version bound, online filter, domain mix.",
        ),
        Trainer(
            "longcat_data",
            "longcat_plugins.data.trainer:LongcatDataTrainer",
            config="longcat_plugins.data.settings:DataSettings",
            summary=(
                "verl's sync v1 trainer with planned prompts: budgets, oversampled groups, curricula, replay, quotas."
            ),
        ),
        # DORA's policies: selected by name like any plugin's (schedulers.core.registry)
        DoraEvictionPolicy(
            "staleness_window",
            f"{mod}.core.versions:staleness_window",
            summary="Evict versions no sample of which could still be trained fresh (``v < latest - staleness``).",
        ),
        DoraEvictionPolicy(
            "idle_or_stale",
            f"{mod}.core.versions:idle_or_stale",
            summary="``staleness_window`` plus every older version with no active work (frees memory early).",
        ),
        DoraBalancer(
            "greedy",
            f"{mod}.core.balancer:greedy",
            summary="Move newest requests from the most to the least loaded instance once the load spread reaches the threshold.",
        ),
        DoraBalancer(
            "none",
            f"{mod}.core.balancer:no_balancing",
            summary="Never migrate; the cap then stays at ``cap_before_rebalance`` for the whole step.",
        ),
        # admission ``none`` is the setting's own value (no policy asked): component names are unique
        # per family, and the balancer ``none`` has it
        DoraAdmission(
            "version_window",
            f"{mod}.core.admission:version_window",
            summary="Start only on a version with at least ``window`` later batches left in its window.",
        ),
        DoraAdmission(
            "length_aware",
            f"{mod}.core.admission:length_aware",
            summary="Start a prompt only on a version with enough window left to finish it (its length history).",
        ),
        SchedulePolicy(
            "dora_elastic",
            f"{mod}.elastic:DoraSchedulePolicy",
            summary="verl fully-async ``dynamic_schedule`` policy driven by :class:`ElasticColocationPolicy`.",
        ),
    ]
