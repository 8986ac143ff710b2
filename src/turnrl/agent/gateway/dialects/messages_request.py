"""The Messages API's request read into the gateway's `Call` (`dialects.messages` writes the answer).

A Messages request becomes OpenAI chat messages that the policy's chat template renders as it
renders any: `system` (a string or text blocks) is the first message; a user turn's text blocks
make a user message and each `tool_result` block a tool message, in their order; an assistant
turn is one assistant message whose content is its text blocks joined and whose tool calls are
its `tool_use` blocks (name, and `input` as JSON text). An answer sent back as it came (text then
tool_use blocks) is thus the message the gateway recorded, and the episode does not fork.

Every field is checked, and one the gateway cannot honour is refused with its path
(`messages[1].content[0].type: ...`), never dropped: images and documents, thinking, server
tools, `tool_choice` any or tool. Three are taken with no effect: `metadata` (who the user is),
`cache_control` (a prompt-caching hint: the engine caches prefixes on its own) and a
`tool_result`'s `is_error` (the chat template has no place for it: the model reads the result's
text alone).
"""

from __future__ import annotations

import difflib
import json
from typing import Any

import orjson

from turnrl.agent.gateway.dialects.base import BadRequest, Call
from turnrl.servers.chat.response import ChatOutput

SAMPLING = ("temperature", "top_p", "top_k")
"""The request's sampling fields the run's own replace."""
FIELDS = frozenset({"model", "max_tokens", "messages", "system", "stop_sequences", "stream", *SAMPLING})
FIELDS |= {"tools", "tool_choice", "metadata", "cache_control"}
NOT_OFFERED = frozenset({"thinking", "service_tier", "container", "context_management", "mcp_servers"})
NOT_OFFERED |= {"output_config", "output_format", "inference_geo", "speed", "diagnostics"}
"""The API's own fields the gateway does not offer: refused as such, not as unknown."""
TEXT_KEYS = frozenset({"type", "text", "cache_control", "citations"})
TOOL_USE_KEYS = frozenset({"type", "id", "name", "input", "cache_control"})
TOOL_RESULT_KEYS = frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"})
TOOL_KEYS = frozenset({"name", "description", "input_schema", "cache_control", "type"})
BLOCKS = {"user": ("text", "tool_result"), "assistant": ("text", "tool_use"), "system": ("text",)}
"""The content blocks each role's turn may hold."""


def _bad(where: str, why: str) -> BadRequest:
    return BadRequest(f"{where}: {why}")


def _shown(value: Any) -> str:
    return f"{value!r:.60}"


