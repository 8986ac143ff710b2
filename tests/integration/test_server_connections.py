"""Bounds on connections and waiting work (`servers.connections`, `--max-waiting`), on real servers:
a `turnrl retriever serve` child reached over raw sockets and httpx, and `turnrl serve`'s batcher
with a real tiny-random engine."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from turnrl.rollout.base import SamplingParams
from turnrl.servers.connections import ConnectionLimits
from turnrl.servers.retriever.launcher import LocalRetriever
from turnrl.tasks.search.corpus import write_builtin_corpus


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from turnrl.servers.retriever.index import build_index

    root = tmp_path_factory.mktemp("conn")
    paths = write_builtin_corpus(root / "bc", n_entities=30, seed=5)
    build_index(paths.corpus, root / "index", show_progress=False)
    return root / "index"


def raw(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_half_sent_heads_are_closed_at_the_header_timeout_and_keyed_clients_go_on(index_dir):
    """Before: a head trickled in a byte at a time held its connection for ever (uvicorn's
    keep-alive timer restarts on every byte). Now it gets a 408 at --header-timeout."""
    with LocalRetriever(index_dir, extra_args=["--header-timeout", "1"]) as server:
        slow = raw(server.base_url)
        slow.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\n")
        start = time.monotonic()

        def trickle() -> None:  # one header byte every 0.2 s: never a complete head
            try:
                while time.monotonic() - start < 5:
                    slow.sendall(b"X")
                    time.sleep(0.2)
            except OSError:
                pass  # closed by the server

        threading.Thread(target=trickle, daemon=True).start()
        got = answer(slow)
        waited = time.monotonic() - start
        assert got.startswith(b"HTTP/1.1 408 ") and b"not complete within 1s (--header-timeout)" in got
        assert 0.9 <= waited < 4.0, waited
        health = httpx.get(server.base_url + "/health", headers=server.headers).json()["connections"]
        assert health["header_timeouts"] == 1 and health["header_timeout_s"] == 1.0
        # a keyed client on a kept-alive connection is not cut between its requests
        with httpx.Client(headers=server.headers, trust_env=False) as http:
            for _ in range(3):
                r = http.post(server.url, json={"queries": ["capital"], "topk": 1})
                assert r.status_code == 200, r.text
                time.sleep(0.4)


def test_a_client_still_sending_after_the_408_reads_it(index_dir):
    """The 408 is followed by a half-close, not a close: a socket closed while its client still
    sends answers with a reset, and a reset can discard the 408 before the client reads it (the
    first test above failed so, once in a loaded CI run). Here the client sends a byte every 50 ms
    until 0.4 s after the 1 s timeout, and only then reads."""
    with LocalRetriever(index_dir, extra_args=["--header-timeout", "1"]) as server:
        slow = raw(server.base_url)
        slow.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\n")
        start = time.monotonic()
        while time.monotonic() - start < 1.4:
            slow.sendall(b"X")
            time.sleep(0.05)
        time.sleep(0.1)
        got = answer(slow)
        assert got.startswith(b"HTTP/1.1 408 "), got[:80]


def test_a_connection_beyond_the_cap_is_a_503_with_retry_after(index_dir):
    """Its request is read and answered 503 (a clean refusal the client can retry), and none of the
    server's code runs for it; the connections within the cap are served as before."""
    with LocalRetriever(index_dir, extra_args=["--max-connections", "3", "--header-timeout", "30"]) as server:
        held = [raw(server.base_url) for _ in range(3)]  # open, nothing sent yet
        time.sleep(0.3)
        extra = raw(server.base_url)
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        got = answer(extra)
        assert got.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in got.lower()
        assert b"too many open connections (--max-connections); retry" in got
        key = server.headers["Authorization"].encode()
        held[0].sendall(
            b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: " + key + b"\r\nConnection: close\r\n\r\n"
        )
        assert answer(held[0]).startswith(b"HTTP/1.1 200 ")  # one within the cap: served
        for s in held[1:]:
            s.close()
        time.sleep(0.3)
        health = httpx.get(server.base_url + "/health", headers=server.headers).json()["connections"]
        assert health["refused_connections"] == 1 and health["max_connections"] == 3
        assert health["open"] == 1  # this request's own


def test_a_client_still_sending_its_body_after_the_503_reads_it(index_dir):
    """The 503 is written once the head is in, before the body: a client that sends all of a
    large body and only then reads (as an HTTP client does) met a socket the server had closed with
    the body unread, and the kernel's reset took the 503 with it. The refusal now half-closes and
    drops the rest of the body, as the 408 does."""
    with LocalRetriever(index_dir, extra_args=["--max-connections", "1", "--header-timeout", "30"]) as server:
        held = raw(server.base_url)  # the one connection the cap allows
        time.sleep(0.3)
        body = b"x" * (8 << 20)
        extra = raw(server.base_url)
        extra.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
        extra.sendall(b"Content-Length: %d\r\n\r\n" % len(body))
        time.sleep(0.2)  # the 503 is written now, with 8 MiB still to come
        for i in range(0, len(body), 1 << 16):
            extra.sendall(body[i : i + (1 << 16)])
        got = answer(extra)
        assert got.startswith(b"HTTP/1.1 503 "), got[:80]
        held.close()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--max-connections", "0"], "--max-connections 0: must be >= 1"),
        (["--max-connections", "-5"], "--max-connections -5: must be >= 1"),
        (
            ["--header-timeout", "0.5"],
            "--header-timeout 0.5: must be finite and >= 1 second (a slower client",
        ),
        (["--header-timeout", "nan"], "--header-timeout nan: must be finite and >= 1 second (not a number)"),
        # once served, and a connection that sent nothing held its socket for ever
        (
            ["--header-timeout", "inf"],
            "--header-timeout inf: must be finite and >= 1 second (a connection that",
        ),
    ],
)
@pytest.mark.timeout(120)  # a server that starts anyway fails here, not hangs
def test_bad_limits_are_one_line(flags, said, index_dir, capsys):
    from turnrl.cli import main

    assert main(["retriever", "serve", "--index", str(index_dir), *flags]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    with pytest.raises(Exception, match="must be >= 1"):
        ConnectionLimits(max_connections=0)


def test_waiting_generations_are_capped_with_a_503(tiny):
    """`turnrl serve`'s queue: with the worker busy and --max-waiting 1 requests waiting, one more
    is refused at once (its prompt never held), counted in /health's requests_refused_busy."""
    from turnrl.rollout.hf import HFEngine
    from turnrl.servers.inference.batcher import Batcher, Busy

    batcher = Batcher(HFEngine(*tiny), max_waiting=1)
    try:
        release = threading.Event()
        busy = batcher.call(release.wait)  # the worker runs this: generations wait behind it
        time.sleep(0.1)
        params = SamplingParams(max_new_tokens=2, temperature=0.0)
        first = batcher.submit([[1, 2, 3]], params)
        with pytest.raises(Busy, match=r"1 requests already wait for the engine \(--max-waiting 1\)"):
            batcher.submit([[4, 5, 6]], params)
        gone = threading.Event()
        gone.set()  # a waiting request whose client left frees its place
        batcher._jobs[0].gone = gone
        again = batcher.submit([[7, 8]], params)
        release.set()
        busy.result(timeout=30)
        assert len(again.result(timeout=60).response_ids[0]) == 2 and first.cancelled()
        stats = batcher.stats()
        assert stats["requests_refused_busy"] == 1 and stats["requests_waiting"] == 0
    finally:
        batcher.close(timeout=30)
