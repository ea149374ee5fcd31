"""R4 tool-call format reward: well-formed tags, JSON bodies, known tools, schema-valid arguments."""

from __future__ import annotations

import json
import math

import pytest

from longcat_plugins.rewards.result import ERROR_KEY, VALID_KEY
from longcat_plugins.rewards.tool_format import check_calls, compute_score

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {"name": "now", "parameters": {"type": "object", "properties": {}}},  # bare (non-OpenAI-wrapped) spec
]
INFO = {"tools": TOOLS}


def call(name: str, args: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


@pytest.mark.parametrize(
    ("text", "score"),
    [
        (call("get_weather", {"city": "Paris"}), 1.0),
        ("I will check.\n" + call("get_weather", {"city": "Oslo", "unit": "c"}) + call("now", {}), 1.0),
        ('<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}</tool_call>', 1.0),
        (call("get_weather", {}), 0.0),  # missing required
        (call("get_weather", {"city": "Paris", "unit": "k"}), 0.0),  # enum
        (call("get_weather", {"city": "Paris", "extra": 1}), 0.0),  # additionalProperties
        (call("get_weather", {"city": 3}), 0.0),  # type
        (call("delete_everything", {}), 0.0),  # unknown tool
        ("<tool_call>{not json}</tool_call>", 0.0),
        ("<tool_call>" + json.dumps({"name": "now"}), 0.0),  # unclosed
        ("<tool_call><tool_call>{}</tool_call></tool_call>", 0.0),  # nested
        (call("now", {}) + "<tool_call>[1, 2]</tool_call>", 0.0),  # one bad call spoils the set
        ("no calls at all", 0.0),
    ],
)
def test_scores(text: str, score: float) -> None:
    res = compute_score("tool_use", text, None, INFO)
    assert res["score"] == score and res[VALID_KEY] == 1.0, res


def test_partial_credit_and_optional_call() -> None:
    text = call("now", {}) + call("get_weather", {})
    assert compute_score("t", text, None, INFO, partial_credit=True)["score"] == 0.5
    assert compute_score("t", "plain answer", None, INFO, require_call=False)["score"] == 1.0


def test_reasons_name_the_problem() -> None:
    reasons = [
        r
        for ok, r in check_calls(call("get_weather", {"city": 3}), {"get_weather": TOOLS[0]["function"]["parameters"]})
    ]
    assert "get_weather" in reasons[0] and "3" in reasons[0]


@pytest.mark.parametrize(
    "info", [{}, {"tools": [{"function": {"parameters": {}}}]}, {"tools": [{"name": "x", "parameters": {"type": 5}}]}]
)
def test_bad_tool_schemas_are_invalid(info: dict) -> None:
    res = compute_score("t", call("x", {}), None, info)
    assert res[VALID_KEY] == 0.0 and math.isnan(res["score"]) and "tool" in res[ERROR_KEY]
