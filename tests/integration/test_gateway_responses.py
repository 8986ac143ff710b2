"""The gateway's Responses API: the real `openai` SDK (`client.responses.create`, streamed and not,
and `client.responses.stream`) against a real gateway on loopback, the in-process `hf` engine over
tiny-random (scripted turns where a test needs a tool call), and a chat template that renders tools.

What is checked: the answer is OpenAI's `response` (output items, status, usage) and its stream
OpenAI's typed events, numbered; the recorded ids are the engine's own samples; a call renders to
the ids the chat template gives the same conversation; and an agent that continues its episode,
by `previous_response_id` or by sending the whole conversation back (`store=False`), tool calls
and their outputs included, records one sample, with no fork.
"""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.gateway_serving import ANSWER, client_of, sampled, serving, tool_engine
from tests.support.recording_engine import RecordingEngine
from tests.support.scripted_engine import ScriptedEngine
from turnrl.servers.chat.template import ChatTemplate

QUESTION = "Compute 12 * 34."
TOOLS = [
    {
        "type": "function",
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        "strict": False,
    }
]
CHAT_TOOLS = [
    {"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k not in ("type", "strict")}}
]


def test_a_response_is_openai_s_recorded_as_sampled_and_continued_by_id(tiny_tool):
    model, tok = tiny_tool
    engine = RecordingEngine(model, tok)
    with serving(engine, tok) as gateway:
        client, episode = client_of(gateway, "r1")
        out = client.responses.create(
            model="policy", instructions="Be brief.", input=QUESTION, max_output_tokens=12
        )
        context, ids, _ = engine.rows[-1]
        chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
        assert context == ChatTemplate(tok).prompt_ids(chat)  # what chat completions would render
        assert out.object == "response" and out.id.startswith("resp_") and out.model == "policy"
        (item,) = out.output
        assert item.type == "message" and item.role == "assistant" and len(item.content) == 1
        assert out.output_text == tok.decode(ids, skip_special_tokens=True)
        cut = len(ids) == 12 and ids[-1] != tok.eos_token_id
        assert out.status == ("incomplete" if cut else "completed") and item.status == out.status
        if cut:
            assert out.incomplete_details.reason == "max_output_tokens"
        assert out.usage.input_tokens == len(context) and out.usage.output_tokens == len(ids)
        assert out.usage.total_tokens == len(context) + len(ids) and out.instructions == "Be brief."
        assert sampled(episode) == [ids] and episode.trajectory.episode.prompt == context

        # the next call names the first: its conversation is the first's, then the new input
        again = client.responses.create(
            model="policy",
            instructions="Be brief.",
            input="Go on.",
            previous_response_id=out.id,
            max_output_tokens=6,
        )
        assert again.previous_response_id == out.id
        assert episode.trajectory.drift == "" and episode.trajectory.forks == 0
        assert sampled(episode) == [ids, engine.rows[-1][1]]
        assert again.output_text == tok.decode(engine.rows[-1][1], skip_special_tokens=True)


def test_a_stream_is_openai_s_events_and_the_whole_history_sent_back_extends_it(tiny_tool):
    model, tok = tiny_tool
    engine = RecordingEngine(model, tok)
    with serving(engine, tok) as gateway:
        client, episode = client_of(gateway, "r2")
        events = list(
            client.responses.create(
                model="policy", input=QUESTION, max_output_tokens=12, stream=True, store=False
            )
        )
        kinds = [e.type for e in events]
        assert kinds[:5] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
        ]
        final = events[-1].response
        assert kinds[-4:] == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            f"response.{final.status}",  # completed, or incomplete when max_output_tokens cut it
        ]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[0].response.status == "in_progress" and events[0].response.output == []
        assert final.id == events[0].response.id and final.status in ("completed", "incomplete")
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        context, ids, _ = engine.rows[-1]
        assert text == final.output_text == tok.decode(ids, skip_special_tokens=True)
        assert final.usage.output_tokens == len(ids) and final.usage.input_tokens == len(context)
        assert sampled(episode) == [ids]

        # store=False: the agent sends the whole conversation back, the answer as it came
        history = [
            {"role": "user", "content": QUESTION},
            *final.output,
            {"role": "user", "content": "Go on."},
        ]
        client.responses.create(model="policy", input=history, max_output_tokens=6, store=False)
        assert episode.trajectory.drift == "" and sampled(episode) == [ids, engine.rows[-1][1]]
        # nothing was kept to continue from
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="policy", input="More.", previous_response_id=final.id)
        assert refused.value.body["param"] == "previous_response_id"


