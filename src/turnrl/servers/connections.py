"""Bounds on connections, the same for every turnrl server: how many may be open, and how long a
client may take to send a request's headers.

    limits = ConnectionLimits.from_args(args)          # --max-connections, --header-timeout
    serve_on(app, sock, connections=Connections(limits))  # listen.serve_on; /health reports them

Without them, clients that open connections and never finish a request head hold a socket each
for ever (uvicorn's keep-alive timer is reset by every byte that arrives, and a connection with no
complete request runs no application code): a thousand such heads left a retriever out of file
descriptors and its keyed clients timing out. Here:

- a connection beyond `max_connections` open ones is answered `503` with `Retry-After` once its
  request head is in (counted in `refused_connections`), then closed after a lingering half-close
  (what the client still sends, a request body, is read and dropped for `LINGER_S`): the client
  reads a clean refusal it can retry, and the server runs none of its work (the head is still bounded by the
  header timeout). The process's file-descriptor limit is raised, up to its hard limit, to hold
  `max_connections` and the server's own files;
- a connection that has not sent a complete request head `header_timeout_s` after it opened, or
  after its previous response ended (keep-alive), is answered `408` and closed, however slowly
  its bytes trickle in (counted in `header_timeouts`).

Both are enforced in the HTTP protocol, below the application: `Limited` is uvicorn's h11
protocol with a timer per connection. `/health` shows the limits and the counters under
`"connections"` (`Connections.health`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from turnrl.errors import TurnrlInputError

MAX_CONNECTIONS = 1024
HEADER_TIMEOUT_S = 10.0
LINGER_S = 1.0
"""Seconds a connection answered 408 or 503 stays half-open, reading and dropping what its client still sends."""


@dataclass(frozen=True)
class ConnectionLimits:
    """Each is an option of every turnrl server, reported by its /health."""

    max_connections: int = MAX_CONNECTIONS
    """Open connections at once (--max-connections); one more is answered 503 and closed."""
    header_timeout_s: float = HEADER_TIMEOUT_S
    """Seconds a connection may take to send a complete request head (--header-timeout), from
    when it opened or its previous response ended; then it is answered 408 and closed."""

    def __post_init__(self) -> None:
        if isinstance(self.max_connections, bool) or self.max_connections < 1:
            raise TurnrlInputError(f"--max-connections {self.max_connections}: must be >= 1")
        timeout = self.header_timeout_s
        if not (math.isfinite(timeout) and timeout >= 1.0):
            why = (
                "not a number"
                if math.isnan(timeout)
                else "a connection that sends nothing would hold its socket for ever"
                if timeout > 1.0
                else "a slower client could not send a request head on a busy machine"
            )
            raise TurnrlInputError(f"--header-timeout {timeout:g}: must be finite and >= 1 second ({why})")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ConnectionLimits:
        return cls(args.max_connections, args.header_timeout)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--max-connections and --header-timeout, on a server command's parser (checked when the
    limits are built: a value out of range is one line naming the option)."""
    parser.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        help="open connections at once; one more is answered 503 with Retry-After (default %(default)s)",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=HEADER_TIMEOUT_S,
        help="seconds a connection may take to send a request's headers; then 408 and closed "
        "(default %(default)s, at least 1)",
    )


class Connections:
    """One server's limits and its counters (updated on the server's event loop)."""

    def __init__(self, limits: ConnectionLimits | None = None) -> None:
        self.limits = limits or ConnectionLimits()
        self.open = 0
        self.refused_connections = 0
        self.header_timeouts = 0

    def health(self) -> dict[str, Any]:
        return {
            **asdict(self.limits),
            "open": self.open,
            "refused_connections": self.refused_connections,
            "header_timeouts": self.header_timeouts,
        }

    def protocol(self) -> type:
        """uvicorn's h11 protocol class bound to these limits (`uvicorn.Config(http=...)`)."""
        # uvicorn is imported only when a server starts, so the subclass is built here, not at import
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return type("Limited", (_LimitedMixin, H11Protocol), {"_connections": self})


if TYPE_CHECKING:  # a checker sees H11Protocol's attributes; at run time uvicorn is not imported
    from uvicorn.protocols.http.h11_impl import H11Protocol as _H11Base
else:
    _H11Base = object


class _LimitedMixin(_H11Base):
    """What `Connections.protocol` adds to uvicorn's H11Protocol (the next class in the built
    class's MRO, which every `super()` here reaches): the open-connection count and the header timer."""

    _connections: Connections  # set on the built class; uvicorn's protocol has its own `connections`
    _timer: asyncio.TimerHandle | None = None
    _counted = False
    _lingering = False

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        connections = self._connections
        if connections.open >= connections.limits.max_connections:
            connections.refused_connections += 1
            self.app = _busy  # its request is answered 503, none of the server's code runs
            # the 503 goes out once the head is in, often before the body: uvicorn's close after
            # it lingers, as the 408's does (the request cycle closes `self.transport`)
            self.transport = _LingerOnClose(transport, self._close_lingering)
        else:
            connections.open += 1
            self._counted = True
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._counted:
            self._connections.open -= 1
            self._counted = False
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # answered 408 and half-closed: the rest of the head is read and dropped
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm()  # a complete head arrived: the application has the request

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # keep-alive: the next head has the same time

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self._connections.limits.header_timeout_s, self._late)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _late(self) -> None:
        self._timer = None
        if self.transport.is_closing() or not (self.cycle is None or self.cycle.response_complete):
            return
        self._connections.header_timeouts += 1
        limit = self._connections.limits.header_timeout_s
        self.transport.write(_timed_out(f"request headers not complete within {limit:g}s (--header-timeout)"))
        self._close_lingering()

    def _close_lingering(self) -> None:
        """Close after a refusal (408, 503) without losing it: closing a socket whose client is
        still sending makes the kernel answer with a reset, which can discard the response before
        the client reads it. Send FIN after the response, read and drop what still arrives, and
        close `LINGER_S` later."""
        transport = getattr(self.transport, "wrapped", self.transport)
        if transport.is_closing():
            return
        if not transport.can_write_eof():
            transport.close()
            return
        self._lingering = True
        transport.write_eof()
        transport.resume_reading()  # uvicorn pauses reading a body nobody receives: drain it
        self.loop.call_later(LINGER_S, transport.close)


class _LingerOnClose:
    """A refused connection's transport, as uvicorn's request cycle sees it: `close()` lingers."""

    def __init__(self, transport: Any, linger: Any) -> None:
        self.wrapped, self._linger = transport, linger

    def close(self) -> None:
        self._linger()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


async def _busy(scope: Any, receive: Any, send: Any) -> None:
    """The application of a connection over `max_connections`: 503, Retry-After, close."""
    import orjson

    body = orjson.dumps({"detail": "too many open connections (--max-connections); retry"})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def raise_fd_limit(connections: int) -> None:
    """Let the process hold `connections` sockets and its own files: the soft RLIMIT_NOFILE raised
    toward `connections + 256`, never past the hard limit (a no-op where there is none)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _timed_out(message: str) -> bytes:
    """A whole HTTP/1.1 408 in turnrl's one-line JSON shape, written straight to the socket (no
    request cycle exists to answer through: the head never came)."""
    import orjson

    body = orjson.dumps({"detail": message})
    head = ["HTTP/1.1 408 Request Timeout", "content-type: application/json", f"content-length: {len(body)}", "connection: close"]  # fmt: skip
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body
