"""Math verification: extract the final answer, then check equivalence under a hard time limit.

``compute_score`` is a verl ``custom_reward_function``. Scores: ``correct_score`` when the
answer is equivalent to the reference, ``incorrect_score`` when it is not (or there is no
answer); NaN and ``longcat_reward_valid = 0`` when the check timed out, crashed, or the
reference itself cannot be parsed, so the sample is masked rather than punished.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from longcat_plugins.bounds import bounded, check_bounds
from longcat_plugins.rewards.math.extract import MAX_ANSWER_CHARS, MAX_RESPONSE_CHARS, AnswerTooLong, extract_answer
from longcat_plugins.rewards.plain import plain
from longcat_plugins.rewards.result import invalid, scored

__all__ = ["MathRewardConfig", "compute_score", "extract_answer", "verify"]


@dataclass(frozen=True)
class MathRewardConfig:
    """Settings of the ``math`` reward (``longcat.settings.reward.math``)."""

    #: per sample, all references together; a timed-out check returns at once (the replacement
    #: is forked in the background), so the caller waits at most this plus a few ms
    timeout_s: float = bounded(1.5, gt=0)
    workers: int = bounded(2, ge=1)
    memory_mb: int = bounded(2048, gt=0)
    correct_score: float = 1.0
    incorrect_score: float = 0.0
    #: uid the sympy workers drop to when the reward worker runs as root; -1 keeps root
    drop_uid: int = bounded(65534, ge=-1)
    #: longer responses, or longer extracted answers, are invalid (never truncated and guessed at)
    max_response_chars: int = bounded(MAX_RESPONSE_CHARS, ge=1)
    max_answer_chars: int = bounded(MAX_ANSWER_CHARS, ge=1)

    def __post_init__(self) -> None:
        check_bounds(self)
        for name in ("correct_score", "incorrect_score"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if not self.correct_score > self.incorrect_score:
            raise ValueError(
                f"correct_score ({self.correct_score}) must be above incorrect_score ({self.incorrect_score}): "
                "otherwise a right answer earns no more than a wrong one"
            )


def verify(
    pred: str, gold: str, config: MathRewardConfig | None = None, timeout_s: float | None = None
) -> tuple[str, str]:
    """(verdict, detail) for one pair under the hard limit: equal, different, timeout, error, unparsable_reference.

    Raises :class:`~longcat_plugins.rewards.result.RewardSetupError` when the check workers
    cannot start or fail their canary pairs (never a silent stream of invalid samples).
    """
    from longcat_plugins.rewards.math.pool import shared_pool

    cfg = config or MathRewardConfig()
    pool = shared_pool(cfg.workers, cfg.memory_mb, None if cfg.drop_uid < 0 else cfg.drop_uid)
    return pool.check(pred, gold, cfg.timeout_s if timeout_s is None else timeout_s)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl reward function: 1.0 for an answer equivalent to ``ground_truth``; invalid when uncheckable.

    Raises :class:`~longcat_plugins.rewards.result.RewardSetupError` when the check pool cannot work here.
    """
    from longcat_plugins.host import settings_with_overrides  # lazily, as the reward module imports without the host

    cfg = settings_with_overrides("reward", "math", MathRewardConfig, kwargs)
    ground_truth = plain(ground_truth)
    if ground_truth is None or (isinstance(ground_truth, str) and not ground_truth.strip()):
        return invalid(f"math reward: empty ground_truth for data_source {data_source!r}")
    golds = [str(g) for g in ground_truth] if isinstance(ground_truth, list | tuple) else [str(ground_truth)]
    try:
        pred = extract_answer(solution_str or "", cfg.max_response_chars, cfg.max_answer_chars)
    except AnswerTooLong as exc:
        return invalid(f"math reward: {exc}")
    if pred is None:
        return scored(cfg.incorrect_score, acc=0.0)
    errors = []
    deadline = time.monotonic() + cfg.timeout_s  # one budget for all references: the bound is per sample
    for gold in golds:
        try:
            gold_answer = (
                extract_answer(gold, cfg.max_response_chars, cfg.max_answer_chars)
                if "\\boxed" in gold or "####" in gold  # a worked solution (MATH, GSM8K): its final answer
                else gold
            )
        except AnswerTooLong as exc:
            return invalid(f"math reward: reference: {exc}")
        left = deadline - time.monotonic()
        if left <= 0:
            errors.append(f"timeout: no time left for reference {gold[:40]!r} within timeout_s={cfg.timeout_s:g}")
            continue
        verdict, detail = verify(pred, gold_answer or gold, cfg, timeout_s=left)
        if verdict == "equal":
            return scored(cfg.correct_score, acc=1.0)
        if verdict != "different":
            errors.append(f"{verdict}: {detail}")
    if errors and len(errors) == len(golds):
        return invalid("math reward: " + "; ".join(errors))
    return scored(cfg.incorrect_score, acc=0.0)
