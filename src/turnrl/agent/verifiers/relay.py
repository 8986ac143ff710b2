"""The relay: verifiers' model calls, sent through the episode's client (loopback, keyed)."""

from __future__ import annotations

import asyncio
import hmac
import inspect
import json
import secrets
from typing import TYPE_CHECKING, Any

from turnrl.agent.verifiers.common import MAX_BODY, RELAY_KEY_HEADER, VerifiersEnvError, one_line

if TYPE_CHECKING:
    pass

# --- the relay: verifiers' model calls, through the episode's client ---------------------------------


class Relay:
    """A loopback OpenAI-compatible endpoint for one episode, in front of its `client`.

    verifiers' harness programs stream (`stream: true`), and verifiers relays a streamed call to the
    provider as a stream; turnrl's chat endpoints answer whole responses only. The relay sends each
    call through `client` without streaming and, when it was asked for, frames the answer as one
    server-sent event. Routing through `client` also keeps its key, headers and timeouts: the key
    never goes into an environment variable that verifiers would read.
    """

    def __init__(self, client: Any) -> None:
        if not callable(getattr(client, "post", None)):
            raise VerifiersEnvError(
                f"the verifiers agent needs an openai.AsyncOpenAI or openai.OpenAI client, got {type(client).__name__}"
            )
        self.client = client
        self.key = secrets.token_urlsafe(24)
        self.url = ""
        self._runner: Any = None

    async def __aenter__(self) -> Relay:
        from aiohttp import web

        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _unknown(self, request: Any) -> Any:
        from aiohttp import web

        message = f"turnrl's episode endpoint serves POST /v1/chat/completions only, not {request.method} {request.path}"
        return web.json_response({"error": {"message": message, "type": "invalid_request_error"}}, status=404)

    async def _chat(self, request: Any) -> Any:
        import httpx
        import openai
        from aiohttp import web

        if not hmac.compare_digest(request.headers.get(RELAY_KEY_HEADER, ""), self.key):
            return web.json_response(
                {"error": {"message": "bad relay key", "type": "auth_error"}}, status=401
            )
        body = await request.json()
        stream = bool(body.pop("stream", False))
        options = body.pop("stream_options", None) or {}
        try:
            if inspect.iscoroutinefunction(self.client.post):
                response = await self.client.post("/chat/completions", cast_to=httpx.Response, body=body)
            else:  # a sync client would block this loop, which also serves verifiers' interception
                response = await asyncio.to_thread(
                    self.client.post, "/chat/completions", cast_to=httpx.Response, body=body
                )
        except openai.APIStatusError as err:  # the endpoint's own answer (a refused call, a bad request)
            return web.Response(
                status=err.status_code, body=err.response.content, content_type="application/json"
            )
        except openai.APIConnectionError as err:
            message = f"turnrl: the episode's endpoint did not answer: {one_line(err)}"
            return web.json_response(
                {"error": {"message": message, "type": "api_connection_error"}}, status=502
            )
        completion = response.json()
        if not stream:
            return web.json_response(completion)
        events = sse_events(completion, include_usage=bool(options.get("include_usage")))
        return web.Response(body=events, content_type="text/event-stream")


def sse_events(completion: dict[str, Any], include_usage: bool) -> bytes:
    """A whole chat completion as the stream OpenAI would have sent: one chunk per choice carrying
    its message as the delta, a usage chunk when asked for, then `[DONE]`."""
    head = {k: v for k, v in completion.items() if k not in ("object", "choices", "usage")}
    chunks = []
    for choice in completion.get("choices") or []:
        delta = {k: v for k, v in (choice.get("message") or {}).items() if v is not None}
        if delta.get("tool_calls"):  # a streamed tool call carries its position
            delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(delta["tool_calls"])]
        chunks.append(
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [
                    {
                        "index": choice.get("index", 0),
                        "delta": delta,
                        "logprobs": choice.get("logprobs"),
                        "finish_reason": choice.get("finish_reason"),
                    }
                ],
            }
        )
    if include_usage and completion.get("usage") is not None:
        chunks.append(
            {**head, "object": "chat.completion.chunk", "choices": [], "usage": completion["usage"]}
        )
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
