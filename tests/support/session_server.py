"""Sandbox sessions through their HTTP routes, for the session tests: a server started with small
session limits, and one helper per route."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.proc_scan import pids_of_uids
from turnrl.servers.sandbox.process import SandboxProcess

LIMITS = ["--max-sessions", "6", "--session-disk-bytes", str(8 << 20), "--session-max-files", "300"]


def start(isolation: str) -> SandboxProcess:
    return SandboxProcess(workers=2, queue=16, isolation=isolation, extra_args=LIMITS).start()


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def http(server: SandboxProcess, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, server.url + path, headers=server.headers, timeout=60, **kw)


def create(server: SandboxProcess, files: dict[str, str] | None = None, ttl_s: float | None = None) -> str:
    body: dict[str, Any] = {"files": {p: b64(c) for p, c in (files or {}).items()}}
    if ttl_s is not None:
        body["ttl_s"] = ttl_s
    response = http(server, "POST", "/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


def run(server: SandboxProcess, sid: str, command: str, timeout_s: float = 10, status: int = 200) -> Any:
    response = http(server, "POST", f"/sessions/{sid}/run", json={"command": command, "timeout_s": timeout_s})
    assert response.status_code == status, response.text
    return response.json()


def health(server: SandboxProcess) -> dict[str, Any]:
    return http(server, "GET", "/health").json()


def roots(server: SandboxProcess) -> set[str]:
    work_root = health(server)["work_root"]
    return {os.path.join(work_root, n) for n in os.listdir(work_root) if n.startswith("session-")}


def delete(server: SandboxProcess, sid: str) -> None:
    assert http(server, "DELETE", f"/sessions/{sid}").status_code == 204


def assert_idle(server: SandboxProcess) -> None:
    """No session left, nothing of the sessions' uids alive, and the server serves."""
    got = health(server)
    assert got["sessions"]["live"] == 0 and not roots(server)
    if got["sessions"]["uids"]:
        assert pids_of_uids(*got["sessions"]["uids"]) == []
    sid = create(server)
    assert run(server, sid, "echo ok")["stdout"] == "ok\n"
    delete(server, sid)


# the servers of a session test module (each module its own, started once): bound to module names
# with `server, basic, any_server = fixtures()`; they override the integration conftest's `/run_code` ones
def fixtures() -> tuple[object, object, object]:
    """`server` (every layer the host allows), `basic` (`--isolation basic`), `any_server` (each)."""

    @pytest.fixture(scope="module")
    def server() -> Iterator[SandboxProcess]:
        with start("auto") as proc:
            yield proc

    @pytest.fixture(scope="module")
    def basic() -> Iterator[SandboxProcess]:
        with start("basic") as proc:
            yield proc

    @pytest.fixture(params=["auto", "basic"])
    def any_server(request: pytest.FixtureRequest) -> SandboxProcess:
        return request.getfixturevalue("server" if request.param == "auto" else "basic")

    return server, basic, any_server
