"""One model call of an episode, whatever its dialect: checked, planned on the episode's trajectory,
run on the engine, recorded (or abandoned), answered whole or streamed.

    call = dialect.parse(body)                        # dialects/: the request as a `Call`
    response = await answer(dialect, gateway, episode, call, request)

The checks every dialect shares (`prepare`): the messages, tools and tool choice as `turnrl serve`
checks them, tools only where the template renders them, a budget >= 1, no empty stop string.
The sampling is the run's: the request's own temperature, top_p, top_k or seed is ignored and
counted (`agent/sampling_overridden`), and no call is seeded (a group's episodes would sample alike).

One call of an episode runs at a time (a second waits for the first): the trajectory grows call by
call. A call whose client leaves before its answer is complete, or whose episode is closed (timed
out), stops: dropped from the engine's queue or stopped at its next decode step. Such a call is
**abandoned**: never recorded (`Trajectory.abandoned_calls`); the next call extends the last
recorded one as if it had not happened.

**Streaming.** The engine answers whole, so a stream's first events (the dialect's `stream_open`)
go out at once, and the rest once the answer is there (`stream_reply`). A client that leaves the
stream before the answer is out stops the generation if it still runs, and its call is abandoned;
the call is recorded once the answer's events are sent and before the closing one ([DONE],
`message_stop`, `response.completed`), at which the client's SDK returns: an agent that ends its
episode right then still has the call trained. A failure once the stream has started is
the dialect's error event (`stream_error`), not an HTTP status.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from turnrl.agent.gateway.dialects.base import BadRequest, Call, Dialect, Reply, refused
from turnrl.agent.gateway.server import Gateway, OpenEpisode
from turnrl.agent.gateway.trajectory import Plan, Refused
from turnrl.errors import TurnrlInputError
from turnrl.rollout.base import Generation, SamplingParams
from turnrl.servers.chat.response import ChatOutput, chat_choice
from turnrl.servers.chat.schema import check_messages, check_tool_choice, check_tools
from turnrl.servers.chat.tool_calls import parameter_schemas
from turnrl.servers.guard import finite_json, non_finite_path, wait_for_disconnect

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def error_response(dialect: Dialect, message: str, status: int) -> Response:
    """A refusal in the dialect's error shape, plus turnrl's one-line `detail` (what every turnrl
    server answers, so a client reading `detail` reads any of them)."""
    return finite_json({**dialect.error(message, status), "detail": message}, status)


def check_model(gateway: Gateway, call: Call) -> None:
    if call.model not in (None, "", gateway.model_id):
        raise BadRequest(
            f"model: {call.model[:64]!r} is not served here; send the `model` that run() was given "
            f"({gateway.model_id!r})",
            404,
        )


def _without_nulls(messages: list[Any]) -> list[Any]:
    """Messages without their null fields: an agent that appends the SDK's own message object
    (`message.model_dump()`) sends `annotations`, `audio`, `function_call` as null, which say nothing."""
    return [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m for m in messages]


def _overrides(sent: dict[str, Any], run: SamplingParams) -> bool:
    """Whether the request asked for sampling other than the run's (which is used all the same)."""
    ours = {"temperature": run.temperature, "top_p": run.top_p, "top_k": run.top_k, "seed": None}
    sent = {k: v for k, v in sent.items() if k in ours}
    if "top_k" in sent:
        sent["top_k"] = max(sent["top_k"] or 0, 0)  # -1, 0 and null all mean off
    return any(v != ours[k] for k, v in sent.items())


def _plan(gateway: Gateway, episode: OpenEpisode, call: Call) -> tuple[Plan, set[str] | None]:
    """The checked call planned on the trajectory, and the tool names its output is read for."""
    messages = check_messages(_without_nulls(call.messages))
    tools, names = check_tools(call.tools)
    parse_tools = check_tool_choice(call.tool_choice, tools)
    if tools and not gateway.renders_tools:
        raise BadRequest(
            "tools: the chat template does not render tools, so the model would never see them; "
            "set rollout.agent.chat_template to a template that does"
        )
    if call.max_tokens is not None and call.max_tokens < 1:
        raise BadRequest(f"{call.max_tokens_field}: must be >= 1, got {call.max_tokens}")
    if any(not s for s in call.stop):
        raise BadRequest(f"{call.stop_field}: empty stop string")
    with gateway.tokenizer_lock:
        plan = episode.trajectory.plan(messages, tools, call.max_tokens, call.variables)
    return plan, names if parse_tools else None


