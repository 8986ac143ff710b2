"""The Messages API dialect, driven through the ASGI app itself (no HTTP server) over a scripted
engine: the request read into OpenAI chat messages, an answer sent back as it came reads as the
message recorded, refusals in Anthropic's error shape naming the field, the stream's events and
the stop sequence that ended an answer. tests/integration/test_gateway_messages.py has the SDK.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.gateway_serving import FailingEngine, gateway_of, post
from turnrl.agent.gateway.dialects.base import Call, Reply
from turnrl.agent.gateway.dialects.messages import DIALECT, response
from turnrl.agent.gateway.dialects.messages_request import parse
from turnrl.agent.gateway.server import Gateway
from turnrl.agent.gateway.trajectory import comparable
from turnrl.rollout.base import SamplingParams
from turnrl.servers.chat.response import stop_string

ANSWER = "The answer is 408."
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34"}}</tool_call>'
HELLO = {"model": "policy", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
TOOL = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}}},
}
PATH = "/episodes/e/v1/messages"


@pytest.fixture(scope="module")
def tok(tiny):
    tool_tok = copy.copy(tiny[1])
    tool_tok.chat_template = TOOL_TEMPLATE
    return tool_tok


def call(app, gateway: Gateway, body: dict, key: str | None = "") -> tuple[int, list[bytes]]:
    """POST `body` to the Messages route with the key in `x-api-key` (the episode's unless given;
    None: no key): the status and the body's parts as sent."""
    key = gateway.key_of("e") if key == "" else key
    headers = [
        (b"anthropic-version", b"2023-06-01"),
        *([(b"x-api-key", key.encode())] if key is not None else []),
    ]
    status, _, parts = post(app, PATH, body, headers)
    return status, parts


def events(parts: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    """The stream's events: (the `event:` name, the data), the name checked against its `type`."""
    out = []
    for raw in b"".join(parts).decode().split("\n\n")[:-1]:
        head, data = raw.split("\n")
        assert head.startswith("event: ") and data.startswith("data: "), raw
        name, payload = head[7:], json.loads(data[6:])
        assert payload["type"] == name
        out.append((name, payload))
    return out


def test_a_request_reads_as_openai_chat_messages():
    body = {
        **HELLO,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Compute "}, {"type": "text", "text": "12 * 34."}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me see."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "calculator",
                        "input": {"expression": "12 * 34"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "408"}],
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "oops", "is_error": True},
                    {"type": "text", "text": "Now say it."},
                ],
            },
        ],
        "tools": [{**TOOL, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": False},
        "stop_sequences": ["END"],
        "temperature": 0.2,
        "top_k": 5,
        "metadata": {"user_id": "u1"},
        "stream": True,
    }
    call_ = parse(json.dumps(body).encode())
    arguments = json.dumps({"expression": "12 * 34"})
    assert call_.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Compute 12 * 34."},
        {
            "role": "assistant",
            "content": "Let me see.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "408"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "oops"},
        {"role": "user", "content": "Now say it."},
    ]
    assert call_.tools == [
        {
            "type": "function",
            "function": {
                "name": "calculator",
                "description": TOOL["description"],
                "parameters": TOOL["input_schema"],
            },
        }
    ]
    assert call_.tool_choice == "auto" and call_.stop == ["END"] and call_.stop_field == "stop_sequences"
    assert call_.sampling == {"temperature": 0.2, "top_k": 5} and call_.stream and call_.max_tokens == 16
    assert call_.output.stop_reason and call_.model == "policy"


def _reply(
    message: dict[str, Any], reason: str, stop: list[str] | None = None, hit: str | None = None
) -> Reply:
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason, "stop_reason": hit}
    options = {"stop_sequences": stop or []}
    return Reply(Call(messages=[], options=options), "policy", [1, 2, 3], choice=choice, completion_tokens=4)


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": ANSWER, "tool_calls": None},
        {"role": "assistant", "content": "", "tool_calls": None},
        {
            "role": "assistant",
            "content": "Let me  see.\n",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calc", "arguments": '{"x": "1 + 2"}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "calc", "arguments": "{}"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "calc", "arguments": '{"é": [1, {"a": null}]}'},
                }
            ],
        },
    ],
)
def test_an_answer_sent_back_as_it_came_is_the_message_recorded(message):
    body = response(_reply(message, "tool_calls" if message["tool_calls"] else "stop"))
    turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": body["content"]}]
    again = parse(json.dumps({**HELLO, "messages": [*turns, {"role": "user", "content": "next"}]}).encode())
    recorded = {k: v for k, v in message.items() if v is not None}  # as Turn.record keeps it
    assert comparable(again.messages[1]) == comparable(recorded)
    assert all(b["id"].startswith("toolu_") for b in body["content"] if b["type"] == "tool_use")


