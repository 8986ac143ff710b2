"""The gateway's dialect table and the chat dialect's own shapes, driven through the ASGI app itself
(no HTTP server): refusals in OpenAI's error shape naming the field, the chunks a chat.completion
streams as, and a stream's client that leaves, at every point, deterministically.

The engine is scripted (a fixed answer, or one that fails): what is checked is the gateway's
bookkeeping, not the model; tests/integration/test_gateway_stream.py has the real engine and SDK.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.gateway_serving import FailingEngine, bearer, gateway_of, post
from turnrl.agent.gateway.dialects import DIALECTS
from turnrl.agent.gateway.dialects.base import field_of
from turnrl.agent.gateway.server import Gateway
from turnrl.rollout.base import SamplingParams
from turnrl.servers.chat.response import completion_chunks, pieces

ANSWER = "The answer is 408."
HELLO = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
PATH = "/episodes/e/v1/chat/completions"


@pytest.fixture(scope="module")
def tok(tiny):
    tool_tok = copy.copy(tiny[1])
    tool_tok.chat_template = TOOL_TEMPLATE
    return tool_tok


def call(app, gateway: Gateway, body: dict, leave_after: int | None = None) -> tuple[int, dict, list[bytes]]:
    """POST `body` to the chat route through the ASGI app: the status, the headers and the body's
    parts as sent. `leave_after`: the client disconnects once that many parts have reached it."""
    return post(app, PATH, body, bearer(gateway), leave_after)


def events(parts: list[bytes]) -> list[Any]:
    """The stream's `data:` payloads: JSON, or the closing "[DONE]"."""
    out = []
    for event in b"".join(parts).decode().split("\n\n")[:-1]:
        assert event.startswith("data: "), event
        out.append(event[6:] if event == "data: [DONE]" else json.loads(event[6:]))
    return out


def test_every_dialect_is_a_route_with_its_own_error_shape(tok):
    with gateway_of(tok) as (app, _):
        routes = {getattr(r, "path", None) for r in app.routes}
    paths = [d.path for d in DIALECTS]
    assert len(set(paths)) == len(paths) and len({d.name for d in DIALECTS}) == len(DIALECTS)
    for dialect in DIALECTS:
        assert f"/episodes/{{episode_id}}/v1{dialect.path}" in routes
        body = dialect.error("max_tokens: must be >= 1, got 0", 400)
        assert "max_tokens: must be >= 1, got 0" in json.dumps(body)
    assert field_of("messages[2].role: 'robot' is not one of ...") == "messages[2].role"
    assert field_of("episode 'e': unknown to this key") is None


@pytest.mark.parametrize(
    ("extra", "param", "said"),
    [
        ({"max_token": 2}, "max_token", "did you mean 'max_tokens'"),
        ({"presence_penalty": 0.5}, "presence_penalty", "not supported by the agent gateway"),
        ({"n": 2}, "n", "n: must be 1"),
        (
            {"stream": True, "stream_options": {"include_usge": True}},
            "stream_options.include_usge",
            "unknown",
        ),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "is not one of"),
        ({"max_tokens": 0}, "max_tokens", "must be >= 1"),
    ],
)
def test_a_refused_field_is_a_400_in_openai_s_shape_naming_it(tok, extra, param, said):
    with gateway_of(tok) as (app, gateway):
        status, headers, parts = call(app, gateway, {**HELLO, **extra})
        episode = gateway.episode("e")
    assert (
        status == 400 and headers["content-type"] == "application/json"
    )  # a stream too: refused before it starts
    body = json.loads(b"".join(parts))
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and said in error["message"] and body["detail"] == error["message"]
    assert episode.trajectory.episode is None


def test_the_model_s_name_and_the_key_are_refused_in_the_same_shape(tok):
    with gateway_of(tok) as (app, gateway):
        status, _, parts = call(app, gateway, {**HELLO, "model": "gpt-4o"})
    error = json.loads(b"".join(parts))["error"]
    assert status == 404 and error["param"] == "model" and "run() was given" in error["message"]


