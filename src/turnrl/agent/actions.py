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

import re
from dataclasses import dataclass, field

from turnrl.agent.executor import ToolCall
from turnrl.agent.tools.base import ToolError
from turnrl.servers.chat.tool_calls import TOOL_CALL, parse_call


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
    call = parse_call(raw, tools)
    return call if isinstance(call, str) else ToolCall(*call)


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
