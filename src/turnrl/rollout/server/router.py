"""Which server answers a completion request: the least-loaded one that is up and current, and the
next one when it fails."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from turnrl.rollout.server.wire import ServerError, response_detail

log = logging.getLogger(__name__)

DOWN_RETRY_S = 10.0
"""How long an external server marked down is left alone before the engine tries it again."""


class ServerRouter:
    """Sends each completion request to one server and on to the next when it fails, and keeps
    what routing needs: the requests in flight and answered per server, the servers down (failed)
    and stale (missed a weight sync), and the count of requests sent again."""

    def __init__(
        self, client: httpx.Client, urls: list[str], max_retries: int, revive: Callable[[str], bool]
    ) -> None:
        """`revive(url)`: bring `url` back after a failure if it is the run's own child (True
        once it serves again); any other failed server is marked down."""
        self.client, self.urls, self.max_retries, self.revive = client, urls, max_retries, revive
        self.inflight = dict.fromkeys(urls, 0)
        self.completed = dict.fromkeys(urls, 0)  # requests answered, per server (load spread)
        self.down: dict[str, float] = {}
        """Servers that failed, and when: none is picked while any other is up."""
        self.stale: set[str] = set()
        """Servers that missed a weight sync: none serves until it loaded the current version."""
        self.down_retry_s = DOWN_RETRY_S
        self.retried = 0  # requests sent again after a server failed them (their rows read once)
        self._lock = threading.Lock()
        self._turn = itertools.count()

    # -- requests -----------------------------------------------------------------------------
    def complete(self, body: Callable[[str], dict[str, Any]], version: int) -> tuple[str, httpx.Response]:
        """POST `body(url)` to /v1/completions of one server, and of the next one after a connection
        error, a timeout or a 5xx, at most `max_retries` times more; the server that answered and
        its 200 answer. `version`: the trainer's, named when no server can take the request."""
        tried: list[str] = []
        failures: list[str] = []
        for _ in range(self.max_retries + 1):
            url = self._pick(tried, version)
            tried.append(url)
            try:
                r = self.client.post(f"{url}/v1/completions", json=body(url))
            except httpx.TransportError as err:  # refused, reset, timed out: try the next server
                failures.append(f"{url} ({type(err).__name__})")
                self._failed(url)
                continue
            finally:
                with self._lock:
                    self.inflight[url] -= 1
            if r.status_code >= 500:
                failures.append(f"{url} (HTTP {r.status_code}: {response_detail(r)})")
                self._failed(url)
                continue
            self._answered(url, r, failures)
            return url, r
        raise ServerError(
            f"inference server unreachable after {len(failures)} attempts "
            f"(rollout.server.max_retries={self.max_retries}): {'; '.join(failures)}"
        )

    def _pick(self, tried: list[str], version: int) -> str:
        """The least-loaded server not tried yet for this request (round-robin among equals), among
        those up and current; ServerError when none is."""
        with self._lock:
            usable = [u for u in self.urls if u not in self.stale and u not in self.down]
            usable = usable or [u for u in self.urls if u not in self.stale]
            if not usable:
                raise ServerError(
                    f"every inference server missed the weights of policy version {version} "
                    f"({', '.join(self.urls)}): none can sample for the trainer"
                )
            fresh = [u for u in usable if u not in tried] or usable
            k = next(self._turn) % len(fresh)
            url = min(fresh[k:] + fresh[:k], key=lambda u: self.inflight[u])
            self.inflight[url] += 1
            return url

    def _answered(self, url: str, r: httpx.Response, failures: list[str]) -> None:
        """`url` answered below 500: it is up; ServerError unless it answered 200."""
        with self._lock:
            self.down.pop(url, None)
            self.retried += bool(failures)
        if r.status_code != 200:
            raise ServerError(
                f"{url} refused a completion request: HTTP {r.status_code}: {response_detail(r)}"
            )
        with self._lock:
            self.completed[url] += 1
        if failures:
            log.warning("completion request retried on %s after: %s", url, "; ".join(failures))

    # -- server health ------------------------------------------------------------------------
    def _failed(self, url: str) -> None:
        """A request to `url` failed: start the own child again if it died, else mark it down."""
        if self.revive(url):
            return
        with self._lock:
            self.down.setdefault(url, time.monotonic())

    def up(self, url: str) -> None:
        """`url` serves again (the own child, restarted)."""
        with self._lock:
            self.down.pop(url, None)

    def missed(self, urls: set[str]) -> None:
        """`urls` missed the weight sync that just ended: down and stale until they load it."""
        with self._lock:
            self.stale = set(urls)
            for url in urls:
                self.down.setdefault(url, time.monotonic())

    def due(self) -> list[str]:
        """The stale servers whose down time is over: time to try them again."""
        now = time.monotonic()
        return [u for u in sorted(self.stale) if now - self.down.get(u, 0.0) >= self.down_retry_s]

    def still_down(self, url: str) -> None:
        """`url` failed again: it is left alone for another `down_retry_s`."""
        with self._lock:
            self.down[url] = time.monotonic()

    def current(self, url: str) -> None:
        """Stale `url` loaded the current weights: it serves again."""
        with self._lock:
            self.stale.discard(url)
            self.down.pop(url, None)

    def counters(self) -> dict[str, float]:
        with self._lock:
            return {
                "retried_requests": float(self.retried),
                "servers_down": float(len(set(self.down) | self.stale)),
            }
