"""The gateway's HTTP API: OpenAI's chat completions, one base URL per episode.

    POST /episodes/{episode_id}/v1/chat/completions    OpenAI's request (`servers.chat.schema`)
        -> OpenAI's `chat.completion` (`servers.chat.response`), plus turnrl's `policy_version`
    GET  /episodes/{episode_id}/v1/models              -> {"object": "list", "data": [{"id": model}]}

The agent's client has `base_url = .../episodes/<id>/v1` and the episode's own key, so every call
names its episode without the agent knowing, and no call reaches another episode (`episode_of`). The request is OpenAI's, checked as `turnrl serve` checks it (unknown fields
refused with "did you mean", NaN refused, unsupported options refused), with three rules of its own:
`n` must be 1 (the trainer's `rollout.n` makes the group), `top_logprobs` is not offered, and the
sampling parameters are the run's (`temperature`, `top_p`, `top_k`: the trainer computes its
log-probs at them; no `seed`: a group's episodes would sample alike), so the request's own are
ignored and counted (`agent/sampling_overridden`).

One call of an episode runs at a time (a second waits for the first): the episode's trajectory
grows call by call (`trajectory`). A call whose client leaves, or whose episode is closed (timed
out), stops: dropped from the engine's queue or stopped at its next decode step.
"""

from __future__ import annotations

import asyncio
import hmac
import threading
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from pydantic import ValidationError
from starlette.responses import Response

from turnrl.agent.gateway.server import Gateway, OpenEpisode
from turnrl.agent.gateway.trajectory import Plan, Refused
from turnrl.errors import TurnrlInputError
from turnrl.rollout.base import Generation, SamplingParams
from turnrl.servers.chat.response import ChatOutput, chat_completion
from turnrl.servers.chat.schema import (
    ChatRequest,
    check_messages,
    check_options,
    check_tool_choice,
    check_tools,
    max_tokens_of,
)
from turnrl.servers.guard import Guard, detail, finite_json, presented_key, wait_for_disconnect
from turnrl.servers.refusal import Refusal, add_error_handlers
from turnrl.servers.validation import describe_validation_error

EXAMPLE = '{"model": "policy", "messages": [{"role": "user", "content": "Hello"}]}'
SAMPLING = ("temperature", "top_p", "top_k", "seed")
"""The request's sampling fields the run's own replace."""


class BadRequest(Refusal):
    """A call the gateway refuses: its status (400 unless said) and one line naming the field."""


def _without_nulls(messages: list[Any]) -> list[Any]:
    """Messages without their null fields: an agent that appends the SDK's own message object
    (`message.model_dump()`) sends `annotations`, `audio`, `function_call` as null, which say nothing."""
    return [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m for m in messages]


def _overrides(req: ChatRequest, run: SamplingParams) -> bool:
    """Whether the request asked for sampling other than the run's (which is used all the same)."""
    ours = {"temperature": run.temperature, "top_p": run.top_p, "top_k": run.top_k, "seed": None}
    sent = {k: getattr(req, k) for k in SAMPLING if k in req.model_fields_set}
    if "top_k" in sent:
        sent["top_k"] = max(sent["top_k"] or 0, 0)  # -1, 0 and null all mean off
    return any(v != ours[k] for k, v in sent.items())


def prepare(
    gateway: Gateway, episode: OpenEpisode, req: ChatRequest
) -> tuple[Plan, ChatOutput, SamplingParams]:
    """Check the request and plan the call on the episode's trajectory; BadRequest otherwise."""
    try:
        check_options(req)
        if req.n != 1:
            raise BadRequest(
                f"n: must be 1, got {req.n}; the trainer's rollout.n makes the group of episodes"
            )
        if req.top_logprobs:
            raise BadRequest(
                "top_logprobs: not offered by the agent gateway (logprobs: true gives the sampled ones)"
            )
        messages = check_messages(_without_nulls(req.messages))
        tools, names = check_tools(req.tools)
        parse_tools = check_tool_choice(req.tool_choice, tools)
        if tools and not gateway.renders_tools:
            raise BadRequest(
                "tools: the chat template does not render tools, so the model would never see them; "
                "set rollout.agent.chat_template to a template that does"
            )
        asked, field = max_tokens_of(req)
        if asked is not None and asked < 1:
            raise BadRequest(f"{field}: must be >= 1, got {asked}")
        stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        if any(not s for s in stop):
            raise BadRequest("stop: empty stop string")
        with gateway.tokenizer_lock:
            plan = episode.trajectory.plan(messages, tools, asked, req.chat_template_kwargs)
    except Refused as err:
        raise BadRequest(str(err), err.status) from None
    except TurnrlInputError as err:  # ChatRequestError, ChatTemplateError: the client's messages
        # the shared checks name turnrl serve; here the agent gateway answers
        raise BadRequest(" ".join(str(err).replace("turnrl serve", "the agent gateway").split())) from None
    if _overrides(req, episode.params):
        episode.sampling_overridden += 1
    params = replace(
        episode.params,
        n=1,
        max_new_tokens=plan.max_new_tokens,
        stop=list(dict.fromkeys([*episode.params.stop, *stop])),
        # never seeded: the n episodes of a prompt open with the same context, and one seed would give
        # them one sample (a GRPO group of equal answers); unseeded calls also merge in the engine
        seed=None,
        ignore_eos=req.ignore_eos or episode.params.ignore_eos,
    )
    output = ChatOutput(
        stop=params.stop,
        tools=names if parse_tools else None,
        logprobs=req.logprobs,
        tokens_as_ids=req.return_tokens_as_token_ids,
        return_token_ids=req.return_token_ids,
        skip_special_tokens=req.skip_special_tokens,
    )
    return plan, output, params


