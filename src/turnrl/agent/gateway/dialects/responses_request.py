"""The Responses dialect's request (`responses`), read into OpenAI chat terms (`base.Call`).

`instructions` is a system message first; `input` a string (one user message) or a list of items:
messages (user, system, developer, assistant; text parts only), `function_call` items (the
`tool_calls` of the assistant message before them, or of an assistant message of their own: an
answer's output items sent back as they came read as the assistant message recorded) and
`function_call_output` items (tool messages). `tools` are function tools, flat
(`{"type": "function", "name", "description", "parameters"}`), made chat's; `tool_choice` "auto"
or "none"; `max_output_tokens` the call's budget. `previous_response_id` is resolved later, on the
episode (`responses.bind`): the call's options keep the input apart from the instructions for it.

`temperature` and `top_p` are the run's, whatever is sent (`Call.sampling`: counted, not used).
`user`, `metadata`, `prompt_cache_key`, `safety_identifier` and `service_tier` are taken and change
nothing sampled; every other field at a value the gateway cannot honour is refused, naming it
(`NOT_SERVED`, `reasoning`, `text`, `stream_options`).
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from pydantic import ConfigDict, ValidationError

from turnrl.agent.gateway.dialects.base import BadRequest, Call
from turnrl.servers.validation import StrictRequest, describe_validation_error

EXAMPLE = '{"model": "policy", "input": "Hello"}'
SAMPLING = ("temperature", "top_p")
"""The request's sampling fields the run's own replace."""
ROLES = ("user", "system", "developer", "assistant")
MESSAGE_KEYS = frozenset({"type", "role", "content", "id", "status"})
CALL_KEYS = frozenset({"type", "id", "call_id", "name", "arguments", "status"})
RESULT_KEYS = frozenset({"type", "id", "call_id", "output", "status"})
PART_KEYS = {
    "input_text": frozenset({"type", "text"}),
    # what an answer's output item holds, sent back as it came
    "output_text": frozenset({"type", "text", "annotations", "logprobs"}),
}
TOOL_KEYS = frozenset({"type", "name", "description", "parameters", "strict"})

NOT_SERVED: dict[str, tuple[Any, ...]] = {
    # OpenAI's fields whose effect the gateway does not have: only their "off" values are taken
    "background": (None, False),
    "conversation": (None,),
    "context_management": (None,),
    "include": (None, []),
    "max_tool_calls": (None,),
    "moderation": (None,),
    "prompt": (None,),
    "prompt_cache_options": (None,),
    "prompt_cache_retention": (None,),
    "top_logprobs": (None, 0),
    # the model may write several calls at once, and a call over the context is refused, not cut
    "parallel_tool_calls": (None, True),
    "truncation": (None, "disabled"),
}


class ResponsesRequest(StrictRequest):
    # unknown fields and wrong JSON types are refused (StrictRequest); NaN/inf never get in
    model_config = ConfigDict(allow_inf_nan=False)

    input: Any = None
    model: str | None = None
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    max_output_tokens: int | None = None
    previous_response_id: str | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    # sent by real clients, no effect on what is sampled
    user: str | None = None
    metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    # declared so their "off" value is understood; any other is refused (NOT_SERVED)
    parallel_tool_calls: bool | None = None
    truncation: str | None = None
    background: bool | None = None
    conversation: Any = None
    context_management: Any = None
    include: list[Any] | None = None
    max_tool_calls: int | None = None
    moderation: Any = None
    prompt: Any = None
    prompt_cache_options: Any = None
    prompt_cache_retention: str | None = None
    top_logprobs: int | None = None


# -- checks -----------------------------------------------------------------------------------------
def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _present(item: dict[str, Any]) -> dict[str, Any]:
    """An object without its null fields: the SDK's `model_dump()` of an answer's items sends them."""
    return {k: v for k, v in item.items() if v is not None}


def _keys(where: str, item: dict[str, Any], known: frozenset[str]) -> None:
    for key in item:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(known))}"
            raise BadRequest(f"{where}.{key}: unknown field; {hint}")


def _object(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{where}: must be an object, got {type(value).__name__}")
    return _present(value)


def _string(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{where}: must be a non-empty string, got {_shown(value)}")
    return value


def _check_options(req: ResponsesRequest) -> None:
    """Refuse what is declared but not served, naming the field."""
    for name, allowed in NOT_SERVED.items():
        if getattr(req, name) not in allowed:
            taken = " or ".join(json.dumps(v) for v in allowed)
            raise BadRequest(f"{name}: not served by the agent gateway; send {taken} (or leave it out)")
    for key, value in _present(req.reasoning or {}).items():
        _keys("reasoning", {key: value}, frozenset({"effort", "summary", "generate_summary"}))
        raise BadRequest(
            f"reasoning.{key}: not served by the agent gateway (the policy reasons as its chat "
            "template lets it); send null"
        )
    text = _present(req.text or {})
    _keys("text", text, frozenset({"format", "verbosity"}))
    if text.get("format", {"type": "text"}) != {"type": "text"}:
        raise BadRequest("text.format: only {'type': 'text'} is served by the agent gateway")
    if text.get("verbosity", "medium") != "medium":
        raise BadRequest("text.verbosity: only 'medium' is served by the agent gateway")
    for key, value in (req.stream_options or {}).items():
        # obfuscation (padding against length side channels on the internet) is not added on loopback
        _keys("stream_options", {key: value}, frozenset({"include_obfuscation"}))
        if not isinstance(value, bool):
            raise BadRequest(f"stream_options.{key}: must be true or false, got {_shown(value)}")


# -- input items as chat messages ------------------------------------------------------------------
def _text(where: str, content: Any) -> str:
    """A string, or text parts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where}: must be a string or a list of text parts, got {type(content).__name__}")
    texts = []
    for j, raw in enumerate(content):
        part = _object(f"{where}[{j}]", raw)
        kind = part.get("type")
        if kind not in PART_KEYS:
            raise BadRequest(
                f"{where}[{j}].type: only text parts (input_text, output_text) are served by the "
                f"agent gateway, got {_shown(kind)}"
            )
        _keys(f"{where}[{j}]", part, PART_KEYS[kind])
        if not isinstance(part.get("text"), str):
            raise BadRequest(f"{where}[{j}].text: must be a string, got {_shown(part.get('text'))}")
        texts.append(part["text"])
    return "".join(texts)


