"""SandboxClient's session methods against a fake transport: what is retried, and what never is
(a command that may have run)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable

import httpx
import pytest

from turnrl.servers.sandbox.client import (
    CommandResult,
    SandboxClient,
    SandboxRequestError,
    SandboxUnavailable,
    SessionGone,
)

DONE = {
    "return_code": 0,
    "stdout": "hi\n",
    "stderr": "",
    "timed_out": False,
    "execution_time": 0.01,
    "status": "Finished",
}


def client_with(handler: Callable[[httpx.Request], httpx.Response]) -> SandboxClient:
    client = SandboxClient("http://sandbox.test", retries=3, backoff=0.001, max_backoff=0.001, api_key="k")
    client._http = httpx.AsyncClient(transport=httpx.MockTransport(handler), headers=client.headers)
    return client


def count_calls(fail: Callable[[int], httpx.Response]) -> tuple[list[httpx.Request], SandboxClient]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return fail(len(seen))

    return seen, client_with(handler)


def test_a_command_is_not_resent_after_a_read_error() -> None:
    def fail(n: int) -> httpx.Response:
        raise httpx.ReadError("connection reset")

    seen, client = count_calls(fail)
    with pytest.raises(SandboxUnavailable, match="not resent"):
        asyncio.run(client.session_run("abc", "rm -rf x"))
    assert len(seen) == 1


def test_a_command_is_not_resent_after_a_500() -> None:
    seen, client = count_calls(lambda n: httpx.Response(500, json={"detail": "boom"}))
    with pytest.raises(SandboxUnavailable):
        asyncio.run(client.session_run("abc", "true"))
    assert len(seen) == 1


def test_a_command_is_resent_when_it_cannot_have_run() -> None:
    def fail(n: int) -> httpx.Response:
        if n == 1:
            raise httpx.ConnectError("refused")
        if n == 2:
            return httpx.Response(503, json={"detail": "sandbox overloaded"})
        return httpx.Response(200, json=DONE)

    seen, client = count_calls(fail)
    result = asyncio.run(client.session_run("abc", "echo hi", timeout_s=5, stdin="in"))
    assert result == CommandResult(0, "hi\n", "", False, 0.01, "Finished", "")
    assert len(seen) == 3
    assert json.loads(seen[-1].content) == {"command": "echo hi", "timeout_s": 5, "stdin": "in"}
    assert seen[-1].url.path == "/sessions/abc/run" and seen[-1].headers["authorization"] == "Bearer k"


def test_file_calls_are_retried_and_shaped() -> None:
    def fail(n: int) -> httpx.Response:
        if n == 1:
            raise httpx.ReadError("reset")
        return httpx.Response(200, json={"path": "/app/x", "content": base64.b64encode(b"\x00x").decode()})

    seen, client = count_calls(fail)
    assert asyncio.run(client.read_file("abc", "/app/x")) == b"\x00x"
    assert len(seen) == 2 and seen[-1].url.params["path"] == "/app/x"


def test_gone_sessions_and_refusals() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            return httpx.Response(404, json={"detail": "session 'abc': no such session"})
        if request.method == "PUT":
            return httpx.Response(409, json={"detail": "session 'abc': passed its limits"})
        return httpx.Response(410, json={"detail": "session 'abc': expired (its ttl_s of 1 s ran out)"})

    client = client_with(handler)
    with pytest.raises(SessionGone, match="expired"):
        asyncio.run(client.session_run("abc", "true"))
    with pytest.raises(SandboxRequestError, match="limits"):
        asyncio.run(client.write_file("abc", "x", "y"))
    asyncio.run(client.delete_session("abc"))  # gone already: fine


def test_session_context_creates_and_deletes() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.url.path}")
        if request.url.path == "/sessions":
            body = json.loads(request.content)
            assert body == {"files": {"a": base64.b64encode(b"1").decode()}, "ttl_s": 60}
            return httpx.Response(201, json={"session_id": "s1", "expires_in_s": 60})
        if request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(200, json=DONE)

    async def main() -> None:
        async with client_with(handler).session(files={"a": "1"}, ttl_s=60) as s:
            assert s.id == "s1"
            assert (await s.run("echo hi")).ok

    asyncio.run(main())
    assert calls == ["POST /sessions", "POST /sessions/s1/run", "DELETE /sessions/s1"]
