"""The tool protocol: what the episode loop needs from a tool, and nothing more.

A tool has a `name`, a `description` and a JSON schema of its `parameters` (the form chat
templates take in `tools=[...]`), and an async `call(arguments) -> ToolResult | str`. In the XML
action format the text between the tool's tags becomes the argument named `xml_argument`. A call
may reward its step: `ToolResult(text, reward=1.0)` (read with `rollout.multi_turn.step_rewards`).

Optional:
- `tag` / `obs_tag`: XML tags of the action and of the observation (default: the name, `observation`);
- `call_batch(list_of_arguments)`: one call for all of a turn's calls to this tool (a retriever
  answers a batch of queries in one request);
- `aclose()`: release clients at the end of the run.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from turnrl.errors import TurnrlInputError


class ToolError(TurnrlInputError):
    """A tool that cannot be built or loaded; the message is one line naming the culprit."""


class FatalToolError(TurnrlInputError):
    """A tool failure the run cannot go on after (a child server that died again after its restart, a
    tool blocking the tools' event loop). Unlike every other tool failure it is not shown to the model
    as an error observation: the executor raises it and the rollout stops. One line naming the culprit;
    a TurnrlInputError, so `turnrl train` reports it as that line (a server that cannot be kept up, a
    tool that cannot run, are the run's input), not as a traceback."""


@dataclass
class ToolResult:
    text: str
    """What the model sees (before truncation and wrapping)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Numbers averaged into `agent/tool/<name>/<key>` metrics."""
    error: bool = False
    """The call failed; the text says why (the episode goes on)."""
    reward: float | None = None
    """The call's step reward, a finite number (`rollout.multi_turn.step_rewards`); None: none."""


@runtime_checkable
class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]

    async def call(self, arguments: dict[str, Any]) -> ToolResult | str: ...


def xml_argument(tool: Any) -> str:
    """Argument that receives the text between a tool's XML tags: declared, else the first parameter."""
    declared = getattr(tool, "xml_argument", None)
    if isinstance(declared, str) and declared:
        return declared
    props = list((getattr(tool, "parameters", None) or {}).get("properties", {}))
    return props[0] if props else "input"


def schema(tool: Any) -> dict[str, Any]:
    """OpenAI-style function schema, the form `tokenizer.apply_chat_template(tools=...)` takes."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def text_parameter(name: str, description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": description}},
        "required": [name],
    }


class FunctionTool:
    """A plain (sync or async) function as a tool: arguments are passed as keywords.

    Parameters become string properties of the schema; the docstring's first line is the description;
    `fn.tag`, `fn.obs_tag` and `fn.xml_argument`, when set, are used as the tool's.
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None):
        self.fn = fn
        self.name = name or fn.__name__
        doc = inspect.getdoc(fn) or ""
        self.description = doc.splitlines()[0] if doc else self.name
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        self.parameters = {
            "type": "object",
            "properties": {p.name: {"type": "string"} for p in params},
            "required": [p.name for p in params if p.default is p.empty],
        }
        for attr in ("tag", "obs_tag", "xml_argument"):  # optional settings set on the function itself
            if isinstance(getattr(fn, attr, None), str):
                setattr(self, attr, getattr(fn, attr))

    async def call(self, arguments: dict[str, Any]) -> ToolResult | str:
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**arguments)
        import asyncio

        # a blocking function must not stall the event loop that runs the other calls
        return await asyncio.to_thread(self.fn, **arguments)


def check_tool(tool: Any, where: str) -> None:
    """One-line error naming `where` when an object does not implement the tool protocol."""
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise ToolError(f"{where}: a tool needs a non-empty string attribute 'name'")
    if not callable(getattr(tool, "call", None)):
        raise ToolError(f"{where}: tool '{name}' has no call(arguments) method")
    params = getattr(tool, "parameters", None)
    if not isinstance(params, dict):
        raise ToolError(f"{where}: tool '{name}' needs 'parameters', a JSON schema dict")
    if not isinstance(getattr(tool, "description", None), str):
        raise ToolError(f"{where}: tool '{name}' needs a string 'description'")