def _message(where: str, item: dict[str, Any]) -> dict[str, Any]:
    _keys(where, item, MESSAGE_KEYS)
    role = item.get("role")
    if role not in ROLES:
        seen = "missing" if role is None else f"{_shown(role)} is not"
        raise BadRequest(f"{where}.role: {seen} one of {', '.join(ROLES)}")
    if "content" not in item:
        raise BadRequest(f"{where}.content: missing; a string or a list of text parts")
    return {"role": role, "content": _text(f"{where}.content", item["content"])}


def _function_call(where: str, item: dict[str, Any]) -> dict[str, Any]:
    """The item as an OpenAI chat tool call."""
    _keys(where, item, CALL_KEYS)
    call_id = _string(f"{where}.call_id", item.get("call_id"))
    name = _string(f"{where}.name", item.get("name"))
    arguments = item.get("arguments")
    if not isinstance(arguments, str):
        raise BadRequest(f"{where}.arguments: must be JSON text, got {_shown(arguments)}")
    if arguments.strip():
        try:
            json.loads(arguments)
        except (ValueError, RecursionError):
            raise BadRequest(f"{where}.arguments: not JSON: {_shown(arguments)}") from None
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _result(where: str, item: dict[str, Any]) -> dict[str, Any]:
    """A function's output as a chat tool message."""
    _keys(where, item, RESULT_KEYS)
    call_id = _string(f"{where}.call_id", item.get("call_id"))
    if "output" not in item:
        raise BadRequest(f"{where}.output: missing; a string or a list of text parts")
    return {"role": "tool", "tool_call_id": call_id, "content": _text(f"{where}.output", item["output"])}


