"""Parse what the model wrote in one turn into an action.

Two formats:
- XML tags (Search-R1, Code-R1): `<search>query</search>`, `<code>program</code>`, `<answer>x</answer>`;
  generation stops at the first closing tag, so a turn holds at most one action.
- JSON tool calls in the chat template (Qwen/Hermes style): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
  any number per assistant message; a message without one is the final answer.

Malformed actions (a closing tag without its opening, broken JSON, an unknown tool) are `invalid`
with a one-line reason: the loop shows the model a corrective observation and counts them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from turnrl.agent.executor import ToolCall
from turnrl.agent.tools.base import ToolError

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass
class Action:
    kind: str
    """`tool`, `answer`, `none` (no action at all) or `invalid`."""
    calls: list[ToolCall] = field(default_factory=list)
    answer: str = ""
    reason: str = ""


class XmlActions:
    """`<tag>content</tag>` actions; `tags` maps an action tag to (tool name, argument name)."""

    def __init__(self, tags: dict[str, tuple[str, str]], answer_tag: str = "answer"):
        if answer_tag in tags:
            raise ToolError(f"rollout.multi_turn.answer_tag '{answer_tag}' is also a tool tag")
        self.tags, self.answer_tag = tags, answer_tag
        names = "|".join(re.escape(t) for t in [*tags, answer_tag])
        self._action = re.compile(rf"<({names})>(.*?)</\1>", re.DOTALL)
        self._closing = re.compile(rf"</({names})>")

    @property
    def stops(self) -> list[str]:
        return [f"</{t}>" for t in [*self.tags, self.answer_tag]]

    def parse(self, text: str) -> Action:
        match = self._action.search(text)
        if match is None:
            closing = self._closing.search(text)
            if closing:
                return Action("invalid", reason=f"</{closing.group(1)}> without <{closing.group(1)}>")
            return Action("none")
        tag, content = match.group(1), match.group(2).strip()
        if tag == self.answer_tag:
            return Action("answer", answer=content)
        if not content:
            return Action("invalid", reason=f"empty <{tag}>")
        tool, argument = self.tags[tag]
        return Action("tool", [ToolCall(tool, {argument: content})])


def _call_from_json(raw: str, tools: set[str]) -> ToolCall | str:
    """A ToolCall, or the one-line reason the JSON is not a usable call."""
    try:
        data: Any = json.loads(raw)
    except json.JSONDecodeError as err:
        return f"tool call is not valid JSON ({err.msg} at char {err.pos})"
    if not isinstance(data, dict):
        return f"tool call must be a JSON object, got {type(data).__name__}"
    name, args = data.get("name"), data.get("arguments", data.get("parameters", {}))
    if not isinstance(name, str) or not name:
        return "tool call has no 'name' string"
    if name not in tools:
        return f"unknown tool '{name}'; available: {', '.join(sorted(tools))}"
    if isinstance(args, str):  # some models send the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return f"arguments of '{name}' are not a JSON object"
    if not isinstance(args, dict):
        return f"arguments of '{name}' must be a JSON object, got {type(args).__name__}"
    return ToolCall(name, args)


class JsonActions:
    """`<tool_call>{json}</tool_call>` actions; a message without a call is the final answer."""

    def __init__(self, tools: set[str], stops: list[str] | None = None):
        self.tools = tools
        self.stops = list(stops or [])

    def parse(self, text: str) -> Action:
        raws = TOOL_CALL.findall(text)
        if not raws:
            if "<tool_call>" in text:
                return Action("invalid", reason="<tool_call> without </tool_call>")
            return Action("answer", answer=text.strip())
        calls: list[ToolCall] = []
        for raw in raws:
            call = _call_from_json(raw.strip(), self.tools)
            if isinstance(call, str):
                return Action("invalid", reason=call)
            calls.append(call)
        return Action("tool", calls)
