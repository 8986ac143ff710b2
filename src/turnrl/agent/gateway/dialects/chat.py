"""OpenAI's chat completions: `POST .../v1/chat/completions`, whole or streamed.

The request is OpenAI's, checked as `turnrl serve` checks it (`servers.chat.schema`: unknown fields
refused with "did you mean", NaN refused, unsupported options refused), with three rules of the
gateway's own: `n` must be 1 (the trainer's `rollout.n` makes the group), `top_logprobs` is not
offered, and the request's sampling fields are not used (the run's are; `Call.sampling`). Unlike
`turnrl serve`, `stream: true` is taken: the answer is then `text/event-stream`, one
`data: {chat.completion.chunk}` per event (`servers.chat.response.content_chunks`), closed by
`data: [DONE]`; `stream_options.include_usage` adds the usage chunk.

Errors are OpenAI's `{"error": {"message", "type", "param", "code"}}`; in a stream, one
`data: {"error": ...}` event ends it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from turnrl.agent.gateway.dialects.base import BadRequest, Call, Dialect, Reply, field_of, refused, sse
from turnrl.errors import TurnrlInputError
from turnrl.servers.chat.response import ChatOutput, completion_body, content_chunks, role_chunk
from turnrl.servers.chat.schema import ChatRequest, check_options, max_tokens_of
from turnrl.servers.validation import describe_validation_error

EXAMPLE = '{"model": "policy", "messages": [{"role": "user", "content": "Hello"}]}'
SAMPLING = ("temperature", "top_p", "top_k", "seed")
"""The request's sampling fields the run's own replace."""
STREAM_OPTIONS = ("include_usage", "include_obfuscation")
"""OpenAI's `stream_options`; obfuscation (random padding against length side channels on the
public internet) is not added on loopback, whatever is asked."""
DONE = sse("[DONE]")


def _stream_options(options: dict[str, Any] | None) -> bool:
    """Whether the stream ends with a usage chunk; BadRequest for a key OpenAI does not have."""
    for key, value in (options or {}).items():
        if key not in STREAM_OPTIONS:
            raise BadRequest(f"stream_options.{key}: unknown field; known: {', '.join(STREAM_OPTIONS)}")
        if not isinstance(value, bool):
            raise BadRequest(f"stream_options.{key}: must be true or false, got {value!r:.60}")
    return bool((options or {}).get("include_usage"))


def _gateway_rules(req: ChatRequest) -> tuple[int | None, str, list[str]]:
    """The budget (and its field) and the stop strings, or BadRequest."""
    # streaming is this route's own (turnrl serve refuses it): the shared check sees the default
    check_options(req.model_copy(update={"stream": False}))
    if req.n != 1:
        raise BadRequest(f"n: must be 1, got {req.n}; the trainer's rollout.n makes the group of episodes")
    if req.top_logprobs:
        raise BadRequest(
            "top_logprobs: not offered by the agent gateway (logprobs: true gives the sampled ones)"
        )
    asked, field = max_tokens_of(req)
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    return asked, field, stop


def parse(body: bytes) -> Call:
    try:
        req = ChatRequest.model_validate_json(body)
    except ValidationError as err:
        raise BadRequest(
            describe_validation_error(list(err.errors()), list(ChatRequest.model_fields), EXAMPLE)
        ) from None
    try:
        asked, field, stop = _gateway_rules(req)
    except TurnrlInputError as err:
        raise refused(err) from None
    return Call(
        messages=req.messages,
        tools=req.tools,
        tool_choice=req.tool_choice,
        max_tokens=asked,
        max_tokens_field=field,
        stop=stop,
        model=req.model,
        variables=req.chat_template_kwargs,
        ignore_eos=req.ignore_eos,
        sampling={k: getattr(req, k) for k in SAMPLING if k in req.model_fields_set},
        stream=req.stream,
        output=ChatOutput(
            logprobs=req.logprobs,
            tokens_as_ids=req.return_tokens_as_token_ids,
            return_token_ids=req.return_token_ids,
            skip_special_tokens=req.skip_special_tokens,
        ),
        options={"include_usage": _stream_options(req.stream_options) and req.stream},
    )


def error(message: str, status: int) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    code = "context_length_exceeded" if "(context_length_exceeded)" in message else None
    return {"error": {"message": message, "type": kind, "param": field_of(message), "code": code}}


def response(reply: Reply) -> dict[str, Any]:
    assert reply.choice is not None
    return completion_body(
        reply.model,
        reply.prompt_ids,
        [reply.choice],
        reply.completion_tokens,
        reply.policy_version,
        reply.call.output,
        completion_id=f"chatcmpl-{reply.id}",
        created=reply.created,
    )


def _head(reply: Reply) -> dict[str, Any]:
    return {"id": f"chatcmpl-{reply.id}", "created": reply.created, "model": reply.model}


def stream_open(reply: Reply) -> list[bytes]:
    return [sse(role_chunk(_head(reply), 1, reply.call.options["include_usage"]))]


def stream_reply(reply: Reply) -> list[bytes]:
    chunks = content_chunks(response(reply), reply.call.options["include_usage"])
    return [*(sse(c) for c in chunks), DONE]


def stream_error(reply: Reply, message: str, status: int) -> list[bytes]:
    # OpenAI's SDK raises an APIError at an event that carries `error`; no [DONE] follows it
    return [sse(error(message, status))]


DIALECT = Dialect(
    name="chat",
    path="/chat/completions",
    parse=parse,
    error=error,
    response=response,
    stream_open=stream_open,
    stream_reply=stream_reply,
    stream_error=stream_error,
)
