"""An ASGI app of a turnrl server on a loopback socket in the test process, served as
`listen.serve_on` serves it (its connection bounds), on a thread with a handle to stop it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from turnrl.servers.connections import Connections
from turnrl.servers.listen import bind, url_of


@contextmanager
def serving_app(app: Any, connections: Connections | None = None) -> Iterator[str]:
    """Serve `app` until the block ends; yields its base URL."""
    import uvicorn

    connections = connections or Connections()
    app.state.connections = connections
    sock = bind("127.0.0.1", 0)
    config = uvicorn.Config(app, log_level="warning", access_log=False, http=connections.protocol())
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
