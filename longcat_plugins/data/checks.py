"""What stops a planned run before Ray, under whichever trainer runs the planner.

:func:`strategy_problems` checks the strategies of ``longcat.settings.scheduler.longcat_data``
against the rest of the configuration (budgets against the batch, the context curriculum's
agent loop, the self-verification reward, plugin strategies by name and by trainer); each
trainer adds what is its own (``longcat_data``: v1, one batch per step; ``dora``: which
strategies its sampler runs instead). Every problem names its key path.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from longcat_plugins.data.settings import SETTINGS_PATH, DataSettings
from longcat_plugins.data.strategy import problems_for

#: the agent loop that applies a per-request response budget (D6)
BUDGETED_AGENT_LOOP = "longcat_single_turn"
#: the reward manager that routes samples to rewards by data source
ROUTER = "longcat_router"


def planned_settings(config: DictConfig) -> DataSettings | None:
    """The strategies' settings in ``config``; ``None`` when they are invalid (the settings
    check reports those with their key path)."""
    raw = OmegaConf.select(config, SETTINGS_PATH, default=None)
    try:
        data: Any = OmegaConf.to_container(raw, resolve=True) if raw is not None else {}
        return DataSettings(**data)
    except (TypeError, ValueError):
        return None


def strategy_problems(config: DictConfig, settings: DataSettings, trainer: str) -> list[str]:
    """Problems of the enabled strategies in ``config`` under ``trainer``, each naming its key."""
    problems: list[str] = []
    batch, n = int(config.data.train_batch_size), int(config.actor_rollout_ref.rollout.n)
    b = settings.budget
    if b.enable:
        budget = b.budget or batch * n
        if budget < b.n_min:
            problems.append(f"{SETTINGS_PATH}.budget.budget: {budget} rollouts cannot give one task n_min={b.n_min}")
    ctx = settings.context
    if ctx.enable:
        limit = int(config.data.max_response_length)
        if max(ctx.budgets) > limit:
            problems.append(
                f"{SETTINGS_PATH}.context.budgets: the largest budget {max(ctx.budgets)} exceeds "
                f"data.max_response_length ({limit}), the rollout's ceiling"
            )
        agent = config.actor_rollout_ref.rollout.agent.get("default_agent_loop", None)
        if agent != BUDGETED_AGENT_LOOP:
            problems.append(
                f"actor_rollout_ref.rollout.agent.default_agent_loop: {SETTINGS_PATH}.context needs the "
                f"{BUDGETED_AGENT_LOOP!r} agent loop (it applies the per-request budget), got {agent!r}"
            )
    if settings.selfverify.enable:
        problems += _verdict_reward_problems(config)
        if settings.quotas.enable:
            problems.append(f"{SETTINGS_PATH}.selfverify: not combined with quotas yet (turn one off)")
    problems += problems_for(settings.strategies, trainer, f"{SETTINGS_PATH}.strategies")
    return problems


def _verdict_reward_problems(config: DictConfig) -> list[str]:
    """A6's verification rows need the ``selfverify`` reward: as the custom reward function, or
    as the reward router's route for their data source."""
    import fnmatch

    from longcat_plugins.data.selfverify import DATA_SOURCE

    if OmegaConf.select(config, "reward.reward_manager.name", default=None) == ROUTER:
        routes = OmegaConf.select(config, f"longcat.settings.reward.{ROUTER}.routes", default=None) or {}
        routed = next((r for pat, r in dict(routes).items() if fnmatch.fnmatchcase(DATA_SOURCE, str(pat))), None)
        if routed != "selfverify":
            return [
                f"longcat.settings.reward.{ROUTER}.routes: {SETTINGS_PATH}.selfverify needs the data source "
                f"{DATA_SOURCE!r} routed to the 'selfverify' reward (it scores the verdicts), it goes to {routed!r}"
            ]
        return []
    name = OmegaConf.select(config, "reward.custom_reward_function.name", default=None)
    if name != "selfverify":
        return [
            f"reward.custom_reward_function.name: {SETTINGS_PATH}.selfverify needs the 'selfverify' reward "
            f"(it scores the verdicts; its setting main names the main task's reward), got {name!r}"
        ]
    return []


__all__ = ["BUDGETED_AGENT_LOOP", "planned_settings", "strategy_problems"]
