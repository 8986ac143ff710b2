"""The `search` tool: queries a retriever (turnrl's or Search-R1's) and shows `Doc i(Title: t) text`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from turnrl.agent.tools.base import ToolResult, text_parameter
from turnrl.agent.tools.supervisor import ServerSupervisor, supervised
from turnrl.servers.retriever.client import Passage, RetrieverClient, format_passages
from turnrl.servers.retriever.errors import RetrieverUnavailable

# The built-in search task and the built-in index must describe the same invented world.
BUILTIN_ENTITIES = 300
BUILTIN_SEED = 0


def builtin_index(cache: Path) -> Path:
    """A BM25 index over the built-in corpus, built once into `cache` (about a second)."""
    from turnrl.servers.retriever.builtin_corpus import write_builtin_corpus
    from turnrl.servers.retriever.index import build_index

    out = cache / "retriever" / f"builtin-{BUILTIN_ENTITIES}-seed{BUILTIN_SEED}"
    if (out / "meta.json").is_file():
        return out
    # build beside the target and rename, so two runs starting together never see half an index
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    paths = write_builtin_corpus(tmp / "corpus", BUILTIN_ENTITIES, BUILTIN_SEED)
    build_index(paths.corpus, tmp / "index", show_progress=False)
    try:
        (tmp / "index").rename(out)
    except OSError:
        if not (out / "meta.json").is_file():
            raise
    shutil.rmtree(tmp, ignore_errors=True)
    return out


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
    ):
        self.url, self.topk = url, topk
        self.tag, self.obs_tag = tag, obs_tag
        self.client = RetrieverClient(url, topk=topk, timeout=timeout, retries=retries)
        self.server = server
        """Set when the retriever is turnrl's own child: a dead one is restarted once (`supervisor`)."""

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        return (await self.call_batch([arguments]))[0]

    async def call_batch(self, arguments: list[dict[str, Any]]) -> list[ToolResult]:
        queries: list[str] = []
        slots: list[int] = []
        results: list[ToolResult] = []
        for i, args in enumerate(arguments):
            query = args.get("query")
            if isinstance(query, str) and query.strip():
                queries.append(query.strip())
                slots.append(i)
                results.append(ToolResult(""))
            else:
                results.append(ToolResult("error: empty search query", error=True))
        if queries:
            found = await supervised(self.server, lambda: self.client.retrieve(queries), RetrieverUnavailable)
            for slot, passages in zip(slots, found, strict=True):
                results[slot] = ToolResult(passages_text(passages), {"passages": float(len(passages))})
        return results

    async def aclose(self) -> None:
        await self.client.aclose()
