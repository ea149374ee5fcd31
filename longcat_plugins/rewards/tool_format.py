"""Tool-call format reward: are the model's tool calls syntactically valid?

A call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the Hermes/Qwen format
verl's tool parsers read). Valid means: tags balanced and not nested, the body is a JSON object
with a string ``name`` naming a tool offered in ``extra_info["tools"]`` (OpenAI function
schemas), and ``arguments`` (an object, or a string holding one) validating against that tool's
JSON schema. Malformed *tool schemas* in the data are the dataset's fault: invalid, not 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from longcat_plugins.rewards.plain import plain
from longcat_plugins.rewards.result import invalid, scored

_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolFormatConfig:
    """Settings of the ``tool_format`` reward (``longcat.settings.reward.tool_format``)."""

    #: a response without any tool call scores 0 (else 1 when it has none and needs none)
    require_call: bool = True
    #: score = share of valid calls instead of all-or-nothing
    partial_credit: bool = False


def _tool_schemas(extra_info: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """name -> parameters schema, from OpenAI-style tool specs; ValueError naming the bad entry."""
    tools = plain((extra_info or {}).get("tools"))
    if tools is None:
        raise ValueError("extra_info['tools'] is missing")
    if isinstance(tools, str):
        tools = json.loads(tools)
    out: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(list(tools)):
        spec = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ValueError(f"extra_info['tools'][{i}] has no function name")
        params = spec.get("parameters") or {"type": "object"}
        if isinstance(params, str):
            params = json.loads(params)
        out[spec["name"]] = params
    return out


def check_calls(text: str, schemas: dict[str, dict[str, Any]]) -> list[tuple[bool, str]]:
    """(valid, reason) per tool call in ``text``; an unbalanced tag counts as one invalid call."""
    import jsonschema

    results: list[tuple[bool, str]] = []
    if text.count("<tool_call>") != text.count("</tool_call>"):
        results.append((False, "unbalanced <tool_call> tags"))
    for body in _TAG.findall(text):
        if "<tool_call>" in body:
            results.append((False, "nested <tool_call>"))
            continue
        try:
            call = json.loads(body.strip())
        except json.JSONDecodeError as exc:
            results.append((False, f"body is not JSON: {exc.msg}"))
            continue
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            results.append((False, "call has no string 'name'"))
            continue
        name = call["name"]
        if name not in schemas:
            results.append((False, f"unknown tool {name!r}"))
            continue
        args = call.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                results.append((False, f"{name}: arguments string is not JSON"))
                continue
        if not isinstance(args, dict):
            results.append((False, f"{name}: arguments must be an object"))
            continue
        try:
            jsonschema.validate(args, schemas[name])
        except jsonschema.ValidationError as exc:
            results.append((False, f"{name}: {exc.message}"))
            continue
        results.append((True, name))
    return results


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl reward function: 1.0 when every tool call is well formed and matches its schema."""
    import jsonschema

    cfg = ToolFormatConfig(**{k: v for k, v in kwargs.items() if k in ToolFormatConfig.__dataclass_fields__})
    try:
        schemas = _tool_schemas(extra_info)
        for schema in schemas.values():
            jsonschema.Draft202012Validator.check_schema(schema)
    except (ValueError, TypeError, AttributeError, jsonschema.SchemaError) as exc:
        return invalid(f"tool_format ({data_source}): bad tool schema: {getattr(exc, 'message', exc)}")
    results = check_calls(solution_str or "", schemas)
    if not results:
        return scored(0.0 if cfg.require_call else 1.0)
    good = sum(ok for ok, _ in results)
    if cfg.partial_credit:
        return scored(good / len(results), acc=float(good == len(results)))
    return scored(float(good == len(results)))