@pytest.mark.parametrize(
    ("reason", "stop", "hit", "said"),
    [
        ("stop", [], None, ("end_turn", None)),
        ("length", [], None, ("max_tokens", None)),
        ("tool_calls", [], None, ("tool_use", None)),
        ("stop", ["END", "\n"], "END", ("stop_sequence", "END")),
        ("stop", ["END"], "<|stop|>", ("end_turn", None)),  # the run's own stop string: a turn's end
    ],
)
def test_the_stop_reason(reason, stop, hit, said):
    body = response(_reply({"role": "assistant", "content": "x", "tool_calls": None}, reason, stop, hit))
    assert (body["stop_reason"], body["stop_sequence"]) == said
    assert body["usage"] == {"input_tokens": 3, "output_tokens": 4}


def test_the_stop_string_that_ended_a_choice():
    assert stop_string("a END b", ["END", "b"], "stop") == "END"
    assert stop_string("x\n\n", ["\n\n", "\n"], "stop") == "\n"  # complete first
    assert stop_string("abc", ["abc", "b"], "stop") == "b"
    assert stop_string("a END", ["END"], "length") is None and stop_string("a", ["END"], "stop") is None


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}


@pytest.mark.parametrize(
    ("change", "field", "said"),
    [
        ({"max_tokens": None}, "max_tokens", "missing; the Messages API requires it"),
        ({"max_token": 5}, "max_token", "did you mean 'max_tokens'"),
        ({"thinking": {"type": "enabled", "budget_tokens": 10}}, "thinking", "not offered"),
        (
            {"messages": [{"role": "user", "content": [IMAGE]}]},
            "messages[0].content[0].type",
            "'image' blocks",
        ),
        ({"tool_choice": {"type": "any"}}, "tool_choice.type", "'any' is not offered"),
        (
            {"tool_choice": {"type": "tool", "name": "calculator"}},
            "tool_choice.type",
            "'tool' is not offered",
        ),
        (
            {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
            "tool_choice.disable_parallel_tool_use",
            "not offered",
        ),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type", "server tool"),
        ({"tools": [{**TOOL, "strict": True}]}, "tools[0].strict", "unknown field"),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "The"}]},
            "messages[1].role",
            "prefill",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "q", "cache_control": {"type": "x"}}],
                    }
                ]
            },
            "messages[0].content[0].cache_control.type",
            "ephemeral",
        ),
        ({"messages": [{"role": "robot", "content": "q"}]}, "messages[0].role", "is not one of"),
        ({"system": [IMAGE]}, "system[0].type", "'image' blocks"),
        ({"stop_sequences": [""]}, "stop_sequences", "empty stop string"),
        ({"max_tokens": 0}, "max_tokens", "must be >= 1"),
        ({"temperature": "hot"}, "temperature", "must be a number"),
        ({"metadata": {"user": "u"}}, "metadata.user", "did you mean 'user_id'"),
    ],
)
def test_a_refused_field_is_a_400_in_anthropic_s_shape_naming_it(tok, change, field, said):
    body = {k: v for k, v in {**HELLO, **change}.items() if v is not None}
    with gateway_of(tok) as (app, gateway):
        status, parts = call(app, gateway, {**body, "stream": True})
        episode = gateway.episode("e")
    reply = json.loads(b"".join(parts))
    assert status == 400 and reply["type"] == "error" and reply["error"]["type"] == "invalid_request_error"
    message = reply["error"]["message"]
    assert message.startswith(f"{field}: ") and said in message and reply["detail"] == message
    assert episode.trajectory.episode is None


