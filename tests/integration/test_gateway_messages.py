"""The gateway's Messages API: the real `anthropic` SDK against a real gateway on loopback, the
in-process `hf` engine over tiny-random (scripted turns where a test needs a tool call), and a
chat template that renders tools.

What is checked: what the SDK reads, whole or streamed (`messages.create`, the `messages.stream`
helper), is the engine's own sample; the recorded ids are the engine's; an episode that sends its
answers back (text, tool_use blocks, tool_result turns) records one trajectory with no fork; the
models list reads; a refusal is Anthropic's error naming the field.
"""

from __future__ import annotations

import json

import pytest

from tests.support.gateway_serving import ANSWER, sampled, serving, tool_engine
from tests.support.recording_engine import RecordingEngine
from turnrl.agent.gateway.server import Gateway, OpenEpisode
from turnrl.rollout.base import SamplingParams

anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")

BUDGET = 96
QUESTION = [{"role": "user", "content": "Compute 12 * 34."}]
TOOL = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}}},
}


def client_of(gateway: Gateway, episode_id: str) -> tuple[anthropic.Anthropic, OpenEpisode]:
    """The SDK's client for a new episode: its base URL without `/v1` (the SDK adds
    `/v1/messages`), its key (sent as `x-api-key`)."""
    episode = gateway.open(episode_id, SamplingParams(max_new_tokens=BUDGET))
    client = anthropic.Anthropic(
        base_url=gateway.base_url(episode_id).removesuffix("/v1"),
        api_key=episode.key,
        http_client=httpx2.Client(trust_env=False, timeout=60),
        max_retries=0,
    )
    return client, episode


def test_whole_and_streamed_answers_are_the_engine_s_samples(tiny_tool):
    model, tok = tiny_tool
    engine = RecordingEngine(model, tok)
    with serving(engine, tok) as gateway:
        client, episode = client_of(gateway, "m1")
        out = client.messages.create(model="policy", max_tokens=12, messages=QUESTION, system="Be brief.")
        context, ids, _ = engine.rows[-1]
        assert out.type == "message" and out.role == "assistant" and out.id.startswith("msg_")
        assert out.stop_reason in ("end_turn", "max_tokens") and out.stop_sequence is None
        text = "".join(b.text for b in out.content)
        assert text == tok.decode(ids, skip_special_tokens=True)
        assert out.usage.input_tokens == len(context) and out.usage.output_tokens == len(ids)
        assert sampled(episode) == [ids] and episode.trajectory.episode.prompt == context

        # streamed, carrying the answer back as it came: the sample grows, no drift
        messages = [
            *QUESTION,
            {"role": "assistant", "content": out.content},
            {"role": "user", "content": "Go on."},
        ]
        stream = client.messages.create(
            model="policy", max_tokens=6, messages=messages, system="Be brief.", stream=True
        )
        got = list(stream)
        kinds = [e.type for e in got]
        assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
        assert got[0].message.usage.input_tokens == len(engine.rows[-1][0]) and got[0].message.content == []
        streamed = "".join(e.delta.text for e in got if e.type == "content_block_delta")
        assert streamed == tok.decode(engine.rows[-1][1], skip_special_tokens=True)
        assert got[-2].usage.output_tokens == len(engine.rows[-1][1])
        assert episode.trajectory.drift == "" and episode.trajectory.forks == 0
        assert sampled(episode) == [ids, engine.rows[-1][1]]


def test_a_tool_episode_records_one_trajectory(tiny_tool):
    model, tok = tiny_tool
    engine = tool_engine(model, tok)
    with serving(engine, tok) as gateway:
        client, episode = client_of(gateway, "t1")
        first = client.messages.create(model="policy", max_tokens=BUDGET, messages=QUESTION, tools=[TOOL])
        assert first.stop_reason == "tool_use" and [b.type for b in first.content] == ["tool_use"]
        use = first.content[0]
        assert (
            use.name == "calculator"
            and use.input == {"expression": "12 * 34"}
            and use.id.startswith("toolu_")
        )
        assert sampled(episode) == [engine.rows[0].ids]

        # the answer sent back as the SDK gives it, the tool's result, through the stream helper
        result = {"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "408"}]}
        messages = [*QUESTION, first.to_param(), {"role": "user", "content": [result]}]
        with client.messages.stream(model="policy", max_tokens=BUDGET, messages=messages, tools=[TOOL]) as s:
            kinds = [event.type for event in s]
            final = s.get_final_message()
        assert "text" in kinds and kinds[-1] == "message_stop"
        assert [b.text for b in final.content] == [ANSWER] and final.stop_reason == "end_turn"
        assert episode.trajectory.drift == "" and episode.trajectory.forks == 0
        assert sampled(episode) == [engine.rows[0].ids, engine.rows[1].ids]

        # a tool call streamed, on an episode of its own: the helper gathers its input
        helper, other = client_of(gateway, "t2")
        with helper.messages.stream(model="policy", max_tokens=BUDGET, messages=QUESTION, tools=[TOOL]) as s:
            partial = "".join(e.partial_json for e in s if e.type == "input_json")
            final = s.get_final_message()
        assert json.loads(partial) == {"expression": "12 * 34"} and final.stop_reason == "tool_use"
        assert final.content[0].input == {"expression": "12 * 34"} and sampled(other) == [engine.rows[-1].ids]


def test_the_models_list_reads(tiny_tool):
    model, tok = tiny_tool
    with serving(RecordingEngine(model, tok), tok) as gateway:
        client, _ = client_of(gateway, "l1")
        models = list(client.models.list())
        assert [m.id for m in models] == [gateway.model_id]
        assert models[0].type == "model" and models[0].display_name and models[0].created_at.year >= 1970


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"extra_body": {"thinking": {"type": "enabled", "budget_tokens": 16}}}, "thinking"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].type",
        ),
        ({"tools": [TOOL], "tool_choice": {"type": "any"}}, "tool_choice.type"),
    ],
)
def test_a_refusal_is_anthropic_s_error_naming_the_field(tiny_tool, extra, field):
    model, tok = tiny_tool
    with serving(RecordingEngine(model, tok), tok) as gateway:
        client, episode = client_of(gateway, "r1")
        request = {"model": "policy", "max_tokens": 8, "messages": QUESTION, **extra}
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(**request)
        assert refused.value.type == "invalid_request_error" and refused.value.status_code == 400
        assert refused.value.api_message.startswith(f"{field}: ") and refused.value.body["type"] == "error"

        # max_tokens is required (the SDK would not send the call): straight on the wire
        with httpx2.Client(trust_env=False, timeout=60) as http:
            reply = http.post(
                gateway.base_url("r1") + "/messages",
                json={"model": "policy", "messages": QUESTION},
                headers={"x-api-key": episode.key, "anthropic-version": "2023-06-01"},
            )
        assert reply.status_code == 400 and reply.json()["error"]["message"].startswith("max_tokens: missing")
        assert episode.trajectory.episode is None
