"""Tool calls in the model's own format, read into OpenAI `tool_calls`.

The Hermes format (Qwen2.5, Qwen3, Hermes, SmolLM3 and most open models trained for tools): the
assistant writes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number per message.

    parsed = parse_tool_calls('Let me look. <tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>')
    parsed.content      -> "Let me look."
    parsed.tool_calls   -> [{"id": "call_...", "type": "function",
                             "function": {"name": "search", "arguments": '{"q": "x"}'}}]
    parsed.unparsed     -> 0

A block that does not parse (broken JSON, no name, an unknown tool) is never dropped: the whole
text stays the message's content, no call is returned, and `unparsed` counts the bad blocks with
`reasons` saying why, so a server can report it and a trainer can count it.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
OPEN_TAG = "<tool_call>"


@dataclass
class ParsedMessage:
    """What one assistant message says: its text and its calls, OpenAI-shaped."""

    content: str | None
    """The text outside the calls (None when there is none and there are calls, as OpenAI sends)."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """`{"id", "type": "function", "function": {"name", "arguments": <JSON text>}}` per call."""
    unparsed: int = 0
    """`<tool_call>` blocks that could not be read; the text is then kept whole as content."""
    reasons: list[str] = field(default_factory=list)
    """Why each unparsed block failed, one line each."""


def parse_call(raw: str, tools: set[str] | None = None) -> tuple[str, dict[str, Any]] | str:
    """`(name, arguments)` from one call's JSON, or the one-line reason it is not a usable call.
    `tools`: the names that may be called (None = any)."""
    try:
        data: Any = json.loads(raw)
    except json.JSONDecodeError as err:
        return f"tool call is not valid JSON ({err.msg} at char {err.pos})"
    except (ValueError, RecursionError) as err:  # an integer past the digit limit; deep nesting
        return f"tool call is JSON too large to read ({type(err).__name__})"
    if not isinstance(data, dict):
        return f"tool call must be a JSON object, got {type(data).__name__}"
    name, args = data.get("name"), data.get("arguments", data.get("parameters", {}))
    if not isinstance(name, str) or not name:
        return "tool call has no 'name' string"
    if tools is not None and name not in tools:
        return f"unknown tool '{name}'; available: {', '.join(sorted(tools)) or 'none'}"
    if isinstance(args, str):  # some models send the arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):  # not JSON, an integer past the digit limit, deep nesting
            return f"arguments of '{name}' are not a JSON object"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f"arguments of '{name}' must be a JSON object, got {type(args).__name__}"
    return name, args


def parse_tool_calls(text: str, tools: set[str] | None = None) -> ParsedMessage:
    """Split an assistant message into content and OpenAI tool calls (see the module docstring)."""
    raws = TOOL_CALL.findall(text)
    dangling = text.count(OPEN_TAG) - len(raws)  # an opened call the model never closed
    reasons = ["<tool_call> without </tool_call>"] * max(dangling, 0)
    calls: list[dict[str, Any]] = []
    for raw in raws:
        call = parse_call(raw.strip(), tools)
        if isinstance(call, str):
            reasons.append(call)
            continue
        name, args = call
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
            }
        )
    if reasons:  # all or nothing: half a message's calls would run a plan the model did not finish
        return ParsedMessage(text, [], len(reasons), reasons)
    if not calls:
        return ParsedMessage(text)
    content = TOOL_CALL.sub("", text).strip()
    return ParsedMessage(content or None, calls)