def _present(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without its null fields: a null is an absent optional field."""
    return {k: v for k, v in obj.items() if v is not None}


def _object(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(where, f"must be an object, got {type(value).__name__}")
    return _present(value)


def _keys(where: str, obj: dict[str, Any], known: frozenset[str]) -> None:
    """BadRequest for a key outside `known`, with the closest known one."""
    for key in obj:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(known))}"
            prefix = f"{where}.{key}" if where else str(key)
            raise _bad(prefix, f"unknown field; {hint}")


def _string(where: str, value: Any, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str):
        got = "missing" if value is None else f"got {type(value).__name__}"
        raise _bad(where, f"must be a string, {got}")
    return value


def _sampling(req: dict[str, Any]) -> dict[str, Any]:
    """The sampling fields sent (top_k an integer, the others numbers), to be counted, not used."""
    for key in SAMPLING:
        value, kinds = req.get(key), int if key == "top_k" else (int, float)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            what = "an integer" if key == "top_k" else "a number"
            raise _bad(key, f"must be {what}, got {_shown(value)}")
    return {k: req[k] for k in SAMPLING if k in req}


def _cache_control(where: str, value: Any) -> None:
    """A prompt-caching breakpoint: taken (the answer is the same without it), its shape checked."""
    if value is None:
        return
    control = _object(where, value)
    _keys(where, control, frozenset({"type", "ttl"}))
    if control.get("type") != "ephemeral":
        raise _bad(f"{where}.type", f"must be 'ephemeral', got {_shown(control.get('type'))}")
    if control.get("ttl", "5m") not in ("5m", "1h"):
        raise _bad(f"{where}.ttl", f"must be '5m' or '1h', got {_shown(control.get('ttl'))}")


def _block_type(where: str, block: dict[str, Any], allowed: tuple[str, ...]) -> str:
    kind = block.get("type")
    if kind not in allowed:
        shown = "missing" if kind is None else f"{_shown(kind)} blocks are not offered here"
        raise _bad(f"{where}.type", f"{shown}; the agent gateway takes {', '.join(allowed)} blocks")
    return kind


def _text_block(where: str, block: dict[str, Any]) -> str:
    _keys(where, block, TEXT_KEYS)
    _cache_control(f"{where}.cache_control", block.get("cache_control"))
    if block.get("citations"):
        raise _bad(f"{where}.citations", "not offered by the agent gateway")
    return _string(f"{where}.text", block.get("text"), required=True) or ""


def _texts(where: str, content: Any) -> str:
    """A string, or text blocks joined (`system`, a tool result's content)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(where, f"must be a string or a list of text blocks, got {type(content).__name__}")
    parts = []
    for j, raw in enumerate(content):
        block = _object(f"{where}[{j}]", raw)
        _block_type(f"{where}[{j}]", block, ("text",))
        parts.append(_text_block(f"{where}[{j}]", block))
    return "".join(parts)


def _tool_call(where: str, block: dict[str, Any]) -> dict[str, Any]:
    """A `tool_use` block as OpenAI's tool call (what the gateway recorded for it)."""
    _keys(where, block, TOOL_USE_KEYS)
    _cache_control(f"{where}.cache_control", block.get("cache_control"))
    call_id = _string(f"{where}.id", block.get("id"), required=True)
    name = _string(f"{where}.name", block.get("name"), required=True)
    arguments = block.get("input")
    if not isinstance(arguments, dict):
        raise _bad(f"{where}.input", f"must be an object, got {type(arguments).__name__}")
    text = json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def _tool_result(where: str, block: dict[str, Any]) -> dict[str, Any]:
    """A `tool_result` block as OpenAI's tool message."""
    _keys(where, block, TOOL_RESULT_KEYS)
    _cache_control(f"{where}.cache_control", block.get("cache_control"))
    call_id = _string(f"{where}.tool_use_id", block.get("tool_use_id"), required=True)
    if not isinstance(block.get("is_error", False), bool):
        raise _bad(f"{where}.is_error", f"must be true or false, got {_shown(block['is_error'])}")
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": _texts(f"{where}.content", block.get("content", "")),
    }


def _turn(where: str, role: str, content: Any) -> list[dict[str, Any]]:
    """One turn as OpenAI messages: the user's text runs and tool results in order, the assistant's
    text joined with its tool calls, a system turn's text."""
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise _bad(where, f"must be a string or a list of content blocks, got {type(content).__name__}")
    if not content and role != "assistant":  # an empty answer comes back as no blocks
        raise _bad(where, "must not be empty")
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, raw in enumerate(content):
        here = f"{where}[{j}]"
        block = _object(here, raw)
        kind = _block_type(here, block, BLOCKS[role])
        if kind == "tool_use":
            calls.append(_tool_call(here, block))
        elif kind == "tool_result":
            out.append(_tool_result(here, block))
        elif role != "user":
            texts.append(_text_block(here, block))
        elif out and out[-1]["role"] == "user":  # a run of text blocks is one user message
            out[-1]["content"] += _text_block(here, block)
        else:
            out.append({"role": "user", "content": _text_block(here, block)})
    if role == "user":
        return out
    message: dict[str, Any] = {"role": role, "content": "".join(texts)}
    return [{**message, "tool_calls": calls} if calls else message]


def _messages(value: Any, system: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise _bad("messages", "must be a non-empty list of messages")
    out: list[dict[str, Any]] = []
    if system is not None:
        text = _texts("system", system)
        if text:  # no system prompt, not an empty one
            out.append({"role": "system", "content": text})
    for i, raw in enumerate(value):
        where = f"messages[{i}]"
        message = _object(where, raw)
        _keys(where, message, frozenset({"role", "content"}))
        role = message.get("role")
        if role not in BLOCKS:
            raise _bad(f"{where}.role", f"{_shown(role)} is not one of user, assistant, system")
        if "content" not in message:
            raise _bad(f"{where}.content", "missing")
        out += _turn(f"{where}.content", role, message["content"])
    if value[-1].get("role") == "assistant":
        raise _bad(
            f"messages[{len(value) - 1}].role",
            "the last turn must be the user's; continuing an assistant turn (prefill) is not offered",
        )
    return out


def _tools(value: Any) -> list[dict[str, Any]] | None:
    """Custom tools as OpenAI function tools; server tools refused."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise _bad("tools", f"must be a list of tools, got {type(value).__name__}")
    out = []
    for i, raw in enumerate(value):
        where = f"tools[{i}]"
        tool = _object(where, raw)
        if tool.get("type", "custom") != "custom":
            raise _bad(
                f"{where}.type", f"{_shown(tool['type'])} (a server tool) is not offered; custom tools only"
            )
        _keys(where, tool, TOOL_KEYS)
        _cache_control(f"{where}.cache_control", tool.get("cache_control"))
        function: dict[str, Any] = {"name": _string(f"{where}.name", tool.get("name"), required=True)}
        description = _string(f"{where}.description", tool.get("description"))
        if description is not None:
            function["description"] = description
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise _bad(f"{where}.input_schema", f"must be a JSON schema object, got {type(schema).__name__}")
        function["parameters"] = schema
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(value: Any) -> str | None:
    """`auto` or `none` in OpenAI's terms; the others refused (the policy decides whether to call)."""
    if value is None:
        return None
    choice = _object("tool_choice", value)
    kind = choice.get("type")
    if kind in ("any", "tool"):
        raise _bad(
            "tool_choice.type",
            f"{kind!r} is not offered by the agent gateway: it cannot force a call; send auto or none",
        )
    if kind not in ("auto", "none"):
        raise _bad("tool_choice.type", f"must be one of auto, none, got {_shown(kind)}")
    _keys(
        "tool_choice",
        choice,
        frozenset({"type", "disable_parallel_tool_use"} if kind == "auto" else {"type"}),
    )
    parallel = choice.get("disable_parallel_tool_use", False)
    if not isinstance(parallel, bool):
        raise _bad("tool_choice.disable_parallel_tool_use", f"must be true or false, got {_shown(parallel)}")
    if parallel:
        raise _bad("tool_choice.disable_parallel_tool_use", "not offered: the gateway cannot limit the calls")
    return kind


def _stop_sequences(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad("stop_sequences", f"must be a list of strings, got {type(value).__name__}")
    return [_string(f"stop_sequences[{i}]", s, required=True) or "" for i, s in enumerate(value)]


def _metadata(value: Any) -> None:
    """Who the request is for: taken, with no effect on the answer."""
    if value is None:
        return
    metadata = _object("metadata", value)
    _keys("metadata", metadata, frozenset({"user_id"}))
    _string("metadata.user_id", metadata.get("user_id"))


def _body(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, null fields dropped; NaN and Infinity are not JSON."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise BadRequest(f"body: not valid JSON ({' '.join(str(err).split())})") from None
    req = _object("body", value)
    for key in req:
        if key in NOT_OFFERED:
            raise _bad(key, "not offered by the agent gateway")
    _keys("", req, FIELDS)
    return req


def _max_tokens(value: Any) -> int:
    if value is None:
        raise _bad("max_tokens", "missing; the Messages API requires it (the most tokens to generate)")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad("max_tokens", f"must be an integer, got {_shown(value)}")
    return value


def parse(body: bytes) -> Call:
    req = _body(body)
    stream = req.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream", f"must be true or false, got {_shown(stream)}")
    _metadata(req.get("metadata"))
    _cache_control("cache_control", req.get("cache_control"))
    stop = _stop_sequences(req.get("stop_sequences"))
    return Call(
        messages=_messages(req.get("messages"), req.get("system")),
        tools=_tools(req.get("tools")),
        tool_choice=_tool_choice(req.get("tool_choice")),
        max_tokens=_max_tokens(req.get("max_tokens")),
        stop=stop,
        stop_field="stop_sequences",
        model=_string("model", req.get("model")),
        sampling=_sampling(req),
        stream=stream,
        output=ChatOutput(stop_reason=True),
        options={"stop_sequences": stop},
    )
