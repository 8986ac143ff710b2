"""A gateway for the dialect tests: on loopback over tiny-random with a template that renders tools,
a real SDK client per episode, the recorded sample read back, and an engine whose first two calls of
an episode are scripted (a calculator call, then the answer), as tiny-random writes noise; or as an
app alone over an engine that always writes one text (`gateway_of`), driven through ASGI."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai

from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.gateway.app import create_app
from turnrl.agent.gateway.server import Gateway, OpenEpisode
from turnrl.agent.gateway.trajectory import EpisodeLimits
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.servers.chat.template import ChatTemplate

BUDGET = 96
ANSWER = "The answer is 408."
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34"}}</tool_call>'


@contextlib.contextmanager
def serving(engine, tok, budget: int = BUDGET) -> Iterator[Gateway]:
    limits = EpisodeLimits(max_prompt_tokens=256, max_response_tokens=budget, max_calls=8)
    gateway = Gateway(engine, ChatTemplate(tok), limits)
    gateway.start(create_app(gateway))
    try:
        yield gateway
    finally:
        gateway.close()


def client_of(gateway: Gateway, episode_id: str, budget: int = BUDGET) -> tuple[openai.OpenAI, OpenEpisode]:
    episode = gateway.open(episode_id, SamplingParams(max_new_tokens=budget))
    http = httpx.Client(trust_env=False, timeout=60)
    return openai.OpenAI(
        base_url=gateway.base_url(episode_id), api_key=episode.key, http_client=http, max_retries=0
    ), episode


def sampled(episode: OpenEpisode) -> list[list[int]]:
    """The recorded sample's sampled runs (mask 1), in order."""
    sample = episode.trajectory.episode
    assert sample is not None
    pairs = zip(sample.ids, sample.mask, strict=True)
    return [[t for t, _ in run] for mask, run in itertools.groupby(pairs, key=lambda p: p[1]) if mask]


def tool_engine(model, tok) -> ScriptedEngine:
    """An episode's first call writes a calculator call, its second the answer (tiny-random writes
    noise); the rows are the engine's, recorded as any."""
    turns = {1: CALL, 2: ANSWER}
    forced = {k: [*tok.encode(text, add_special_tokens=False), tok.eos_token_id] for k, text in turns.items()}

    def script(context: list[int]) -> list[int] | None:
        return forced.get(tok.decode(context).count("<|im_start|>assistant"))

    return ScriptedEngine(script, inner=HFEngine(model, tok))


class FailingEngine(ScriptedEngine):
    """An engine whose every call fails, as a device out of memory would."""

    def generate(self, prompt_ids, params, max_new_tokens_per_row=None):
        raise RuntimeError("CUDA out of memory")


@contextlib.contextmanager
def gateway_of(tok, text: str = ANSWER, engine=None, eos: bool = True) -> Iterator[tuple[Any, Gateway]]:
    """The app over an engine that always writes `text` (then EOS), and the gateway; episode "e" open."""
    answer = [*tok.encode(text, add_special_tokens=False), *([tok.eos_token_id] if eos else [])]
    engine = engine or ScriptedEngine(lambda context: answer, eos_ids={tok.eos_token_id})
    limits = EpisodeLimits(max_prompt_tokens=256, max_response_tokens=64, max_calls=8)
    gateway = Gateway(engine, ChatTemplate(tok), limits)
    gateway.open("e", SamplingParams(max_new_tokens=64))
    try:
        yield create_app(gateway), gateway
    finally:
        gateway.close()


def post(
    app, path: str, body: dict, headers: list[tuple[bytes, bytes]], leave_after: int | None = None
) -> tuple[int, dict[str, str], list[bytes]]:
    """POST `body` to `path` through the ASGI app, as a client on loopback: the status, the headers
    and the body's parts as sent. `leave_after`: the client disconnects once that many parts have
    reached it (it reads nothing after); None: it stays to the end."""
    return asyncio.run(_post(app, path, body, headers, leave_after))


async def _post(app, path, body, headers, leave_after) -> tuple[int, dict[str, str], list[bytes]]:
    left, delivered = asyncio.Event(), False
    start: dict[str, Any] = {}
    parts: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message.get("body") and not left.is_set():
            parts.append(message["body"])
            if leave_after is not None and len(parts) >= leave_after:
                left.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, parts


def bearer(gateway: Gateway, episode_id: str = "e") -> list[tuple[bytes, bytes]]:
    """The episode's key as OpenAI's SDKs send it."""
    return [(b"authorization", f"Bearer {gateway.key_of(episode_id)}".encode())]
