"""The Responses API dialect, driven through the ASGI app itself (no HTTP server) over a scripted
engine: input items read into OpenAI chat messages, refusals in OpenAI's error shape naming the
field, the typed events a response streams as, a budget that cuts the answer, a failure mid-stream,
and the episode's stored responses. tests/integration/test_gateway_responses.py has the SDK.
"""

from __future__ import annotations

import copy
import gc
import json
from typing import Any

import pytest

from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.gateway_serving import FailingEngine, bearer, gateway_of, post
from turnrl.agent.gateway.dialects.base import BadRequest
from turnrl.agent.gateway.dialects.responses import _KEPT, kept_of
from turnrl.agent.gateway.dialects.responses_request import chat_tools, input_messages, parse
from turnrl.agent.gateway.server import Gateway
from turnrl.rollout.base import SamplingParams

ANSWER = "The answer is 408."
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34"}}</tool_call>'
HELLO = {"model": "policy", "input": "hi", "max_output_tokens": 16}
TOOL = {
    "type": "function",
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
}
PATH = "/episodes/e/v1/responses"


@pytest.fixture(scope="module")
def tok(tiny):
    tool_tok = copy.copy(tiny[1])
    tool_tok.chat_template = TOOL_TEMPLATE
    return tool_tok


def call(app, gateway: Gateway, body: dict, leave_after: int | None = None) -> tuple[int, list[bytes]]:
    """POST `body` to the responses route through the ASGI app: the status and the body's parts.
    `leave_after`: the client disconnects once that many parts have reached it."""
    status, _, parts = post(app, PATH, body, bearer(gateway), leave_after)
    return status, parts


def events(parts: list[bytes]) -> list[dict[str, Any]]:
    """The stream's events, each checked to name its type on its `event:` line."""
    out = []
    for event in b"".join(parts).decode().split("\n\n")[:-1]:
        head, data = event.split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert head == f"event: {payload['type']}"
        out.append(payload)
    return out


# -- the request -------------------------------------------------------------------------------------
def test_input_items_read_as_chat_messages():
    items = [
        {"role": "developer", "content": "Be brief."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Compute "},
                {"type": "input_text", "text": "12 * 34."},
            ],
        },
        # an answer sent back as the SDK dumps it: its text, then its call, nulls and all
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "phase": None,
            "content": [{"type": "output_text", "text": "Let me see.", "annotations": [], "logprobs": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "calculator",
            "arguments": '{"expression": "12 * 34"}',
            "status": "completed",
            "namespace": None,
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": [{"type": "input_text", "text": "408"}],
        },
        {"type": "function_call", "call_id": "call_2", "name": "calculator", "arguments": ""},
    ]
    assert input_messages(items) == [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Compute 12 * 34."},
        {
            "role": "assistant",
            "content": "Let me see.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "12 * 34"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "408"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_2", "type": "function", "function": {"name": "calculator", "arguments": ""}}
            ],
        },
    ]
    assert input_messages("hi") == [{"role": "user", "content": "hi"}]
    # `strict` is no part of what the model is shown
    assert chat_tools([{**TOOL, "strict": True}]) == [
        {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}
    ]


def test_instructions_come_first_and_the_sampling_is_counted_not_used():
    body = {**HELLO, "instructions": "Be brief.", "temperature": 0.2, "top_p": None, "tools": [TOOL]}
    parsed = parse(json.dumps(body).encode())
    assert parsed.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert parsed.sampling == {"temperature": 0.2} and parsed.max_tokens_field == "max_output_tokens"
    assert parsed.tools == chat_tools([TOOL]) and parsed.tool_choice is None and not parsed.stream


