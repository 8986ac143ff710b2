"""mini-swe-agent's commands in a real sandbox session (turnrl's server as a subprocess): the
environment class `SessionEnvironment`, and a process agent whose Harbor row brings a workspace
(opened before it starts, verified after it exits, deleted in every case)."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from turnrl.agent.functions.entrypoint import EpisodeFailed
from turnrl.agent.functions.process import load_process_agent
from turnrl.agent.harbor.reader import make_row, read_task
from turnrl.agent.harness.mini_swe_agent import SENTINEL, SessionEnvironment
from turnrl.agent.harness.session import SessionError
from turnrl.config import load_config
from turnrl.servers.sandbox.process import SandboxProcess

TASK = Path(__file__).parents[2] / "src" / "turnrl" / "tasks" / "harbor" / "builtin" / "numbers" / "mean_fix"


@pytest.fixture(scope="module")
def server() -> Iterator[SandboxProcess]:
    with SandboxProcess(workers=2, queue=16).start() as proc:
        yield proc


def http(server: SandboxProcess, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(method, server.url + path, headers=server.headers, timeout=60, **kw)


def live(server: SandboxProcess) -> int:
    return http(server, "GET", "/health").json()["sessions"]["live"]


@pytest.fixture
def session(server: SandboxProcess) -> Iterator[str]:
    files = {"notes.txt": base64.b64encode(b"hello\n").decode()}
    response = http(server, "POST", "/sessions", json={"files": files})
    assert response.status_code == 201, response.text
    sid = response.json()["session_id"]
    yield sid
    http(server, "DELETE", f"/sessions/{sid}")


@pytest.fixture
def env(server: SandboxProcess, session: str, monkeypatch) -> Iterator[SessionEnvironment]:
    monkeypatch.setenv("TURNRL_SANDBOX_URL", server.url)
    monkeypatch.setenv("TURNRL_SANDBOX_SESSION", session)
    monkeypatch.setenv("TURNRL_SANDBOX_KEY", server.api_key or "")
    environment = SessionEnvironment(env={"PAGER": "cat"}, image="ignored-as-mini-ignores-it")
    yield environment
    environment.shell.close()


def test_a_file_written_by_one_command_is_seen_by_the_next(env):
    first = env.execute({"command": "cat notes.txt; echo world >> notes.txt; echo oops >&2; echo $PAGER"})
    assert first == {"output": "hello\noops\ncat\n", "returncode": 0, "exception_info": ""}
    second = env.execute({"command": "cat /app/notes.txt && pwd && exit 3"})
    assert second["output"] == "hello\nworld\n/app\n" and second["returncode"] == 3


def test_cwd_and_a_missing_folder(env):
    env.execute({"command": "mkdir -p sub && echo x > sub/f"})
    assert env.execute({"command": "ls"}, cwd="/app/sub")["output"] == "f\n"
    missing = env.execute({"command": "echo never"}, cwd="/app/nowhere")
    assert missing["returncode"] != 0 and "never" not in missing["output"]


def test_timeout_is_an_answer_with_exception_info(env):
    out = env.execute({"command": "echo started; sleep 30"}, timeout=1)
    assert out["returncode"] == -1
    assert "timed out after 1 seconds" in out["exception_info"]
    assert out["extra"]["exception_type"] == "TimeoutExpired"


def test_template_vars_and_serialize_keep_no_key(env):
    got = env.get_template_vars(task="t")
    assert got["system"] == "Linux" and got["task"] == "t" and got["env"] == {"PAGER": "cat"}
    assert "api_key" not in got
    info = env.serialize()["info"]["config"]
    assert info["environment_type"] == "turnrl.agent.harness.mini_swe_agent.SessionEnvironment"
    assert "api_key" not in info["environment"]


def test_the_sentinel_raises_submitted(env):
    exceptions = pytest.importorskip("minisweagent.exceptions", reason="mini-swe-agent is not installed")
    with pytest.raises(exceptions.Submitted) as raised:
        env.execute({"command": f"echo {SENTINEL}; echo the diff"})
    assert raised.value.messages[0]["extra"] == {"exit_status": "Submitted", "submission": "the diff\n"}
    # not first, or a failing command: no submission
    assert env.execute({"command": f"echo x; echo {SENTINEL}"})["returncode"] == 0
    assert env.execute({"command": f"echo {SENTINEL}; exit 1"})["returncode"] == 1


def test_a_session_gone_raises(env, server, session):
    http(server, "DELETE", f"/sessions/{session}")
    with pytest.raises(SessionError, match="the session is gone"):
        env.execute({"command": "true"})


# -- a process agent whose row brings a workspace ----------------------------------------------------

FIX = (  # the task's own solution, run in the session the process was given
    "import sys\nfrom pathlib import Path\nfrom turnrl.agent.harness.session import SessionShell\n"
    "with SessionShell.from_env() as s:\n"
    "    assert s.run(Path(sys.argv[1]).read_text()).return_code == 0\n"
)


def harbor_row() -> dict:
    return make_row(read_task(TASK), "harbor", "train", 0)


def agent(server: SandboxProcess | None, command: str, timeout_s: float = 60):
    ac = load_config(None, [f"rollout.agent.timeout_s={timeout_s}"]).rollout.agent
    ac.command = command
    url = server.url if server is not None else "http://127.0.0.1:9"  # nothing listens there
    key = server.api_key if server is not None else ""
    keys = [f"rollout.multi_turn.workspace.url={url}", f"rollout.multi_turn.workspace.api_key={key}"]
    mt = load_config(None, keys).rollout.multi_turn
    return load_process_agent(ac, mt)


CLIENT = SimpleNamespace(api_key="k", base_url="http://127.0.0.1:9/episodes/e/v1")


def test_the_verifier_scores_what_the_process_left(server, tmp_path):
    fix = tmp_path / "fix.py"
    fix.write_text(FIX)
    got = agent(server, f"{sys.executable} {fix} {TASK / 'solution' / 'solve.sh'}").fn(
        CLIENT, "policy", harbor_row()
    )
    assert (got.reward, got.metrics) == (1.0, {"nonzero_exit": 0.0})
    # doing nothing scores 0, and a process that fails is verified all the same
    got = agent(server, f"{sys.executable} -c 'import sys; sys.exit(3)'").fn(CLIENT, "policy", harbor_row())
    assert (got.reward, got.metrics) == (0.0, {"nonzero_exit": 1.0})
    assert live(server) == 0


def test_the_process_is_told_its_session(server, tmp_path):
    show = tmp_path / "show.py"
    show.write_text(
        "import os\nfor k in ('TURNRL_SANDBOX_URL', 'TURNRL_SANDBOX_SESSION', 'TURNRL_WORKSPACE'):\n"
        "    assert os.environ[k], k\nprint('reward: 0.25')\n"
    )
    got = agent(server, f"{sys.executable} {show}").fn(CLIENT, "policy", harbor_row())
    assert got.reward == 0.25 and got.metrics == {}  # its own reward: no verifier
    assert live(server) == 0


def test_a_timeout_deletes_the_session_unverified(server):
    fn = agent(server, "sleep 30", timeout_s=1).fn
    with pytest.raises(EpisodeFailed) as failed:
        fn(CLIENT, "policy", harbor_row())
    assert failed.value.kind == "timeout" and live(server) == 0


def test_a_sandbox_that_is_down_fails_the_episode_as_workspace():
    loaded = agent(None, "true")
    with pytest.raises(EpisodeFailed) as failed:
        loaded.fn(CLIENT, "policy", harbor_row())
    assert failed.value.kind == "workspace" and "127.0.0.1:9" in str(failed.value)
    assert "workspace" in loaded.error_kinds
    loaded.close()
