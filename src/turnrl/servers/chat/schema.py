"""`POST /v1/chat/completions`' request: OpenAI's fields, vLLM's extensions, and the checks of
`messages`, `tools` and `tool_choice` that pydantic cannot phrase in one line.

    req = ChatRequest.model_validate_json(body)      # unknown fields refused, NaN refused
    messages = check_messages(req.messages)          # template-ready dicts, or ChatRequestError
    tools, names = check_tools(req.tools)
    parse = check_tool_choice(req.tool_choice, tools)

Every refusal is a `ChatRequestError` whose message is one line starting with the field's path
(`messages[2].role: 'robot' is not one of system, developer, user, assistant, tool`).
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from pydantic import ConfigDict, Field

from turnrl.errors import TurnrlInputError
from turnrl.servers.validation import StrictRequest


class ChatRequestError(TurnrlInputError):
    """A chat request this server will not serve; the message is one line naming the field."""


# OpenAI / vLLM fields whose effect is not implemented: a value other than these is refused, never
# ignored (a penalty, a forced tool call or a JSON schema would change what the model is asked for)
UNSUPPORTED: dict[str, Any] = {
    "stream": False,
    "store": False,
    "parallel_tool_calls": True,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "logit_bias": None,
    "min_p": 0.0,
    "min_tokens": 0,
    "stop_token_ids": None,
    "include_stop_str_in_output": False,
    "echo": False,
    "add_generation_prompt": True,
    "continue_final_message": False,
    "chat_template": None,
    "documents": None,
    "prompt_logprobs": None,
    "truncate_prompt_tokens": None,
    "allowed_token_ids": None,
    "bad_words": None,
    "use_beam_search": False,
    "length_penalty": 1.0,
    "structured_outputs": None,
    "guided_json": None,
    "guided_regex": None,
    "guided_choice": None,
    "guided_grammar": None,
    "functions": None,
    "function_call": None,
    "audio": None,
    "prediction": None,
    "reasoning_effort": None,
    "web_search_options": None,
}

MAX_TOP_LOGPROBS = 20
"""OpenAI's bound on `top_logprobs`."""


class ChatRequest(StrictRequest):
    # unknown fields and wrong JSON types ("temperature": "1") are refused (StrictRequest); NaN/inf never get in
    model_config = ConfigDict(allow_inf_nan=False)

    messages: list[Any] = Field(description="OpenAI messages; checked by `check_messages`.")
    model: str | None = None
    tools: list[Any] | None = Field(default=None, description="OpenAI function tools, given to the template.")
    tool_choice: Any = Field(default=None, description="'auto' (default) or 'none'.")
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = Field(default=None, description="-1, 0 or null = off (vLLM extension).")
    max_tokens: int | None = Field(default=None, description="OpenAI's older name of max_completion_tokens.")
    max_completion_tokens: int | None = Field(
        default=None, description="Tokens per choice; absent: what max_model_len leaves."
    )
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, description="0..20, with logprobs: true.")
    ignore_eos: bool = Field(default=False, description="Never stop at EOS (vLLM extension).")
    return_token_ids: bool = Field(default=False, description="vLLM: prompt_token_ids and token_ids.")
    return_tokens_as_token_ids: bool = Field(default=False, description="vLLM: tokens as 'token_id:N'.")
    skip_special_tokens: bool = Field(
        default=True, description="Of `content` only; ids are always all there."
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None, description="Extra template variables (vLLM), e.g. enable_thinking."
    )
    # sent by real clients, no effect on what is sampled
    user: str | None = Field(default=None, description="OpenAI's end-user id; not used.")
    metadata: dict[str, Any] | None = Field(default=None, description="Not stored; not used.")
    response_format: dict[str, Any] | None = Field(default=None, description="Only {'type': 'text'}.")
    modalities: list[str] | None = Field(default=None, description="Only ['text'].")
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    stream_options: dict[str, Any] | None = Field(default=None, description="Only without streaming.")
    spaces_between_special_tokens: bool = True
    request_id: str | None = None
    priority: int = 0
    # declared so a client sending the default is understood; any other value is refused (UNSUPPORTED)
    stream: bool = False
    store: bool = False
    parallel_tool_calls: bool = True
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[str, float] | None = None
    min_p: float = 0.0
    min_tokens: int = 0
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    documents: list[Any] | None = None
    prompt_logprobs: int | None = None
    truncate_prompt_tokens: int | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    use_beam_search: bool = False
    length_penalty: float = 1.0
    structured_outputs: dict[str, Any] | None = None
    guided_json: Any = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    functions: list[Any] | None = None
    function_call: Any = None
    audio: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    web_search_options: dict[str, Any] | None = None


