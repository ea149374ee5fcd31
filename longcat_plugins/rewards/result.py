"""The one shape every longcat reward returns, so validity survives verl's reward loop.

verl stacks ``reward_extra_info`` into arrays keyed by the *first* sample's keys
(``RewardLoopManager.compute_rm_score`` and the agent loop both do ``info[key]`` for every
sample), so every sample of a batch must carry the same keys. An invalid sample (the reward
could not be computed: timeout, sandbox error, unreachable judge) has score NaN, never 0,
and ``longcat_reward_valid = 0.0``; the algorithm family masks it out of the loss. A reward
that *raised* is also invalid, and ``longcat_reward_failed = 1.0`` marks it, so a broken
reward is counted apart from one that could not decide (:mod:`.failures`).
"""

from __future__ import annotations

import math
from typing import Any

VALID_KEY = "longcat_reward_valid"
ERROR_KEY = "longcat_reward_error"
NAME_KEY = "longcat_reward_name"
#: 1.0 when the reward raised (a bug or a dead dependency), 0.0 otherwise; see :mod:`.failures`
FAILED_KEY = "longcat_reward_failed"
#: how much of a failure's traceback travels with the sample (its tail: the frames that raised)
TRACEBACK_CHARS = 2000

#: keys every longcat reward returns (besides ``score``); the router returns exactly these
STANDARD_KEYS: tuple[str, ...] = ("acc", VALID_KEY, ERROR_KEY)


class RewardSetupError(RuntimeError):
    """A reward cannot work at all in this process (e.g. its check workers fail their canaries).

    Raised, never turned into invalid samples: masking every sample would train on nothing, silently.
    """


def scored(score: float, acc: float | None = None, **extra: Any) -> dict[str, Any]:
    """A computed result: ``score`` counts, ``acc`` defaults to ``score >= 1``."""
    return {
        "score": float(score),
        "acc": float(score >= 1.0) if acc is None else float(acc),
        VALID_KEY: 1.0,
        ERROR_KEY: "",
        **extra,
    }


def invalid(error: str, **extra: Any) -> dict[str, Any]:
    """A result that could not be computed: NaN score, valid flag 0, the reason in ``error``."""
    return {"score": float("nan"), "acc": 0.0, VALID_KEY: 0.0, ERROR_KEY: str(error)[:500], **extra}


def failed(name: str, exc: BaseException) -> dict[str, Any]:
    """The result for a reward that raised: invalid (NaN), ``longcat_reward_failed = 1.0`` and
    the exception with the tail of its traceback in ``longcat_reward_error``."""
    import traceback

    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    head = f"{name}: {type(exc).__name__}: {exc}"[:300]
    return {**invalid(""), ERROR_KEY: f"{head}\n{tb[-TRACEBACK_CHARS:]}", FAILED_KEY: 1.0}


def is_valid(result: dict[str, Any]) -> bool:
    """True when ``result`` carries a computed (finite) score."""
    return bool(result.get(VALID_KEY, 1.0)) and math.isfinite(float(result["score"]))
