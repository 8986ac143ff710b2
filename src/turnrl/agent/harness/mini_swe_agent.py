"""mini-swe-agent (PyPI `mini-swe-agent`, 2.x) trained as it is, as a process agent on tasks that
bring a workspace (docs/agent-programs.md, "mini-swe-agent and other harnesses"):

    rollout.agent.command="python -m turnrl.agent.harness.mini_swe_agent -c agent.step_limit=30"

The launcher (`main`) runs mini-swe-agent's own CLI on the row's task: `--yolo --exit-immediately`,
no cost limit, the model `openai/$TURNRL_MODEL` through litellm at the gateway's URL, and
`--environment-class` `SessionEnvironment`, which runs each of the agent's commands in the episode's
sandbox session. Its arguments go to mini-swe-agent after the launcher's (a later `-c` wins).
mini-swe-agent's console output goes to `mini.log` in the episode's folder, never to stdout: a line
the model wrote there would otherwise be read as the episode's `reward:`. The trajectory is
`mini.traj.json` beside it.

`SessionEnvironment` has what mini-swe-agent asks of an environment (its `LocalEnvironment`'s
interface) and needs no import of it but its `Submitted` exception, imported when it is raised.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from turnrl.agent.harness.session import ENV_KEY, ENV_SESSION, ENV_URL, Ran, SessionShell

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""The first line of output by which mini-swe-agent's agent says it is done."""
ENVIRONMENT_CLASS = "turnrl.agent.harness.mini_swe_agent.SessionEnvironment"
"""Its import path (`__name__` is `__main__` when the launcher runs with `python -m`)."""
LOG, TRAJECTORY = "mini.log", "mini.traj.json"
TAIL_LINES = 20
"""Lines of mini-swe-agent's log shown on stderr when it fails."""


@dataclass
class SessionEnvironmentConfig:
    """`environment.*` in mini-swe-agent's config; other keys are ignored, as its own configs do."""

    cwd: str = ""
    """Where commands run ('' = the workspace, /app)."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables exported before each command."""
    timeout: float = 30
    """Seconds a command may run."""
    url: str = ""
    """The sandbox ('' = $TURNRL_SANDBOX_URL); `session` and `api_key` likewise."""
    session: str = ""
    api_key: str = ""


class SessionEnvironment:
    """Runs mini-swe-agent's commands in the episode's sandbox session (see the module docstring)."""

    def __init__(self, *, config_class: type = SessionEnvironmentConfig, **kwargs: Any) -> None:
        known = {f.name for f in fields(config_class)}
        self.config = config_class(**{k: v for k, v in kwargs.items() if k in known})
        c = self.config
        self.shell = SessionShell(
            c.url or _need(ENV_URL), c.session or _need(ENV_SESSION), c.api_key or os.environ.get(ENV_KEY, "")
        )
        self._system: dict[str, str] | None = None

    def execute(self, action: dict, cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        """Run `action["command"]`; raises `Submitted` on the sentinel, `SessionError` when the
        session is gone (nothing more can be done)."""
        seconds = timeout or self.config.timeout
        ran = self.shell.run(action.get("command", ""), seconds, cwd or self.config.cwd, self.config.env)
        output = observation(ran, seconds)
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        """Raise mini-swe-agent's `Submitted` when the output starts with the sentinel line."""
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SENTINEL and output["returncode"] == 0:
            from minisweagent.exceptions import Submitted

            submission = "".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The config, the sandbox's `uname` (system, node, release, version, machine), and `kwargs`."""
        return {**self._config_dict(), **self.system(), **kwargs}

    def system(self) -> dict[str, str]:
        """The sandbox's `uname`, asked once (this machine's when the answer is not five lines)."""
        if self._system is None:
            keys = ("system", "node", "release", "version", "machine")
            ran = self.shell.run("uname -s; uname -n; uname -r; uname -v; uname -m", self.config.timeout)
            lines = ran.output.splitlines()
            self._system = (
                dict(zip(keys, lines, strict=True))
                if ran.return_code == 0 and len(lines) == len(keys)
                else {k: str(v) for k, v in platform.uname()._asdict().items()}
            )
        return self._system

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": self._config_dict(),
                    "environment_type": f"{type(self).__module__}.{type(self).__name__}",
                }
            }
        }

    def _config_dict(self) -> dict[str, Any]:
        """The config without its key: it reaches the prompt's variables and the trajectory file."""
        return {k: v for k, v in asdict(self.config).items() if k != "api_key"}