def test_a_whole_answer_and_a_stream_say_the_same(tok):
    with gateway_of(tok) as (app, gateway):
        _, _, parts = call(app, gateway, HELLO)
        whole = json.loads(b"".join(parts))
        gateway.close_episode("e")
        gateway.open("e", SamplingParams(max_new_tokens=64))
        status, headers, parts = call(
            app, gateway, {**HELLO, "stream": True, "stream_options": {"include_usage": True}}
        )
        recorded = gateway.episode("e").trajectory.episode
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    *chunks, done = events(parts)
    assert done == "[DONE]" and whole["choices"][0]["message"]["content"] == ANSWER
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == ANSWER
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["usage"] == whole["usage"]
    assert recorded is not None and recorded.turns == 1


@pytest.mark.parametrize("leave_after", [1, 2, 4])
def test_a_client_that_leaves_a_stream_is_never_recorded(tok, leave_after):
    """After the role chunk (the engine may still run), after a content delta, before [DONE]."""
    with gateway_of(tok) as (app, gateway):
        status, _, parts = call(app, gateway, {**HELLO, "stream": True}, leave_after=leave_after)
        traj = gateway.episode("e").trajectory
        assert status == 200 and len(parts) == leave_after
        assert traj.abandoned_calls == 1 and traj.episode is None and traj.calls == 1
        # the episode goes on: its next call is served and recorded
        _, _, parts = call(app, gateway, {**HELLO, "stream": True})
        assert events(parts)[-1] == "[DONE]" and traj.episode is not None and traj.abandoned_calls == 1


def test_an_engine_that_fails_mid_stream_ends_it_with_an_error_event(tok):
    engine = FailingEngine(lambda context: None, eos_ids={tok.eos_token_id})
    with gateway_of(tok, engine=engine) as (app, gateway):
        status, _, parts = call(app, gateway, {**HELLO, "stream": True})
        traj = gateway.episode("e").trajectory
        assert gateway.engine_errors == ["RuntimeError: CUDA out of memory"]
    head, failure = events(parts)
    assert status == 200 and head["choices"][0]["delta"]["role"] == "assistant"
    assert failure["error"]["type"] == "server_error" and "CUDA out of memory" in failure["error"]["message"]
    assert traj.episode is None and traj.abandoned_calls == 1


def test_chunks_rebuild_the_whole_answer():
    call_ = {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"x": "1 + 2"}'}}
    logprobs = {"content": [{"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}]}
    body = {
        "id": "chatcmpl-1",
        "created": 7,
        "model": "policy",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Let me  see.\n", "tool_calls": [call_]},
                "logprobs": logprobs,
                "finish_reason": "tool_calls",
                "token_ids": [1, 2],
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        "policy_version": 4,
    }
    chunks = completion_chunks(body, include_usage=True)
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-1" for c in chunks)
    deltas = [c["choices"][0] for c in chunks[:-1]]
    assert deltas[0]["delta"] == {"role": "assistant", "content": ""} and deltas[0]["logprobs"] is None
    assert deltas[1]["logprobs"] == logprobs and all(d["logprobs"] is None for d in deltas[2:])
    assert "".join(d["delta"].get("content", "") for d in deltas) == "Let me  see.\n"
    calls = [t for d in deltas for t in d["delta"].get("tool_calls", [])]
    assert calls[0] == {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "calc", "arguments": ""},
    }
    assert "".join(t["function"]["arguments"] for t in calls) == call_["function"]["arguments"]
    last = chunks[-2]
    assert last["choices"][0]["finish_reason"] == "tool_calls" and last["choices"][0]["token_ids"] == [1, 2]
    assert last["policy_version"] == 4 and all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == body["usage"]
    assert "usage" not in completion_chunks(body)[0]
    for text in ("", "  ", "a", " a b  ", "x" * 60, "line\n\nnext", "é ü"):
        assert "".join(pieces(text)) == text
