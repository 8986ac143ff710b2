"""The guard every turnrl server wears (`turnrl.servers.guard`), on a real uvicorn server on
localhost: the key, the body limit while a chunked body streams in, the client's departure seen by
the route, NaN refused before serialising; and `listen.bind`'s one-line errors."""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request

from turnrl.errors import TurnrlInputError
from turnrl.keys import auth_headers, check_bind, is_loopback
from turnrl.servers.guard import Guard, finite_json, non_finite_path, wait_for_disconnect
from turnrl.servers.listen import bind, url_of

KEY = "s3cret-key"
LIMIT = 1000


def make_app() -> tuple[FastAPI, dict[str, int]]:
    app = FastAPI()
    seen = {"gone": 0, "finished": 0}

    @app.post("/echo")
    async def echo(request: Request):  # type: ignore[no-untyped-def]
        return finite_json({"bytes": len(await request.body())})

    @app.get("/nan")
    async def nan():  # type: ignore[no-untyped-def]
        return finite_json({"ok": [1.0, 2.0], "rows": [{"lp": [0.5, math.nan]}]})

    @app.post("/slow")
    async def slow(request: Request):  # type: ignore[no-untyped-def]
        work = asyncio.ensure_future(asyncio.sleep(30))
        gone = asyncio.ensure_future(wait_for_disconnect(request))
        await asyncio.wait([work, gone], return_when=asyncio.FIRST_COMPLETED)
        if gone.done():
            work.cancel()
            seen["gone"] += 1
        else:
            seen["finished"] += 1
        return finite_json({"done": True})

    app.add_middleware(Guard, api_key=KEY, max_body=LIMIT)
    return app, seen


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, dict[str, int]]]:
    app, seen = make_app()
    sock = bind("127.0.0.1", 0)
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = url_of(sock)
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield url, seen
    srv.should_exit = True
    thread.join(10)
    sock.close()


H = auth_headers(KEY)


def test_the_key_is_required_and_compared(server):
    url, _ = server
    missing = httpx.post(url + "/echo", content=b"abc")
    assert missing.status_code == 401 and missing.json()["detail"].startswith("api key: missing")
    wrong = httpx.post(url + "/echo", content=b"abc", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json() == {"detail": "api key: wrong key"}
    assert httpx.post(url + "/echo", content=b"abc", headers=H).json() == {"bytes": 3}
    # the header the openai SDK does not send but curl users do
    assert httpx.post(url + "/echo", content=b"ab", headers={"X-API-Key": KEY}).json() == {"bytes": 2}


def test_body_limit_by_length_and_while_streaming(server):
    url, _ = server
    big = httpx.post(url + "/echo", content=b"x" * (LIMIT + 1), headers=H)
    assert big.status_code == 413 and f"limit of {LIMIT} bytes" in big.json()["detail"]
    sent = 0

    def chunks() -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding chunked
        nonlocal sent
        for _ in range(10_000):
            sent += 100
            yield b"y" * 100

    try:
        r = httpx.post(url + "/echo", content=chunks(), headers=H, timeout=10)
        assert r.status_code == 413 and "more bytes than that" in r.json()["detail"]
    except httpx.HTTPError:
        pass  # the server may close while we still write: refused either way
    assert sent < 1_000_000  # refused long before the whole megabyte went out
    exact = httpx.post(url + "/echo", content=iter([b"z" * 500, b"z" * 500]), headers=H)
    assert exact.json() == {"bytes": LIMIT}  # at the limit, chunked: served


def test_nan_is_refused_before_serialising_and_the_connection_survives(server):
    url, _ = server
    with httpx.Client(headers=H) as client:
        r = client.get(url + "/nan")
        assert r.status_code == 500
        assert r.json() == {"detail": "response: rows[0].lp[1] is not a finite number; nothing was sent"}
        assert client.post(url + "/echo", content=b"ok").json() == {"bytes": 2}


def test_a_route_sees_its_client_leave(server):
    url, seen = server
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/slow", content=b"{}", headers=H, timeout=0.5)
    deadline = time.monotonic() + 5
    while seen["gone"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen == {"gone": 1, "finished": 0}


def test_non_finite_path_finds_the_first_culprit():
    assert non_finite_path({"a": [1, 2.5, 3], "b": {"c": "x"}}) is None
    assert non_finite_path({"a": [1.0, float("inf")]}) == "a[1]"
    assert non_finite_path([{"x": 1}, {"y": [0.0, -math.inf]}]) == "[1].y[1]"
    assert non_finite_path(math.nan) == "value"
    assert non_finite_path([1e308, 1e308]) is None  # the sum overflows; each number is finite


def test_bind_errors_are_one_line_and_loopback_needs_no_key():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(TurnrlInputError, match=rf"^--host 127.0.0.1 --port {port}: cannot listen \("):
            bind("127.0.0.1", port)
    finally:
        taken.close()
    with pytest.raises(TurnrlInputError, match=r"^--port 99999: not a port"):
        bind("127.0.0.1", 99999)
    with pytest.raises(TurnrlInputError, match="cannot resolve"):
        bind("no-such-host.invalid", 0)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.org")
    check_bind("127.0.0.1", "")
    check_bind("0.0.0.0", "k")
    with pytest.raises(TurnrlInputError, match=r"^--host 0.0.0.0: binding beyond loopback"):
        check_bind("0.0.0.0", "")
