"""Run turnrl's own retriever as a child process, for runs that were given no retriever URL.

    with LocalRetriever("indexes/wiki") as server:
        client = RetrieverClient(server.url, api_key=server.api_key)

The child is `turnrl retriever serve` on a free loopback port (or `port`); port, log, /health,
restart on the same port, stop and the child's random API key are `turnrl.servers.child`'s. A
child that dies at start-up raises RetrieverError carrying the child's own one-line error (bad
index, missing extra, ...).
"""

from __future__ import annotations

import sys
from pathlib import Path

from turnrl.servers.child import ChildServer
from turnrl.servers.retriever.errors import RetrieverError, RetrieverUnavailable


class LocalRetriever(ChildServer):
    """A `turnrl retriever serve` child process over `index_dir`; use as a context manager."""

    start_error = RetrieverError
    unavailable_error = RetrieverUnavailable
    log_prefix = "turnrl-retriever-"

    def __init__(
        self,
        index_dir: str | Path,
        topk: int = 3,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 120.0,
        log_path: str | Path | None = None,
        extra_args: list[str] | None = None,
        api_key: str | None = None,
    ) -> None:
        """`api_key`: the key the child requires (`.api_key`, sent by `.headers`); None = a fresh
        random one, '' = none. `extra_args`: more `turnrl retriever serve` options (`--max-queries N`)."""
        super().__init__(
            host=host,
            port=port,
            startup_timeout=startup_timeout,
            log_path=log_path,
            extra_args=extra_args,
            api_key=api_key,
        )
        self.index_dir, self.topk = Path(index_dir), topk

    def describe(self) -> str:
        return f"retriever over {self.index_dir}"

    @property
    def url(self) -> str:
        """The /retrieve URL, the form Search-R1 configs and RetrieverClient take."""
        return f"{self.base_url}/retrieve"

    def command(self, port: int) -> list[str]:
        return [
            sys.executable, "-m", "turnrl.cli", "retriever", "serve",
            "--index", str(self.index_dir), "--host", self.host, "--port", str(port),
            "--topk", str(self.topk), *self.extra_args,
        ]  # fmt: skip
