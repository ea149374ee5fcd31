"""Arithmetic rewards for the CPU demo's tasks.

``arithmetic`` (partial credit) is for a randomly initialised model, which almost never answers
exactly: an all-zero reward makes every GRPO advantage zero, so besides exact correctness (1.0)
it gives graded credit for answering with a number at all and for how close that number is.

``arithmetic_exact`` is for a warm start (:mod:`longcat_plugins.learning.arithmetic_warmstart`), which is
partly right already: 1.0 only for the one clear answer form ``The answer is N.``, else 0.0.
"""

from __future__ import annotations

import math
import re
from typing import Any

_INT = re.compile(r"-?\d+")


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, float]:
    """1.0 for the exact answer; otherwise up to 0.5 for a number close to it and for digits."""
    target = int(str(ground_truth).strip())
    numbers = _INT.findall(solution_str or "")
    if numbers and int(numbers[-1]) == target:
        return {"score": 1.0, "acc": 1.0}
    text = (solution_str or "").strip()
    digit_share = sum(ch.isdigit() for ch in text) / len(text) if text else 0.0
    closeness = math.exp(-abs(int(numbers[-1]) - target) / max(1, abs(target))) if numbers else 0.0
    return {"score": 0.25 * digit_share + 0.25 * closeness, "acc": 0.0}


#: the one answer form credited: the whole response is "The answer is N." (N an integer)
_ANSWER = re.compile(r"The answer is (-?\d+)\.")


def exact_answer(solution_str: str | None) -> str | None:
    """The integer the response clearly answers, as text, or ``None``.

    Only a response that is exactly ``The answer is N.`` (surrounding whitespace aside) counts:
    a number elsewhere, two answers, or trailing text is not a clear answer.
    """
    match = _ANSWER.fullmatch((solution_str or "").strip())
    return str(int(match.group(1))) if match else None


def compute_exact_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, float]:
    """1.0 when the response is exactly ``The answer is <ground_truth>.``, else 0.0 (warm starts).

    No partial credit: the warm-started demo's reward, where a partly right model gives GRPO its
    signal."""
    correct = exact_answer(solution_str) == str(int(str(ground_truth).strip()))
    return {"score": float(correct), "acc": float(correct)}
