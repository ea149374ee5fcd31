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
#: the multi-turn tool-use loop (its episodes' rubric is the truth self-verification judges against)
TOOL_AGENT_LOOP = "longcat_tool_agent"


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
        problems += _verify_loop_problems(config, settings)
        if settings.quotas.enable:
            problems.append(f"{SETTINGS_PATH}.selfverify: not combined with quotas yet (turn one off)")
    problems += problems_for(settings.strategies, trainer, f"{SETTINGS_PATH}.strategies")
    return problems


def verify_agent_loop(config: Any, settings: DataSettings) -> str:
    """The agent loop A6's verification rows run in: ``selfverify.agent_loop`` or the run's default."""
    default = OmegaConf.select(config, "actor_rollout_ref.rollout.agent.default_agent_loop", default=None)
    return settings.selfverify.agent_loop or str(default or "single_turn_agent")


def _verify_loop_problems(config: DictConfig, settings: DataSettings) -> list[str]:
    """Verification rows are single-turn prompts: their loop must be one (a multi-turn episode
    loop would run the copied row's environment task, never the verification prompt), and next
    to tool episodes the episodes must be scored by the reward manager, as the verdicts are."""
    from longcat_plugins.data.settings import VERIFY_AGENT_LOOPS

    problems = []
    loop = verify_agent_loop(config, settings)
    if loop not in VERIFY_AGENT_LOOPS:
        problems.append(
            f"{SETTINGS_PATH}.selfverify.agent_loop: verification rows are single-turn, but they would run in "
            f"{loop!r} (actor_rollout_ref.rollout.agent.default_agent_loop); name one of {list(VERIFY_AGENT_LOOPS)}"
        )
    default = OmegaConf.select(config, "actor_rollout_ref.rollout.agent.default_agent_loop", default=None)
    if default == TOOL_AGENT_LOOP:
        key = f"longcat.settings.environment.{TOOL_AGENT_LOOP}.reward_in_loop"
        if OmegaConf.select(config, key, default=True) is not False:
            problems.append(
                f"{key}: {SETTINGS_PATH}.selfverify next to tool episodes needs reward_in_loop: false (the episodes "
                f"scored by reward.reward_manager like the verdicts, e.g. {ROUTER} routing them to 'tool_rubric'; "
                "a batch half scored in the loop and half by the reward manager has two shapes of reward info)"
            )
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


__all__ = ["BUDGETED_AGENT_LOOP", "TOOL_AGENT_LOOP", "planned_settings", "strategy_problems", "verify_agent_loop"]
