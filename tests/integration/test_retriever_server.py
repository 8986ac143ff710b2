"""The retriever server over HTTP: a real `turnrl retriever serve` child on a free local port."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.retriever_docs import EXTRA_DOCS
from turnrl.servers.retriever.client import RetrieverClient, check_server, format_passages
from turnrl.servers.retriever.corpus import split_title
from turnrl.servers.retriever.index import build_index
from turnrl.servers.retriever.launcher import LocalRetriever
from turnrl.tasks.search.corpus import builtin_documents


@pytest.fixture(scope="module")
def corpus() -> list[dict[str, str]]:
    return builtin_documents(40, seed=11) + EXTRA_DOCS


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, corpus: list[dict[str, str]]
) -> Iterator[LocalRetriever]:
    root = tmp_path_factory.mktemp("retriever")
    corpus_path = root / "corpus.jsonl"
    corpus_path.write_text("".join(json.dumps(row) + "\n" for row in corpus), encoding="utf-8")
    build_index(corpus_path, root / "index", show_progress=False)
    with LocalRetriever(root / "index", topk=3, startup_timeout=60) as running:
        yield running


def post(server: LocalRetriever, body: object) -> httpx.Response:
    return httpx.post(server.url, json=body, timeout=30, headers=server.headers)


def test_health(server: LocalRetriever, corpus: list[dict[str, str]]) -> None:
    body = httpx.get(f"{server.base_url}/health", timeout=10, headers=server.headers).json()
    assert body["status"] == "ok" and body["method"] == "bm25" and body["num_docs"] == len(corpus)
    assert body["topk"] == 3 and Path(body["index"]).name == "index"
    assert body["limits"] == {
        "max_queries": 1024,
        "max_results": 16384,
        "max_query_chars": 4096,
        "max_body": 8 << 20,
    }
    assert check_server(server.url, api_key=server.api_key)["num_docs"] == len(corpus)


def test_exact_title_query_ranks_its_document_first(
    server: LocalRetriever, corpus: list[dict[str, str]]
) -> None:
    for row in corpus[::5] + EXTRA_DOCS:
        title = split_title(row["contents"])[0]
        result = post(server, {"queries": [title], "topk": 3, "return_scores": True}).json()["result"]
        assert result[0][0]["document"] == row, title


def test_search_r1_request_shape_verbatim(server: LocalRetriever, corpus: list[dict[str, str]]) -> None:
    # The payload Search-R1's generation.py sends (`_batch_search`), byte for byte in shape.
    payload = {
        "queries": ["Harbour of Ostrevant winter", "Quellmark Observatory basalt"],
        "topk": 3,
        "return_scores": True,
    }
    response = post(server, payload)
    assert response.status_code == 200 and set(response.json()) == {"result"}
    result = response.json()["result"]
    assert len(result) == 2 and all(len(block) == 3 for block in result)
    for block in result:
        for item in block:
            assert set(item) == {"document", "score"} and set(item["document"]) == {"id", "contents"}
            assert isinstance(item["score"], float)
        scores = [item["score"] for item in block]
        assert scores == sorted(scores, reverse=True)
    assert [block[0]["document"]["id"] for block in result] == ["wiki-1", "wiki-2"]
    # And what Search-R1 then shows the model:
    assert format_passages(result[0]).startswith(
        "Doc 1(Title: Harbour of Ostrevant) The harbour of Ostrevant"
    )


def test_return_scores_false_gives_plain_documents(server: LocalRetriever) -> None:
    result = post(server, {"queries": ["Quellmark Observatory"], "topk": 2, "return_scores": False}).json()[
        "result"
    ]
    assert len(result) == 1 and len(result[0]) == 2
    assert result[0][0] == EXTRA_DOCS[1] and set(result[0][1]) == {"id", "contents"}
    # return_scores defaults to false, as in Search-R1's QueryRequest.
    assert post(server, {"queries": ["Quellmark Observatory"]}).json()["result"][0][0] == EXTRA_DOCS[1]


def test_batch_keeps_query_order(server: LocalRetriever, corpus: list[dict[str, str]]) -> None:
    rows = corpus[::3]
    rows = rows[len(rows) // 2 :] + rows[: len(rows) // 2]
    titles = [split_title(r["contents"])[0] for r in rows]
    result = post(server, {"queries": titles, "topk": 1, "return_scores": True}).json()["result"]
    assert [block[0]["document"]["id"] for block in result] == [r["id"] for r in rows]


@pytest.mark.parametrize(("topk", "expected"), [(1, 1), (5, 5), (None, 3)])
def test_topk_respected(server: LocalRetriever, topk: int | None, expected: int) -> None:
    result = post(server, {"queries": ["river", "company"], "topk": topk}).json()["result"]
    assert [len(block) for block in result] == [expected, expected]


def test_topk_equal_to_corpus_size(server: LocalRetriever, corpus: list[dict[str, str]]) -> None:
    result = post(server, {"queries": ["town"], "topk": len(corpus)}).json()["result"]
    assert sorted(d["id"] for d in result[0]) == sorted(r["id"] for r in corpus)


def test_unknown_words_still_answer_topk(server: LocalRetriever) -> None:
    result = post(
        server, {"queries": ["zzqxv wwkkpt", "the of and"], "topk": 2, "return_scores": True}
    ).json()
    assert [len(block) for block in result["result"]] == [2, 2]
    assert all(item["score"] == 0.0 for block in result["result"] for item in block)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"queries": []}, "queries: empty list"),
        ({"queries": ["fine", "  "]}, "queries[1]: empty query string"),
        ({"queries": ["x"], "topk": 0}, "topk: must be a positive integer, got 0"),
        ({"queries": ["x"], "topk": -2}, "topk: must be a positive integer, got -2"),
        ({"queries": ["x"], "topk": 10_000}, "topk: 10000 is larger than the corpus (42 documents)"),
        ({"queries": ["x"], "topk": "three"}, "topk: Input should be a valid integer"),
        ({"queries": "just one string"}, "queries: Input should be a valid array"),
        ({"queries": ["ok", 7]}, "queries[1]: Input should be a valid string"),
        ({"queries": ["x"], "top_k": 3}, "top_k: unknown field; did you mean 'topk'?"),
        ({"topk": 3}, "queries: Field required"),
        ([1, 2], "request body: must be a JSON object"),
    ],
)
def test_bad_requests_get_one_line_422(server: LocalRetriever, body: object, needle: str) -> None:
    response = post(server, body)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert needle in detail and "\n" not in detail
    assert post(server, {"queries": ["river"], "topk": 1}).status_code == 200  # still serving


@pytest.mark.parametrize(
    ("raw", "needle"),
    [(b'{"queries": ["a"', "request body: not valid JSON"), (b"", "request body: missing")],
)
def test_malformed_body(server: LocalRetriever, raw: bytes, needle: str) -> None:
    headers = {"Content-Type": "application/json", **server.headers}
    response = httpx.post(server.url, content=raw, headers=headers, timeout=10)
    assert response.status_code == 422 and needle in response.json()["detail"]
    assert httpx.get(f"{server.base_url}/health", timeout=10, headers=server.headers).status_code == 200


def test_json_without_content_type_is_understood(server: LocalRetriever) -> None:
    # curl -d sends application/x-www-form-urlencoded; the body is still JSON.
    raw = json.dumps({"queries": ["Quellmark Observatory"], "topk": 1}).encode()
    headers = {"Content-Type": "text/plain", **server.headers}
    response = httpx.post(server.url, content=raw, headers=headers, timeout=10)
    assert response.json()["result"][0][0]["id"] == "wiki-2"


def test_client_round_trip(server: LocalRetriever) -> None:
    async def run() -> list[list]:
        async with RetrieverClient(server.url, topk=2, timeout=10, api_key=server.api_key) as client:
            return await client.retrieve(["Harbour of Ostrevant", "Quellmark Observatory"])

    result = asyncio.run(run())
    assert [block[0].id for block in result] == ["wiki-1", "wiki-2"] and all(len(b) == 2 for b in result)
    assert result[1][0].title == "Quellmark Observatory" and result[1][0].score is not None
    assert format_passages(result[1]).splitlines()[0] == (
        "Doc 1(Title: Quellmark Observatory) Quellmark Observatory was built on a basalt ridge."
    )


def test_concurrent_requests(server: LocalRetriever, corpus: list[dict[str, str]]) -> None:
    titles = [split_title(r["contents"])[0] for r in corpus[:16]]

    async def run() -> list[list]:
        async with RetrieverClient(server.url, topk=1, timeout=30, api_key=server.api_key) as client:
            return await asyncio.gather(*(client.retrieve([t]) for t in titles))

    results = asyncio.run(run())
    assert [r[0][0].id for r in results] == [row["id"] for row in corpus[:16]]
