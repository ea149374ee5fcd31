"""Heavy thinking (2601 report §4, Figs 10-11): width K parallel reasoning, then a summary over the answers.

verl-free on purpose: the agent loop (:mod:`._heavy_agent_loop`) and the bench
(``bench/bench_heavy_thinking.py``) run the same orchestration, :func:`heavy_think`, over their own
``generate`` (verl's rollout server there, in-process transformers here).

One round: K trajectories generated concurrently from the context memory's messages; each
trajectory's *answer* (its text after the reasoning, :func:`answer_of`) is cut to
``answer_max_chars`` and laid out by the summary template (:func:`summary_messages`); the summary
stage writes the final response in the parallel stage's own format, which the memory appends as
the assistant turn. Depth: ``rounds`` > 1 asks again (``refine_prompt``) with that history, so the
next round's K trajectories see the previous final answer.

Reward crediting (:func:`credit`): every training output is credited with the task reward of the
answer it wrote itself: a parallel trajectory with its own answer's reward, the summary with the
final answer's. The final answer's reward never reaches a parallel trajectory (see docs/environments.md).
"""

from __future__ import annotations

import asyncio
import random
import string
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

AGENT_NAME = "longcat_heavy_thinking"
#: the summary template's required slot: the K answers, laid out by :func:`answers_block`
ANSWERS_SLOT = "answers"
#: the template's optional slot: the current user message (the question)
QUESTION_SLOT = "question"
#: what an empty answer (a trajectory cut inside its reasoning, or silent) shows to the summary
NO_ANSWER = "(no answer)"

DEFAULT_SUMMARY_TEMPLATE = "{question}\nCandidate answers:\n{answers}\nGive the final answer."
DEFAULT_REFINE_PROMPT = "Check the answer above and answer again."


@dataclass(frozen=True)
class HeavyThinkingSettings:
    """Settings of ``longcat_heavy_thinking`` (``longcat.settings.environment.longcat_heavy_thinking``)."""

    #: width: parallel reasoning trajectories per round
    k: int = 4
    #: depth: rounds of (K parallel trajectories, summary); round r > 1 sees round r-1's final answer
    rounds: int = 1
    #: the summary stage's user message; ``{answers}`` (required) gets the K answers, ``{question}``
    #: (optional) the current user message
    summary_template: str = DEFAULT_SUMMARY_TEMPLATE
    #: the user message that opens rounds 2.. (after the previous round's final answer)
    refine_prompt: str = DEFAULT_REFINE_PROMPT
    #: an answer longer than this is cut to its last ``answer_max_chars`` characters (the
    #: conclusion is at the end), marked with a leading "..."
    answer_max_chars: int = 400
    #: the marker that ends a trajectory's reasoning; the answer is the text after its last
    #: occurrence (empty: the whole response is the answer)
    think_end: str = "</think>"
    #: "index" (trajectory order) or "shuffle" (a permutation per round, seeded per sample:
    #: the summary cannot learn a position bias)
    answer_order: str = "index"
    #: response budget of a parallel trajectory / of the summary (0: ``rollout.response_length``)
    parallel_max_tokens: int = 0
    summary_max_tokens: int = 0
    #: train the parallel trajectories too (verl's v1 trainer: several outputs per sample);
    #: False, or the legacy trainer: the summary of the last round only
    train_parallel: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k: the width must be an integer >= 1, got {self.k!r}")
        if not isinstance(self.rounds, int) or self.rounds < 1:
            raise ValueError(f"rounds: the depth must be an integer >= 1, got {self.rounds!r}")
        slots = template_slots(self.summary_template, "summary_template")
        if ANSWERS_SLOT not in slots:
            raise ValueError(
                f"summary_template: needs the answer slot {{{ANSWERS_SLOT}}} (the K answers go there), "
                f"got {self.summary_template!r}"
            )
        unknown = slots - {ANSWERS_SLOT, QUESTION_SLOT}
        if unknown:
            raise ValueError(
                f"summary_template: unknown slot(s) {', '.join(sorted(unknown))}; "
                f"only {{{ANSWERS_SLOT}}} and {{{QUESTION_SLOT}}}"
            )
        if self.rounds > 1 and not self.refine_prompt.strip():
            raise ValueError("refine_prompt: must not be empty when rounds > 1")
        if self.answer_max_chars < 1:
            raise ValueError(f"answer_max_chars: must be >= 1, got {self.answer_max_chars}")
        if self.answer_order not in ("index", "shuffle"):
            raise ValueError(f"answer_order: must be 'index' or 'shuffle', got {self.answer_order!r}")
        for name in ("parallel_max_tokens", "summary_max_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0 (0: the rollout's response length), got {getattr(self, name)}")


