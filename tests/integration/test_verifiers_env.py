"""`verifiers:<env>` end to end: verifiers (0.4) environments played by the agent function
`load_verifiers_agent` returns, against one real `turnrl serve --model tiny-random --threads 1`
child with a chat template that renders tools (tests/support/chat_templates.py), through the real
`openai` SDK's AsyncOpenAI client, as a trainer hands one to an episode.

The environments (tests/support/verifiers_envs.py) are verifiers' own machinery throughout: the
`null` chat harness program in the subprocess runtime, verifiers' interception server, a `calc`
MCP toolset served as a child process. What is checked against turnrl's side:
- the reward `run` returns is the env's scoring, recomputed here from the reply verifiers recorded;
- the prompt the server rendered is the task's: its prompt token count equals this process's
  rendering of the task's messages (and, for the tool env, of the tool schemas verifiers sent)
  with the same template and tokenizer;
- every number is a finite float; a row written by `verifiers_rows` plays its own task.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import openai
import pytest

pytest.importorskip("verifiers.v1")

from tests.support import verifiers_envs
from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.serving import serve_process
from turnrl.agent.verifiers import (
    VerifiersEpisodeError,
    episode_result,
    load_verifiers_agent,
    load_verifiers_env,
    run_episode,
)
from turnrl.data.prepare.verifiers import verifiers_rows
from turnrl.servers.chat.schema import check_messages
from turnrl.servers.chat.template import ChatTemplate

REPO = Path(__file__).resolve().parents[2]
ENVS = REPO / "tests" / "support" / "verifiers_envs.py"
MODEL = "tiny-random"


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    template = tmp_path_factory.mktemp("chat") / "tools.jinja"
    template.write_text(TOOL_TEMPLATE)
    proc = serve_process(
        tmp_path_factory.getbasetemp(), extra_args=["--threads", "1", "--chat-template", str(template)]
    )
    with proc:
        yield proc


@pytest.fixture(autouse=True)
def importable_parts(monkeypatch):
    # verifiers' tool server child runs `python -m tests.support.verifiers_parts` from its own
    # working directory: the repository must be on its path
    monkeypatch.setenv("PYTHONPATH", str(REPO))


def play(child, fn):
    """`fn(client)` on a fresh event loop with an AsyncOpenAI client of the child, as the function
    agents' rollout runs each episode on its own loop."""

    async def main():
        async with openai.AsyncOpenAI(
            base_url=child.url + "/v1", api_key=child.api_key, max_retries=0, timeout=120
        ) as client:
            return await fn(client)

    return asyncio.run(main())


def prompt_tokens(tok, messages, tools=None) -> int:
    """How many prompt tokens the child renders for `messages` (and `tools`): its checks and template."""
    saved, tok.chat_template = tok.chat_template, TOOL_TEMPLATE
    try:
        return len(ChatTemplate(tok).prompt_ids(check_messages(messages), tools))
    finally:
        tok.chat_template = saved


def expected_numbers(answer: str, reply: str) -> dict[str, float]:
    """The env's scoring, recomputed: its two weighted rewards and its metric."""
    contains = verifiers_envs.contains_score(answer, reply)
    length = verifiers_envs.length_score(reply)
    return {
        "reward": verifiers_envs.CONTAINS_WEIGHT * contains + verifiers_envs.LENGTH_WEIGHT * length,
        "reward/contains": contains,
        "reward/length": length,
        "chars": float(len(reply)),
    }


def prompt_messages(trace) -> list[dict[str, str]]:
    """The messages of the episode's first model call: everything before its first reply."""
    messages = []
    for message in trace.branches[0].messages:
        if message.role == "assistant":
            break
        messages.append({"role": message.role, "content": message.content})
    return messages


def test_a_single_turn_env_scores_each_task(child, tiny):
    env = load_verifiers_env(f"{ENVS}:single_turn")
    rows = verifiers_rows(env)

    async def episodes(client):
        return [await run_episode(env, client, MODEL, row) for row in rows]

    results = []
    for episode, (question, answer) in zip(play(child, episodes), verifiers_envs.QUESTIONS, strict=True):
        (trace,) = episode.traces
        assert trace.ok and trace.task.data.prompt == question and trace.task.data.answer == answer
        result = episode_result(episode)
        assert result == pytest.approx(expected_numbers(answer, trace.last_reply))
        assert all(isinstance(v, float) and math.isfinite(v) for v in result.values())
        (call,) = trace.calls  # max_turns 1: one model call, at most 24 tokens (the env's sampling)
        assert call.usage.completion_tokens <= 24
        assert call.usage.prompt_tokens == prompt_tokens(tiny[1], [{"role": "user", "content": question}])
        results.append(result["reward"])
    assert len(set(results)) > 1, results  # reply lengths differ, so do the rewards

    # the agent function itself, as the trainer calls it
    run = load_verifiers_agent(f"verifiers:{ENVS}:single_turn")
    result = play(child, lambda client: run(client, MODEL, rows[1]))
    assert set(result) == {"reward", "reward/contains", "reward/length", "chars"}
    assert result["reward"] == pytest.approx(
        verifiers_envs.CONTAINS_WEIGHT * result["reward/contains"]
        + verifiers_envs.LENGTH_WEIGHT * result["reward/length"]
    )


