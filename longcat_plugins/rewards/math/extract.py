"""Final-answer extraction from a model response; pure string work, linear time, no sympy.

Order of preference: the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces matched), then a
final-answer phrase ("the answer is ...", "final answer: ..."), then the last math span or
number in the text. Extraction runs in the reward worker itself, so it must never be
super-linear in the response length.
"""

from __future__ import annotations

import re

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*(\{)|\\boxed\s+(\S+)")
_PHRASE_RE = re.compile(
    r"(?:final\s+answer|the\s+answer|answer)\s*(?:is|:|=)?\s*[:：]?\s*(.+)",
    re.IGNORECASE,
)
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_DOLLAR_RE = re.compile(r"\$([^$]{1,500})\$")


def _match_braces(text: str, open_idx: int) -> str | None:
    """The content of the brace group starting at ``text[open_idx] == '{'``, or None if unclosed."""
    depth = 0
    for i in range(open_idx, len(text)):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            continue
        if ch == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif ch == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[open_idx + 1 : i]
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{}`` in ``text``."""
    found = None
    for m in _BOX_RE.finditer(text):
        if m.group(1) is not None:
            content = _match_braces(text, m.start(1))
            if content is not None:
                found = content
        else:
            found = m.group(2).rstrip("$.")
    return found


def _strip_sentence(ans: str) -> str:
    ans = ans.strip().splitlines()[0] if ans.strip() else ""
    ans = ans.strip().rstrip(".").strip()
    dollars = _DOLLAR_RE.findall(ans)
    if dollars:
        return dollars[-1].strip()
    return ans.strip("*").strip()


def extract_answer(response: str, max_chars: int = 20000) -> str | None:
    """The final answer in ``response`` or None when there is none to grade.

    Only the last ``max_chars`` characters are looked at: answers come last, and this keeps the
    cost bounded for very long reasoning traces.
    """
    if not response:
        return None
    text = response[-max_chars:]
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    phrases = list(_PHRASE_RE.finditer(text))
    if phrases:
        ans = _strip_sentence(phrases[-1].group(1))
        if ans:
            return ans
    dollars = _DOLLAR_RE.findall(text)
    if dollars:
        return dollars[-1].strip()
    numbers = _NUMBER_RE.findall(text)
    if numbers:
        return numbers[-1]
    return None
