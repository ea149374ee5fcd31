"""On-policy self-verification (A6, 2601 report §3.3.1): the policy judges its own rollouts.

When the main task's running reward stagnates (:class:`PlateauDetector`), a verification phase
starts: each step of the phase adds prompts made from the policy's own recent rollouts (the
problem and one candidate solution) to the same batch as the main prompts, and the policy must
answer with exactly one of two verdicts. The verification reward is coupled to the true
correctness of the judged rollout (its own outcome reward), as in RISE (Liu et al., "Trust, But
Verify", arXiv 2505.13445; public code xyliu-cs/RISE, built on verl): +1 for the verdict that
matches the truth, -0.5 for the other verdict, -1 for any response that is not exactly one
verdict. Candidates come from the hardest recent tasks first (the report: "verification is
emphasized on challenging cases"), in pairs of one incorrect and one correct solution, so that
a constant verdict is right on half of them at most (a mean reward of 0.25 against 1 for judging).

The phase ends by its own rule: after ``max_steps`` steps that trained verification samples, or
earlier once a step's verification accuracy reaches ``exit_accuracy`` (verification has been
learned), or once ``wait_steps`` of its steps in a row trained none (a streaming trainer trains
a prompt a step or more after issuing it, and its online filter drops a verification group whose
verdicts all agree: no signal); the detector then starts a fresh history, so a new phase needs
``2 × window`` new steps of stagnation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from longcat_plugins.data.settings import SelfVerifySettings

PREFIX = "longcat/selfverify"
#: the ``data_source`` of a verification prompt (the reward function dispatches on it)
DATA_SOURCE = "longcat_selfverify"
CORRECT, INCORRECT = "correct", "incorrect"
#: RISE's verification rewards: matching verdict, wrong verdict, no clear verdict
REWARD_RIGHT, REWARD_WRONG, REWARD_UNPARSEABLE = 1.0, -0.5, -1.0


class PlateauDetector:
    """Fires when the mean of the last ``window`` values rose by less than ``min_delta`` over the
    mean of the ``window`` values before them (needs ``2 × window`` values since the last reset)."""

    def __init__(self, window: int, min_delta: float) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self.min_delta = min_delta
        self.history: list[float] = []

    def observe(self, value: float) -> bool:
        """Add one step's running reward; whether the reward has plateaued now."""
        self.history.append(float(value))
        self.history = self.history[-2 * self.window :]
        return self.plateaued()

    def plateaued(self) -> bool:
        w = self.window
        if len(self.history) < 2 * w:
            return False
        before = sum(self.history[:w]) / w
        recent = sum(self.history[w:]) / w
        return recent - before < self.min_delta

    def reset(self) -> None:
        self.history = []


def parse_verdict(response: str | None, correct: str, incorrect: str) -> str | None:
    """``correct`` / ``incorrect`` when the whole response (whitespace aside) is that verdict, else
    ``None``: a verdict inside other text, or both, is not a clear verdict."""
    text = (response or "").strip()
    if text == correct.strip():
        return CORRECT
    if text == incorrect.strip():
        return INCORRECT
    return None


def fill_prompt(template: str, problem: str, solution: str) -> str:
    """A verification prompt: ``template`` with its ``{problem}`` and ``{solution}`` slots filled
    (plain replacement: a problem or solution holding braces is shown as it is)."""
    return template.replace("{problem}", problem).replace("{solution}", solution)


def verification_reward(verdict: str | None, target: str) -> float:
    """RISE's coupling: +1 when the verdict is the judged rollout's true correctness, -0.5 when it
    is the other verdict, -1 when there is no clear verdict."""
    if target not in (CORRECT, INCORRECT):
        raise ValueError(f"verification target must be {CORRECT!r} or {INCORRECT!r}, got {target!r}")
    if verdict is None:
        return REWARD_UNPARSEABLE
    return REWARD_RIGHT if verdict == target else REWARD_WRONG


@dataclass(frozen=True)
class Judged:
    """A main-task rollout the policy may be asked to judge: task, problem text, response, truth."""

    task: str
    step: int
    problem: str
    solution: str
    correct: bool
    group_accuracy: float


