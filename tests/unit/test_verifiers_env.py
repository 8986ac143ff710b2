"""`verifiers:<env>` without a model: loading an environment and each way that fails (one line
naming it), the env's tasks as turnrl rows and `turnrl data verifiers:<env>`, a row -> task, and the
relay's stream framing read back by verifiers' own stream parser. Episodes against a real
`turnrl serve` child: tests/integration/test_verifiers_env.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")

from tests.support import verifiers_envs
from turnrl.agent.verifiers import (
    INSTALL,
    TASK_KEY,
    VerifiersEnvError,
    env_name,
    load_verifiers_agent,
    load_verifiers_env,
    script_dependencies,
    sse_events,
    task_of,
)
from turnrl.data.dataset import load_examples, read_rows
from turnrl.data.prepare.verifiers import verifiers_rows

ENVS = Path(__file__).resolve().parents[1] / "support" / "verifiers_envs.py"


def spec(loader: str) -> str:
    return f"{ENVS}:{loader}"


def one_line_error(spec_: str) -> str:
    with pytest.raises(VerifiersEnvError) as err:
        load_verifiers_env(spec_)
    message = str(err.value)
    assert "\n" not in message and message.startswith("verifiers:"), message
    return message


def test_an_env_from_a_file_and_its_rows():
    env = load_verifiers_env(f"verifiers:{spec('single_turn')}")
    assert env_name(env) == "EchoTaskset"
    rows = verifiers_rows(env, "train")
    assert len(rows) == len(verifiers_envs.QUESTIONS)
    for i, (row, (question, answer)) in enumerate(zip(rows, verifiers_envs.QUESTIONS, strict=True)):
        assert row["data_source"] == "verifiers/EchoTaskset"
        assert row["prompt"] == [{"role": "user", "content": question}]
        assert row["reward_model"]["ground_truth"] == answer
        assert row["extra_info"]["split"] == "train" and row["extra_info"]["index"] == i
        # the row plays exactly its task again: the same data, hence the same key verifiers records
        task = task_of(env, row)
        original = list(env.taskset)[i]
        assert task.data == original.data and task.key == original.key
    assert [r["extra_info"]["split"] for r in verifiers_rows(env, "val", name="echo")] == ["val"] * 3
    assert verifiers_rows(env, name="echo")[0]["data_source"] == "verifiers/echo"


def test_a_plain_verl_row_becomes_a_task():
    env = load_verifiers_env(spec("single_turn"))
    row = {
        "data_source": "gsm8k",
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        "reward_model": {"style": "rule", "ground_truth": "4"},
        "extra_info": {"index": 7, "id": "row-7", "unrelated": True},
    }
    data = task_of(env, row).data
    assert data.answer == "4" and data.id == "row-7"
    assert [(m.role, m.content) for m in data.prompt] == [("system", "Be brief."), ("user", "2+2?")]
    with pytest.raises(VerifiersEnvError, match="the row has no 'prompt'"):
        task_of(env, {"reward_model": {"ground_truth": "4"}}, "verifiers:echo")
    with pytest.raises(VerifiersEnvError, match=r"row 3 is not a EchoData") as err:
        task_of(env, {"extra_info": {"index": 3, TASK_KEY: '{"prompt": 5}'}}, "verifiers:echo")
    assert "\n" not in str(err.value)


def test_turnrl_data_writes_the_envs_tasks(cli, tmp_path, tiny):
    out = tmp_path / "echo"
    done = cli("data", f"verifiers:{spec('single_turn')}", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "3 tasks of EchoTaskset" in done.stdout
    train, val = read_rows(out / "train.jsonl"), read_rows(out / "val.jsonl")
    assert [r["prompt"] for r in train] == [r["prompt"] for r in val]
    assert {r["extra_info"]["split"] for r in val} == {"val"}
    # turnrl's own row checks accept them
    examples = load_examples([str(out / "train.jsonl")], tiny[1], 256)
    assert [e.ground_truth for e in examples] == [a for _, a in verifiers_envs.QUESTIONS]
    json.loads(train[0]["extra_info"][TASK_KEY])  # the task's data, as JSON text (parquet-safe)

    done = cli("data", f"verifiers:{spec('single_turn')}", "--out", str(tmp_path / "x"), "--split", "train")
    assert done.returncode == 2 and "--split do not apply" in done.stderr
    done = cli("data", f"verifiers:{tmp_path}/missing.py:load", "--out", str(tmp_path / "y"))
    assert done.returncode == 2 and "file not found" in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0


def test_bad_environments_say_so_in_one_line(monkeypatch):
    assert "file not found" in one_line_error(f"verifiers:{ENVS.parent}/missing.py:load")
    assert "defines no 'nope'" in one_line_error(spec("nope"))
    message = one_line_error(spec("not_an_env"))
    assert "expected a verifiers Env" in message and "got int 42" in message
    message = one_line_error(spec("broken"))
    assert "the loader raised RuntimeError: the dataset is unreachable" in message
    message = one_line_error("verifiers:no-such-taskset-xyz")
    assert "cannot load environment 'no-such-taskset-xyz'" in message and "not found" in message
    assert "cannot import module 'no_such_module_xyz'" in one_line_error("no_such_module_xyz:load")
    assert "name an environment" in one_line_error("verifiers:")
    # the agent loads its environment when it is made: a bad one never reaches an episode
    with pytest.raises(VerifiersEnvError, match="got int 42"):
        load_verifiers_agent(spec("not_an_env"))

    # verifiers not installed: its import fails
    monkeypatch.setitem(sys.modules, "verifiers", None)
    monkeypatch.setitem(sys.modules, "verifiers.v1", None)
    message = one_line_error("verifiers:my-env")
    assert "the verifiers package is not installed" in message and INSTALL in message


def test_the_relays_stream_reads_back_whole():
    """A whole completion framed as a stream reads back, through verifiers' own parser of a
    relayed provider stream, as the same message, tool calls and usage."""
    from verifiers.v1.dialects import ChatDialect

    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "tiny-random",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "adding",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "calc_add", "arguments": '{"a": 2, "b": 3}'},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
    }
    parser = ChatDialect().stream_parser()
    events = [e + b"\n\n" for e in sse_events(completion, include_usage=True).split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]\n\n"
    for event in events:
        if event == b"data: [DONE]\n\n" and parser.on_done is not None:
            parser.on_done()
        parser.feed(event)
    response = parser.finish()
    assert response.message.content == "adding" and response.finish_reason == "tool_calls"
    (call,) = response.message.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_1", "calc_add", {"a": 2, "b": 3})
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (9, 4)
    assert b'"usage"' not in sse_events(completion, include_usage=False)


def test_the_chat_programs_dependencies_are_read_from_its_script():
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

    deps = script_dependencies(CHAT_PROGRAM_SOURCE)
    assert "openai" in deps and any(d.startswith("mcp") for d in deps)
    assert script_dependencies("print('no metadata')") == []