def input_messages(value: Any) -> list[dict[str, Any]]:
    """`input` as OpenAI chat messages. A `function_call` joins the assistant message before it
    (an answer's text and its calls come back as a message item then call items), so an answer
    sent back is the assistant message that was recorded."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise BadRequest(f"input: must be a string or a non-empty list of items, got {_shown(value)}")
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(value):
        where = f"input[{i}]"
        item = _object(where, raw)
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(where, item))
        elif kind == "function_call":
            call = _function_call(where, item)
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append(_result(where, item))
        else:
            raise BadRequest(
                f"{where}.type: {_shown(kind)} is not served by the agent gateway; one of message, "
                "function_call, function_call_output"
            )
    return out


def chat_tools(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    """Responses' flat function tools as chat's (`{"type": "function", "function": {...}}`), as a
    chat request would send them: name, description, parameters."""
    out, names = [], set()
    for i, raw in enumerate(tools or []):
        where = f"tools[{i}]"
        tool = _object(where, raw)
        if tool.get("type") != "function":
            raise BadRequest(
                f"{where}.type: only 'function' tools are served by the agent gateway, got "
                f"{_shown(tool.get('type'))}"
            )
        _keys(where, tool, TOOL_KEYS)
        name = _string(f"{where}.name", tool.get("name"))
        if name in names:
            raise BadRequest(f"{where}.name: {name!r} is given twice")
        if not isinstance(tool.get("parameters", {}), dict):
            raise BadRequest(f"{where}.parameters: must be a JSON schema object")
        if not isinstance(tool.get("description", ""), str):
            raise BadRequest(f"{where}.description: must be a string")
        if not isinstance(tool.get("strict", False), bool):
            raise BadRequest(f"{where}.strict: must be true or false")
        names.add(name)
        # `strict` asks the server to constrain the arguments to the schema, which the gateway
        # does not; the SDK always sends it, and it is no part of what the model is shown
        shown = {k: v for k, v in tool.items() if k not in ("type", "strict")}
        out.append({"type": "function", "function": shown})
    return out or None


def _tool_choice(value: Any) -> Any:
    if value in (None, "auto", "none"):
        return value
    if value == "required" or isinstance(value, dict):
        shown = "'required'" if value == "required" else "a named tool"
        raise BadRequest(
            f"tool_choice: {shown} is not served by the agent gateway (it would need constrained "
            "decoding); use 'auto' or 'none'"
        )
    raise BadRequest(f"tool_choice: {_shown(value)} is not one of 'auto', 'none'")


def parse(body: bytes) -> Call:
    try:
        req = ResponsesRequest.model_validate_json(body)
    except ValidationError as err:
        raise BadRequest(
            describe_validation_error(list(err.errors()), list(ResponsesRequest.model_fields), EXAMPLE)
        ) from None
    _check_options(req)
    if req.input is None:
        raise BadRequest("input: missing; a string or a list of items")
    inputs = input_messages(req.input)
    head = [] if req.instructions is None else [{"role": "system", "content": req.instructions}]
    echo = {
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "metadata": req.metadata or {},
        "previous_response_id": req.previous_response_id,
        "store": req.store is not False,
        "tool_choice": req.tool_choice or "auto",
        "tools": req.tools or [],
        "user": req.user,
    }
    return Call(
        messages=[*head, *inputs],
        tools=chat_tools(req.tools),
        tool_choice=_tool_choice(req.tool_choice),
        max_tokens=req.max_output_tokens,
        max_tokens_field="max_output_tokens",
        model=req.model,
        sampling={k: getattr(req, k) for k in SAMPLING if getattr(req, k) is not None},
        stream=bool(req.stream),
        options={"inputs": inputs, "head": head, "echo": echo},
    )