def test_the_key_and_the_model_are_refused_in_the_same_shape(tok):
    with gateway_of(tok) as (app, gateway):
        missing, no_key = call(app, gateway, HELLO, key=None)
        foreign, other_key = call(app, gateway, HELLO, key="not-the-key")
        named, model = call(app, gateway, {**HELLO, "model": "claude-sonnet-4-5"})
    assert missing == 401 and json.loads(b"".join(no_key))["error"]["type"] == "authentication_error"
    assert foreign == 404 and json.loads(b"".join(other_key))["error"]["type"] == "not_found_error"
    error = json.loads(b"".join(model))["error"]
    assert named == 404 and error["type"] == "not_found_error" and error["message"].startswith("model: ")


def test_a_whole_answer_and_a_stream_say_the_same(tok):
    with gateway_of(tok, text=CALL) as (app, gateway):
        status, parts = call(app, gateway, {**HELLO, "max_tokens": 60, "tools": [TOOL]})
        whole = json.loads(b"".join(parts))
        gateway.close_episode("e")
        gateway.open("e", SamplingParams(max_new_tokens=64))
        status, parts = call(app, gateway, {**HELLO, "max_tokens": 60, "tools": [TOOL], "stream": True})
        recorded = gateway.episode("e").trajectory.episode
    assert status == 200 and whole["stop_reason"] == "tool_use" and whole["id"].startswith("msg_")
    assert whole["content"] == [
        {
            "type": "tool_use",
            "id": whole["content"][0]["id"],
            "name": "calculator",
            "input": {"expression": "12 * 34"},
        }
    ]
    names = [name for name, _ in events(parts)]
    assert names == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * (len(names) - 5),
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    (_, start), (_, head), *deltas, (_, stop), (_, delta), _ = events(parts)
    assert (
        start["message"]["content"] == []
        and start["message"]["usage"]["input_tokens"] == whole["usage"]["input_tokens"]
    )
    assert head["content_block"]["input"] == {} and head["content_block"]["name"] == "calculator"
    partial = "".join(d["delta"]["partial_json"] for _, d in deltas)
    assert json.loads(partial) == whole["content"][0]["input"] and stop == {
        "type": "content_block_stop",
        "index": 0,
    }
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == whole["usage"]["output_tokens"]
    assert recorded is not None and recorded.turns == 1


def test_the_stop_sequence_that_ended_the_answer(tok):
    with gateway_of(tok, text=ANSWER + " END of it") as (app, gateway):
        _, parts = call(app, gateway, {**HELLO, "stop_sequences": ["of", "END"]})
    body = json.loads(b"".join(parts))
    assert body["stop_reason"] == "stop_sequence" and body["stop_sequence"] == "END"
    assert body["content"] == [{"type": "text", "text": ANSWER + " "}]


def test_an_engine_that_fails_mid_stream_ends_it_with_an_error_event(tok):
    engine = FailingEngine(lambda context: None, eos_ids={tok.eos_token_id})
    with gateway_of(tok, engine=engine) as (app, gateway):
        status, parts = call(app, gateway, {**HELLO, "stream": True})
        traj = gateway.episode("e").trajectory
    (start, _), (name, failure) = events(parts)
    assert status == 200 and start == "message_start" and name == "error"
    assert failure["error"]["type"] == "api_error" and "CUDA out of memory" in failure["error"]["message"]
    assert failure["detail"] == failure["error"]["message"] and traj.abandoned_calls == 1


def test_the_dialect_is_served():
    assert DIALECT.path == "/messages" and DIALECT.error("x: y", 500)["error"]["type"] == "api_error"