def finish(
    gateway: Gateway, episode: OpenEpisode, plan: Plan, output: ChatOutput, gen: Generation
) -> dict[str, Any]:
    """The chat.completion body; the call recorded on the episode's trajectory."""
    ids, lps = gen.response_ids[0], gen.log_probs[0]
    if len(ids) > plan.max_new_tokens:  # an engine must honour the budget: a silent cut would hide it
        raise RuntimeError(
            f"rollout engine returned {len(ids)} tokens for a call limited to {plan.max_new_tokens}"
        )
    with gateway.tokenizer_lock:
        body, unparsed = chat_completion(gateway.tokenizer, gateway.model_id, plan.context, gen, output)
    message = body["choices"][0]["message"]
    answer = {k: v for k, v in message.items() if v is not None}
    version = min(gen.versions_of(0), default=gen.policy_version)
    with gateway.tokenizer_lock:  # record() decodes the last token
        episode.trajectory.record(
            plan, ids, lps, version, answer, len(message.get("tool_calls") or []), unparsed
        )
    return body


def create_app(gateway: Gateway) -> FastAPI:
    """The gateway's app: the module-level routes (`ROUTERS`) over `app.state.gateway`."""
    app = FastAPI(title="turnrl agent gateway")
    # no server-wide key: each episode has its own (`episode_of`); loopback only
    app.add_middleware(Guard, max_body=gateway.max_body)
    app.state.gateway = gateway

    add_error_handlers(app)
    for r in ROUTERS:
        app.include_router(r)
    return app


router = APIRouter()
# a new route is one module with an `APIRouter` and one line in this table
ROUTERS: list[APIRouter] = [router]


def episode_of(episode_id: str, request: Request) -> OpenEpisode:
    """The open episode whose key the request carries. Another episode's key gets the answer an
    unknown id gets, so a key tells nothing about the ids of other episodes."""
    gateway: Gateway = request.app.state.gateway
    presented = presented_key(request.scope)
    if presented is None:
        raise BadRequest("api key: missing; send 'Authorization: Bearer <key>' (the episode's key)", 401)
    episode = gateway.episode(episode_id)
    if episode is None or not hmac.compare_digest(presented, episode.key.encode()):
        raise BadRequest(
            f"episode {episode_id[:64]!r}: unknown to this key, or already ended (timed out?)", 404
        )
    return episode


@router.get("/episodes/{episode_id}/v1/models")
async def models(episode_id: str, request: Request) -> Response:
    episode_of(episode_id, request)
    card = {"id": request.app.state.gateway.model_id, "object": "model", "created": 0, "owned_by": "turnrl"}
    return finite_json({"object": "list", "data": [card]})


def chat_request(body: bytes, gateway: Gateway) -> ChatRequest:
    """The call's request, checked as `turnrl serve` checks it, for the model the agent was given."""
    try:
        req = ChatRequest.model_validate_json(body)
    except ValidationError as err:
        raise BadRequest(
            describe_validation_error(list(err.errors()), list(ChatRequest.model_fields), EXAMPLE)
        ) from None
    if req.model not in (None, "", gateway.model_id):
        raise BadRequest(
            f"model: {req.model[:64]!r} is not served here; send the `model` that run() was given "
            f"({gateway.model_id!r})",
            404,
        )
    return req


@router.post("/episodes/{episode_id}/v1/chat/completions")
async def chat(episode_id: str, request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    episode = episode_of(episode_id, request)
    req = chat_request(await request.body(), gateway)
    async with episode.lock:  # one call of an episode at a time: its trajectory grows call by call
        plan, output, params = await asyncio.to_thread(prepare, gateway, episode, req)
        gone = threading.Event()
        if not episode.start_call(gone):
            raise BadRequest(f"episode {episode_id[:64]!r}: already ended (timed out?)", 404)
        try:
            job = asyncio.wrap_future(gateway.runner.submit(plan.context, params, gone))
            left = asyncio.ensure_future(wait_for_disconnect(request))
            try:
                await asyncio.wait({job, left}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                left.cancel()
            if not job.done():  # the client left: drop the call, or stop it at the next decode step
                gone.set()
                job.cancel()
                return Response(status_code=499)
            if job.cancelled() or gone.is_set():
                raise BadRequest(f"episode {episode_id[:64]!r}: ended while this call ran", 404)
            try:
                gen = job.result()
            except Exception as err:  # the engine's fault, not the agent's: the run stops after the step
                gateway.engine_failed(err)
                return detail(f"generation failed: {type(err).__name__}: {' '.join(str(err).split())}", 500)
        finally:
            episode.end_call(gone)
        content = await asyncio.to_thread(finish, gateway, episode, plan, output, gen)
    return finite_json(content)
