"""RetrieverClient retry/backoff and check_server, against scripted HTTP servers on 127.0.0.1.

The scripted server is a real stdlib HTTP server that answers a fixed sequence (a 500, then
a Search-R1 answer, ...): the failures a production retriever shows, on demand.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from turnrl.runtime import free_port
from turnrl.servers.retriever.client import RetrieverClient, check_server
from turnrl.servers.retriever.errors import RetrieverError, RetrieverRequestError, RetrieverUnavailable

DOC = {"document": {"id": "3", "contents": "Dransk\nDransk trades salt."}, "score": 2.5}


class Scripted:
    """Answers POST /retrieve with the scripted (status, body) pairs in turn, the last one forever;
    a body may be a function of the request's JSON. `health`: False = no /health (Search-R1's),
    a (status, body) pair = that answer. The headers of every request are kept in `headers`."""

    def __init__(self, script: list[tuple[int, object]], health: bool | tuple[int, object] = True) -> None:
        self.script, self.health, self.requests = script, health, []
        self.headers: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                owner.headers.append(dict(self.headers))
                if isinstance(owner.health, tuple) and self.path == "/health":
                    self._send(*owner.health)
                elif owner.health and self.path == "/health":
                    self._send(200, {"status": "ok", "num_docs": 1})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                owner.headers.append(dict(self.headers))
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                step = min(len(owner.requests), len(owner.script)) - 1
                status, answer = owner.script[step]
                self._send(status, answer(body) if callable(answer) else answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/retrieve"

    def __enter__(self) -> Scripted:
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def dead_url() -> Iterator[str]:
    yield f"http://127.0.0.1:{free_port()}/retrieve"


def test_retries_5xx_then_succeeds_with_search_r1_payload() -> None:
    script = [(500, {"detail": "boom"}), (503, {"detail": "busy"}), (200, {"result": [[DOC], [DOC, DOC]]})]
    with Scripted(script) as server:
        client = RetrieverClient(server.url, topk=2, retries=3, backoff=0.01)
        result = asyncio.run(client.retrieve(["q1", "q2"]))
    assert len(server.requests) == 3
    assert server.requests[0] == {"queries": ["q1", "q2"], "topk": 2, "return_scores": True}
    assert [len(r) for r in result] == [1, 2]
    assert result[0][0].id == "3" and result[0][0].title == "Dransk" and result[0][0].score == 2.5


def test_gives_up_after_retries_and_names_url() -> None:
    with Scripted([(502, {"detail": "bad gateway"})]) as server:
        client = RetrieverClient(server.url, retries=2, backoff=0.01)
        with pytest.raises(
            RetrieverUnavailable, match=r"failed after 3 attempts \(last: HTTP 502: bad gateway\)"
        ):
            asyncio.run(client.retrieve(["q"]))
    assert len(server.requests) == 3


def test_4xx_is_not_retried() -> None:
    with Scripted([(422, {"detail": "topk: must be a positive integer, got 0"})]) as server:
        client = RetrieverClient(server.url, retries=3, backoff=0.01)
        with pytest.raises(RetrieverRequestError, match=r"HTTP 422.*topk: must be a positive integer"):
            asyncio.run(client.retrieve(["q"]))
    assert len(server.requests) == 1


def test_malformed_answers_are_errors() -> None:
    with Scripted([(200, {"result": [[DOC]]})]) as server:
        client = RetrieverClient(server.url, backoff=0.01)
        with pytest.raises(RetrieverError, match="1 result lists for 2 queries"):
            asyncio.run(client.retrieve(["a", "b"]))
    with (
        Scripted([(200, {"answer": []})]) as server,
        pytest.raises(RetrieverError, match="without a 'result' list"),
    ):
        asyncio.run(RetrieverClient(server.url).retrieve(["a"]))


def test_connection_refused_is_retried_then_reported(dead_url: str) -> None:
    client = RetrieverClient(dead_url, retries=2, backoff=0.01)
    with pytest.raises(
        RetrieverUnavailable, match=f"retriever at {dead_url} failed after 3 attempts.*Connect"
    ):
        asyncio.run(client.retrieve(["q"]))
    assert asyncio.run(client.retrieve([])) == []  # nothing to ask: no request at all


def test_check_server(dead_url: str) -> None:
    with pytest.raises(RetrieverUnavailable) as info:
        check_server(dead_url, timeout=2)
    assert str(info.value).startswith(f"retriever at {dead_url} is not reachable") and "\n" not in str(
        info.value
    )
    with Scripted([(200, {"result": [[DOC]]})]) as server:
        assert check_server(server.url) == {"status": "ok", "num_docs": 1}
    # Search-R1's own server has no /health: the probe falls back to a one-query /retrieve.
    with Scripted([(200, {"result": [[DOC]]})], health=False) as server:
        assert check_server(server.url) == {}
        assert server.requests == [{"queries": ["health check"], "topk": 1}]
    with (
        Scripted([(404, {"detail": "Not Found"})], health=False) as server,
        pytest.raises(RetrieverUnavailable, match="is not answering the /retrieve API"),
    ):
        check_server(server.url)


def test_one_client_serves_several_event_loops() -> None:
    with Scripted([(200, {"result": [[DOC]]})]) as server:
        client = RetrieverClient(server.url)
        for _ in range(2):  # a fresh asyncio.run each time, as a synchronous caller would do
            assert asyncio.run(client.retrieve(["q"]))[0][0].id == "3"


def test_constructor_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="topk"):
        RetrieverClient("http://127.0.0.1:1", topk=0)
    with pytest.raises(ValueError, match="retries"):
        RetrieverClient("http://127.0.0.1:1", retries=-1)


def echo(body: dict) -> dict:
    """A retriever that finds each query itself: one passage whose id is the query."""
    return {"result": [[{"document": {"id": q, "contents": q}, "score": 1.0}] for q in body["queries"]]}


def test_sends_the_key_and_splits_a_batch_by_the_advertised_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    health = (200, {"status": "ok", "limits": {"max_queries": 3, "max_results": 4, "max_body": 1 << 20}})
    with Scripted([(200, echo)], health=health) as server:
        client = RetrieverClient(server.url, topk=2, api_key="k1")
        result = asyncio.run(client.retrieve(list("abcde")))  # topk 2: at most 4 // 2 = 2 queries a request
    assert [block[0].id for block in result] == list("abcde")  # in query order, whatever came back first
    assert sorted(len(r["queries"]) for r in server.requests) == [1, 2, 2]
    assert [h.get("Authorization") for h in server.headers] == ["Bearer k1"] * 4  # /health, then 3 POSTs
    # no key given: $TURNRL_API_KEY; a server without limits (Search-R1's) gets the whole batch at once
    monkeypatch.setenv("TURNRL_API_KEY", "from-env")
    with Scripted([(200, echo)], health=False) as server:
        result = asyncio.run(RetrieverClient(server.url).retrieve(list("abcde")))
        assert len(result) == 5 and [len(r["queries"]) for r in server.requests] == [5]
        assert {h.get("Authorization") for h in server.headers} == {"Bearer from-env"}
        assert check_server(server.url) == {} and server.headers[-1].get("Authorization") == "Bearer from-env"


def test_check_server_names_a_refused_key() -> None:
    refusal = (401, {"detail": "api key: wrong key"})
    with Scripted([refusal], health=refusal) as server, pytest.raises(RetrieverRequestError) as info:
        check_server(server.url, api_key="nope")
    assert str(info.value) == (
        f"retriever at {server.url} refused the key (HTTP 401: api key: wrong key); "
        "set rollout.multi_turn.search.api_key or $TURNRL_API_KEY to the server's key"
    )
