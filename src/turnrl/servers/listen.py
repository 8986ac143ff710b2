"""Bind first, then say so, then serve: how every turnrl server starts listening.

    sock = bind("127.0.0.1", 8000)     # one-line TurnrlInputError if it cannot
    print("listening on", url_of(sock))                 # only now is it true
    serve_on(app, sock, log_level="warning")

uvicorn binds inside `run()` and, on failure, logs a traceback-like error and exits; binding here
first turns a taken port, a bad address or a port out of range into one line naming the flag, and
the "listening" line is printed only once the socket listens. `port_arg` is the argparse type of
every `--port`.
"""

from __future__ import annotations

import argparse
import socket
from typing import Any, NoReturn

from turnrl.errors import TurnrlInputError
from turnrl.servers.connections import Connections, raise_fd_limit


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line naming it, without the usage block above it
    (`turnrl COMMAND --help` still shows the usage). Sub-parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def port_arg(text: str) -> int:
    """argparse type: a TCP port in [0, 65535] (0 = any free port)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port in [0, 65535]")
    return port


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port, or TurnrlInputError starting with the flags and giving
    the reason (the command puts its own name in front)."""
    if not 0 <= port <= 65535:
        raise TurnrlInputError(f"--port {port}: not a port in [0, 65535]")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as err:
        raise TurnrlInputError(f"--host {host}: cannot resolve ({err})") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as err:
        sock.close()
        raise TurnrlInputError(
            f"--host {host} --port {port}: cannot listen ({err.strerror or err})"
        ) from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    """http://host:port of a bound socket (the real port when 0 was asked for)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve_on(
    app: Any, sock: socket.socket, connections: Connections | None = None, **uvicorn_options: Any
) -> None:
    """Serve `app` with uvicorn on the already-listening `sock` until SIGINT/SIGTERM, under
    `connections`' bounds (the defaults when None); the app's /health finds them at
    `app.state.connections` (`connection_health`)."""
    import uvicorn

    connections = connections or Connections()
    raise_fd_limit(connections.limits.max_connections)
    app.state.connections = connections
    options = {
        "access_log": False,
        "timeout_graceful_shutdown": 2,
        "http": connections.protocol(),
        **uvicorn_options,
    }
    server = uvicorn.Server(uvicorn.Config(app, **options))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def connection_health(app: Any) -> dict[str, Any] | None:
    """The connection limits and counters /health reports (None: not served by `serve_on`)."""
    connections = getattr(app.state, "connections", None)
    return connections.health() if connections is not None else None
