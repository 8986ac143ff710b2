"""An agent as a process, in any language (`rollout.agent.command`, docs/agent-programs.md).

    agent = load_process_agent(cfg.rollout.agent)      # the executable checked now, one line if missing
    returned = agent.fn(client, model, row)           # one process per episode; a `Returned`

It runs as an agent function: `fn` takes the episode's client only for its base URL and key, and
starts the command (split like a shell would, run without one) in the trainer's working directory,
in a session of its own, with

    OPENAI_BASE_URL     the episode's `.../episodes/<id>/v1`    OPENAI_API_KEY     its key
    ANTHROPIC_BASE_URL  the same without `/v1`                  ANTHROPIC_API_KEY  its key
    TURNRL_MODEL        the model name to send                  TURNRL_ROW_FILE    the row as JSON
    TURNRL_EPISODE_DIR  a fresh folder, removed after the episode

and the row's JSON on its stdin. Its reward, the first that is there: a reward it printed
(`process_output`); `rollout.agent.test_command`'s, run after it (the number it writes to
TURNRL_REWARD_FILE, else 1 for exit status 0 and 0 for any other); an answer it printed; the last
assistant message the gateway recorded. A failure raises `EpisodeFailed` of its kind, and the
process's whole group is killed: when it ends, when it floods its output, and at the timeout.

A row that brings a workspace (a Harbor task, `workspaces.brings_workspace`) gets a sandbox session
holding the task's files (`process_workspace`), opened before the process starts, and four more
variables to reach it (docs/sandbox.md "Sessions" has its routes):

    TURNRL_SANDBOX_URL      the sandbox server             TURNRL_SANDBOX_SESSION  the session's id
    TURNRL_SANDBOX_KEY      its key ('' = none)            TURNRL_WORKSPACE        /app, the files' folder

Once the process has exited, whatever its exit status (an agent stopped by a limit still leaves
its work), the task's tests run in the session and the verifier's reward is the episode's, unless
the process printed a reward of its own; `test_command` is not run. A session that cannot be
opened, or a verifier that cannot be run or read, fails the episode (`agent/errors/workspace`).
The session is deleted in every case, at a timeout or a kill too; `rollout.agent.timeout_s`
bounds the process and its verifier together.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from turnrl.agent.functions.entrypoint import AgentFunction, AgentLoadError, EpisodeFailed, Returned
from turnrl.agent.functions.process_output import last_line, read_reward_file, read_stdout
from turnrl.agent.functions.process_run import OUTPUT_CAP, Finished, Run
from turnrl.agent.functions.process_workspace import KIND, EpisodeWorkspace, WorkspaceServer
from turnrl.agent.workspaces import brings_workspace

log = logging.getLogger(__name__)

ERROR_KINDS = ("nonzero_exit", "output_limit", KIND)
"""The failures of its own, besides `timeout` and `no_calls` (`agent/errors/<kind>`)."""
LOOPBACK = "127.0.0.1,localhost"


def parse_command(command: str, key: str) -> list[str]:
    """The argv of `command`, its executable found now: one line naming `key` otherwise."""
    try:
        argv = shlex.split(command)
    except ValueError as err:
        raise AgentLoadError(f"{key}: {command!r} is not a command line ({err})") from None
    if not argv:
        raise AgentLoadError(f"{key}: an empty command")
    exe = argv[0]
    if os.sep in exe:
        if not Path(exe).is_file():
            raise AgentLoadError(f"{key}: {exe}: file not found")
        if not os.access(exe, os.X_OK):
            raise AgentLoadError(f"{key}: {exe} is not executable (chmod +x it, or name its interpreter)")
    elif shutil.which(exe) is None:
        raise AgentLoadError(f"{key}: {exe!r} is not a command on PATH")
    return argv


def load_process_agent(ac: Any, multi_turn: Any = None) -> AgentFunction:
    """`rollout.agent.command` (and `test_command`) as an agent function; see the module docstring.
    `multi_turn` (`rollout.multi_turn`, else its defaults) names the workspaces' sandbox."""
    from turnrl.config.agent_schema import MultiTurnConfig

    argv = parse_command(ac.command, "rollout.agent.command")
    test = parse_command(ac.test_command, "rollout.agent.test_command") if ac.test_command else None
    server = WorkspaceServer(multi_turn if multi_turn is not None else MultiTurnConfig())
    agent = ProcessAgent(argv, test, ac.timeout_s, server)
    return AgentFunction(agent, False, ac.command.strip(), agent.stop, ERROR_KINDS, server.close)


def _plain(value: Any) -> Any:
    """A row's numpy or torch values as JSON takes them (anything else as its text)."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def _base_env(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    # the gateway is on loopback: a proxy from the environment must not take the agent's calls
    for key in ("NO_PROXY", "no_proxy"):
        env[key] = ",".join(x for x in (env.get(key, ""), LOOPBACK) if x)
    env["TURNRL_ROW_FILE"] = str(folder / "row.json")
    env["TURNRL_EPISODE_DIR"] = str(folder)
    return env


def agent_env(folder: Path, base_url: str, key: str, model: str) -> dict[str, str]:
    """The agent's environment: the trainer's, and the episode's client settings for the SDKs."""
    base_url = base_url.rstrip("/")
    return {
        **_base_env(folder),
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": key,
        "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": key,
        "TURNRL_MODEL": model,
    }