def check_options(req: ChatRequest) -> None:
    """Refuse what is declared but not implemented, and the bounds of the logprob fields."""
    for name, default in UNSUPPORTED.items():
        if getattr(req, name) != default:
            raise ChatRequestError(f"{name}: not supported by turnrl serve (only {json.dumps(default)})")
    if req.response_format not in (None, {"type": "text"}):
        raise ChatRequestError("response_format: only {'type': 'text'} is supported by turnrl serve")
    if req.modalities not in (None, ["text"]):
        raise ChatRequestError("modalities: only ['text'] is supported by turnrl serve")
    if req.top_logprobs is not None:
        if not 0 <= req.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ChatRequestError(
                f"top_logprobs: must be in [0, {MAX_TOP_LOGPROBS}], got {_shown(req.top_logprobs)}"
            )
        if not req.logprobs:
            raise ChatRequestError("top_logprobs: needs logprobs: true")


def max_tokens_of(req: ChatRequest) -> tuple[int | None, str]:
    """The asked budget and the field it came from (None: absent; the route picks the default)."""
    a, b = req.max_tokens, req.max_completion_tokens
    if a is not None and b is not None and a != b:
        raise ChatRequestError(
            f"max_completion_tokens: {_shown(b)} differs from max_tokens {_shown(a)}; send one of them"
        )
    if b is not None:
        return b, "max_completion_tokens"
    return a, "max_tokens"


ROLES: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "refusal", "reasoning_content"}),
    "tool": frozenset({"role", "content", "tool_call_id", "name"}),
}
"""Each role and the keys its message may carry."""


def _shown(value: Any, limit: int = 60) -> str:
    """`repr(value)`, cut: a refusal names what was sent, it does not echo a megabyte back."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _unknown(where: str, key: Any, known: frozenset[str]) -> ChatRequestError:
    close = difflib.get_close_matches(str(key), sorted(known), n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(known))}"
    return ChatRequestError(f"{where}.{key}: unknown field; {hint}")


def _text(where: str, content: Any, required: bool) -> str | None:
    """A message's content as text: a string, or text parts joined; None only where allowed."""
    if content is None:
        if required:
            raise ChatRequestError(f"{where}: missing; a string or a list of text parts")
        return None
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ChatRequestError(
            f"{where}: must be a string or a list of text parts, got {type(content).__name__}"
        )
    parts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ChatRequestError(
                f"{where}[{j}]: only text parts ({{'type': 'text', 'text': ...}}) are supported, got {_shown(kind)}"
            )
        parts.append(part["text"])
    return "".join(parts)


def _string(where: str, value: Any, required: bool = False) -> None:
    if value is None and not required:
        return
    if not isinstance(value, str) or (required and not value):
        raise ChatRequestError(f"{where}: must be a non-empty string, got {_shown(value)}")


def _check_json(where: str, text: str) -> None:
    """Tool-call arguments that are JSON text (empty: no arguments), or ChatRequestError: the model
    would be shown text its template was written to show as a JSON object (`turnrl sft` refuses
    such a conversation too)."""
    if not text.strip():
        return
    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        raise ChatRequestError(
            f"{where}: not JSON ({err.msg} at line {err.lineno} column {err.colno}): {_shown(text)}"
        ) from None
    except (ValueError, RecursionError):  # an integer past Python's digit limit, nesting past the stack
        raise ChatRequestError(
            f"{where}: JSON this server cannot read (an integer over 4300 digits, or nested too deep)"
        ) from None


def _tool_calls(where: str, calls: Any) -> list[dict[str, Any]]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise ChatRequestError(f"{where}: must be a list of tool calls, got {type(calls).__name__}")
    out = []
    for j, call in enumerate(calls):
        here = f"{where}[{j}]"
        if not isinstance(call, dict):
            raise ChatRequestError(f"{here}: must be an object, got {type(call).__name__}")
        for key in call:
            if key not in ("id", "type", "function"):
                raise _unknown(here, key, frozenset({"id", "type", "function"}))
        _string(f"{here}.id", call.get("id"))
        if call.get("type", "function") != "function":
            raise ChatRequestError(f"{here}.type: only 'function' tool calls, got {_shown(call.get('type'))}")
        function = call.get("function")
        if not isinstance(function, dict):
            raise ChatRequestError(f"{here}.function: must be an object with name and arguments")
        for key in function:
            if key not in ("name", "arguments"):
                raise _unknown(f"{here}.function", key, frozenset({"name", "arguments"}))
        _string(f"{here}.function.name", function.get("name"), required=True)
        args = function.get("arguments", "{}")
        if not isinstance(args, (str, dict)):  # JSON text on OpenAI's wire; some clients send the object
            raise ChatRequestError(f"{here}.function.arguments: must be JSON text, got {type(args).__name__}")
        if isinstance(args, str):
            _check_json(f"{here}.function.arguments", args)
        out.append({"id": call.get("id"), "type": "function", "function": {**function, "arguments": args}})
    return out