def template_slots(template: str, key: str) -> set[str]:
    """The ``{name}`` slots of a ``str.format`` template; a ValueError naming ``key`` if it does not parse."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"{key}: not a valid template ({exc}); write a literal brace as {{{{ or }}}}") from exc
    slots = set()
    for _, name, _, _ in parsed:
        if name is None:
            continue
        if not name.isidentifier():
            raise ValueError(f"{key}: slot {{{name}}} is not a plain name")
        slots.add(name)
    return slots


# -- the summary's input ----------------------------------------------------------------------------


def answer_of(response: str, think_end: str = "</think>") -> str:
    """The answer content of a trajectory: the text after its reasoning, stripped.

    With ``think_end`` set, a response that opens its reasoning but never closes it has no answer
    (it was cut while thinking); a response without reasoning markers is all answer.
    """
    text = response.strip()
    if think_end:
        if think_end in text:
            return text.rsplit(think_end, 1)[1].strip()
        opener = "<" + think_end[2:] if think_end.startswith("</") else None
        if opener and opener in text:
            return ""
    return text


def truncate_answer(answer: str, max_chars: int) -> str:
    """``answer`` cut to its last ``max_chars`` characters (the conclusion), marked with "..."."""
    if len(answer) <= max_chars:
        return answer
    return "..." + answer[len(answer) - max_chars :]


def answer_order(k: int, order: str, rng: random.Random | None) -> list[int]:
    """Indices of the K answers in the order the summary sees them."""
    indices = list(range(k))
    if order == "shuffle":
        (rng or random.Random(0)).shuffle(indices)
    return indices


def answers_block(answers: Sequence[str], order: Sequence[int]) -> str:
    """The K answers as the summary sees them: one numbered line per answer, in ``order``."""
    return "\n".join(f"({n}) {answers[i] or NO_ANSWER}" for n, i in enumerate(order, start=1))


def summary_messages(
    history: Sequence[dict[str, Any]], answers: Sequence[str], settings: HeavyThinkingSettings, order: Sequence[int]
) -> list[dict[str, Any]]:
    """The summary stage's messages: the history before the current user turn, then that turn
    rewritten by the template around the K answers (answers only, each cut to ``answer_max_chars``)."""
    if not history or history[-1].get("role") != "user":
        raise ValueError("heavy thinking: the context must end with a user message")
    cut = [truncate_answer(a, settings.answer_max_chars) for a in answers]
    content = settings.summary_template.format(
        **{QUESTION_SLOT: str(history[-1].get("content", "")), ANSWERS_SLOT: answers_block(cut, order)}
    )
    return [dict(m) for m in history[:-1]] + [{"role": "user", "content": content}]


# -- the context memory ----------------------------------------------------------------------------


@dataclass
class ContextMemory:
    """The multi-turn history (Fig. 11): the conversation so far, to which each round's final
    response is appended as the assistant turn (it has the parallel stage's format, so it
    concatenates directly); the parallel stage and the summary both read it."""

    messages: list[dict[str, Any]] = field(default_factory=list)

    def append_final(self, response: str) -> None:
        self.messages.append({"role": "assistant", "content": response})

    def ask(self, content: str) -> None:
        self.messages.append({"role": "user", "content": content})


# -- the orchestration ------------------------------------------------------------------------------


class Generation(Protocol):
    """What a ``generate`` call returns: at least the decoded response."""

    text: str


#: ``generate(messages, max_tokens, tag)``: one trajectory from these messages (``tag`` names it,
#: e.g. for request ids: ``r0-p2``, ``r0-summary``)
Generate = Callable[[list[dict[str, Any]], int, str], Awaitable[Any]]


@dataclass
class RoundTrace:
    """One round: the K parallel generations, their answers, the summary's messages and generation."""

    parallel: list[Any]
    answers: list[str]
    order: list[int]
    summary_messages: list[dict[str, Any]]
    summary: Any

    @property
    def final(self) -> str:
        return str(self.summary.text)


