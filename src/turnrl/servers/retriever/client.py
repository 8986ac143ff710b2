"""Client side of the retriever API: an async batched client and Search-R1's passage format.

Works against turnrl's own server and against any server speaking Search-R1's
`POST /retrieve` (Search-R1's `retrieval_server.py`, FlashRAG-based ones).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from turnrl.keys import API_KEY_ENV, auth_headers
from turnrl.servers.retriever.corpus import split_title
from turnrl.servers.retriever.errors import RetrieverError, RetrieverRequestError, RetrieverUnavailable


@dataclass(frozen=True)
class Passage:
    """One retrieved document; `score` is None when the server sent none."""

    id: str
    contents: str
    score: float | None = None

    @property
    def title(self) -> str:
        return split_title(self.contents)[0]

    @property
    def text(self) -> str:
        return split_title(self.contents)[1]

    @classmethod
    def from_result(cls, item: Mapping[str, Any]) -> Passage:
        """Parse one result item: `{"document": {...}, "score": s}` or a bare `{"id", "contents"}`."""
        doc = item.get("document", item)
        if not isinstance(doc, Mapping) or not isinstance(doc.get("contents"), str):
            raise RetrieverError(f"retriever result item has no 'contents' string: {str(item)[:120]}")
        score = item.get("score")
        return cls(str(doc.get("id", "")), doc["contents"], None if score is None else float(score))


def format_passages(passages: Sequence[Passage | Mapping[str, Any]]) -> str:
    """Render results the way Search-R1 shows them to the model: `Doc i(Title: t) text` per line.

    The title is the first line of `contents` (wiki-18's surrounding quotes removed), the
    text the remaining lines; numbering starts at 1.
    """
    lines = []
    for i, item in enumerate(passages, start=1):
        passage = item if isinstance(item, Passage) else Passage.from_result(item)
        lines.append(f"Doc {i}(Title: {passage.title}) {passage.text}\n")
    return "".join(lines)


def endpoints(url: str) -> tuple[str, str]:
    """(base URL, /retrieve URL) from either form: Search-R1 configs pass the /retrieve URL."""
    url = url.rstrip("/")
    base = url[: -len("/retrieve")] if url.endswith("/retrieve") else url
    return base, f"{base}/retrieve"


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
        detail = body.get("detail", body) if isinstance(body, dict) else body
    except ValueError:
        detail = response.text
    return " ".join(str(detail).split())[:300]


def _parse_result(body: Any, n_queries: int, url: str) -> list[list[Passage]]:
    if not isinstance(body, dict) or not isinstance(body.get("result"), list):
        raise RetrieverError(f"retriever at {url} answered without a 'result' list: {str(body)[:120]}")
    result = body["result"]
    if len(result) != n_queries:
        raise RetrieverError(
            f"retriever at {url} answered {len(result)} result lists for {n_queries} queries"
        )
    return [[Passage.from_result(item) for item in block] for block in result]


def _advertised_limits(body: Any) -> dict[str, int]:
    """The positive integer limits under /health's "limits" (turnrl's server), else {}."""
    limits = body.get("limits") if isinstance(body, dict) else None
    if not isinstance(limits, dict):
        return {}
    return {k: v for k, v in limits.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


class RetrieverClient:
    """Async batched client with retries.

    Connection errors, timeouts and 5xx answers are retried `retries` times with
    exponential backoff (a retriever that is restarting or overloaded recovers); a 4xx
    answer is raised at once as RetrieverRequestError, since resending it cannot help.

    Every request carries the key (`api_key`, default $TURNRL_API_KEY). A batch larger than
    the server's advertised limits (/health "limits": max_queries, max_results) is sent as
    several requests, answered in query order.
    """

    def __init__(
        self,
        url: str,
        topk: int = 3,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        api_key: str | None = None,
    ) -> None:
        """`api_key`: the server's key; None or '' = $TURNRL_API_KEY (none if unset)."""
        if topk <= 0:
            raise ValueError(f"topk: must be positive, got {topk}")
        if retries < 0:
            raise ValueError(f"retries: must be >= 0, got {retries}")
        self.base_url, self.url = endpoints(url)
        self.topk, self.timeout, self.retries = topk, timeout, retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self.headers = auth_headers(api_key)
        self._limits: dict[str, int] | None = None
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> httpx.AsyncClient:
        # An AsyncClient belongs to the event loop it was first used on; callers that run
        # several asyncio.run() in turn get a fresh one per loop.
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx.AsyncClient(timeout=self.timeout, headers=self.headers)
            self._loop = loop
        return self._client

    async def limits(self) -> dict[str, int]:
        """The request limits the server advertises in /health (turnrl's: max_queries,
        max_results, max_query_chars, max_body), read once; {} for a server that names none
        (Search-R1's has no /health). Not remembered while the server cannot be reached."""
        if self._limits is not None:
            return self._limits
        try:
            response = await self._http().get(f"{self.base_url}/health")
        except httpx.TransportError:
            return {}
        if response.status_code == 200:
            try:
                self._limits = _advertised_limits(orjson.loads(response.content))
            except orjson.JSONDecodeError:
                self._limits = {}
        elif response.status_code == 404:
            self._limits = {}  # no /health at all: nothing will be advertised later either
        return self._limits or {}

    async def retrieve(self, queries: Sequence[str], topk: int | None = None) -> list[list[Passage]]:
        """Top-k passages for each query, in query order: one HTTP request for the whole batch,
        or one per slice of it when the batch exceeds the server's advertised limits."""
        if not queries:
            return []
        queries, topk = list(queries), self.topk if topk is None else topk
        size = len(queries)
        if size > 1:
            limits = await self.limits()
            size = min(
                size, limits.get("max_queries", size), max(1, limits.get("max_results", size * topk) // topk)
            )
        if size >= len(queries):
            return await self._retrieve(queries, topk)
        # concurrent: the server scores each request in a worker thread of its own
        parts = await asyncio.gather(
            *(self._retrieve(queries[i : i + size], topk) for i in range(0, len(queries), size))
        )
        return [block for part in parts for block in part]

    async def _retrieve(self, queries: list[str], topk: int) -> list[list[Passage]]:
        payload = {"queries": queries, "topk": topk, "return_scores": True}
        last_error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
                await asyncio.sleep(
                    delay * random.uniform(0.8, 1.2)
                )  # jitter: retries of many workers spread out
            try:
                response = await self._http().post(self.url, json=payload)
            except httpx.TransportError as err:
                last_error = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
                continue
            if response.status_code >= 500:
                last_error = f"HTTP {response.status_code}: {_detail(response)}"
                continue
            if response.status_code >= 400:
                raise RetrieverRequestError(
                    f"retriever at {self.url} rejected the request (HTTP {response.status_code}): {_detail(response)}"
                )
            # orjson: a batch of 256 queries x 3 passages is ~600 kB, which json.loads (httpx's
            # response.json) decodes 3x slower. Its error is a json.JSONDecodeError, as before.
            return _parse_result(orjson.loads(response.content), len(queries), self.url)
        raise RetrieverUnavailable(
            f"retriever at {self.url} failed after {self.retries + 1} attempts (last: {last_error})"
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> RetrieverClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def check_server(url: str, timeout: float = 5.0, api_key: str | None = None) -> dict[str, Any]:
    """Fail fast, in one line naming `url`, when no retriever answers there or it refuses the key.

    Returns turnrl's /health body, or {} for a server without /health (Search-R1's), which
    is then probed with a one-query /retrieve instead. `api_key`: as RetrieverClient's.
    """
    base, retrieve_url = endpoints(url)
    hint = "start one with `turnrl retriever serve --index DIR`"
    headers = auth_headers(api_key)
    try:
        response = httpx.get(f"{base}/health", timeout=timeout, headers=headers)
        if response.status_code == 200:
            body = response.json()
            return body if isinstance(body, dict) else {}
        if response.status_code == 401:
            raise RetrieverRequestError(
                f"retriever at {retrieve_url} refused the key (HTTP 401: {_detail(response)}); "
                f"set rollout.multi_turn.search.api_key or ${API_KEY_ENV} to the server's key"
            )
        probe = httpx.post(
            retrieve_url, json={"queries": ["health check"], "topk": 1}, timeout=timeout, headers=headers
        )
    except httpx.TransportError as err:
        reason = str(err) or type(err).__name__
        raise RetrieverUnavailable(
            f"retriever at {retrieve_url} is not reachable ({reason}); {hint}"
        ) from None
    if probe.status_code != 200:
        raise RetrieverUnavailable(
            f"retriever at {retrieve_url} is not answering the /retrieve API (HTTP {probe.status_code}: "
            f"{_detail(probe)}); {hint}"
        )
    return {}
