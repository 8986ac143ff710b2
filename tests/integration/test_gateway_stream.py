"""The gateway's chat completions streamed: the real `openai` SDK against a real gateway on loopback,
the in-process `hf` engine over tiny-random (scripted turns where a test needs a tool call), and a
chat template that renders tools.

What is checked: the stream is OpenAI's (a role chunk, content deltas, tool-call deltas, a chunk with
the finish reason, the usage chunk, `[DONE]`), what the client reads is what a whole answer says,
the recorded ids are the engine's own samples, and a client that leaves a stream stops its
generation and is not recorded.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.support.agents.scripted import TOOLS
from tests.support.gateway_serving import ANSWER, BUDGET, client_of, sampled, serving, tool_engine
from tests.support.recording_engine import RecordingEngine
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine

QUESTION = [{"role": "user", "content": "Compute 12 * 34."}]


def test_streamed_chat_is_openai_s_and_recorded_as_sampled(tiny_tool):
    model, tok = tiny_tool
    engine = RecordingEngine(model, tok)
    with serving(engine, tok) as gateway:
        client, episode = client_of(gateway, "s1")
        stream = client.chat.completions.create(
            model="policy",
            messages=QUESTION,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
        assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].finish_reason is None
        *body, finish, usage = chunks[1:]
        assert all(c.choices[0].finish_reason is None and c.usage is None for c in body)
        assert (
            finish.choices[0].finish_reason in ("stop", "length") and finish.choices[0].delta.content is None
        )
        assert usage.choices == [] and usage.usage is not None
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        # the engine's own sample, written as a whole answer would be
        context, ids, _ = engine.rows[-1]
        assert tok.decode(ids, skip_special_tokens=True) == text
        assert usage.usage.completion_tokens == len(ids) and usage.usage.prompt_tokens == len(context)
        assert sampled(episode) == [ids] and episode.trajectory.episode.prompt == context

        # the next call carries the streamed answer: it extends the sample, no drift
        messages = [*QUESTION, {"role": "assistant", "content": text}, {"role": "user", "content": "Go on."}]
        again = list(
            client.chat.completions.create(model="policy", messages=messages, max_tokens=6, stream=True)
        )
        assert again[-1].choices[0].finish_reason in ("stop", "length")
        assert episode.trajectory.drift == "" and episode.trajectory.forks == 0
        assert sampled(episode) == [ids, engine.rows[-1][1]]
        assert episode.trajectory.episode.log_probs[-len(engine.rows[-1][2]) :] == pytest.approx(
            engine.rows[-1][2]
        )


def test_the_wire_is_server_sent_events_ending_with_done(tiny_tool):
    model, tok = tiny_tool
    with serving(HFEngine(model, tok), tok) as gateway:
        episode = gateway.open("w", SamplingParams(max_new_tokens=BUDGET))
        body = {"model": "policy", "messages": QUESTION, "max_tokens": 4, "stream": True}
        auth = {"Authorization": f"Bearer {episode.key}"}
        with httpx.Client(trust_env=False, timeout=60) as http:
            with http.stream(
                "POST", gateway.base_url("w") + "/chat/completions", json=body, headers=auth
            ) as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                raw = r.read().decode()
            events = raw.split("\n\n")
            assert events[-2:] == ["data: [DONE]", ""] and all(e.startswith("data: ") for e in events[:-1])
            chunks = [json.loads(e[6:]) for e in events[:-2]]
            assert "usage" not in chunks[0] and chunks[-1]["choices"][0]["finish_reason"] is not None
            assert chunks[-1]["policy_version"] == 0  # turnrl's field rides on the finish chunk
            # a whole answer to the same kind of call has the same shape around its content
            whole = http.post(
                gateway.base_url("w") + "/chat/completions", json={**body, "stream": False}, headers=auth
            )
            assert whole.json()["object"] == "chat.completion"


def test_streamed_tool_calls_accumulate_to_the_whole_answer(tiny_tool):
    model, tok = tiny_tool
    engine = tool_engine(model, tok)
    with serving(engine, tok) as gateway:
        client, episode = client_of(gateway, "t1")
        chunks = list(
            client.chat.completions.create(model="policy", messages=QUESTION, tools=TOOLS, stream=True)
        )
        deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
        head, *rest = deltas
        assert head.index == 0 and head.id.startswith("call_") and head.type == "function"
        assert head.function.name == "calculator" and head.function.arguments == ""
        assert all(d.index == 0 and d.id is None and d.function.name is None for d in rest)
        arguments = "".join(d.function.arguments for d in rest)
        assert json.loads(arguments) == {"expression": "12 * 34"}
        assert not any(c.choices[0].delta.content for c in chunks)  # the call is not content
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        assert sampled(episode) == [engine.rows[0].ids]

        # the tool's result extends the sample; the SDK's stream helper gathers the answer
        call = {"id": head.id, "type": "function", "function": {"name": "calculator", "arguments": arguments}}
        messages = [
            *QUESTION,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": head.id, "content": "408"},
        ]
        with client.chat.completions.stream(model="policy", messages=messages, tools=TOOLS) as s:
            kinds = [event.type for event in s]
            final = s.get_final_completion()
        assert kinds[0] == "chunk" and "content.delta" in kinds and "content.done" in kinds
        assert final.choices[0].message.content == ANSWER and final.choices[0].finish_reason == "stop"
        assert episode.trajectory.drift == "" and sampled(episode) == [engine.rows[0].ids, engine.rows[1].ids]

        # a tool call through the helper, on an episode of its own
        helper, other = client_of(gateway, "t2")
        with helper.chat.completions.stream(model="policy", messages=QUESTION, tools=TOOLS) as s:
            done = [e for e in s if e.type == "tool_calls.function.arguments.done"]
            final = s.get_final_completion()
        assert [(e.name, json.loads(e.arguments)) for e in done] == [
            ("calculator", {"expression": "12 * 34"})
        ]
        assert final.choices[0].message.tool_calls[0].function.arguments == arguments
        assert sampled(other) == [engine.rows[-1].ids] and final.choices[0].finish_reason == "tool_calls"


class StartedEngine(RecordingEngine):
    """The recording engine, telling when a generation has started."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = threading.Event()

    def generate(self, prompt_ids, params, max_new_tokens_per_row=None, abort=None):
        self.started.set()
        return super().generate(prompt_ids, params, max_new_tokens_per_row, abort=abort)


