"""The Responses dialect's answer (`responses`): the `response` object, whole or as the typed
server-sent events OpenAI streams it as.

The answer's `output` is a `message` item (the text, one `output_text` part) and one
`function_call` item per tool call (`call_id`, `name`, `arguments` as JSON text). An answer of
calls alone has no message item; one with neither has a message with empty text, so the answer
sent back as input is always the assistant message that was recorded. `status` is "completed",
or "incomplete" with `incomplete_details.reason` "max_output_tokens" when the budget cut it.

Streamed: `response.created` and `response.in_progress` at once (status "in_progress", no output),
then, once the engine has answered, per item `response.output_item.added`, its content part
(`response.content_part.added`, `response.output_text.delta`s, `response.output_text.done`,
`response.content_part.done`) or its arguments (`response.function_call_arguments.delta`s,
`.done`), `response.output_item.done`, and last `response.completed` (`response.incomplete` when
cut, as OpenAI sends it) with the whole response. Each event is `event: <type>` with its JSON,
numbered by `sequence_number`. A failure after the stream has started is one `error` event.
"""

from __future__ import annotations

import time
from typing import Any

from turnrl.agent.gateway.dialects.base import Reply, field_of, sse
from turnrl.servers.chat.response import pieces

OPENING = 2
"""The events `opening` sends: the rest are numbered from here."""


def response_id(reply: Reply) -> str:
    return f"resp_{reply.id}"


def error_object(message: str, status: int, codes: tuple[str, ...] = ()) -> dict[str, Any]:
    """OpenAI's error object; `code` is the first of `codes` the message names in parentheses."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    code = next((c for c in codes if f"({c})" in message), None)
    return {"message": message, "type": kind, "param": field_of(message), "code": code}


def _usage(reply: Reply) -> dict[str, Any]:
    prompt = len(reply.prompt_ids)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": reply.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + reply.completion_tokens,
    }


def _response(reply: Reply, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    """The `response` object around `output`, echoing what the request asked."""
    echo = reply.call.options["echo"]
    return {
        "id": response_id(reply),
        "object": "response",
        "created_at": reply.created,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": echo["instructions"],
        "max_output_tokens": echo["max_output_tokens"],
        "model": reply.model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": echo["previous_response_id"],
        "reasoning": {"effort": None, "summary": None},
        "store": echo["store"],
        # the run's sampling is used, whatever the request sent (`Call.sampling`)
        "temperature": None,
        "top_p": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": echo["tool_choice"],
        "tools": echo["tools"],
        "truncation": "disabled",
        "usage": None,
        "user": echo["user"],
        "metadata": echo["metadata"],
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def output_items(reply: Reply) -> list[dict[str, Any]]:
    """The answer's output items: its text as a message (unless it is calls alone), then its calls."""
    assert reply.choice is not None
    message = reply.choice["message"]
    calls = message.get("tool_calls") or []
    cut = reply.choice["finish_reason"] == "length"
    items: list[dict[str, Any]] = []
    if message.get("content") or not calls:
        items.append(
            {
                "id": f"msg_{reply.id}",
                "type": "message",
                "role": "assistant",
                "status": "incomplete" if cut else "completed",
                "content": [_text_part(message.get("content") or "")],
            }
        )
    for k, call in enumerate(calls):
        items.append(
            {
                "id": f"fc_{reply.id}_{k}",
                "type": "function_call",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    return items


def body(reply: Reply) -> dict[str, Any]:
    """The whole `response` (plus turnrl's `policy_version`)."""
    assert reply.choice is not None
    cut = reply.choice["finish_reason"] == "length"
    out = _response(reply, "incomplete" if cut else "completed", output_items(reply))
    if cut:
        out["incomplete_details"] = {"reason": "max_output_tokens"}
    else:
        out["completed_at"] = int(time.time())
    out["usage"] = _usage(reply)
    out["policy_version"] = reply.policy_version
    return out


def _event(kind: str, number: int, **fields: Any) -> bytes:
    return sse({"type": kind, **fields, "sequence_number": number}, event=kind)


def opening(reply: Reply) -> list[bytes]:
    head = _response(reply, "in_progress", [])
    return [_event("response.created", 0, response=head), _event("response.in_progress", 1, response=head)]


def _message_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    part = item["content"][0]
    at = {"item_id": item["id"], "output_index": index, "content_index": 0}
    out = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": _text_part("")},
    ]
    out += [
        {"type": "response.output_text.delta", **at, "delta": p, "logprobs": []} for p in pieces(part["text"])
    ]
    out.append({"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []})
    out.append({"type": "response.content_part.done", **at, "part": part})
    return out


def _call_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    at = {"item_id": item["id"], "output_index": index}
    started = {**item, "arguments": "", "status": "in_progress"}
    out = [{"type": "response.output_item.added", "output_index": index, "item": started}]
    out += [
        {"type": "response.function_call_arguments.delta", **at, "delta": p}
        for p in pieces(item["arguments"])
    ]
    out.append(
        {
            "type": "response.function_call_arguments.done",
            **at,
            "name": item["name"],
            "arguments": item["arguments"],
        }
    )
    return out


def events(reply: Reply) -> list[bytes]:
    """Every event after `opening`, to `response.completed` (or `response.incomplete`)."""
    final = body(reply)
    payloads: list[dict[str, Any]] = []
    for index, item in enumerate(final["output"]):
        steps = _message_events if item["type"] == "message" else _call_events
        payloads += steps(index, item)
        payloads.append({"type": "response.output_item.done", "output_index": index, "item": item})
    last = "response.completed" if final["status"] == "completed" else "response.incomplete"
    payloads.append({"type": last, "response": final})
    return [sse({**p, "sequence_number": OPENING + n}, event=p["type"]) for n, p in enumerate(payloads)]


def failure(reply: Reply, message: str, status: int) -> list[bytes]:
    """OpenAI's `error` event (code, message, param), with the error object beside them too: the
    SDK raises an `APIError` at an event that carries one."""
    error = error_object(message, status)
    fields = {k: error[k] for k in ("code", "message", "param")}
    return [_event("error", OPENING, **fields, error=error)]
