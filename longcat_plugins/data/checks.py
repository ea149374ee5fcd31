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
        name = OmegaConf.select(config, "reward.custom_reward_function.name", default=None)
        if name != "selfverify":
            problems.append(
                f"reward.custom_reward_function.name: {SETTINGS_PATH}.selfverify needs the 'selfverify' reward "
                f"(it scores the verdicts; its setting main names the main task's reward), got {name!r}"
            )
        if settings.quotas.enable:
            problems.append(f"{SETTINGS_PATH}.selfverify: not combined with quotas yet (turn one off)")
    problems += problems_for(settings.strategies, trainer, f"{SETTINGS_PATH}.strategies")
    return problems


__all__ = ["BUDGETED_AGENT_LOOP", "planned_settings", "strategy_problems"]
