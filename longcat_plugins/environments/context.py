"""E4 context management (report §3.3.2, App. B): when to summarise, when to discard, what to restart from.

The report's hybrid strategy: a *summary* (the model itself distils the history, ReSum-style)
whenever the context passes a token threshold (80K in the report, App. B), and a *discard-all*
reset (restart from the system prompt and the original question) when the interaction passes a
turn limit. The discard threshold follows a *progressive schedule* that "gradually increases the
discard threshold, allowing a gradual increase in the number of reasoning steps for more
challenging samples": each reset a trajectory has already taken raises the turn limit of its next
segment (and, optionally, the limit grows with the training step), up to a cap.

This module is the policy only (pure, no verl): :class:`ContextPolicy` answers "what now?" from
the context length and the turns taken in the current segment; the agent loop performs it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from longcat_plugins.bounds import bounded, check_bounds

DEFAULT_SUMMARY_INSTRUCTION = (
    "The conversation is getting long. Summarise everything needed to finish the task: the user's "
    "request, what the tools returned, what is done and what remains. Do not call tools."
)
SUMMARY_PREFIX = "Summary of the work so far:\n"


class ContextAction(str, enum.Enum):
    """What the agent loop does before its next model turn."""

    CONTINUE = "continue"
    SUMMARY = "summary"
    DISCARD = "discard"
    STOP = "stop"


@dataclass(frozen=True)
class ContextSettings:
    """The context-management knobs (fields of the agent loop's settings, see ``ToolAgentSettings``)."""

    #: summarise when the context (prompt + everything generated so far) reaches this many tokens; 0: never
    summary_threshold_tokens: int = bounded(0, ge=0)
    #: discard-all reset when a segment has taken this many model turns; 0: never
    discard_turns: int = bounded(0, ge=0)
    #: progressive schedule: the turn limit grows by this much per reset already taken
    discard_turns_growth: int = bounded(0, ge=0)
    #: ... and by this much per training step (the schedule of the whole run)
    discard_turns_growth_per_step: float = bounded(0.0, ge=0)
    #: ... never beyond this (0: no cap)
    discard_turns_max: int = bounded(0, ge=0)
    #: at most this many context restarts (summaries + discards) per trajectory; then it ends
    max_context_resets: int = bounded(4, ge=0)
    #: the user message that asks for the summary
    summary_instruction: str = DEFAULT_SUMMARY_INSTRUCTION
    #: token budget of the summary generation
    summary_max_tokens: int = bounded(256, ge=1)

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.discard_turns_max and self.discard_turns and self.discard_turns_max < self.discard_turns:
            raise ValueError(
                f"discard_turns_max ({self.discard_turns_max}) is below discard_turns ({self.discard_turns})"
            )
        if self.summary_threshold_tokens and not self.summary_instruction.strip():
            raise ValueError("summary_instruction: must not be empty when summary_threshold_tokens > 0")


class ContextPolicy:
    """Decides summary / discard / stop from the current segment's state.

    ``resets`` counts the context restarts a trajectory has taken so far (summaries and discards);
    ``global_step`` is the training step (0 outside training).
    """

    def __init__(self, settings: ContextSettings, global_step: int = 0) -> None:
        self.settings = settings
        self.global_step = max(0, int(global_step))

    def turn_limit(self, resets: int) -> int:
        """The discard threshold of a segment after ``resets`` restarts (0: no limit)."""
        s = self.settings
        if not s.discard_turns:
            return 0
        limit = (
            s.discard_turns + s.discard_turns_growth * resets + int(s.discard_turns_growth_per_step * self.global_step)
        )
        return min(limit, s.discard_turns_max) if s.discard_turns_max else limit

    def decide(self, context_tokens: int, segment_turns: int, resets: int) -> ContextAction:
        """Before a model turn: summary if the context reached the token threshold (and the segment
        has had a turn), discard if the segment reached its turn limit (the summary wins when both
        hold: it keeps more), stop when a restart is due but the trajectory has used up its restarts."""
        s = self.settings
        # a segment summarises only what it added: a restarted context that is already over the
        # threshold (long question + summary) gets its turn instead of an endless summary chain
        want_summary = (
            bool(s.summary_threshold_tokens) and context_tokens >= s.summary_threshold_tokens and segment_turns > 0
        )
        limit = self.turn_limit(resets)
        want_discard = bool(limit) and segment_turns >= limit
        if not (want_summary or want_discard):
            return ContextAction.CONTINUE
        if resets >= s.max_context_resets:
            return ContextAction.STOP
        return ContextAction.SUMMARY if want_summary else ContextAction.DISCARD


def restart_messages(
    system: dict[str, Any] | None, question: dict[str, Any], summary: str | None = None
) -> list[dict[str, Any]]:
    """The context a segment restarts from: [system, original question] (+ the summary, as a user turn)."""
    messages = [dict(system)] if system is not None else []
    messages.append(dict(question))
    if summary is not None:
        messages.append({"role": "user", "content": SUMMARY_PREFIX + summary.strip()})
    return messages
