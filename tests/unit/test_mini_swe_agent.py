"""mini-swe-agent as a process agent, without a sandbox: the script a command becomes, a command's
answer as mini-swe-agent reads it, and the launcher's command line and environment
(turnrl.agent.harness). The commands in a real session: tests/integration/test_mini_swe_agent*.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from turnrl.agent.harbor.reader import make_row, read_task
from turnrl.agent.harness.mini_swe_agent import (
    ENVIRONMENT_CLASS,
    SessionEnvironment,
    main,
    mini_command,
    mini_env,
    observation,
    task_of,
)
from turnrl.agent.harness.session import Ran, SessionError, SessionShell, script

TASK = Path(__file__).parents[2] / "src" / "turnrl" / "tasks" / "harbor" / "builtin" / "numbers" / "mean_fix"


def test_script_merges_stderr_exports_and_enters_the_folder():
    text = script("ls", cwd="/app/my dir", env={"PAGER": "cat", "Q": "it's"})
    assert text.splitlines() == [
        "exec 2>&1",
        "export PAGER=cat",
        "export Q='it'\"'\"'s'",
        "cd -- '/app/my dir' || exit",
        "ls",
    ]
    out = subprocess.run(
        ["bash", "-c", script("echo a; echo b >&2; echo $Q", env={"Q": "it's"})],
        capture_output=True,
        text=True,
    )
    assert (out.stdout, out.stderr) == ("a\nb\nit's\n", "")
    with pytest.raises(ValueError, match="not a shell variable name"):
        script("ls", env={"A-B": "x"})


def test_observation_as_mini_swe_agent_reads_it():
    assert observation(Ran("hi\n", 0), 30) == {"output": "hi\n", "returncode": 0, "exception_info": ""}
    late = observation(Ran("part", None, timed_out=True, status="TimeLimitExceeded"), 2.5)
    assert late["returncode"] == -1 and late["output"] == "part"
    assert late["exception_info"].endswith("timed out after 2.5 seconds")
    refused = observation(Ran("", None, status="Error", message="the session passed its limits (disk)"), 30)
    assert refused["returncode"] == -1 and "passed its limits" in refused["exception_info"]
    cut = observation(Ran("x", 0, message="output truncated"), 30)
    assert cut["exception_info"] == "" and cut["extra"] == {"message": "output truncated"}


def test_the_task_is_the_instruction_without_the_tool_preamble():
    task = read_task(TASK)
    assert task_of(make_row(task, "harbor", "train", 0)) == task.instruction.strip()
    assert task_of({"prompt": [{"role": "user", "content": " fix it "}]}) == "fix it"


def test_command_line_and_environment(tmp_path):
    argv = mini_command(
        "fix it", "policy", "http://127.0.0.1:9/episodes/e/v1", tmp_path, ["-c", "agent.step_limit=3"]
    )
    assert argv[:3] == [sys.executable, "-m", "minisweagent.run.mini"]
    assert f"{SessionEnvironment.__module__}.{SessionEnvironment.__name__}" == ENVIRONMENT_CLASS
    assert argv[-2:] == ["-c", "agent.step_limit=3"]  # the caller's last: it wins
    pairs = dict(zip(argv[3:-2:2], argv[4:-2:2], strict=True))
    assert pairs["-m"] == "openai/policy" and pairs["--environment-class"] == ENVIRONMENT_CLASS
    assert (
        pairs["-t"] == "fix it"
        and pairs["--cost-limit"] == "0"
        and pairs["-o"] == str(tmp_path / "mini.traj.json")
    )
    assert "--yolo" in argv and "--exit-immediately" in argv
    assert "model.model_kwargs.api_base=http://127.0.0.1:9/episodes/e/v1" in argv
    assert "model.cost_tracking=ignore_errors" in argv
    env = mini_env({"MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "2", "X": "1"}, tmp_path)
    assert env["MSWEA_CONFIGURED"] == "true" and env["MSWEA_COST_TRACKING"] == "ignore_errors"
    assert env["MSWEA_GLOBAL_CONFIG_DIR"] == str(tmp_path / "mini-config")
    assert (
        env["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] == "2" and env["X"] == "1"
    )  # a setting of the user's stays
    assert mini_env({}, tmp_path)["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] == "1"


def test_without_mini_swe_agent_the_launcher_says_so(monkeypatch, capsys):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert main([]) == 2
    assert "pip install mini-swe-agent" in capsys.readouterr().err


def test_a_shell_needs_its_session(monkeypatch):
    monkeypatch.setattr("turnrl.agent.harness.session.time.sleep", lambda seconds: None)
    with pytest.raises(SessionError, match="TURNRL_SANDBOX_URL and TURNRL_SANDBOX_SESSION not set"):
        SessionShell.from_env({})
    with SessionShell.from_env(
        {"TURNRL_SANDBOX_URL": "http://127.0.0.1:9/", "TURNRL_SANDBOX_SESSION": "s"}
    ) as s:
        assert (s.url, s.session, "Authorization" in s.http.headers) == ("http://127.0.0.1:9", "s", False)
        with pytest.raises(SessionError, match="after 3 tries"):
            s.run("true")
