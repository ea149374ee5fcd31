"""Final-answer extraction from a model response; pure string work, one linear pass, no sympy.

Only an answer the model clearly gave is found; anything else is "no answer" (scored wrong),
never a guess. In order:

1. text after the last ``</think>``; a ``<think>`` never closed means no answer;
2. if the response contains ``\\boxed``/``\\fbox`` at all: the content of the top-level
   boxes. Every box must be closed: one unclosed ``\\boxed{`` anywhere (a truncated or
   malformed final answer) means no answer, never the last number or an inner box. Several
   boxes must all hold the same answer (``\\boxed{5} ... \\boxed{6}`` is a hedge: no answer),
   and a box followed by a retraction ("\\boxed{5} ... wait, it is 6") is no answer either:
   the model did not stand by the box, and the value in the prose is not boxed;
3. otherwise GSM8K's ``#### 42``: the rest of that line (several such lines must agree, and no
   retraction may follow, as for boxes);
4. otherwise an explicit final-answer phrase ("the final answer is", "the answer is",
   ``Answer:`` at the start of a line): the rest of that line, or its one ``$...$`` span
   (several spans are graded together: ``$5$ or $6$`` is a hedge, not 6; so is one span followed
   by a number or a question mark, ``$6$ or 5`` or ``$6$?``);
5. otherwise a final line that is only one number or one math span (``$...$``, ``\\[...\\]``).

No other fallback: the last number or math span in running text is not an answer.
Inputs longer than ``max_chars`` raise :class:`AnswerTooLong` (the caller reports it invalid),
and so does an extracted answer longer than ``max_answer_chars``.
"""

from __future__ import annotations

import re

from longcat_plugins.rewards.math.latex import unify_unicode