def test_a_client_that_leaves_a_stream_stops_it_and_is_not_recorded(tiny_tool):
    model, tok = tiny_tool
    engine = StartedEngine(model, tok)
    long = 1500  # ~10 s of tiny-random on a CPU, unless stopped
    with serving(engine, tok, budget=long) as gateway:
        client, episode = client_of(gateway, "a1", budget=long)
        start = time.monotonic()
        stream = client.chat.completions.create(
            model="policy", messages=QUESTION, max_tokens=long, stream=True, extra_body={"ignore_eos": True}
        )
        first = next(iter(stream))  # the role chunk goes out before the engine has answered
        assert first.choices[0].delta.role == "assistant"
        assert engine.started.wait(10)  # leave while it runs (not while it waits in the queue)
        stream.close()
        gateway.runner.drain(30)
        assert time.monotonic() - start < 8
        assert engine.rows and len(engine.rows[-1][1]) < long  # stopped at a decode step
        traj = episode.trajectory
        assert traj.abandoned_calls == 1 and traj.episode is None and traj.calls == 1

        # nothing hangs: the episode's next call is served and starts the sample
        out = client.chat.completions.create(model="policy", messages=QUESTION, max_tokens=4)
        assert out.choices[0].finish_reason in ("stop", "length")
        assert sampled(episode) == [engine.rows[-1][1]] and traj.abandoned_calls == 1