def _need(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise RuntimeError(
            f"{name} is not set: run mini-swe-agent under turnrl (rollout.agent.command) on a task "
            "that brings a workspace, or set environment.url and environment.session"
        )
    return value


def observation(ran: Ran, seconds: float) -> dict[str, Any]:
    """A command's answer as mini-swe-agent's LocalEnvironment gives it: a failure to finish has
    return code -1 and says why in `exception_info`."""
    if ran.status == "Finished" and ran.return_code is not None:
        out: dict[str, Any] = {"output": ran.output, "returncode": ran.return_code, "exception_info": ""}
        if ran.message:
            out["extra"] = {"message": ran.message}
        return out
    if ran.timed_out or ran.status == "TimeLimitExceeded":
        kind, why = "TimeoutExpired", f"the command timed out after {seconds:g} seconds"
    else:
        kind, why = "SandboxError", ran.message or f"the sandbox did not run it ({ran.status})"
    return {
        "output": ran.output,
        "returncode": -1,
        "exception_info": f"An error occurred while executing the command: {why}",
        "extra": {"exception_type": kind, "exception": why},
    }


# -- the launcher ---------------------------------------------------------------------------------


def task_of(row: Mapping[str, Any]) -> str:
    """The row's task as mini-swe-agent is asked it: the last prompt message, without the preamble
    that tells turnrl's own loop how to call its tools (mini-swe-agent has its own)."""
    from turnrl.agent.harbor.reader import PREAMBLE
    from turnrl.agent.harbor.spec import WORKSPACE

    prompt = row.get("prompt") or row.get("raw_prompt") or []
    content = prompt[-1]["content"] if prompt else ""
    text = content if isinstance(content, str) else " ".join(str(p.get("text", "")) for p in content)
    return text.removeprefix(PREAMBLE.format(workdir=WORKSPACE)).strip()


def mini_command(task: str, model: str, base_url: str, folder: Path, extra: list[str]) -> list[str]:
    """mini-swe-agent's own CLI for one episode; `extra` last, so what it sets wins."""
    return [
        sys.executable, "-m", "minisweagent.run.mini",
        "-c", "mini.yaml",
        "-c", f"model.model_kwargs.api_base={base_url}",
        "-c", "model.cost_tracking=ignore_errors",  # litellm knows no price for the policy's name
        "-m", f"openai/{model}",
        "--environment-class", ENVIRONMENT_CLASS,
        "-t", task,
        "--yolo", "--exit-immediately",
        "--cost-limit", "0",  # 0: no limit
        "-o", str(folder / TRAJECTORY),
        *extra,
    ]  # fmt: skip


def mini_env(environ: Mapping[str, str], folder: Path) -> dict[str, str]:
    """mini-swe-agent's environment: the episode's, and its settings for an unattended run."""
    env = dict(environ)
    env |= {
        "MSWEA_CONFIGURED": "true",  # no first-run questions
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_GLOBAL_CONFIG_DIR": str(folder / "mini-config"),  # not the user's .env
        "MSWEA_COST_TRACKING": "ignore_errors",
    }
    # a refused call (a limit of the episode) would be refused again: one try, no waits between
    env.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of litellm's price list
    return env


def report(folder: Path, code: int) -> None:
    """One line on stderr: how mini-swe-agent ended; after a failure, its log's last lines."""
    try:
        info = json.loads((folder / TRAJECTORY).read_text()).get("info", {})
    except (OSError, ValueError):
        info = {}
    calls = info.get("model_stats", {}).get("api_calls", "?")
    print(
        f"mini-swe-agent: exit status {code}, {info.get('exit_status') or '?'}, {calls} model calls",
        file=sys.stderr,
    )
    if code != 0:
        lines = (folder / LOG).read_text(errors="replace").splitlines() if (folder / LOG).is_file() else []
        print("\n".join(lines[-TAIL_LINES:]), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run mini-swe-agent on the episode's row (see the module docstring); its exit status."""
    if importlib.util.find_spec("minisweagent") is None:
        print("mini-swe-agent is not installed: pip install mini-swe-agent", file=sys.stderr)
        return 2
    folder = Path(os.environ["TURNRL_EPISODE_DIR"])
    row = json.loads(Path(os.environ["TURNRL_ROW_FILE"]).read_text())
    command = mini_command(
        task_of(row),
        os.environ["TURNRL_MODEL"],
        os.environ["OPENAI_BASE_URL"],
        folder,
        sys.argv[1:] if argv is None else argv,
    )
    with (folder / LOG).open("wb") as log:
        code = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=mini_env(os.environ, folder),
        ).returncode
    report(folder, code)
    return code


if __name__ == "__main__":
    sys.exit(main())
