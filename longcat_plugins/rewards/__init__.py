"""The built-in rewards family (math, GenRM, code sandbox, tool-call format); exposed as plugin ``longcat.rewards`` by :mod:`longcat_plugins.builtins`."""

from __future__ import annotations

from longcat_plugins.components import Component


def components() -> list[Component]:
    """The rewards components this package ships, named by ``module:attr`` so nothing (sympy,
    verl's reward loop) is imported until a component is used."""
    from longcat_plugins.components import RewardFunction, RewardGuard, RewardManager
    from longcat_plugins.evaluation import components as evaluation_components

    mod = "longcat_plugins.rewards"
    #: (name, module, function, config class, summary)
    functions = [
        (
            "arithmetic",
            "arithmetic",
            "compute_score",
            None,
            "1.0 for the exact answer; otherwise up to 0.5 for a number close to it and for digits.",
        ),
        (
            "arithmetic_exact",
            "arithmetic",
            "compute_exact_score",
            None,
            "1.0 when the response is exactly ``The answer is <ground_truth>.``, else 0.0 (warm starts).",
        ),
        (
            "selfverify",
            "selfverify",
            "compute_score",
            "SelfVerifyRewardConfig",
            "Verification prompts: +1 right verdict, -0.5 wrong, -1 unclear; other samples: the main reward.",
        ),
        (
            "math",
            "math",
            "compute_score",
            "MathRewardConfig",
            "verl reward function: 1.0 for an answer equivalent to ``ground_truth``; invalid when uncheckable.",
        ),
        (
            "code",
            "code",
            "compute_score",
            "CodeRewardConfig",
            "verl reward function: run the response's program against ``ground_truth``'s test cases.",
        ),
        (
            "genrm",
            "genrm",
            "compute_score",
            "GenRMConfig",
            "verl reward function (async): 1.0 when the judge says the response matches the reference.",
        ),
        (
            "tool_format",
            "tool_format",
            "compute_score",
            "ToolFormatConfig",
            "verl reward function: 1.0 when every tool call is well formed and matches its schema.",
        ),
    ]
    # the managers subclass verl's RewardManagerBase (checked when the bridge registers them)
    managers = [
        (
            "longcat_router",
            "RouterRewardManager",
            "RouterConfig",
            "Dispatches each sample by ``data_source`` to a reward (multi-domain batches).",
        ),
        ("longcat_math", "MathRewardManager", None, "Every sample scored by the ``math`` reward."),
        ("longcat_code", "CodeRewardManager", None, "Every sample scored by the ``code`` sandbox reward."),
        (
            "longcat_genrm",
            "GenRMRewardManager",
            None,
            "Every sample scored by the ``genrm`` judge, through verl's reward router when enabled.",
        ),
        (
            "longcat_tool_format",
            "ToolFormatRewardManager",
            None,
            "Every sample scored by the ``tool_format`` reward.",
        ),
    ]
    out: list[Component] = [
        RewardFunction(
            name,
            f"{mod}.{module}:{fn}",
            config=f"{mod}.{module}:{config}" if config else None,
            summary=summary,
        )
        for name, module, fn, config, summary in functions
    ]
    # the tool environment's rubric, for a reward manager that scores tool episodes (the
    # longcat_tool_agent loop with reward_in_loop=false, or verl's tool_agent + EnvironmentTool)
    out.append(
        RewardFunction(
            "tool_rubric",
            "longcat_plugins.environments.episode_reward:compute_score",
            summary="verl reward function: the episode's rubric score (1.0 = every rubric item met).",
        )
    )
    out += evaluation_components()
    out.append(
        RewardGuard(
            "failures",
            f"{mod}.failures:FailureGuard",
            config=f"{mod}.failures:FailureSettings",
            summary="Rewards that raise: invalid samples, longcat/reward/failed/<name>, the run stops above a share.",
        )
    )
    return out + [
        RewardManager(
            name, f"{mod}.managers:{cls}", config=f"{mod}.managers:{config}" if config else None, summary=summary
        )
        for name, cls, config, summary in managers
    ]