def check_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """The messages as the chat template takes them: content as text, `developer` as `system` (most
    open models' templates know no developer role), keys without a value dropped."""
    if not messages:
        raise ChatRequestError("messages: must be a non-empty list of messages")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ChatRequestError(
                f"{where}: must be an object with role and content, got {type(message).__name__}"
            )
        # a null is an absent key: the SDK's `message.model_dump()` sends `"audio": null`,
        # `"function_call": null`, ... for what OpenAI's own answers may carry
        message = {k: v for k, v in message.items() if v is not None}
        role = message.get("role")
        if role not in ROLES:
            seen = "missing" if role is None else f"{_shown(role)} is not"
            raise ChatRequestError(f"{where}.role: {seen} one of {', '.join(ROLES)}")
        for key in message:
            if key not in ROLES[role]:
                raise _unknown(where, key, ROLES[role])
        calls = _tool_calls(f"{where}.tool_calls", message.get("tool_calls")) if role == "assistant" else []
        # an assistant message may be calls alone; every other message says something
        content = _text(f"{where}.content", message.get("content"), required=role != "assistant")
        if role == "assistant" and content is None and not calls:
            raise ChatRequestError(
                f"{where}.content: missing; an assistant message needs content or tool_calls"
            )
        _string(f"{where}.name", message.get("name"))
        if role == "tool":
            _string(f"{where}.tool_call_id", message.get("tool_call_id"), required=True)
        for key in ("refusal", "reasoning_content"):
            _string(f"{where}.{key}", message.get(key))
        rendered: dict[str, Any] = {k: v for k, v in message.items() if v is not None}
        rendered["role"] = "system" if role == "developer" else role
        rendered["content"] = content or ""
        if calls:
            rendered["tool_calls"] = calls
        else:
            rendered.pop("tool_calls", None)
        out.append(rendered)
    return out


TOOL_KEYS = frozenset({"type", "function"})
FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})


def check_tools(tools: list[Any] | None) -> tuple[list[dict[str, Any]] | None, set[str]]:
    """The tools as given (None when there are none) and their names."""
    if not tools:
        return None, set()
    names: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise ChatRequestError(f"{where}: must be an object {{'type': 'function', 'function': {{...}}}}")
        for key in tool:
            if key not in TOOL_KEYS:
                raise _unknown(where, key, TOOL_KEYS)
        if tool.get("type") != "function":
            raise ChatRequestError(
                f"{where}.type: only 'function' tools are supported, got {_shown(tool.get('type'))}"
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise ChatRequestError(f"{where}.function: must be an object with a name")
        for key in function:
            if key not in FUNCTION_KEYS:
                raise _unknown(f"{where}.function", key, FUNCTION_KEYS)
        name = function.get("name")
        _string(f"{where}.function.name", name, required=True)
        if name in names:
            raise ChatRequestError(f"{where}.function.name: {name!r} is given twice")
        if not isinstance(function.get("parameters", {}), dict):
            raise ChatRequestError(f"{where}.function.parameters: must be a JSON schema object")
        names.add(name)
    return tools, names


def check_tool_choice(tool_choice: Any, tools: list[dict[str, Any]] | None) -> bool:
    """Whether the model's output is read for tool calls: with tools and `tool_choice` auto (the
    default). "none" renders the tools all the same (the prompt does not change with the choice)
    but reads no calls; "required" and a named function would need constrained decoding: refused."""
    if tool_choice in (None, "auto"):
        return tools is not None
    if tool_choice == "none":
        return False
    if tool_choice == "required" or isinstance(tool_choice, dict):
        shown = "'required'" if tool_choice == "required" else "a named function"
        raise ChatRequestError(f"tool_choice: {shown} is not supported by turnrl serve; use 'auto' or 'none'")
    raise ChatRequestError(f"tool_choice: {_shown(tool_choice)} is not one of 'auto', 'none'")
