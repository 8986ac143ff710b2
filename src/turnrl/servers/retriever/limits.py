"""What one /retrieve request may ask for: the server's `--max-*` options and their defaults.

A module of its own, free of the web stack, so that the CLI can show the defaults without
importing FastAPI.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from turnrl.servers.retriever.errors import RetrieverError


@dataclass(frozen=True)
class Limits:
    """Bounds on one /retrieve request; each is a `turnrl retriever serve` option.

    The defaults sit far above what turnrl's own search tool sends (one query per rollout of a
    turn; its client splits a larger turn by the limits /health advertises) and far below what
    hurts: at the limits a response is ~10 MB of passages, not the 492 MB one unbounded request
    produced."""

    max_queries: int = 1024
    """Queries per request (--max-queries)."""
    max_results: int = 16384
    """Queries x topk per request: the passages one response may hold (--max-results)."""
    max_query_chars: int = 4096
    """Characters per query (--max-query-chars): the search cost grows with the words of a query."""
    max_body: int = 8 << 20
    """Request body bytes (--max-body), enforced by `Guard` before the body is parsed."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value < 1:
                raise RetrieverError(f"--{name.replace('_', '-')} {value}: must be >= 1")

    def as_dict(self) -> dict[str, int]:
        """The limits as /health advertises them under "limits"."""
        return asdict(self)