def prepare(gateway: Gateway, episode: OpenEpisode, call: Call) -> tuple[Plan, ChatOutput, SamplingParams]:
    """Check the call and plan it on the episode's trajectory; BadRequest otherwise. Renders and
    tokenises: off the event loop."""
    try:
        plan, parse = _plan(gateway, episode, call)
    except Refused as err:
        raise BadRequest(str(err), err.status) from None
    except TurnrlInputError as err:  # ChatRequestError, ChatTemplateError: the client's messages
        raise refused(err) from None
    if _overrides(call.sampling, episode.params):
        episode.sampling_overridden += 1
    params = replace(
        episode.params,
        n=1,
        max_new_tokens=plan.max_new_tokens,
        stop=list(dict.fromkeys([*episode.params.stop, *call.stop])),
        # never seeded: the n episodes of a prompt open with the same context, and one seed would give
        # them one sample (a GRPO group of equal answers); unseeded calls also merge in the engine
        seed=None,
        ignore_eos=call.ignore_eos or episode.params.ignore_eos,
    )
    schemas = parameter_schemas(call.tools)
    output = replace(
        call.output, stop=params.stop, tools=parse, tool_format=gateway.tool_format, tool_schemas=schemas
    )
    return plan, output, params


class Turn:
    """One planned call of an episode on the engine: answered, then recorded or abandoned. Made
    with the episode's lock held; `end()` once done, whatever happened."""

    def __init__(self, gateway: Gateway, episode: OpenEpisode, call: Call, episode_id: str) -> None:
        self.gateway, self.episode, self.call, self.episode_id = gateway, episode, call, episode_id
        self.gone = threading.Event()
        self.job: asyncio.Future[Generation] | None = None
        self.plan: Plan | None = None
        self.output = ChatOutput()
        self.gen: Generation | None = None
        self.unparsed = 0
        self.settled = False
        """Recorded or abandoned: a call is counted once."""

    async def start(self) -> Reply:
        """Plan the call and put it on the engine; BadRequest if it is refused."""
        self.plan, self.output, params = await asyncio.to_thread(
            prepare, self.gateway, self.episode, self.call
        )
        if not self.episode.start_call(self.gone):
            raise BadRequest(f"episode {self.episode_id[:64]!r}: already ended (timed out?)", 404)
        self.job = asyncio.wrap_future(self.gateway.runner.submit(self.plan.context, params, self.gone))
        return Reply(self.call, self.gateway.model_id, self.plan.context)

    async def generation(self, left: asyncio.Future[Any]) -> Generation | None:
        """The engine's answer, or None when the client left first (the call is then abandoned);
        BadRequest when the episode ended meanwhile or the engine failed (a 500: not the agent's fault)."""
        assert self.job is not None
        await asyncio.wait({self.job, left}, return_when=asyncio.FIRST_COMPLETED)
        if not self.job.done():  # the client left: drop the call, or stop it at the next decode step
            self.abandon()
            return None
        if self.job.cancelled() or self.gone.is_set():
            self.abandon()
            raise BadRequest(f"episode {self.episode_id[:64]!r}: ended while this call ran", 404)
        try:
            return self.job.result()
        except Exception as err:  # the run stops after the step
            self.gateway.engine_failed(err)
            self.abandon()
            raise BadRequest(
                f"generation failed: {type(err).__name__}: {' '.join(str(err).split())}", 500
            ) from None

    def answer(self, gen: Generation, reply: Reply) -> Reply:
        """`reply` with the engine's answer written as OpenAI's chat choice (not yet recorded)."""
        assert self.plan is not None
        ids, lps = gen.response_ids[0], gen.log_probs[0]
        # an engine must honour the budget: a silent cut would hide it
        if len(ids) > self.plan.max_new_tokens:
            raise RuntimeError(
                f"rollout engine returned {len(ids)} tokens for a call limited to {self.plan.max_new_tokens}"
            )
        with self.gateway.tokenizer_lock:
            choice, self.unparsed = chat_choice(
                self.gateway.tokenizer, 0, ids, lps, gen.finish_reasons[0], self.output
            )
        self.gen = gen
        return replace(reply, choice=choice, completion_tokens=len(ids), policy_version=gen.policy_version)

    def record(self, reply: Reply) -> None:
        """The answered call on the episode's trajectory (the answer was delivered)."""
        assert self.plan is not None and self.gen is not None and reply.choice is not None
        message = reply.choice["message"]
        answer = {k: v for k, v in message.items() if v is not None}
        ids, lps = self.gen.response_ids[0], self.gen.log_probs[0]
        version = min(self.gen.versions_of(0), default=self.gen.policy_version)
        with self.gateway.tokenizer_lock:  # record() decodes the last token
            self.episode.trajectory.record(
                self.plan, ids, lps, version, answer, len(message.get("tool_calls") or []), self.unparsed
            )
        self.episode.trajectory.tools_offered |= self.output.tools is not None
        self.settled = True

    def abandon(self) -> None:
        """The call's answer will not be delivered: stop it where it runs, never record it."""
        self.gone.set()
        if self.job is not None:
            self.job.cancel()
        if not self.settled and self.plan is not None:
            self.episode.trajectory.abandon()
        self.settled = True

    def end(self) -> None:
        if not self.settled:  # left by an error between answer and record: not delivered
            self.abandon()
        self.episode.end_call(self.gone)