def test_a_plain_row_plays_as_the_envs_task(child, tiny):
    """A verl row that `verifiers_rows` did not write: its messages are the prompt, its ground
    truth the task's answer."""
    run = load_verifiers_agent(f"{ENVS}:single_turn")
    env = load_verifiers_env(f"{ENVS}:single_turn")
    messages = [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Sky colour?"},
    ]
    row = {
        "data_source": "mine",
        "prompt": messages,
        "reward_model": {"ground_truth": "blue"},
        "extra_info": {},
    }
    episode = play(child, lambda client: run_episode(env, client, MODEL, row))
    (trace,) = episode.traces
    assert trace.task.data.answer == "blue"
    assert trace.calls[0].usage.prompt_tokens == prompt_tokens(tiny[1], messages)
    assert episode_result(episode) == pytest.approx(expected_numbers("blue", trace.last_reply))
    assert set(play(child, lambda client: run(client, MODEL, row))) >= {"reward", "chars"}


@pytest.mark.slow
def test_a_tool_envs_tools_reach_the_server(child, tiny):
    env = load_verifiers_env(f"{ENVS}:with_tool")  # the loader returns an EnvConfig
    row = verifiers_rows(env)[1]
    episode = play(child, lambda client: run_episode(env, client, MODEL, row))
    (trace,) = episode.traces
    assert trace.ok, trace.errors
    (tool,) = trace.tools  # what the harness listed from the MCP server and sent with the call
    assert tool.name == "calc_add" and tool.description == "Add two integers and return the sum."
    assert tool.parameters["required"] == ["a", "b"]
    assert {k: v["type"] for k, v in tool.parameters["properties"].items()} == {
        "a": "integer",
        "b": "integer",
    }
    schema = [
        {"type": "function", "function": tool.model_dump(include={"name", "description", "parameters"})}
    ]
    messages = prompt_messages(trace)
    assert messages == [{"role": "user", "content": verifiers_envs.QUESTIONS[1][0]}]
    # the server rendered the schemas: "Tools: calc_add" is in the prompt it counted
    with_tools, without = prompt_tokens(tiny[1], messages, schema), prompt_tokens(tiny[1], messages)
    assert trace.calls[0].usage.prompt_tokens == with_tools != without
    # a random model writes no tool call, so the episode ends after its first reply
    result = episode_result(episode)
    assert result == pytest.approx(expected_numbers(verifiers_envs.QUESTIONS[1][1], trace.last_reply))


def test_a_failed_episode_is_one_line(child):
    """The endpoint refuses every call (a wrong key): verifiers records the rollout as failed, and
    the agent raises one line naming the env and the endpoint's answer."""
    run = load_verifiers_agent(f"{ENVS}:single_turn")
    row = {"prompt": [{"role": "user", "content": "hi"}], "reward_model": {"ground_truth": "x"}}

    async def wrong_key():
        async with openai.AsyncOpenAI(base_url=child.url + "/v1", api_key="wrong", max_retries=0) as client:
            return await run(client, MODEL, row)

    with pytest.raises(VerifiersEpisodeError) as err:
        asyncio.run(wrong_key())
    message = str(err.value)
    assert "\n" not in message and message.startswith(
        f"verifiers:{ENVS}:single_turn: the agent's rollout failed"
    )
    assert "401" in message, message


def test_rollout_agent_env_trains_through_the_gateway(tiny, tmp_path):
    """`rollout.agent.env=verifiers:...`: the function-agent rollout plays the env through its own
    recording gateway on the in-process engine; each episode's reward is the env's rubric's."""
    from turnrl.agent.functions.rollout import FunctionAgentRollout
    from turnrl.batch import Batch
    from turnrl.config import load_config
    from turnrl.rollout.base import SamplingParams
    from turnrl.rollout.hf import HFEngine
    from turnrl.tensors import left_pad, position_ids_from_mask
    from turnrl.trainer.stages import split_generation_input

    model, tok = tiny
    template = tmp_path / "tools.jinja"
    template.write_text(TOOL_TEMPLATE)
    rows = verifiers_rows(load_verifiers_env(f"{ENVS}:single_turn"))[:2]
    cfg = load_config(None, [
        f"rollout.agent.env=verifiers:{ENVS}:single_turn", f"rollout.agent.chat_template={template}",
        "rollout.agent.timeout_s=120", "data.max_response_length=48",
    ])  # fmt: skip
    prompts = [tok.encode(tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False),
                          add_special_tokens=False) for r in rows]  # fmt: skip
    ids, mask = left_pad(prompts, tok.pad_token_id)
    batch = Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)},
        {
            "raw_prompt": [r["prompt"] for r in rows],
            "data_source": [r["data_source"] for r in rows],
            "ground_truth": [r["reward_model"]["ground_truth"] for r in rows],
            "extra_info": [r["extra_info"] for r in rows],
            "index": list(range(len(rows))),
        },
    )
    with FunctionAgentRollout(HFEngine(model, tok), tok, cfg, tok.pad_token_id) as rollout:
        out, metrics = rollout.generate(
            split_generation_input(batch, rows=True), SamplingParams(max_new_tokens=48, n=2)
        )
    assert len(out) == 4 and metrics["agent/calls/mean"] == 1  # one call per single-turn episode
    assert metrics["agent/errors/exception"] == 0 and metrics["agent/template_drift"] == 0
    rewards = [float(r) for r in out["agent_reward"]]
    # the rubric's weighted sum: a reply holding the answer ("5" is likely even from a random model)
    # earns CONTAINS_WEIGHT on top of its length score, so the bound is the weights' sum, not 1
    top = verifiers_envs.CONTAINS_WEIGHT + verifiers_envs.LENGTH_WEIGHT
    assert all(math.isfinite(r) and 0 <= r <= top for r in rewards), rewards
    assert "agent/fn/reward/length" in metrics  # the rubric's own numbers, as the agent's metrics
