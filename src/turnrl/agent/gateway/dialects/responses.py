"""OpenAI's Responses API: `POST .../v1/responses`, whole or streamed.

The request is read into OpenAI chat terms (`responses_request`), so a call renders to the ids the
policy's chat template gives the same conversation sent to chat completions; the answer is written
as OpenAI's `response` object or its typed events (`responses_output`).

`previous_response_id` continues an earlier response of the same episode: its conversation (its
input and answer, and those of the responses it continued; not its instructions, as with OpenAI)
comes before this call's input (`bind`). The episode's responses are kept by id, in memory, while
the episode is served, unless sent with `store: false` (the agent then sends the whole
conversation each time). Either way the next call carries the assistant message that was
recorded, so a well-behaved agent never forks its episode. Errors are OpenAI's
`{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import Any

from turnrl.agent.gateway.dialects import responses_output as output
from turnrl.agent.gateway.dialects.base import BadRequest, Call, Dialect, Reply
from turnrl.agent.gateway.dialects.responses_request import parse

CODES = ("context_length_exceeded", "previous_response_not_found")
"""OpenAI's error codes, read from a refusal's message where it names one in parentheses."""


def error(message: str, status: int) -> dict[str, Any]:
    return {"error": output.error_object(message, status, CODES)}


# -- the episode's responses, by id -----------------------------------------------------------------
@dataclass(frozen=True)
class Kept:
    """A stored response: the one it continued, its call's input (as chat messages, without the
    instructions) and the assistant message it answered with, as recorded."""

    previous: str | None
    inputs: list[dict[str, Any]]
    answer: dict[str, Any]


_KEPT: dict[int, dict[str, Kept]] = {}
"""Each served episode's stored responses by id, keyed by the episode object's id; dropped with it."""


def kept_of(episode: Any) -> dict[str, Kept]:
    """The episode's stored responses (on the gateway's event loop: no lock needed)."""
    key = id(episode)
    if key not in _KEPT:
        _KEPT[key] = {}
        weakref.finalize(episode, _KEPT.pop, key, None)
    return _KEPT[key]


def history(kept: dict[str, Kept], response_id: str) -> list[dict[str, Any]]:
    """The conversation a response ends: the inputs and answers of its chain, oldest first."""
    chain: list[Kept] = []
    at: str | None = response_id
    while at is not None:
        chain.append(kept[at])
        at = kept[at].previous
    return [m for entry in reversed(chain) for m in (*entry.inputs, entry.answer)]


def bind(call: Call, episode: Any) -> Call:
    """The call with the conversation its `previous_response_id` ends before its own input."""
    kept = kept_of(episode)
    options = {**call.options, "kept": kept}
    previous = options["echo"]["previous_response_id"]
    if previous is None:
        return replace(call, options=options)
    if previous not in kept:
        raise BadRequest(
            f"previous_response_id: {previous[:64]!r} is not a stored response of this episode (an "
            "unknown id, another episode's, or one sent with store: false) (previous_response_not_found)"
        )
    messages = [*options["head"], *history(kept, previous), *options["inputs"]]
    return replace(call, messages=messages, options=options)


def keep(reply: Reply) -> None:
    """Store the answered response by its id (unless `store: false`): a later call may continue it."""
    assert reply.choice is not None
    options = reply.call.options
    if options.get("kept") is None or not options["echo"]["store"]:
        return
    answer = {k: v for k, v in reply.choice["message"].items() if v is not None}  # as recorded
    entry = Kept(options["echo"]["previous_response_id"], options["inputs"], answer)
    options["kept"][output.response_id(reply)] = entry


def response(reply: Reply) -> dict[str, Any]:
    keep(reply)
    return output.body(reply)


def stream_reply(reply: Reply) -> list[bytes]:
    keep(reply)
    return output.events(reply)


DIALECT = Dialect(
    name="responses",
    path="/responses",
    parse=parse,
    error=error,
    response=response,
    stream_open=output.opening,
    stream_reply=stream_reply,
    stream_error=output.failure,
    bind=bind,
)
