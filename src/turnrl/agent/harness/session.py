"""The episode's sandbox session seen from inside a process agent: one shell command at a time, over
plain synchronous HTTP (`POST /sessions/{id}/run`, docs/sandbox.md "Sessions").

    shell = SessionShell.from_env()                      # TURNRL_SANDBOX_URL, _SESSION, _KEY
    ran = shell.run("python -m pytest -q", timeout_s=60)
    ran.output, ran.return_code, ran.timed_out           # stdout and stderr as one stream, in order
    shell.close()

A command that fails, or runs out of time, is an answer (`Ran`); a session that is gone or a sandbox
that cannot be reached raises `SessionError`, in one line: nothing more can be done in it.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

ENV_URL, ENV_SESSION, ENV_KEY = "TURNRL_SANDBOX_URL", "TURNRL_SANDBOX_SESSION", "TURNRL_SANDBOX_KEY"
GRACE_S = 30.0
"""How long past a command's own timeout to wait for the sandbox's answer."""
ATTEMPTS = 3
"""Tries of a request the sandbox cannot have acted on (no connection, or 503: overloaded)."""
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SessionError(RuntimeError):
    """The session or its sandbox failed, not the command: it is gone, refused, or unreachable."""


@dataclass(frozen=True)
class Ran:
    """One command's answer."""

    output: str
    """What it wrote to stdout and stderr, merged as a terminal shows them."""
    return_code: int | None
    """Its exit status (128 + N after signal N); None after a timeout or when it did not run."""
    timed_out: bool = False
    status: str = "Finished"
    """Finished | TimeLimitExceeded | Error (the sandbox could not run it, or a session limit killed it)."""
    message: str = ""
    """The sandbox's note: why it did not finish, or that its output was cut."""


def script(command: str, cwd: str = "", env: Mapping[str, str] | None = None) -> str:
    """The bash script the session runs for `command`: stderr joined to stdout first (so the two
    keep their order), the variables exported, the folder entered."""
    lines = ["exec 2>&1"]
    for key, value in (env or {}).items():
        if not NAME.fullmatch(key):
            raise ValueError(f"environment variable {key!r}: not a shell variable name")
        lines.append(f"export {key}={shlex.quote(str(value))}")
    if cwd:
        lines.append(f"cd -- {shlex.quote(cwd)} || exit")
    return "\n".join([*lines, command])


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:300] or response.reason_phrase
    detail = body.get("detail") if isinstance(body, dict) else None
    return detail if isinstance(detail, str) else str(body)[:300]


class SessionShell:
    """Runs commands in one session of a turnrl sandbox (see the module docstring)."""

    def __init__(self, url: str, session: str, api_key: str = "") -> None:
        self.url, self.session = url.rstrip("/"), session
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(headers=headers, timeout=httpx.Timeout(60.0, connect=10.0))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SessionShell:
        """The session the process agent was given; SessionError naming what is missing."""
        environ = os.environ if environ is None else environ
        missing = [k for k in (ENV_URL, ENV_SESSION) if not environ.get(k)]
        if missing:
            raise SessionError(
                f"{' and '.join(missing)} not set: run under turnrl as rollout.agent.command, on a task "
                "that brings a workspace (data.task=harbor)"
            )
        return cls(environ[ENV_URL], environ[ENV_SESSION], environ.get(ENV_KEY, ""))

    def run(
        self, command: str, timeout_s: float = 30.0, cwd: str = "", env: Mapping[str, str] | None = None
    ) -> Ran:
        """`command` (a bash command line) in the session: its merged output and exit status."""
        body = {"command": script(command, cwd, env), "timeout_s": timeout_s, "stdin": ""}
        data = self._post(f"/sessions/{self.session}/run", body, timeout_s + GRACE_S)
        output = (data.get("stdout") or "") + (data.get("stderr") or "")  # stderr: bash's own, if any
        return Ran(
            output,
            data.get("return_code"),
            bool(data.get("timed_out")),
            str(data.get("status") or "Error"),
            data.get("message") or "",
        )

    def _post(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The JSON answer; resent only where the sandbox cannot have run the command."""
        last = ""
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(0.5 * 2**attempt)
            try:
                response = self.http.post(self.url + path, json=body, timeout=timeout)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as err:
                last = f"{type(err).__name__}: {err}"
                continue
            except httpx.HTTPError as err:  # sent: the command may have run, so it is not resent
                raise SessionError(
                    f"sandbox at {self.url} failed {path}: {type(err).__name__}: {err}"
                ) from None
            if response.status_code == 503:
                last = f"HTTP 503: {_detail(response)}"
                continue
            if response.status_code >= 400:
                gone = " (the session is gone)" if response.status_code in (404, 410) else ""
                raise SessionError(
                    f"sandbox at {self.url} refused {path} ({response.status_code}){gone}: {_detail(response)}"
                )
            return response.json()
        raise SessionError(f"sandbox at {self.url} failed {path} after {ATTEMPTS} tries: {last}")

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> SessionShell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