@pytest.mark.parametrize(
    ("extra", "param", "said"),
    [
        ({"max_tokens": 2}, "max_tokens", "did you mean 'max_output_tokens'"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
            "only text parts",
        ),
        ({"tool_choice": "required", "tools": [TOOL]}, "tool_choice", "'required' is not served"),
        ({"tool_choice": {"type": "function", "name": "calculator"}}, "tool_choice", "a named tool"),
        ({"previous_response_id": "resp_nope"}, "previous_response_id", "not a stored response"),
        ({"reasoning": {"effort": "high"}}, "reasoning.effort", "not served"),
        ({"truncation": "auto"}, "truncation", "not served"),
        ({"parallel_tool_calls": False}, "parallel_tool_calls", "not served"),
        ({"text": {"format": {"type": "json_object"}}}, "text.format", "only {'type': 'text'}"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "only 'function' tools"),
        ({"tools": [{**TOOL, "function": {}}]}, "tools[0].function", "unknown field"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type", "not served"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "is not one of"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "calculator", "arguments": "{"}]},
            "input[0].arguments",
            "not JSON",
        ),
        ({"input": []}, "input", "non-empty list"),
        ({"max_output_tokens": 0}, "max_output_tokens", "must be >= 1"),
        (
            {"stream": True, "stream_options": {"include_usage": True}},
            "stream_options.include_usage",
            "unknown",
        ),
    ],
)
def test_a_refused_field_is_a_400_in_openai_s_shape_naming_it(tok, extra, param, said):
    with gateway_of(tok) as (app, gateway):
        status, parts = call(app, gateway, {**HELLO, **extra})
        episode = gateway.episode("e")
    body = json.loads(b"".join(parts))
    error = body["error"]
    assert status == 400 and set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert said in error["message"] and body["detail"] == error["message"]
    assert episode.trajectory.episode is None


# -- the answer --------------------------------------------------------------------------------------
def test_a_stream_says_what_a_whole_response_says(tok):
    with gateway_of(tok) as (app, gateway):
        _, parts = call(app, gateway, HELLO)
        whole = json.loads(b"".join(parts))
        gateway.close_episode("e")
        gateway.open("e", SamplingParams(max_new_tokens=64))
        status, parts = call(app, gateway, {**HELLO, "stream": True})
        assert gateway.episode("e").trajectory.episode.turns == 1
    stream = events(parts)
    assert status == 200 and [e["sequence_number"] for e in stream] == list(range(len(stream)))
    created, progress, added, part, *deltas, text_done, part_done, item_done, completed = stream
    assert (created["type"], progress["type"]) == ("response.created", "response.in_progress")
    assert created["response"]["status"] == "in_progress" and created["response"]["output"] == []
    assert added["item"]["status"] == "in_progress" and added["item"]["content"] == []
    assert part["part"] == {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    assert all(
        d["type"] == "response.output_text.delta" and d["item_id"] == added["item"]["id"] for d in deltas
    )
    assert "".join(d["delta"] for d in deltas) == text_done["text"] == ANSWER
    assert part_done["part"]["text"] == ANSWER and item_done["item"]["status"] == "completed"
    final = completed["response"]
    assert completed["type"] == "response.completed" and final["output"] == [item_done["item"]]
    for key in ("object", "status", "usage", "policy_version", "tools", "store"):
        assert final[key] == whole[key], key
    assert whole["output"][0]["content"][0]["text"] == ANSWER and whole["incomplete_details"] is None


def test_a_tool_call_is_a_function_call_item_streamed_as_arguments(tok):
    with gateway_of(tok, text=CALL) as (app, gateway):
        _, parts = call(app, gateway, {"model": "policy", "input": "hi", "tools": [TOOL], "stream": True})
    stream = events(parts)
    kinds = [e["type"] for e in stream]
    assert "response.content_part.added" not in kinds  # calls alone: no message item
    (item,) = stream[-1]["response"]["output"]
    assert item["type"] == "function_call" and item["name"] == "calculator" and item["status"] == "completed"
    assert item["id"].startswith("fc_") and item["call_id"].startswith("call_")
    args = "".join(e["delta"] for e in stream if e["type"] == "response.function_call_arguments.delta")
    assert json.loads(args) == {"expression": "12 * 34"} == json.loads(item["arguments"])
    (done,) = [e for e in stream if e["type"] == "response.function_call_arguments.done"]
    assert done["arguments"] == item["arguments"] and done["name"] == "calculator"
    assert stream[2]["item"]["arguments"] == "" and stream[-2]["item"] == item


def test_an_answer_the_budget_cut_is_incomplete(tok):
    with gateway_of(tok, text=ANSWER * 3, eos=False) as (app, gateway):
        _, parts = call(app, gateway, {**HELLO, "max_output_tokens": 3})
        whole = json.loads(b"".join(parts))
        _, parts = call(app, gateway, {**HELLO, "max_output_tokens": 3, "stream": True})
    assert whole["status"] == "incomplete" and whole["incomplete_details"] == {"reason": "max_output_tokens"}
    assert whole["output"][0]["status"] == "incomplete" and whole["usage"]["output_tokens"] == 3
    last = events(parts)[-1]
    assert last["type"] == "response.incomplete" and last["response"]["status"] == "incomplete"


def test_an_engine_that_fails_mid_stream_ends_it_with_an_error_event(tok):
    engine = FailingEngine(lambda context: None, eos_ids={tok.eos_token_id})
    with gateway_of(tok, engine=engine) as (app, gateway):
        status, parts = call(app, gateway, {**HELLO, "stream": True})
        traj = gateway.episode("e").trajectory
    *opening, failure = events(parts)
    assert status == 200 and [e["type"] for e in opening] == ["response.created", "response.in_progress"]
    assert failure["type"] == "error" and failure["sequence_number"] == 2
    assert "CUDA out of memory" in failure["message"] and failure["error"]["type"] == "server_error"
    assert traj.episode is None and traj.abandoned_calls == 1


@pytest.mark.parametrize("leave_after", [1, 3])
def test_a_client_that_leaves_a_stream_is_never_recorded(tok, leave_after):
    with gateway_of(tok) as (app, gateway):
        status, parts = call(app, gateway, {**HELLO, "stream": True}, leave_after=leave_after)
        traj = gateway.episode("e").trajectory
        assert status == 200 and len(parts) == leave_after
        assert traj.abandoned_calls == 1 and traj.episode is None
        _, parts = call(app, gateway, {**HELLO, "stream": True})
        assert events(parts)[-1]["type"] == "response.completed" and traj.episode is not None


# -- stored responses --------------------------------------------------------------------------------
def test_a_response_continued_by_id_extends_the_episode_unless_it_was_not_stored(tok):
    with gateway_of(tok) as (app, gateway):
        _, parts = call(app, gateway, {**HELLO, "instructions": "Be brief."})
        first = json.loads(b"".join(parts))
        body = {**HELLO, "instructions": "Be brief.", "input": "more", "previous_response_id": first["id"]}
        _, parts = call(app, gateway, {**body, "store": False})
        second = json.loads(b"".join(parts))
        traj = gateway.episode("e").trajectory
        assert second["previous_response_id"] == first["id"] and second["store"] is False
        assert traj.drift == "" and traj.episode.turns == 2
        assert traj.expected[:4] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": ANSWER},
            {"role": "user", "content": "more"},
        ]
        status, parts = call(app, gateway, {**body, "previous_response_id": second["id"]})
    assert status == 400 and json.loads(b"".join(parts))["error"]["code"] == "previous_response_not_found"


def test_an_episode_s_stored_responses_go_with_it():
    class Episode:
        pass

    episode = Episode()
    kept_of(episode)["resp_1"] = None  # type: ignore[assignment]
    key = id(episode)
    assert key in _KEPT and kept_of(episode) == {"resp_1": None}
    del episode
    gc.collect()
    assert key not in _KEPT


def test_parse_refuses_a_body_that_is_not_an_object():
    with pytest.raises(BadRequest, match=r"^request body: must be a JSON object"):
        parse(b"[1]")
