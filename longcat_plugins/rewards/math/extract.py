"""Final-answer extraction from a model response; pure string work, one linear pass, no sympy.

Only an answer the model clearly gave is found; anything else is "no answer" (scored wrong),
never a guess. In order:

1. text after the last ``</think>``; a ``<think>`` never closed means no answer;
2. if the response contains ``\\boxed``/``\\fbox`` at all: the content of the last top-level
   box. Every box must be closed: one unclosed ``\\boxed{`` anywhere (a truncated or
   malformed final answer) means no answer, never the last number or an inner box;
3. otherwise an explicit final-answer phrase ("the final answer is", "the answer is",
   ``Answer:`` at the start of a line): the rest of that line, or its one ``$...$`` span
   (several spans are graded together: ``$5$ or $6$`` is a hedge, not 6);
4. otherwise a response that *is* just one number or one ``$...$`` span.

No other fallback: the last number or math span in running text is not an answer.
Inputs longer than ``max_chars`` raise :class:`AnswerTooLong` (the caller reports it invalid),
and so does an extracted answer longer than ``max_answer_chars``.
"""

from __future__ import annotations

import re

MAX_RESPONSE_CHARS = 400_000
MAX_ANSWER_CHARS = 2_000

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_TOKEN_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*\{?|\\[{}\\]|[{}]")
_PHRASE_RE = re.compile(
    r"(?:final\s+answer\**\s*(?:is|:|=)|the\s+answer\**\s*(?:is|:|=)|^[ \t*#>]*answer\**\s*[:：])"
    r"[ \t]*[:：]?(?P<rest>[^\n]*)",
    re.IGNORECASE | re.MULTILINE,
)
_NUMBER_ONLY = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_DOLLAR_RE = re.compile(r"\$([^$]{1,500})\$")
_WORD_RE = re.compile(r"\S+")


class AnswerTooLong(ValueError):
    """The response or its answer is past the size limit: the reward reports it invalid."""


def last_boxed(text: str) -> str | None:
    """Content of the last top-level ``\\boxed{}``; None when there is none or any box is unclosed.

    One pass over brace tokens with a stack: linear in ``len(text)`` whatever the nesting.
    """
    stack: list[tuple[bool, int]] = []  # (is a box, content start)
    found: str | None = None
    boxes_open = 0
    for m in _TOKEN_RE.finditer(text):
        tok = m.group(0)
        if tok[0] == "\\" and tok[1] in "bf":
            if not tok.endswith("{"):  # ``\boxed 5``: one token argument
                arg = _WORD_RE.match(text, m.end())
                if arg is None or arg.group(0).startswith("\\"):
                    return None  # ``\boxed`` with no argument, or ``\boxed \boxed ...``: malformed
                if boxes_open == 0:
                    found = arg.group(0).rstrip("$.")
                continue
            stack.append((True, m.end()))
            boxes_open += 1
        elif tok == "{":
            stack.append((False, m.end()))
        elif tok == "}":
            if not stack:
                continue  # a stray closing brace in prose
            is_box, begin = stack.pop()
            if is_box:
                boxes_open -= 1
                if boxes_open == 0:
                    found = text[begin : m.start()]
        # escaped ``\{``, ``\}``, ``\\`` are content
    if boxes_open:
        return None
    return found


def _phrase_answer(line: str) -> str:
    line = line.strip()
    dollars = _DOLLAR_RE.findall(line)
    if len(dollars) == 1:
        return dollars[0].strip()
    # several spans ("$5$ or $6$"): the whole line, so a hedge is graded as one, never as its last part
    return line.replace("$", "").rstrip(".").strip().strip("*").strip()


def extract_answer(
    response: str, max_chars: int = MAX_RESPONSE_CHARS, max_answer_chars: int = MAX_ANSWER_CHARS
) -> str | None:
    """The final answer in ``response``, or None when the model gave none clearly.

    :class:`AnswerTooLong` when ``response`` is longer than ``max_chars`` or the answer longer
    than ``max_answer_chars``: such a sample is reported invalid, never guessed at.
    """
    if not response:
        return None
    if len(response) > max_chars:
        raise AnswerTooLong(f"response has {len(response)} characters, over the limit max_response_chars={max_chars}")
    end_think = response.rfind("</think>")
    text = response[end_think + len("</think>") :] if end_think >= 0 else response
    if end_think < 0 and "<think>" in text:
        return None  # still thinking: the response was cut off
    answer: str | None
    if _BOX_OPEN.search(text):
        answer = last_boxed(text)
    else:
        phrases = list(_PHRASE_RE.finditer(text))
        if phrases:
            answer = _phrase_answer(phrases[-1].group("rest"))
        else:
            whole = text.strip().rstrip(".").strip()
            dollars = _DOLLAR_RE.fullmatch(whole)
            answer = dollars.group(1) if dollars else (whole if _NUMBER_ONLY.fullmatch(whole) else None)
    if answer is not None:
        answer = answer.strip()
    if not answer:
        return None
    if len(answer) > max_answer_chars:
        raise AnswerTooLong(f"answer has {len(answer)} characters, over the limit max_answer_chars={max_answer_chars}")
    return answer
