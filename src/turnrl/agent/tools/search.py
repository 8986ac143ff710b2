"""The `search` tool: queries a retriever (turnrl's or Search-R1's) and shows `Doc i(Title: t) text`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turnrl.agent.tools.base import ToolResult, text_parameter
from turnrl.agent.tools.supervisor import ServerSupervisor, supervised
from turnrl.servers.retriever.client import Passage, RetrieverClient, format_passages
from turnrl.servers.retriever.errors import RetrieverUnavailable


def passages_text(passages: Sequence[Passage | Mapping[str, Any]]) -> str:
    """The tool's output for one query's passages: the text the agent loop wraps in the observation
    tag. Demonstrations built offline (`turnrl data search_sft`) call this too, so they show the
    model exactly what a live search shows it."""
    return format_passages(passages).strip()


class SearchTool:
    """Search-R1's search action; a turn's queries go to the retriever as one batch."""

    name = "search"
    description = "Search a knowledge base; returns the top passages for the query."
    parameters = text_parameter("query", "what to search for")
    xml_argument = "query"

    def __init__(
        self,
        url: str,
        topk: int = 3,
        tag: str = "search",
        obs_tag: str = "information",
        timeout: float = 30.0,
        retries: int = 2,
        server: ServerSupervisor | None = None,
        api_key: str | None = None,
    ):
        """`api_key`: the retriever's key; None or '' = $TURNRL_API_KEY (none if unset)."""
        self.url, self.topk = url, topk
        self.tag, self.obs_tag = tag, obs_tag
        self.client = RetrieverClient(url, topk=topk, timeout=timeout, retries=retries, api_key=api_key)
        self.server = server
        """Set when the retriever is turnrl's own child: a dead one is restarted once (`supervisor`)."""

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        return (await self.call_batch([arguments]))[0]

    async def call_batch(self, arguments: list[dict[str, Any]]) -> list[ToolResult]:
        queries: list[str] = []
        slots: list[int] = []
        results: list[ToolResult] = []
        # A query over the server's limit is this call's error alone: sent, it would fail the
        # whole turn's batch. Only asked for when there is a query (one /health per client).
        has_query = any(isinstance(a.get("query"), str) and a["query"].strip() for a in arguments)
        max_chars = (await self.client.limits()).get("max_query_chars") if has_query else None
        for i, args in enumerate(arguments):
            query = args.get("query")
            if not (isinstance(query, str) and query.strip()):
                results.append(ToolResult("error: empty search query", error=True))
            elif max_chars is not None and len(query.strip()) > max_chars:
                results.append(
                    ToolResult(
                        f"error: search query of {len(query.strip())} characters is longer than the "
                        f"retriever's limit of {max_chars}",
                        error=True,
                    )
                )
            else:
                queries.append(query.strip())
                slots.append(i)
                results.append(ToolResult(""))
        if queries:
            found = await supervised(self.server, lambda: self.client.retrieve(queries), RetrieverUnavailable)
            for slot, passages in zip(slots, found, strict=True):
                results[slot] = ToolResult(passages_text(passages), {"passages": float(len(passages))})
        return results

    async def aclose(self) -> None:
        await self.client.aclose()
