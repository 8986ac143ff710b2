"""`openenv:<server>` end to end: OpenEnv environments (openenv-core's own server framework, served
by uvicorn on a loopback port in a thread: tests/support/openenv_envs.py) played as a function
agent, first with scripted replies (the contract: prompts, actions, tool calls, rewards, failures),
then through the gateway on tiny-random, recorded token by token against the engine's own samples,
and in one step of a real `turnrl train` where half the episodes' env fails.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openenv.core", reason="openenv-core is not installed (pip install -e '.[openenv]')")
pytest.importorskip("openai", reason="the openai SDK is not installed (pip install -e '.[agents]')")

from tests.support.agent_batches import chat_prompt, segments, unpadded
from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.cli import console_script, one_line_error
from tests.support.openenv_envs import (
    STEPS,
    TARGET,
    BrokenEnv,
    CountingEnv,
    FlakyEnv,
    ScriptedClient,
    adder_app,
    counting_app,
    serve,
    word_score,
)
from tests.support.recording_engine import RecordingEngine
from turnrl.agent.functions import entrypoint
from turnrl.agent.functions.entrypoint import EpisodeFailed, load_env_agent
from turnrl.agent.openenv import (
    OpenEnvEpisodeError,
    OpenEnvError,
    load_openenv_agent,
    observation_text,
    parse_spec,
    tool_result_text,
)
from turnrl.config import ConfigError, checks, load_config

ROW = {
    "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Play."}],
    "extra_info": {"openenv_reset": {"topic": "cats"}},
}


@pytest.fixture(scope="module")
def counting():
    with serve(counting_app()) as url:
        yield url


def play(run, client, row=ROW):
    return asyncio.run(run(client, "m", row))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the contract, with scripted replies -------------------------------------------------------------


def test_env_kinds_and_specs():
    assert checks.ENV_KINDS == entrypoint.ENV_KINDS  # the config layer's copy of the loader's table
    with pytest.raises(ConfigError, match=r"named verifiers:<environment> or openenv:<server URL>$"):
        load_config(None, ["rollout.agent.env=gym:maze"])
    spec = parse_spec("openenv:localhost:8000/#action=json&reward=last&max_turns=3&max_tokens=9")
    assert (spec.url, spec.ws_url, spec.loopback) == ("http://localhost:8000", "ws://localhost:8000/ws", True)
    assert (spec.action, spec.reward, spec.max_turns, spec.max_tokens) == ("json", "last", 3, 9)
    assert parse_spec("wss://envs.example.org/maze").ws_url == "wss://envs.example.org/maze/ws"
    assert not parse_spec("https://envs.example.org").loopback
    for bad, said in [
        ("openenv:", "name the environment's server"),
        ("openenv:ftp://x", "is not a server URL"),
        ("openenv:h:1#reward=max", "use reward=sum or reward=last"),
        ("openenv:h:1#turns=3", "unknown option 'turns'; the options are action, reward, max_turns"),
        ("openenv:h:1#max_turns=0", "max_turns='0'; use a whole number >= 1"),
    ]:
        with pytest.raises(OpenEnvError, match=said):
            parse_spec(bad)
    # an observation as a message: one field is its text, several are lines, non-strings JSON
    assert observation_text({"text": "hi"}) == "hi"
    assert observation_text({"board": [[0, 1]], "turn": "x"}) == "board: [[0, 1]]\nturn: x"
    assert tool_result_text({"tool_name": "t", "result": None, "error": {"message": "boom"}}) == "error: boom"


def test_a_text_env_plays_turn_by_turn(counting):
    run = load_openenv_agent(f"openenv:{counting}")
    assert run.__name__ == f"openenv_agent[{counting}, message]"  # the action's one string field
    start = len(CountingEnv.log)
    client = ScriptedClient(["hello", "a1!", "never asked"])
    result = play(run, client)
    assert CountingEnv.log[start:] == [[("hello", 1.0), ("a1!", word_score("a1!"))]]
    assert result == {
        "reward": 1.0 + word_score("a1!"),  # the sum of the steps' rewards
        "env_steps": float(STEPS),
        "env_done": 1.0,
        "invalid_actions": 0.0,
    }
    (first, options), (second, _) = client.calls  # the env said done after STEPS steps
    # the row's prompt, its last user message joined with the reset's observation (reset kwargs: the row's)
    assert first == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Play.\n\nSay a word about cats."},
    ]
    assert options == {}  # no tools, no cap on the reply
    assert second[2]["role"] == "assistant" and second[2]["content"] == "hello"
    assert second[3] == {"role": "user", "content": "You said 5 characters. Another word."}

    last = load_openenv_agent(f"openenv:{counting}#reward=last&max_turns=1&max_tokens=7")
    client = ScriptedClient(["ab"])
    assert play(last, client, {"prompt": []}) == {
        "reward": 1.0,
        "env_steps": 1.0,
        "env_done": 0.0,  # the turn limit ended it, not the env
        "invalid_actions": 0.0,
    }
    assert client.calls[0] == ([{"role": "user", "content": "Say a word about anything."}], {"max_tokens": 7})


def test_json_actions_and_replies_that_are_no_action(counting):
    run = load_openenv_agent(f"openenv:{counting}#action=json")
    start = len(CountingEnv.log)
    client = ScriptedClient(
        ["not json", '{"words": "x"}', '```json\n{"message": "ok"}\n```', '{"message": "b2"}']
    )
    result = play(run, client, {"prompt": []})
    assert CountingEnv.log[start:] == [[("ok", 1.0), ("b2", 0.5)]]
    assert result == {"reward": 1.5, "env_steps": 2.0, "env_done": 1.0, "invalid_actions": 2.0}
    told = [messages[-1]["content"] for messages, _ in client.calls[1:3]]
    # not JSON: said here; a field the action lacks: the env's own validation error, first place and reason
    assert told[0] == (
        "The environment did not take that reply as an action: it is not a JSON object. "
        "Reply with one JSON object holding the action's fields: message (required)."
    )
    assert told[1].startswith("The environment did not take that reply as an action: Invalid message (")
    with pytest.raises(OpenEnvError, match="has no field 'answer' \\(its fields: message\\)"):
        load_openenv_agent(f"openenv:{counting}#action=answer")


def test_a_tool_env_is_played_with_tool_calls():
    with serve(adder_app()) as url:
        run = load_openenv_agent(url)
        assert run.__name__ == f"openenv_agent[{url}, 1 tool(s)]"
        client = ScriptedClient([[("add", {"a": 1, "b": 2})], [("add", "{bad")], [("add", {"a": 3, "b": 4})]])
        result = play(run, client, {"prompt": []})
        assert result == {"reward": 1.0, "env_steps": 2.0, "env_done": 1.0, "invalid_actions": 1.0}
        messages, options = client.calls[-1]
        (tool,) = options["tools"]  # the env's MCP tool, as an OpenAI function tool
        assert tool["function"]["name"] == "add"
        assert tool["function"]["description"] == "Add two integers and return the sum."
        assert tool["function"]["parameters"]["required"] == ["a", "b"]
        assert messages[0] == {"role": "user", "content": f"Use the add tool to make {TARGET}."}
        assert messages[2] == {"role": "tool", "tool_call_id": "call_0", "content": "3"}
        assert messages[4]["content"] == "error: the arguments of add are not a JSON object"
        # a reply without a tool call ends the episode: no step, no reward
        assert play(run, ScriptedClient(["I give up"]), {"prompt": []})["env_steps"] == 0.0


def test_a_full_server_makes_episodes_wait(caplog):
    with serve(counting_app(sessions=1)) as url:
        run = load_openenv_agent(url)

        async def both():
            clients = [ScriptedClient(["aa", "bb"], delay_s=0.2) for _ in range(2)]
            return await asyncio.gather(*(run(c, "m", ROW) for c in clients))

        results = asyncio.run(both())
    assert [r["reward"] for r in results] == [2.0, 2.0]  # the second waited for the first's session
    warnings = [r.getMessage() for r in caplog.records if "sessions are all taken" in r.getMessage()]
    assert len(warnings) == 1, warnings


def test_failures_are_one_line(monkeypatch):
    # without openenv-core: one line naming the extra
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "openenv.core.env_server", None)
        with pytest.raises(OpenEnvError) as err:
            load_env_agent("openenv:http://127.0.0.1:1")
    assert str(err.value) == (
        'openenv:http://127.0.0.1:1: the openenv-core package is not installed; pip install -e ".[openenv]"'
    )
    # nothing listens: one line when the agent loads, naming the spec
    port = free_port()
    with pytest.raises(OpenEnvError) as err:
        load_env_agent(f"openenv:http://127.0.0.1:{port}")
    assert str(err.value).startswith(
        f"openenv:http://127.0.0.1:{port}: cannot reach the environment server at http://127.0.0.1:{port}: ConnectError"
    )
    with serve(counting_app(BrokenEnv)) as url:
        with pytest.raises(OpenEnvEpisodeError) as err:
            play(load_openenv_agent(url), ScriptedClient(["x"]))
        line = f"openenv:{url}: had a step fail in the environment (EXECUTION_ERROR): the env's simulator crashed"
        assert str(err.value) == line
        agent = load_env_agent(f"openenv:{url}")  # as the rollout has it: a failure of its own kind
        assert agent.error_kinds == ("env",) and agent.is_async
        with pytest.raises(EpisodeFailed) as failed:
            play(agent.fn, ScriptedClient(["x"]))
        assert failed.value.kind == "env" and str(failed.value) == line.split(": ", 1)[1]
    # a server that answered at start-up and is gone now: the episode fails, in one line
    with serve(counting_app()) as url:
        run = load_openenv_agent(url)
    with pytest.raises(OpenEnvEpisodeError, match=r"could not open an environment session at ws://127"):
        play(run, ScriptedClient([]))


# --- through the gateway, on tiny-random ---------------------------------------------------------------

BUDGET = 64


def rows_batch(tok, n_rows: int):
    from turnrl.batch import Batch
    from turnrl.tensors import left_pad, position_ids_from_mask

    prompts = [[{"role": "user", "content": f"Round {i}."}] for i in range(n_rows)]
    ids, mask = left_pad([chat_prompt(tok, p[0]["content"]) for p in prompts], tok.pad_token_id)
    return Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)},
        {
            "raw_prompt": prompts,
            "data_source": ["openenv/counting"] * n_rows,
            "ground_truth": [""] * n_rows,
            "extra_info": [{"openenv_reset": {"topic": f"topic {i}"}} for i in range(n_rows)],
            "index": list(range(n_rows)),
        },
    )


def test_rollout_trains_on_the_envs_rewards(tiny, tmp_path, counting):
    """`rollout.agent.env=openenv:...`: 2 rows x 2 episodes through the recording gateway on the
    in-process engine. Each episode's reward is what the env paid it; every sampled token is the
    engine's own, right after the context it was given; the env's observations sit between them."""
    from turnrl.agent.functions.rollout import FunctionAgentRollout
    from turnrl.rollout.base import SamplingParams
    from turnrl.servers.chat.template import ChatTemplate
    from turnrl.trainer.stages import group_and_merge, split_generation_input

    model, tok = tiny
    template = tmp_path / "tools.jinja"
    template.write_text(TOOL_TEMPLATE)
    cfg = load_config(None, [
        f"rollout.agent.env=openenv:{counting}#max_tokens=10", f"rollout.agent.chat_template={template}",
        "rollout.agent.timeout_s=120", f"data.max_response_length={BUDGET}",
    ])  # fmt: skip
    engine = RecordingEngine(model, tok)
    start = len(CountingEnv.log)
    rows = rows_batch(tok, 2)
    with FunctionAgentRollout(engine, tok, cfg, tok.pad_token_id) as rollout:
        out, metrics = rollout.generate(
            split_generation_input(rows, rows=True), SamplingParams(max_new_tokens=BUDGET, n=2, seed=3)
        )
    batch = group_and_merge(rows, out, 2)
    assert metrics["agent/errors/env"] == 0 and metrics["agent/errors/exception"] == 0
    episodes = CountingEnv.log[start:]
    assert len(episodes) == 4 and all(steps for steps in episodes), episodes
    # each episode's reward is its steps' rewards summed, as the env computed them from what it was sent
    paid = sorted(sum(r for _, r in steps) for steps in episodes)
    assert all(r == word_score(m) for steps in episodes for m, r in steps)
    rewards = [float(r) for r in batch["agent_reward"]]
    assert {round(r, 6) for r in rewards} <= {round(r, 6) for r in paid}  # a fork repeats its episode's
    if metrics["agent/template_forks"] == 0:  # one sample per episode
        assert sorted(rewards) == pytest.approx(paid)
    assert metrics["agent/fn/env_steps"] == pytest.approx(sum(len(s) for s in episodes) / 4)
    assert all(math.isfinite(r) for r in rewards)

    tool_tok = copy.copy(tok)
    tool_tok.chat_template = TOOL_TEMPLATE
    chat = ChatTemplate(tool_tok)
    for row in range(len(batch)):
        full, mask, lps = unpadded(batch, row)
        pos = len(full) - len(mask)
        for kind, ids in segments(batch, row):
            if kind == 1:  # sampled: verbatim, after the exact context the engine was given
                hits = [lp for c, o, lp in engine.rows if c == full[:pos] and o == ids]
                assert hits, f"row {row}: sampled ids at {pos} not found after their context"
                assert lps[pos - len(full) + len(mask) :][: len(ids)] == pytest.approx(hits[0], abs=1e-6)
            else:  # the env's observation, as the template renders a user message
                text = tok.decode(ids, skip_special_tokens=False)
                assert chat.encode(text) == ids and "You said" in text, text
            pos += len(ids)


# --- `turnrl train` --------------------------------------------------------------------------------------


def overrides(tmp_path: Path, env: str) -> list[str]:
    template = tmp_path / "tools.jinja"
    template.write_text(TOOL_TEMPLATE)
    return [
        "model.path=tiny-random",
        "data.task=calculator",
        "data.task_args.n_train=8",
        "data.task_args.n_val=2",
        "data.train_batch_size=2",
        "data.val_batch_size=2",
        "data.max_response_length=48",
        "rollout.n=2",
        f"rollout.agent.env={env}",
        f"rollout.agent.chat_template={template}",
        "rollout.agent.timeout_s=60",
        "rollout.agent.on_error=zero",
        "actor.ppo_mini_batch_size=1",
        "actor.ppo_micro_batch_size=4",
        "trainer.total_training_steps=1",
        "trainer.test_freq=0",
        "trainer.val_before_train=false",
        "trainer.logger=[jsonl]",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ]


@pytest.mark.slow
def test_one_training_step_goes_on_past_a_failing_env(tmp_path):
    """Every second session of the env raises at its first step: those episodes score 0 and are
    counted in agent/errors/env; the step trains on the others' rewards, and the run ends well."""
    with serve(counting_app(FlakyEnv)) as url:
        start = len(FlakyEnv.log)
        proc = subprocess.run(
            [console_script(), "train", *overrides(tmp_path, f"openenv:{url}#max_tokens=16")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        episodes = FlakyEnv.log[start : start + 4]  # the step's (validation's come after)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in rows if "critic/score/mean" in r]
    assert step["agent/errors/env"] == 2 and step["agent/errors/exception"] == 0
    assert "had a step fail in the environment (EXECUTION_ERROR)" in proc.stderr
    paid = [sum(r for _, r in steps) for steps in episodes]
    assert step["critic/score/mean"] == pytest.approx(sum(paid) / 4, abs=1e-5)
    assert "actor/pg_loss" in step


def test_an_unreachable_env_stops_train_at_start_up(tmp_path, cli):
    port = free_port()
    line = one_line_error(cli("train", *overrides(tmp_path, f"openenv:http://127.0.0.1:{port}")))
    assert line.startswith(
        f"turnrl train: openenv:http://127.0.0.1:{port}: cannot reach the environment server at "
        f"http://127.0.0.1:{port}: ConnectError"
    ), line
    assert "\n" not in line and not (tmp_path / "run" / "metrics.jsonl").exists()
