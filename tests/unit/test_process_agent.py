"""An agent as a process (`rollout.agent.command`): what its output says, its environment, the
one-line stops at start-up, and a run killed with its group (turnrl.agent.functions.process*)."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from turnrl.agent.functions.configured import load_configured
from turnrl.agent.functions.entrypoint import AgentLoadError
from turnrl.agent.functions.process import agent_env, env_for_test_command, load_process_agent
from turnrl.agent.functions.process_output import read_reward_file, read_stdout
from turnrl.agent.functions.process_run import Run
from turnrl.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("stdout", "reward", "answer", "metrics"),
    [
        ("thinking\nreward: 0.5\n", 0.5, None, {}),
        ("reward: 1\nmore logs\n\n", 1.0, None, {}),  # the reward line need not be the last
        ('{"reward": 2, "turns": 3, "note": "x"}', 2.0, None, {"turns": 3.0}),
        ("answer: 408\nbye", None, "408", {}),
        ("answer: 1\nanswer:  408 \n", None, "408", {}),  # the last answer
        ("answer: 408\nreward: 0\n", 0.0, None, {}),  # a reward wins over an answer
        ('{"answer": "two\\nlines"}', None, "two\nlines", {}),
        ('just logs\n{"level": "info"}\n', None, None, {}),
        ("", None, None, {}),
    ],
)
def test_stdout_is_read_as_a_reward_or_an_answer(stdout, reward, answer, metrics):
    got = read_stdout(stdout)
    assert (got.reward, got.answer, got.metrics, got.bad) == (reward, answer, metrics, "")


@pytest.mark.parametrize(
    "line", ["reward: nan", "reward: abc", "reward:", '{"reward": "high"}', '{"reward": null}']
)
def test_a_bad_reward_line_is_a_bad_return(line):
    got = read_stdout(f"log\n{line}\n")
    assert got.reward is None and line in got.bad


def test_reward_file():
    assert read_reward_file("0.75\n").reward == 0.75
    got = read_reward_file('{"reward": 1, "passed": 4}')
    assert (got.reward, got.metrics) == (1.0, {"passed": 4.0})
    assert "to TURNRL_REWARD_FILE; expected a number" in read_reward_file("PASS").bad


def test_environment_names_the_episode(tmp_path):
    env = agent_env(tmp_path, "http://127.0.0.1:9/episodes/e1/v1/", "k1", "policy")
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:9/episodes/e1/v1"
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9/episodes/e1"
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] == "k1" and env["TURNRL_MODEL"] == "policy"
    assert env["TURNRL_ROW_FILE"] == str(tmp_path / "row.json") and "127.0.0.1" in env["no_proxy"]
    assert env_for_test_command(tmp_path)["TURNRL_REWARD_FILE"] == str(tmp_path / "reward.txt")
    assert "TURNRL_REWARD_FILE" not in env  # the test's, not the agent's


def agent_config(**keys):
    return load_config(None, [f"rollout.agent.{k}={v}" for k, v in keys.items()]).rollout.agent


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        (
            {"command": "no-such-agent-binary --x"},
            "rollout.agent.command: 'no-such-agent-binary' is not a command on PATH",
        ),
        ({"command": "./nowhere/agent.sh"}, "rollout.agent.command: ./nowhere/agent.sh: file not found"),
        ({"command": "sh -c 'unclosed"}, "is not a command line (No closing quotation)"),
        (
            {"command": "sh", "test_command": "nope-test-binary"},
            "rollout.agent.test_command: 'nope-test-binary'",
        ),
        (
            {"command": "sh", "entrypoint": "a.py:run"},
            "'rollout.agent.entrypoint' and 'rollout.agent.command' are two ways to name the agent",
        ),
    ],
)
def test_bad_command_is_one_line_at_start(keys, said):
    # the config check refuses what it can tell from the text; the loader what needs the file system
    with pytest.raises((AgentLoadError, ConfigError)) as err:
        load_configured(agent_config(**keys))
    assert said in str(err.value) and "\n" not in str(err.value)


def test_a_file_that_is_not_executable(tmp_path):
    path = tmp_path / "agent.sh"
    path.write_text("echo hi\n")
    with pytest.raises(AgentLoadError, match="is not executable"):
        load_process_agent(agent_config(command=str(path)))


def test_a_flood_is_killed_not_buffered(tmp_path):
    stdin = tmp_path / "row.json"
    stdin.write_text("{}")
    flood = "import sys\nwhile True: sys.stdout.write('x' * 65536)"
    start = time.monotonic()
    done = Run([sys.executable, "-c", flood], {}, str(stdin), cap=1 << 20).finish(time.monotonic() + 30)
    assert done.over == "stdout" and len(done.stdout) <= 1 << 20 and done.returncode < 0
    assert time.monotonic() - start < 20


def test_a_late_run_is_killed_at_its_deadline(tmp_path):
    stdin = tmp_path / "row.json"
    stdin.write_text('{"a": 1}')
    done = Run(["sh", "-c", "cat; sleep 30"], {"PATH": "/usr/bin:/bin"}, str(stdin)).finish(
        time.monotonic() + 1
    )
    assert done.timed_out and done.stdout == b'{"a": 1}'


def test_stop_reaches_a_running_episode(tmp_path):
    """`stop` kills the group of the episode it names, from another thread, as at a timeout."""
    agent = load_process_agent(agent_config(command="sh -c 'sleep 30'", timeout_s=60))

    class Client:
        base_url, api_key = "http://127.0.0.1:9/episodes/e/v1", "key-e"

    result: list = []
    thread = threading.Thread(target=lambda: result.append(_call(agent.fn, Client())))
    thread.start()
    for _ in range(100):
        if agent.fn.running:
            break
        time.sleep(0.02)
    agent.stop("key-e")
    thread.join(10)
    assert not thread.is_alive() and "timeout" in result[0]


def _call(fn, client) -> str:
    try:
        fn(client, "policy", {"prompt": []})
    except Exception as err:  # EpisodeFailed
        return getattr(err, "kind", "")
    return ""


class FakeClient:
    base_url, api_key = "http://127.0.0.1:9/episodes/e/v1", "k"


def test_row_reaches_stdin_as_json_and_silence_means_the_recorded_reply():
    np = pytest.importorskip("numpy")
    row = {"index": np.int64(3), "extra_info": {"v": np.arange(2)}}
    read = (
        "import json, sys; r = json.load(sys.stdin); print('reward:', r['index'] + sum(r['extra_info']['v']))"
    )
    got = load_process_agent(agent_config(command=f'{sys.executable} -c "{read}"')).fn(
        FakeClient(), "policy", row
    )
    assert got.reward == 4.0
    got = load_process_agent(agent_config(command="sh -c :")).fn(FakeClient(), "policy", row)
    assert got.recorded  # no reward, no answer: the rule scorer reads the last reply recorded
