"""`POST /v1/chat/completions` on `turnrl serve`: OpenAI's chat API (and vLLM's extensions) over the
same machinery as `/v1/completions`.

    {"messages": [...], "tools": [...], "tool_choice": "auto", "n", "temperature", "top_p",
     "max_completion_tokens", "stop", "seed", "logprobs": true, "top_logprobs": 5, "return_token_ids"}
    -> {"id", "object": "chat.completion", "created", "model", "policy_version", "usage",
        "prompt_token_ids"?, "choices": [{"index", "message": {"role", "content", "tool_calls"},
                                          "logprobs": {"content": [...]}, "finish_reason",
                                          "unparsed_tool_calls"?, "token_ids"?}]}

The messages and tools are rendered with the model's chat template (`turnrl serve --chat-template`
replaces it) into one token-id prompt, which goes through the batcher like any completion: merged
with requests that share its sampling parameters, bounded by the same limits, stopped when its
client leaves. The request's schema and checks are `turnrl.servers.chat.schema`; the response is
built by `turnrl.servers.chat.response`; `top_logprobs` come from one more forward pass on the
worker thread (`top_logprobs`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from turnrl.errors import TurnrlInputError
from turnrl.rollout.base import Generation, SamplingParams
from turnrl.servers.chat.response import ChatOutput, TopLogprobs, chat_completion
from turnrl.servers.chat.schema import (
    ChatRequest,
    check_messages,
    check_options,
    check_tool_choice,
    check_tools,
    max_tokens_of,
)
from turnrl.servers.chat.template import ChatTemplate
from turnrl.servers.chat.tool_calls import parameter_schemas
from turnrl.servers.guard import detail, finite_json
from turnrl.servers.inference.common import (
    BadRequest,
    body_of,
    check_size,
    generate_for,
    one_line,
    sampling,
    short,
)
from turnrl.servers.inference.server import Server
from turnrl.servers.inference.top_logprobs import top_logprobs

EXAMPLE = '{"messages": [{"role": "user", "content": "Hello"}], "max_completion_tokens": 16}'
NO_MODEL_LEN_MAX_TOKENS = 16
"""The budget of a request that sends none, for a model that declares no max_model_len (else: the
room max_model_len leaves after the prompt, as vLLM)."""


@dataclass
class Prepared:
    """A checked chat request: its prompt, its engine parameters, how its choices are written."""

    prompt_ids: list[int]
    params: SamplingParams
    output: ChatOutput


def prepare(server: Server, req: ChatRequest) -> Prepared:
    """Check the request and render its prompt (template and tokenizer: real work for a long
    conversation, so it runs off the event loop). Raises BadRequest."""
    if not getattr(server.tokenizer, "chat_template", None):
        raise BadRequest(
            "messages: the served model has no chat template; start turnrl serve with --chat-template FILE"
        )
    try:
        check_options(req)
        messages = check_messages(req.messages)
        tools, names = check_tools(req.tools)
        parse_tools = check_tool_choice(req.tool_choice, tools)
        asked, field = max_tokens_of(req)
        template = ChatTemplate(server.tokenizer)
        prompt_ids = template.prompt_ids(messages, tools, variables=req.chat_template_kwargs)
    except TurnrlInputError as err:  # ChatRequestError, ChatTemplateError: the client's messages
        raise BadRequest(" ".join(str(err).split())) from None
    room = server.max_model_len - len(prompt_ids) if server.max_model_len else None
    if asked is None:
        if room is not None and room < 1:
            raise BadRequest(
                f"messages: {len(prompt_ids)} prompt tokens leave no room under max_model_len {server.max_model_len}"
            )
        asked = room if room is not None else NO_MODEL_LEN_MAX_TOKENS
    params = sampling(
        max_tokens=asked,
        n=req.n,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        stop=req.stop,
        seed=req.seed,
        ignore_eos=req.ignore_eos,
        max_tokens_field=field,
    )
    check_size([prompt_ids], params, server.limits)
    if room is not None and params.max_new_tokens > room:
        raise BadRequest(
            f"{field}: {len(prompt_ids)} prompt tokens + {field} {short(params.max_new_tokens)} exceed "
            f"max_model_len {server.max_model_len}"
        )
    output = ChatOutput(
        stop=params.stop,
        tools=names if parse_tools else None,
        logprobs=req.logprobs,
        tokens_as_ids=req.return_tokens_as_token_ids,
        return_token_ids=req.return_token_ids,
        skip_special_tokens=req.skip_special_tokens,
        tool_format=template.tool_call_format(server.tool_call_format),
        tool_schemas=parameter_schemas(tools),
    )
    return Prepared(prompt_ids, params, output)


def alternatives(server: Server, prepared: Prepared, gen: Generation, k: int) -> list[TopLogprobs]:
    """On the worker thread: each choice's top-k log-probs (one forward per choice)."""
    model, prompt, temperature = server.engine.model, prepared.prompt_ids, prepared.params.temperature
    return [
        top_logprobs(model, prompt, ids, temperature, k, sampled_logprobs=lps)
        for ids, lps in zip(gen.response_ids, gen.log_probs, strict=True)
    ]


router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    """OpenAI's chat API for the app's server (`app.state.server`; the app's key and body guard apply)."""
    server: Server = request.app.state.server
    req = await body_of(request, ChatRequest, EXAMPLE)
    if req.model not in (None, "", server.model_id):
        return detail(
            f"model: {short(req.model)} is not served here; this server serves {server.model_id!r}", 404
        )
    prepared = await asyncio.to_thread(prepare, server, req)
    gen = await generate_for(request, server.batcher, [prepared.prompt_ids], prepared.params)
    if isinstance(gen, Response):  # the client left (499), or the batch failed (500)
        return gen
    if req.logprobs and req.top_logprobs:
        k = req.top_logprobs
        job = server.batcher.call(lambda: alternatives(server, prepared, gen, k))
        try:
            prepared.output.top_logprobs = await asyncio.wrap_future(job)
        except Exception as err:  # out of memory, say: the server's fault, one line
            return detail(f"top_logprobs: computing the alternatives failed: {one_line(err)}", 500)
    # decoding many long choices (and every alternative's text) is real work: off the event loop
    body, unparsed = await asyncio.to_thread(
        chat_completion, server.tokenizer, server.model_id, prepared.prompt_ids, gen, prepared.output
    )
    server.tool_calls_unparsed += unparsed  # counted on the event loop: one writer, no lock
    return finite_json(body)
