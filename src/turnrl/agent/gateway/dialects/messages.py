"""Anthropic's Messages API: `POST .../v1/messages`, whole or streamed (`messages_request` reads it).

The answer is a `message`: its content blocks (the text, then one `tool_use` block per tool call
read from the output, `input` the call's arguments), `stop_reason` (`end_turn`, `max_tokens`,
`tool_use`, or `stop_sequence` with the `stop_sequence` that ended it), `usage` in tokens, and
turnrl's `policy_version`. Streamed, it is the API's server-sent events, each `event: <type>` with
the same `type` in its data: `message_start` at once (the usage's input tokens known, no content),
then once the engine has answered, per block `content_block_start`, its `text_delta` or
`input_json_delta` pieces and `content_block_stop`, then `message_delta` (the stop reason and
the output tokens) and `message_stop`.

Errors are `{"type": "error", "error": {"type", "message"}}`, the type by status
(`invalid_request_error`, `not_found_error`, `api_error`, ...); in a stream, `event: error` ends it.
"""

from __future__ import annotations

import json
from typing import Any

from turnrl.agent.gateway.dialects.base import Dialect, Reply, sse
from turnrl.agent.gateway.dialects.messages_request import parse
from turnrl.servers.chat.response import pieces

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}
"""OpenAI's finish reasons as the API's stop reasons; "stop" is end_turn or stop_sequence."""


def error(message: str, status: int) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _message_id(reply: Reply) -> str:
    return f"msg_{reply.id}"


def _tool_use_id(call_id: str) -> str:
    # the call's own id in the API's form: the agent echoes it in its tool_result
    return f"toolu_{call_id.removeprefix('call_')}"


def _blocks(reply: Reply) -> list[dict[str, Any]]:
    """The answer's content blocks: its text (none when empty), then its tool calls."""
    assert reply.choice is not None
    message = reply.choice["message"]
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": _tool_use_id(call["id"]),
                "name": function["name"],
                "input": json.loads(function["arguments"] or "{}"),
            }
        )
    return blocks


def _stop(reply: Reply) -> tuple[str, str | None]:
    """The stop reason, and the request's stop sequence that ended the answer (None if none did;
    a stop string of the run's own ends a turn as EOS does)."""
    assert reply.choice is not None
    reason = reply.choice["finish_reason"]
    if reason in STOP_REASONS:
        return STOP_REASONS[reason], None
    hit = reply.choice.get("stop_reason")
    if hit is not None and hit in reply.call.options["stop_sequences"]:
        return "stop_sequence", hit
    return "end_turn", None


def _usage(reply: Reply, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": len(reply.prompt_ids), "output_tokens": output_tokens}


def response(reply: Reply) -> dict[str, Any]:
    reason, sequence = _stop(reply)
    return {
        "id": _message_id(reply),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": _blocks(reply),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": _usage(reply, reply.completion_tokens),
        "policy_version": reply.policy_version,
    }


def _event(data: dict[str, Any]) -> bytes:
    return sse(data, event=data["type"])


def stream_open(reply: Reply) -> list[bytes]:
    message = {
        "id": _message_id(reply),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(reply, 0),
    }
    return [_event({"type": "message_start", "message": message})]


def _block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    """One content block as its start (the block empty), its deltas, its stop."""
    if block["type"] == "text":
        head: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
    else:
        head = {**block, "input": {}}
        text = json.dumps(block["input"], ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(text)]
    return [
        _event({"type": "content_block_start", "index": index, "content_block": head}),
        *(_event({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas),
        _event({"type": "content_block_stop", "index": index}),
    ]


def stream_reply(reply: Reply) -> list[bytes]:
    reason, sequence = _stop(reply)
    events = [e for index, block in enumerate(_blocks(reply)) for e in _block_events(index, block)]
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": sequence},
        "usage": {"output_tokens": reply.completion_tokens},
        "policy_version": reply.policy_version,
    }
    return [*events, _event(delta), _event({"type": "message_stop"})]


def stream_error(reply: Reply, message: str, status: int) -> list[bytes]:
    # the SDK raises at `event: error`, its body the whole event: turnrl's `detail` rides along
    return [_event({**error(message, status), "detail": message})]


DIALECT = Dialect(
    name="messages",
    path="/messages",
    parse=parse,
    error=error,
    response=response,
    stream_open=stream_open,
    stream_reply=stream_reply,
    stream_error=stream_error,
)