async def answer_whole(dialect: Dialect, turn: Turn, request: Request) -> Response:
    """The call answered in one body (the episode's lock held)."""
    try:
        reply = await turn.start()
        left = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            gen = await turn.generation(left)
        finally:
            left.cancel()
        if gen is None:
            return Response(status_code=499)  # nobody reads it
        reply = await asyncio.to_thread(turn.answer, gen, reply)
        await asyncio.to_thread(turn.record, reply)
    finally:
        turn.end()
    return finite_json(dialect.response(reply))


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStream(Response):
    """The call answered as server-sent events: an ASGI response that runs the whole call, so the
    episode's lock, the engine call and the recording all end with it, whatever the client does.
    A refusal before the first event is a plain HTTP error in the dialect's shape."""

    def __init__(self, dialect: Dialect, turn: Turn) -> None:
        super().__init__(media_type="text/event-stream")
        self.dialect, self.turn = dialect, turn
        self.extra_headers: list[tuple[bytes, bytes]] = []
        """Sent after the event-stream headers (a live server's policy version)."""
        self.on_end: Callable[[], None] | None = None
        """Called once the stream has ended, whatever happened (a live session's call is done)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # one call of an episode at a time, for as long as its stream runs
        try:
            async with self.turn.episode.lock:
                try:
                    await self._serve(scope, receive, send)
                finally:
                    self.turn.end()
        finally:
            if self.on_end is not None:
                self.on_end()

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            reply = await self.turn.start()
        except BadRequest as err:
            await error_response(self.dialect, str(err), err.status)(scope, receive, send)
            return
        left = asyncio.ensure_future(_disconnect(receive))
        try:
            headers = [*SSE_HEADERS, *self.extra_headers]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            if await self._events(send, self.dialect.stream_open(reply), left):
                await self._rest(send, reply, left)
        finally:
            left.cancel()

    async def _events(self, send: Send, events: list[bytes], left: asyncio.Future[Any]) -> bool:
        """Send the events one by one; False (and the call abandoned) once the client has left."""
        for event in events:
            await asyncio.sleep(0)  # let a disconnect be seen between two events
            if left.done():
                self.turn.abandon()
                return False
            await send({"type": "http.response.body", "body": event, "more_body": True})
        return True

    async def _answer(self, reply: Reply, left: asyncio.Future[Any]) -> Reply | None:
        """The reply with its answer; None when the client left; BadRequest when the call failed."""
        gen = await self.turn.generation(left)
        if gen is None:
            return None
        try:
            reply = await asyncio.to_thread(self.turn.answer, gen, reply)
        except Exception as err:  # the headers are out: a fault of ours is an error event too
            raise BadRequest(
                f"internal error: {type(err).__name__}: {' '.join(str(err).split())}", 500
            ) from None
        where = non_finite_path(reply.choice)
        if where is not None:
            raise BadRequest(f"response: {where} is not a finite number; nothing was sent", 500)
        return reply

    async def _rest(self, send: Send, reply: Reply, left: asyncio.Future[Any]) -> None:
        """The events once the engine has answered; the recording once the answer is out, before the
        closing event: a client's SDK returns at that event, and its agent may then end the episode,
        after which nothing more is recorded, so the call must be on the trajectory by then."""
        try:
            answered = await self._answer(reply, left)
        except BadRequest as err:
            self.turn.abandon()
            if await self._events(send, self.dialect.stream_error(reply, str(err), err.status), left):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if answered is None:
            return
        *body, closing = self.dialect.stream_reply(answered)
        if not await self._events(send, body, left):
            return
        await asyncio.sleep(0)
        if left.done():
            self.turn.abandon()
            return
        await asyncio.to_thread(self.turn.record, answered)
        await send({"type": "http.response.body", "body": closing, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
