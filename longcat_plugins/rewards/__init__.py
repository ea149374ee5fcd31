"""The built-in rewards family (see SPEC.md R1-R4); exposed as plugin ``longcat.rewards`` by :mod:`longcat_plugins.builtins`."""

from __future__ import annotations

from longcat_plugins.components import Component


def components() -> list[Component]:
    """The rewards components this package ships; the family's modules are imported here, lazily."""
    from longcat_plugins.components import RewardFunction, RewardManager
    from longcat_plugins.rewards import arithmetic, code, genrm, tool_format
    from longcat_plugins.rewards import math as math_reward

    out: list[Component] = [
        RewardFunction("arithmetic", arithmetic.compute_score),
        RewardFunction("arithmetic_exact", arithmetic.compute_exact_score),
        RewardFunction("math", math_reward.compute_score, config=math_reward.MathRewardConfig),
        RewardFunction("code", code.compute_score, config=code.CodeRewardConfig),
        RewardFunction("genrm", genrm.compute_score, config=genrm.GenRMConfig),
        RewardFunction("tool_format", tool_format.compute_score, config=tool_format.ToolFormatConfig),
    ]
    try:  # the managers subclass verl's RewardManagerBase; without verl only the functions exist
        # import verl's reward-manager package first: importing it fires the bridge (which may
        # build the process-wide host and so call this function again); that must not happen
        # while the managers module is half-initialised
        import verl.experimental.reward_loop.reward_manager  # noqa: F401

        from longcat_plugins.rewards import managers
    except ImportError:
        return out
    return out + [
        RewardManager("longcat_router", managers.RouterRewardManager, config=managers.RouterConfig),
        RewardManager("longcat_math", managers.MathRewardManager),
        RewardManager("longcat_code", managers.CodeRewardManager),
        RewardManager("longcat_genrm", managers.GenRMRewardManager),
        RewardManager("longcat_tool_format", managers.ToolFormatRewardManager),
    ]