MAX_RESPONSE_CHARS = 400_000
MAX_ANSWER_CHARS = 2_000

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_TOKEN_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*\{?|\\[{}\\]|[{}]")
_PHRASE_RE = re.compile(
    r"(?:final\s+answer\**\s*(?:is|:|=)|the\s+answer\**\s*(?:is|:|=)|^[ \t*#>]*answer\**\s*[:：])"
    r"[ \t]*[:：]?(?P<rest>[^\n]*)",
    re.IGNORECASE | re.MULTILINE,
)
_NUMBER_ONLY = re.compile(r"[-+]?\\?\$?(?:\d[\d,]*(?:\.\d+)?(?:/\d+)?|\.\d+)")
_DOLLAR_RE = re.compile(r"\$([^$]{1,500})\$")
_MATH_LINE = re.compile(r"\$\$(.{1,500})\$\$|\\\[(.{1,500})\\\]|\\\((.{1,500})\\\)|\$([^$]{1,500})\$", re.DOTALL)
_GSM8K_RE = re.compile(r"^[ \t]*####[ \t]*(?P<rest>[^\n]*)$", re.MULTILINE)
#: words that take back what was boxed just before them: "\boxed{5}. Wait, it is 6"
_RETRACTION_RE = re.compile(
    r"\b(?:wait|actually|oops|hold on|mistake|correction|instead|rather|i meant|scratch that|second thought|"
    r"(?:was|is|that's|that is|it's|would be) (?:wrong|incorrect|false|not (?:right|correct|the (?:right |correct )?answer))|"
    r"(?:isn't|is not) (?:right|correct|the (?:right |correct )?answer)|just kidding|"
    r"let me re(?:check|do|calculate|consider)|or (?:maybe|perhaps|possibly))\b"
    r"|(?:^|[\s.;:])no[,.!]",
    re.IGNORECASE,
)
#: a negation right before a box: "it is not \boxed{5}" states that 5 is not the answer
_NEGATED_BOX_RE = re.compile(
    r"(?:\bnot|\bcannot|n't|\bnever|\bno longer)(?:\s+(?:be|equal\s+to|equals?))?[\s:,=]*(?:(?:\$|\\\(|\\\[)\s*)?$",
    re.IGNORECASE,
)
#: a question mark right after the last box (past closing ``$``/``)``/``}``): the box is asked, not answered
_QUESTIONED_BOX_RE = re.compile(r"[\s$)}\]]*\?")
_WORD_RE = re.compile(r"\S+")


class AnswerTooLong(ValueError):
    """The response or its answer is past the size limit: the reward reports it invalid."""


def top_level_boxes(text: str) -> list[tuple[str, int]] | None:
    """(content, end) of every top-level ``\\boxed{}``; None when any box is unclosed or malformed.

    One pass over brace tokens with a stack: linear in ``len(text)`` whatever the nesting.
    """
    stack: list[tuple[bool, int]] = []  # (is a box, content start)
    found: list[tuple[str, int]] = []
    boxes_open = 0
    for m in _TOKEN_RE.finditer(text):
        tok = m.group(0)
        if tok[0] == "\\" and tok[1] in "bf":
            if not tok.endswith("{"):  # ``\boxed 5``: one token argument
                arg = _WORD_RE.match(text, m.end())
                if arg is None or arg.group(0).startswith("\\"):
                    return None  # ``\boxed`` with no argument, or ``\boxed \boxed ...``: malformed
                if boxes_open == 0:
                    found.append((arg.group(0).rstrip("$."), arg.end()))
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
                    found.append((text[begin : m.start()], m.end()))
        # escaped ``\{``, ``\}``, ``\\`` are content
    if boxes_open:
        return None
    return found


def _box_key(content: str) -> str:
    return re.sub(r"\s+", "", content).rstrip(".")


def last_boxed(text: str) -> str | None:
    """Content of the last top-level ``\\boxed{}``; None when there is none or any box is unclosed."""
    boxes = top_level_boxes(text)
    return boxes[-1][0] if boxes else None


def boxed_answer(text: str) -> str | None:
    """The one answer the boxes give; None when a box is unclosed, boxes disagree, or a retraction follows."""
    boxes = top_level_boxes(text)
    if not boxes:
        return None
    if len({_box_key(content) for content, _ in boxes}) > 1:
        return None  # \boxed{5} ... \boxed{6}: several answers, none of them clearly the answer
    content, end = boxes[-1]
    if _QUESTIONED_BOX_RE.match(text, end):
        return None  # "is it \boxed{5}?": a question, not an answer
    if _RETRACTION_RE.search(text, end):
        return None
    start = max(text.rfind("\\boxed", 0, end), text.rfind("\\fbox", 0, end))
    if _NEGATED_BOX_RE.search(text[max(0, start - 40) : max(0, start)]):
        return None  # "the answer is not \boxed{5}; it is 6": the box is what the answer is not
    gsm = _GSM8K_RE.search(text, end)
    if gsm is not None and _box_key(gsm.group("rest")) != _box_key(content):
        return None  # a different "#### 6" after the box
    return content


def _gsm8k_answer(text: str, lines: list[re.Match[str]]) -> str | None:
    """The ``#### N`` answer; None when two such lines disagree or a retraction follows (as for boxes)."""
    if len({_box_key(m.group("rest")) for m in lines}) > 1 or _RETRACTION_RE.search(text, lines[-1].end()):
        return None
    return _phrase_answer(lines[-1].group("rest"))


def _phrase_answer(line: str) -> str:
    line = line.strip()
    dollars = list(_DOLLAR_RE.finditer(line))
    # one span, unless a number or a question mark follows it ("$5$ or 6", "$5$?"): then the line
    if len(dollars) == 1 and not re.search(r"[\d?]", line[dollars[0].end() :]):
        return dollars[0].group(1).strip()
    # several spans ("$5$ or $6$"): the whole line, so a hedge is graded as one, never as its last part
    return line.replace("$", "").rstrip(".").strip().strip("*").strip()


def _final_line_answer(text: str) -> str | None:
    """The last non-empty line when it is only one number or one math span; else None."""
    stripped = text.rstrip()
    line = stripped[stripped.rfind("\n") + 1 :].strip()
    if line.startswith(("$$", "\\[")) and not line.endswith(("$$", "\\]")):
        return None
    if line in ("$$", "\\]"):  # a display block over several lines: its body is the answer
        opener = "$$" if line == "$$" else "\\["
        start = stripped.rfind(opener, 0, len(stripped) - len(line))
        if start < 0:
            return None
        line = stripped[start:].strip()
    line = line.strip("*").strip().rstrip(".").strip()
    math = _MATH_LINE.fullmatch(line)
    if math is not None:
        return next(g for g in math.groups() if g is not None).strip()
    plain = unify_unicode(line)
    return plain if _NUMBER_ONLY.fullmatch(plain) else None


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
        answer = boxed_answer(text)
    elif "####" in text and (gsm := list(_GSM8K_RE.finditer(text))):
        answer = _gsm8k_answer(text, gsm)
    else:
        phrases = list(_PHRASE_RE.finditer(text))
        answer = _phrase_answer(phrases[-1].group("rest")) if phrases else _final_line_answer(text)
    if answer is not None:
        answer = answer.strip()
    if not answer:
        return None
    if len(answer) > max_answer_chars:
        raise AnswerTooLong(f"answer has {len(answer)} characters, over the limit max_answer_chars={max_answer_chars}")
    return answer
