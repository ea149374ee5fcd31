"""The reward of a self-verification run (A6): verdicts for verification prompts, the main reward otherwise.

Verification prompts (``data_source == "longcat_selfverify"``, added by the ``longcat_data``
trainer's self-verification phase) carry the judged rollout's true correctness as
``ground_truth`` and the two accepted verdicts in ``extra_info``; they score RISE's coupling
(+1 matching verdict, -0.5 the other verdict, -1 no clear verdict). Every other sample is scored
by the main reward function named in ``main`` (any enabled reward function), unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from longcat_plugins.data.selfverify import DATA_SOURCE, REWARD_RIGHT, parse_verdict, verification_reward


@dataclass(frozen=True)
class SelfVerifyRewardConfig:
    """Settings of the ``selfverify`` reward (``longcat.settings.reward.selfverify``).

    Attributes:
        main: the reward function that scores the main task's samples.
    """

    main: str = "arithmetic_exact"

    def __post_init__(self) -> None:
        if not self.main or self.main == "selfverify":
            raise ValueError(f"main: must name another reward function, got {self.main!r}")


def check_config(cfg: Any) -> list[str]:
    """Before Ray: ``main`` must name a reward function the recipe enables (other than this one);
    on the reward worker an unknown name fails every main-task sample."""
    from longcat_plugins.config import host_for_section, to_plain

    section = (to_plain(cfg) or {}).get("longcat") or {}
    settings = ((section.get("settings") or {}).get("reward") or {}).get("selfverify") or {}
    main = settings.get("main", SelfVerifyRewardConfig.main)
    names = sorted(
        c.name for c in host_for_section(section).components(kind="reward_function") if c.name != "selfverify"
    )
    if isinstance(main, str) and main and main not in names:
        return [
            f"longcat.settings.reward.selfverify.main: {main!r} is not an enabled reward function; choices: {', '.join(names)}"
        ]
    return []


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, float]:
    """Verification prompts: +1 right verdict, -0.5 wrong, -1 unclear; other samples: the main reward."""
    from longcat_plugins.host import get_host, settings_with_overrides

    if data_source == DATA_SOURCE:
        info = extra_info or {}
        verdict = parse_verdict(solution_str, str(info["selfverify_correct"]), str(info["selfverify_incorrect"]))
        reward = verification_reward(verdict, str(ground_truth))
        return {"score": reward, "acc": float(reward == REWARD_RIGHT)}
    cfg = settings_with_overrides("reward", "selfverify", SelfVerifyRewardConfig, kwargs)
    main = get_host().get("reward", cfg.main, kind="reward_function").target
    rest = {k: v for k, v in kwargs.items() if k != "main"}
    result = main(
        data_source=data_source, solution_str=solution_str, ground_truth=ground_truth, extra_info=extra_info, **rest
    )
    if isinstance(result, dict):
        return {"acc": float(result["score"]), **result}
    return {"score": float(result), "acc": float(result)}


#: the recipe check validation runs when ``reward.custom_reward_function`` selects this reward
compute_score.check_config = check_config  # type: ignore[attr-defined]