@dataclass
class HeavyTrace:
    rounds: list[RoundTrace]
    memory: ContextMemory

    @property
    def final(self) -> str:
        return self.rounds[-1].final


async def heavy_think(
    messages: Sequence[dict[str, Any]],
    generate: Generate,
    settings: HeavyThinkingSettings,
    parallel_max_tokens: int,
    summary_max_tokens: int,
    rng: random.Random | None = None,
) -> HeavyTrace:
    """Run ``settings.rounds`` rounds of K concurrent trajectories plus a summary over ``messages``."""
    memory = ContextMemory([dict(m) for m in messages])
    rounds: list[RoundTrace] = []
    for r in range(settings.rounds):
        if r > 0:
            memory.ask(settings.refine_prompt)
        context = [dict(m) for m in memory.messages]
        parallel = list(
            await asyncio.gather(*(generate(context, parallel_max_tokens, f"r{r}-p{j}") for j in range(settings.k)))
        )
        answers = [answer_of(str(g.text), settings.think_end) for g in parallel]
        order = answer_order(settings.k, settings.answer_order, rng)
        prompt = summary_messages(memory.messages, answers, settings, order)
        summary = await generate(prompt, summary_max_tokens, f"r{r}-summary")
        memory.append_final(str(summary.text))
        rounds.append(RoundTrace(parallel, answers, order, prompt, summary))
    return HeavyTrace(rounds, memory)


# -- reward crediting -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credit:
    """The reward of one training output and what it is: ``role`` parallel/summary, ``round``, ``index``."""

    role: str
    round: int
    index: int
    reward: float


def credit(parallel_rewards: Sequence[Sequence[float]], summary_rewards: Sequence[float]) -> list[Credit]:
    """Each output's reward, in output order (per round: K parallel, then the summary).

    ``parallel_rewards[r][j]`` is the task reward of trajectory j's own answer in round r,
    ``summary_rewards[r]`` that of round r's summary (the last one is the final answer). Every
    output keeps the reward of what it wrote: the final answer's reward goes to the summary only.
    """
    if len(parallel_rewards) != len(summary_rewards):
        raise ValueError(f"{len(parallel_rewards)} rounds of parallel rewards, {len(summary_rewards)} summaries")
    out: list[Credit] = []
    for r, (rewards, final) in enumerate(zip(parallel_rewards, summary_rewards, strict=True)):
        out += [Credit("parallel", r, j, float(x)) for j, x in enumerate(rewards)]
        out.append(Credit("summary", r, len(rewards), float(final)))
    return out


def majority_answer(responses: Sequence[str]) -> int:
    """Index of the self-consistency choice among sampled responses: the most frequent answer
    (stripped text), ties to the earliest (the bench's equal-token baseline)."""
    if not responses:
        raise ValueError("majority_answer: no responses")
    keys = [r.strip() for r in responses]
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    best = max(counts.values())
    return next(i for i, key in enumerate(keys) if counts[key] == best)