def test_a_tool_episode_sent_back_whole_records_one_sample(tiny_tool):
    model, tok = tiny_tool
    engine = tool_engine(model, tok)
    with serving(engine, tok) as gateway:
        client, episode = client_of(gateway, "t1")
        events = list(client.responses.create(model="policy", input=QUESTION, tools=TOOLS, stream=True))
        call = events[-1].response.output[-1]
        assert call.type == "function_call" and call.name == "calculator" and call.status == "completed"
        assert call.call_id.startswith("call_") and json.loads(call.arguments) == {"expression": "12 * 34"}
        deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert deltas == done.arguments == call.arguments and done.name == "calculator"
        assert events[-1].type == "response.completed" and sampled(episode) == [engine.rows[0].ids]

        # the call and its output sent back; the SDK's stream helper gathers the answer
        history = [
            {"role": "user", "content": QUESTION},
            *events[-1].response.output,
            {"type": "function_call_output", "call_id": call.call_id, "output": "408"},
        ]
        with client.responses.stream(model="policy", input=history, tools=TOOLS) as stream:
            kinds = [e.type for e in stream]
            final = stream.get_final_response()
        assert "response.output_text.delta" in kinds and kinds[-1] == "response.completed"
        assert final.output_text == ANSWER and final.status == "completed"
        traj = episode.trajectory
        assert traj.drift == "" and traj.forks == 0 and len(traj.samples) == 1
        assert sampled(episode) == [engine.rows[0].ids, engine.rows[1].ids]


def test_a_tool_episode_continued_by_id_records_one_sample(tiny_tool):
    model, tok = tiny_tool
    engine = tool_engine(model, tok)
    with serving(engine, tok) as gateway:
        client, episode = client_of(gateway, "t2")
        first = client.responses.create(model="policy", input=QUESTION, tools=TOOLS)
        (call,) = first.output
        assert call.type == "function_call" and first.output_text == ""
        assert engine.rows[0].context == ChatTemplate(tok).prompt_ids(
            [{"role": "user", "content": QUESTION}], CHAT_TOOLS
        )
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "408"}
        second = client.responses.create(
            model="policy", input=[result], tools=TOOLS, previous_response_id=first.id
        )
        assert second.output_text == ANSWER
        traj = episode.trajectory
        assert traj.drift == "" and len(traj.samples) == 1
        assert sampled(episode) == [engine.rows[0].ids, engine.rows[1].ids]

        # another episode's response is not this one's to continue
        other, _ = client_of(gateway, "t3")
        with pytest.raises(openai.BadRequestError) as refused:
            other.responses.create(model="policy", input=[result], tools=TOOLS, previous_response_id=first.id)
        assert refused.value.body["param"] == "previous_response_id"
        assert refused.value.body["code"] == "previous_response_not_found"


class FailingEngine(ScriptedEngine):
    def generate(self, prompt_ids, params, max_new_tokens_per_row=None):
        raise RuntimeError("CUDA out of memory")


def test_a_stream_that_fails_raises_the_sdk_s_api_error(tiny_tool):
    _, tok = tiny_tool
    with serving(FailingEngine(lambda context: None, eos_ids={tok.eos_token_id}), tok) as gateway:
        client, episode = client_of(gateway, "f1")
        stream = client.responses.create(model="policy", input=QUESTION, stream=True)
        seen = []
        with pytest.raises(openai.APIError, match="CUDA out of memory") as failed:
            seen.extend(event.type for event in stream)
        assert seen == ["response.created", "response.in_progress"]
        assert failed.value.body["type"] == "server_error" and episode.trajectory.abandoned_calls == 1


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"extra_body": {"max_tokens": 8}}, "max_tokens"),
        (
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}
                ]
            },
            "input[0].content[0].type",
        ),
        ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
        ({"previous_response_id": "resp_0123"}, "previous_response_id"),
    ],
)
def test_the_sdk_reads_a_refusal_as_a_bad_request_naming_the_field(tiny_tool, kwargs, param):
    _, tok = tiny_tool
    with serving(ScriptedEngine(lambda context: None, eos_ids={tok.eos_token_id}), tok) as gateway:
        client, episode = client_of(gateway, "b1")
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(**{"model": "policy", "input": QUESTION, **kwargs})
    body = refused.value.body
    assert body["param"] == param and body["type"] == "invalid_request_error"
    assert body["message"].startswith(param) and episode.trajectory.calls == 0