def env_for_test_command(folder: Path) -> dict[str, str]:
    """The test command's: the row and the episode's folder, and where to write a reward."""
    return {**_base_env(folder), "TURNRL_REWARD_FILE": str(folder / "reward.txt")}


class ProcessAgent:
    """`fn(client, model, row)` for one command; see the module docstring."""

    def __init__(
        self, argv: list[str], test: list[str] | None, timeout_s: float, server: WorkspaceServer | None = None
    ) -> None:
        self.argv, self.test, self.timeout_s = argv, test, timeout_s
        self.server = server
        """The sandbox of the episodes whose rows bring a workspace (None: such a row fails)."""
        self.running: dict[str, Run] = {}
        """The process each episode runs now, by its key."""
        self.lock = threading.Lock()
        self.warned_exit = False

    def __call__(self, client: Any, model: str, row: dict[str, Any]) -> Returned:
        key = str(client.api_key)
        deadline = time.monotonic() + self.timeout_s
        with tempfile.TemporaryDirectory(prefix="turnrl-episode-", ignore_cleanup_errors=True) as name:
            folder = Path(name)
            (folder / "row.json").write_text(json.dumps(row, default=_plain))
            env = agent_env(folder, str(client.base_url), key, model)
            if brings_workspace(row):
                with self._workspace(row) as workspace:
                    done = self._run(self.argv, env | workspace.env, folder, key, deadline)
                    return self._score_in_workspace(done, workspace)
            done = self._run(self.argv, env, folder, key, deadline)
            _check(done, "")
            returned = read_stdout(done.stdout.decode("utf-8", "replace"))
            if returned.reward is not None or returned.bad:
                return returned
            if self.test is not None:
                return self._score_by_test(folder, key, deadline)
            return returned if returned.answer is not None else Returned(recorded=True)

    def _workspace(self, row: dict[str, Any]) -> EpisodeWorkspace:
        if self.server is None:
            raise EpisodeFailed(KIND, "workspace: this agent was loaded without a sandbox for workspaces")
        return EpisodeWorkspace(self.server, row)

    def _score_in_workspace(self, done: Finished, workspace: EpisodeWorkspace) -> Returned:
        """A reward it printed, else the verifier's, whatever its exit status; a process that was
        killed (timeout, flood) fails as any does, its session deleted unverified."""
        _check_killed(done, "")  # any exit status is verified, a process we killed is not
        returned = read_stdout(done.stdout.decode("utf-8", "replace"))
        if returned.reward is not None or returned.bad:
            return returned
        verified = workspace.verify()
        if done.returncode != 0:
            self._warn_exit(done)
        # how many verified episodes' processes failed: an agent that cannot run at all still scores
        verified.metrics["nonzero_exit"] = float(done.returncode != 0)
        return verified

    def _warn_exit(self, done: Finished) -> None:
        """Once per run: the first process that failed but was verified, with its last line."""
        if not self.warned_exit:
            self.warned_exit = True
            said = last_line(done.stderr) or last_line(done.stdout)
            log.warning(
                "agent %s exited with status %d (%s); its workspace is verified all the same "
                "(agent/fn/nonzero_exit counts such episodes)",
                " ".join(self.argv),
                done.returncode,
                said or "nothing on stderr",
            )

    def _score_by_test(self, folder: Path, key: str, deadline: float) -> Returned:
        assert self.test is not None
        done = self._run(self.test, env_for_test_command(folder), folder, key, deadline)
        _check(done, "its test command ")
        reward_file = folder / "reward.txt"
        text = reward_file.read_text(errors="replace") if reward_file.is_file() else ""
        if text.strip():
            return read_reward_file(text)
        return Returned(reward=1.0 if done.returncode == 0 else 0.0)

    def _run(self, argv: list[str], env: dict[str, str], folder: Path, key: str, deadline: float) -> Finished:
        try:
            run = Run(argv, env, str(folder / "row.json"))
        except OSError as err:  # it went after start-up, or is no program (a script without #!)
            raise EpisodeFailed("exception", f"could not be started: {err}") from None
        with self.lock:
            self.running[key] = run
        try:
            return run.finish(deadline)
        finally:
            with self.lock:
                if self.running.get(key) is run:
                    del self.running[key]

    def stop(self, key: str | None) -> None:
        """Kill the process group of the episode with `key` (None = every episode's)."""
        with self.lock:
            runs = list(self.running.values()) if key is None else [self.running.get(key)]
        for run in runs:
            if run is not None:
                run.kill()


def _check(done: Finished, who: str) -> None:
    """Raise the failure `done` shows, if any: `who` is '' for the agent, else names its test."""
    _check_killed(done, who)
    if done.returncode != 0 and not who:
        said = last_line(done.stderr) or last_line(done.stdout)
        status = (
            f"was killed by signal {-done.returncode}"
            if done.returncode < 0
            else f"exited with status {done.returncode}"
        )
        raise EpisodeFailed("nonzero_exit", f"{status}" + (f": {said}" if said else ""))


def _check_killed(done: Finished, who: str) -> None:
    """Raise the failure of a process we killed: it flooded its output, or ran out of time."""
    if done.over:
        raise EpisodeFailed(
            "output_limit",
            f"{who}wrote more than {OUTPUT_CAP} bytes to {done.over}; killed with its children",
        )
    if done.timed_out or done.stopped:
        raise EpisodeFailed(
            "timeout", f"{who}did not end within rollout.agent.timeout_s; killed with its children"
        )
