"""The retriever server against careless and hostile clients.

One real `turnrl retriever serve` child (`LocalRetriever`: a random key, loopback bind, small limits
given as options) over a tiny index, hit with malformed, mistyped, oversized and unauthenticated
requests, by httpx and by raw sockets that lie about lengths or leave mid-request. After each: a
4xx whose `detail` is one line naming the field (or the key, or the body), /health healthy, and a
fixed valid query answering byte for byte as it did first. Then the command line's one-line
refusals: no key beyond loopback, a port out of range, a port already taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.retriever_docs import EXTRA_DOCS
from turnrl.agent.executor import ToolCall, ToolExecutor
from turnrl.agent.tools.base import ToolError
from turnrl.agent.tools.search import SearchTool
from turnrl.agent.tools.toolset import ToolSet
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.servers.retriever.client import RetrieverClient
from turnrl.servers.retriever.index import build_index
from turnrl.servers.retriever.launcher import LocalRetriever
from turnrl.tasks.search.corpus import builtin_documents

pytestmark = pytest.mark.timeout(120)

MAX_QUERIES, MAX_RESULTS, MAX_CHARS, MAX_BODY = 8, 20, 200, 20_000
LIMIT_ARGS = [
    "--max-queries", str(MAX_QUERIES), "--max-results", str(MAX_RESULTS),
    "--max-query-chars", str(MAX_CHARS), "--max-body", str(MAX_BODY),
]  # fmt: skip
FIXED = {
    "queries": ["Harbour of Ostrevant winter", "Quellmark Observatory basalt"],
    "topk": 3,
    "return_scores": True,
}
# A document whose one rare word gets an infinite score in the index (a damaged index, written
# below): the only way a real server produces a non-finite score.
POISON = {"id": "poison", "contents": "Vexolith\nThe vexolith marker stone stands alone."}


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    rows = [*builtin_documents(40, seed=11), *EXTRA_DOCS, POISON]
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    build_index(root / "corpus.jsonl", root / "index", show_progress=False)
    bm25 = root / "index" / "bm25"
    term = json.loads((bm25 / "vocab.index.json").read_text())["vexolith"]
    indptr = np.load(bm25 / "indptr.csc.index.npy")
    data = np.load(bm25 / "data.csc.index.npy", mmap_mode="r+")
    data[indptr[term] : indptr[term + 1]] = np.inf
    data.flush()
    return root / "index"


@pytest.fixture(scope="module")
def server(index_dir: Path) -> Iterator[LocalRetriever]:
    with LocalRetriever(index_dir, topk=3, startup_timeout=60, extra_args=LIMIT_ARGS) as running:
        assert running.api_key  # a child always gets a key of its own
        yield running


@pytest.fixture(scope="module")
def first_answer(server: LocalRetriever) -> bytes:
    response = httpx.post(server.url, json=FIXED, headers=server.headers, timeout=10)
    assert response.status_code == 200
    return response.content


def post(server: LocalRetriever, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    """POST `body` with the key: bytes and byte iterators as they are, anything else as JSON."""
    content = body if isinstance(body, (bytes, Iterator)) else json.dumps(body).encode()
    return httpx.post(server.url, content=content, headers={**server.headers, **(headers or {})}, timeout=10)


def still_serving(server: LocalRetriever, first_answer: bytes) -> None:
    health = httpx.get(f"{server.base_url}/health", headers=server.headers, timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    again = httpx.post(server.url, json=FIXED, headers=server.headers, timeout=10)
    assert again.status_code == 200 and again.content == first_answer


def refused(response: httpx.Response, status: int, needle: str) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and needle in detail, detail
    return detail


def raw_request(server: LocalRetriever, head: str, body: bytes = b"", read: bool = True) -> bytes:
    """Send bytes as they are (a length that lies, a body cut short), optionally leave at once."""
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        if not read:
            return b""
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def head(server: LocalRetriever, length: int | str, key: bool = True) -> str:
    lines = [
        "POST /retrieve HTTP/1.1",
        f"Host: {server.host}:{server.port}",
        "Content-Type: application/json",
        f"Content-Length: {length}",
    ]
    if key:
        lines.append(f"Authorization: Bearer {server.api_key}")
    return "\r\n".join(lines) + "\r\n"


NESTED = b'{"queries": ' + b"[" * 5000 + b"]" * 5000 + b"}"
TOO_MANY = {"queries": [f"river {i}" for i in range(MAX_QUERIES + 1)], "topk": 1}
# 7 queries x topk 3 = 21 results: each under its own limit, their product over --max-results
OVER_RESULTS = {"queries": [f"town {i}" for i in range(7)], "topk": 3}

# (request body, status, what the one-line detail says)
BAD_BODIES: dict[str, tuple[object, int, str]] = {
    "truncated JSON": (b'{"queries": ["a"', 422, "request body: not valid JSON"),
    "not UTF-8": (b'\xff\xfe{"queries": ["a"]}', 422, "request body: not valid JSON"),
    "lone surrogate": (b'{"queries": ["\\ud800"]}', 422, "request body: not valid JSON"),
    "empty body": (b"", 422, "request body: missing"),
    "whitespace body": (b"  \n ", 422, "request body: missing"),
    "null": (None, 422, "request body: must be a JSON object"),
    "a list": ([1, 2], 422, "request body: must be a JSON object"),
    "a string": ("queries", 422, "request body: must be a JSON object"),
    "deeply nested": (NESTED, 422, "request body: not valid JSON (recursion limit exceeded"),
    "queries a string": ({"queries": "river"}, 422, "queries: Input should be a valid array"),
    "queries an object": ({"queries": {"a": 1}}, 422, "queries: Input should be a valid array"),
    "query a number": ({"queries": ["ok", 7]}, 422, "queries[1]: Input should be a valid string"),
    "query a list": ({"queries": [["nested"]]}, 422, "queries[0]: Input should be a valid string"),
    "no queries": ({"topk": 3}, 422, "queries: Field required"),
    "empty queries": ({"queries": []}, 422, "queries: empty list"),
    "blank query": ({"queries": ["fine", " \t"]}, 422, "queries[1]: empty query string"),
    "unknown field": ({"queries": ["a"], "top_k": 2}, 422, "top_k: unknown field; did you mean 'topk'?"),
    "topk a word": ({"queries": ["a"], "topk": "three"}, 422, "topk: Input should be a valid integer"),
    "topk a fraction": ({"queries": ["a"], "topk": 2.5}, 422, "topk: Input should be a valid integer"),
    "topk NaN": (b'{"queries": ["a"], "topk": NaN}', 422, "topk: Input should be a valid integer"),
    "topk Infinity": (b'{"queries": ["a"], "topk": Infinity}', 422, "topk: Input should be a valid integer"),
    "topk 1e400": (b'{"queries": ["a"], "topk": 1e400}', 422, "topk: Input should be a valid integer"),
    "topk 1e30": (b'{"queries": ["a"], "topk": 1e30}', 422, "topk: "),
    "topk huge": ({"queries": ["a"], "topk": 10**30}, 422, "topk: 1000000000000000000000000000000 is larger"),
    "topk zero": ({"queries": ["a"], "topk": 0}, 422, "topk: must be a positive integer, got 0"),
    "topk negative": ({"queries": ["a"], "topk": -5}, 422, "topk: must be a positive integer, got -5"),
    "topk beyond corpus": ({"queries": ["a"], "topk": 44}, 422, "topk: 44 is larger than the corpus (43 documents)"),
    "return_scores a word": ({"queries": ["a"], "return_scores": "maybe"}, 422, "return_scores: "),
    "too many queries": (TOO_MANY, 413, f"queries: 9 queries exceed the server limit of {MAX_QUERIES} per request (--max-queries)"),
    "queries x topk": (OVER_RESULTS, 413, f"topk: 3 documents x 7 queries = 21 results exceed the server limit of {MAX_RESULTS} per request (--max-results)"),
    "over-long query": ({"queries": ["ok", "a" * (MAX_CHARS + 1)]}, 413, f"queries[1]: {MAX_CHARS + 1} characters exceed the server limit of {MAX_CHARS} per query (--max-query-chars)"),
    "body over --max-body": ({"queries": ["b" * MAX_BODY]}, 413, f"exceeds the server limit of {MAX_BODY} bytes (--max-body)"),
}  # fmt: skip

# taken once for what they look like (topk 2, 1; return_scores true): a type error of the client's
STRICT_TYPES: dict[str, tuple[object, int, str]] = {
    "topk a numeric string": ({"queries": ["Paris"], "topk": "2"}, 422, "topk: Input should be a valid integer"),
    "topk true": ({"queries": ["Paris"], "topk": True}, 422, "topk: Input should be a valid integer"),
    "topk 2.0": ({"queries": ["Paris"], "topk": 2.0}, 422, "topk: Input should be a valid integer"),
    "return_scores yes": ({"queries": ["Paris"], "return_scores": "yes"}, 422, "return_scores: Input should be a valid boolean"),
    "return_scores 1": ({"queries": ["Paris"], "return_scores": 1}, 422, "return_scores: Input should be a valid boolean"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_bad_body_gets_one_line_4xx_and_changes_nothing(
    server: LocalRetriever, first_answer: bytes, case: str
) -> None:
    body, status, needle = BAD_BODIES[case]
    refused(post(server, body), status, needle)
    still_serving(server, first_answer)


@pytest.mark.parametrize("case", list(STRICT_TYPES))
def test_a_string_or_a_bool_for_a_number_is_refused(
    server: LocalRetriever, first_answer: bytes, case: str
) -> None:
    body, status, detail = STRICT_TYPES[case]
    assert refused(post(server, body), status, detail) == detail
    still_serving(server, first_answer)


def test_the_key_is_required_everywhere(server: LocalRetriever, first_answer: bytes) -> None:
    for method, url in (
        ("GET", f"{server.base_url}/health"),
        ("POST", server.url),
        ("GET", server.base_url + "/docs"),
    ):
        missing = httpx.request(method, url, json=FIXED, timeout=10)
        refused(missing, 401, "api key: missing")
        wrong = httpx.request(method, url, json=FIXED, headers={"Authorization": "Bearer nope"}, timeout=10)
        refused(wrong, 401, "api key: wrong key")
    # the key is checked before the body is read: an unauthenticated huge body is not read at all
    answer = raw_request(server, head(server, 10**9, key=False), b"x" * 100)
    assert answer.startswith(b"HTTP/1.1 401") and b"api key: missing" in answer
    assert post(server, FIXED, headers={"X-API-Key": server.api_key}).content == first_answer
    still_serving(server, first_answer)


def test_json_without_content_type_still_works(server: LocalRetriever, first_answer: bytes) -> None:
    body = json.dumps(FIXED).encode()
    bare = httpx.post(server.url, content=body, headers=server.headers, timeout=10)  # no Content-Type at all
    assert "content-type" not in bare.request.headers and bare.content == first_answer
    form = post(server, body, headers={"Content-Type": "application/x-www-form-urlencoded"})  # curl -d
    assert form.content == first_answer


def test_huge_content_length_is_refused_before_the_body(server: LocalRetriever, first_answer: bytes) -> None:
    answer = raw_request(server, head(server, 10**9), b'{"queries": ["a"')  # 1 GB announced, 16 bytes sent
    status, _, body = answer.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 413"), answer
    detail = json.loads(body)["detail"]
    assert (
        detail == f"request body: 1000000000 bytes exceeds the server limit of {MAX_BODY} bytes (--max-body)"
    )
    still_serving(server, first_answer)


def test_huge_chunked_body_is_refused_while_streaming(server: LocalRetriever, first_answer: bytes) -> None:
    sent = 0

    def chunks() -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding chunked, 10 MB on offer
        nonlocal sent
        yield b'{"queries": ["'
        for _ in range(10_000):
            sent += 1000
            yield b"q" * 1000

    # the server may close while we still write: refused either way
    with contextlib.suppress(httpx.HTTPError):
        refused(post(server, chunks()), 413, f"more bytes than that exceeds the server limit of {MAX_BODY}")
    assert sent < 2_000_000  # refused long before the 10 MB went out
    still_serving(server, first_answer)


@pytest.mark.parametrize("when", ["mid-body", "after the body", "before the headers end"])
def test_a_client_leaving_mid_request(server: LocalRetriever, first_answer: bytes, when: str) -> None:
    body = json.dumps({"queries": ["river"] * MAX_QUERIES, "topk": 2}).encode()
    if when == "mid-body":
        raw_request(server, head(server, len(body)), body[: len(body) // 2], read=False)
    elif when == "after the body":
        raw_request(server, head(server, len(body)), body, read=False)
    else:
        raw_request(server, head(server, len(body))[:40], read=False)
    still_serving(server, first_answer)


def test_a_non_finite_score_is_one_line_500_and_the_connection_stays(
    server: LocalRetriever, first_answer: bytes
) -> None:
    with httpx.Client(headers=server.headers, timeout=10) as client:
        bad = client.post(
            server.url, json={"queries": ["river", "vexolith stone"], "topk": 2, "return_scores": True}
        )
        refused(bad, 500, "response: result[1][0].score is not a finite number; nothing was sent")
        assert bad.headers.get("connection") != "close"
        assert client.post(server.url, json=FIXED).content == first_answer  # the same connection, served
    # without scores nothing non-finite is sent: the documents still come
    plain = post(server, {"queries": ["vexolith"], "topk": 1})
    assert plain.status_code == 200 and plain.json()["result"][0][0]["id"] == "poison"
    still_serving(server, first_answer)


def mutate(rng: random.Random, text: bytes) -> bytes:
    data = bytearray(text)
    for _ in range(rng.randint(1, 4)):
        op, at = rng.random(), rng.randrange(len(data) + 1)
        if op < 0.4 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op < 0.7:
            data[at:at] = rng.choice(
                [b"[", b"{", b'"', b",", b"null", b"-1", b"1e999", b"\\u0000", b"\x00", b"}"]
            )
        elif data:
            del data[at : at + rng.randint(1, 8)]
    return bytes(data)


def random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 1, 3, 2**63, -(2**63), 10**20])
    if kind == 2:
        return rng.choice([0.5, -0.0, 1e308, 3.0])
    if kind == 3:
        return "".join(rng.choice("ab \t\n\u00e9\u4e2d\U0001f600\x00") for _ in range(rng.randint(0, 12)))
    if kind == 4:
        return "river"
    if kind == 5:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    if kind == 6:
        return {rng.choice(["queries", "topk", "return_scores", "q"]): random_value(rng, depth + 1)}
    return {
        "queries": [random_value(rng, depth + 1) for _ in range(rng.randint(0, 10))],
        "topk": random_value(rng, depth + 1),
    }


def test_random_bodies_never_get_a_5xx(server: LocalRetriever, first_answer: bytes) -> None:
    rng = random.Random(20261125)
    seed = json.dumps(FIXED).encode()
    statuses: dict[int, int] = {}
    with httpx.Client(headers=server.headers, timeout=10) as client:
        for i in range(400):
            body = mutate(rng, seed) if i % 2 else json.dumps(random_value(rng)).encode()
            response = client.post(server.url, content=body)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            assert response.status_code < 500, (body, response.text)
            if response.status_code >= 400:
                detail = response.json()["detail"]
                assert isinstance(detail, str) and detail and "\n" not in detail, (body, detail)
    assert statuses.get(422, 0) > 100  # most are refused; some mutations are still valid requests
    still_serving(server, first_answer)


def test_the_client_splits_a_batch_by_the_advertised_limits(server: LocalRetriever) -> None:
    queries = [f"river town {i}" for i in range(23)]  # 23 queries x topk 3 > 8 queries and > 20 results

    async def run() -> tuple[list[list], list[list], dict[str, int]]:
        async with RetrieverClient(
            server.url, topk=3, timeout=10, retries=0, api_key=server.api_key
        ) as client:
            whole = await client.retrieve(queries)
            one_by_one = [(await client.retrieve([q]))[0] for q in queries]
            return whole, one_by_one, await client.limits()

    whole, one_by_one, limits = asyncio.run(run())
    assert limits == {
        "max_queries": MAX_QUERIES,
        "max_results": MAX_RESULTS,
        "max_query_chars": MAX_CHARS,
        "max_body": MAX_BODY,
    }
    assert whole == one_by_one and all(len(block) == 3 for block in whole)


def test_the_search_tool_refuses_an_over_long_query_alone(server: LocalRetriever) -> None:
    tool = SearchTool(server.url, topk=2, retries=0, api_key=server.api_key)

    async def run() -> list:
        try:
            return await tool.call_batch([{"query": "Quellmark Observatory"}, {"query": "x " * MAX_CHARS}])
        finally:
            await tool.aclose()

    ok, long = asyncio.run(run())
    assert not ok.error and ok.text.startswith("Doc 1(Title: Quellmark Observatory)")
    assert long.error and long.text == (
        f"error: search query of {2 * MAX_CHARS - 1} characters is longer than the retriever's limit of {MAX_CHARS}"
    )


def test_the_toolset_sends_the_configured_key(server: LocalRetriever, tmp_path: Path) -> None:
    cfg = MultiTurnConfig(enable=True, tools=["search"], tool_timeout=30)
    cfg.search.url, cfg.search.api_key = server.url, "not-the-key"
    with pytest.raises(ToolError) as info:
        ToolSet(cfg, tmp_path).start()
    assert str(info.value) == (
        f"rollout.multi_turn.search.url: retriever at {server.url} refused the key (HTTP 401: api key: "
        "wrong key); set rollout.multi_turn.search.api_key or $TURNRL_API_KEY to the server's key"
    )
    cfg.search.api_key = server.api_key
    with ToolSet(cfg, tmp_path) as toolset:
        ex = ToolExecutor(toolset.tools, timeout=30)
        try:
            (found,) = ex.run([ToolCall("search", {"query": "Quellmark Observatory"})])
        finally:
            ex.close()
    assert not found.error and found.text.startswith("Doc 1(Title: Quellmark Observatory)")


# -- the command line ---------------------------------------------------------------------------


def turnrl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "TURNRL_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "turnrl.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environ, **(env or {})},
    )


def one_line(proc: subprocess.CompletedProcess[str], code: int) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code and len(lines) == 1, (proc.returncode, proc.stderr)
    assert lines[0].startswith("turnrl retriever serve: error: ")
    return lines[0]


def test_cli_refuses_a_public_host_without_a_key(index_dir: Path) -> None:
    line = one_line(turnrl("retriever", "serve", "--index", str(index_dir), "--host", "0.0.0.0"), 1)
    assert line == (
        "turnrl retriever serve: error: --host 0.0.0.0: binding beyond loopback needs a key "
        "(--api-key KEY or $TURNRL_API_KEY); anyone who reaches the port could use the server"
    )


def test_cli_refuses_a_port_out_of_range(index_dir: Path) -> None:
    line = one_line(turnrl("retriever", "serve", "--index", str(index_dir), "--port", "99999"), 2)
    assert line.endswith("argument --port: 99999 is not a port in [0, 65535]")
    line = one_line(turnrl("retriever", "serve", "--index", str(index_dir), "--max-queries", "0"), 2)
    assert line.endswith("argument --max-queries: must be >= 1, got 0")


def test_cli_refuses_a_header_timeout_without_end_and_a_bogus_log_level(index_dir: Path) -> None:
    """`--header-timeout inf` once started a server whose silent connections were never closed; the
    log level is the declaration `turnrl serve` shares (servers.options.add_log_level)."""
    serve = ("retriever", "serve", "--index", str(index_dir), "--port", "0")
    line = one_line(turnrl(*serve, "--header-timeout", "inf"), 1)
    assert line == (
        "turnrl retriever serve: error: --header-timeout inf: must be finite and >= 1 second (a "
        "connection that sends nothing would hold its socket for ever)"
    )
    line = one_line(turnrl(*serve, "--log-level", "bogus"), 2)
    assert line.startswith("turnrl retriever serve: error: argument --log-level: invalid choice: 'bogus'")


def test_cli_refuses_a_taken_port(index_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(turnrl("retriever", "serve", "--index", str(index_dir), "--port", str(port)), 1)
    assert line.startswith(f"turnrl retriever serve: error: --host 127.0.0.1 --port {port}: cannot listen (")
    assert "in use" in line


def test_cli_says_where_it_serves_only_once_it_listens(index_dir: Path) -> None:
    # --port 0: the line is the only way to learn the port, so it must come after the bind
    environ = {k: v for k, v in os.environ.items() if k != "TURNRL_API_KEY"}
    command = [
        sys.executable,
        "-m",
        "turnrl.cli",
        "retriever",
        "serve",
        "--index",
        str(index_dir),
        "--port",
        "0",
    ]
    proc = subprocess.Popen(
        [*command, "--api-key", "flag-key"], stderr=subprocess.PIPE, text=True, env=environ
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "serving on http://127.0.0.1:" in line and "(key required)" in line, line
        url = line.split("serving on ")[1].split()[0]
        base = url.removesuffix("/retrieve")
        with_key = httpx.get(f"{base}/health", headers={"Authorization": "Bearer flag-key"}, timeout=10)
        assert with_key.status_code == 200 and httpx.get(f"{base}/health", timeout=10).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=15)