def pick_candidates(pool: Sequence[Judged], k: int) -> list[Judged]:
    """Up to ``k`` rollouts to judge, as pairs of one incorrect and one correct solution (so a
    constant verdict is right half the time at most), hardest tasks first (lowest group accuracy,
    then newest step, then task id); no response twice. No pair, no verification prompt."""
    seen: set[tuple[str, str]] = set()
    unique = []
    for j in sorted(pool, key=lambda j: (j.group_accuracy, -j.step, j.task, j.solution)):
        if (j.problem, j.solution) not in seen:
            seen.add((j.problem, j.solution))
            unique.append(j)
    wrong = [j for j in unique if not j.correct]
    right = [j for j in unique if j.correct]
    pairs = min(k // 2, len(wrong), len(right))
    return [j for i in range(pairs) for j in (wrong[i], right[i])]


class SelfVerification:
    """The phase's state: the plateau detector, the pool of recent rollouts, the phase itself."""

    def __init__(self, settings: SelfVerifySettings) -> None:
        self.settings = settings
        self.detector = PlateauDetector(settings.window, settings.min_delta)
        self.pool: list[Judged] = []
        self.active = False
        self.phase_steps = 0
        self.waited = 0
        self.phases = 0

    def prompt(self, judged: Judged) -> str:
        return fill_prompt(self.settings.prompt, judged.problem, judged.solution)

    def to_judge(self, k: int | None = None) -> list[Judged]:
        """The rollouts this step's verification prompts show (none outside a phase)."""
        if not self.active:
            return []
        return pick_candidates(self.pool, self.settings.tasks if k is None else k)

    def observe(
        self,
        step: int,
        main_rewards: Sequence[float],
        verify_rewards: Sequence[float],
        rollouts: Sequence[Judged],
        verify_filtered: Sequence[float] = (),
    ) -> dict[str, float]:
        """One trained step: the main rewards feed the detector, the verification rewards (trained,
        and ``verify_filtered``: judged, but dropped by online filtering for want of signal) the
        phase's end rule, the main rollouts the candidate pool. Returns ``longcat/selfverify/*``."""
        s = self.settings
        metrics: dict[str, float] = {f"{PREFIX}/phase": float(self.active)}
        finite = [r for r in main_rewards if math.isfinite(r)]
        mean_reward = sum(finite) / len(finite) if finite else 0.0
        metrics[f"{PREFIX}/main_reward"] = mean_reward
        verify_acc = None
        judged = [*verify_rewards, *verify_filtered]
        if judged:
            verify_acc = sum(r == REWARD_RIGHT for r in judged) / len(judged)
            metrics[f"{PREFIX}/verify_accuracy"] = verify_acc
            metrics[f"{PREFIX}/verify_unparseable"] = sum(r == REWARD_UNPARSEABLE for r in judged) / len(judged)
            metrics[f"{PREFIX}/verify_samples"] = float(len(verify_rewards))
            metrics[f"{PREFIX}/verify_filtered"] = float(len(verify_filtered))
        self.pool = [j for j in self.pool if j.step > step - s.recent_steps] + [
            j for j in rollouts if j.step > step - s.recent_steps
        ]
        started = ended = expired = False
        if self.active:
            if verify_rewards:
                self.phase_steps += 1
                self.waited = 0
            else:
                self.waited += 1
            expired = self.waited >= s.wait_steps
            learned = verify_acc is not None and verify_acc >= s.exit_accuracy
            if self.phase_steps >= s.max_steps or learned or expired:
                self.active, ended = False, True
                self.detector.reset()
        elif self.detector.observe(mean_reward) and self.pool:
            self.active, started = True, True
            self.phase_steps = self.waited = 0
            self.phases += 1
        metrics[f"{PREFIX}/phase_started"] = float(started)
        metrics[f"{PREFIX}/phase_ended"] = float(ended)
        metrics[f"{PREFIX}/phase_expired"] = float(expired)
        metrics[f"{PREFIX}/phase_next"] = float(self.active)
        metrics[f"{PREFIX}/phases"] = float(self.phases)
        metrics[f"{PREFIX}/pool"] = float(len(self.pool))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "history": list(self.detector.history),
            "pool": [asdict(j) for j in self.pool],
            "active": self.active,
            "phase_steps": self.phase_steps,
            "waited": self.waited,
            "phases": self.phases,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.detector.history = [float(x) for x in state["history"]]
        self.pool = [Judged(**j) for j in state["pool"]]
        self.active = bool(state["active"])
        self.phase_steps = int(state["phase_steps"])
        self.waited = int(state.get("waited", 0))
        self.phases = int(state["phases"])


__all__ = [
    "DATA_SOURCE",
    "Judged",
    "PlateauDetector",
    "SelfVerification",
    "fill_prompt",
    "parse_verdict",
    "pick_candidates",
    "verification_reward",
]
