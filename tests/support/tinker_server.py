"""`turnrl tinker serve`'s app on a loopback socket in the test process, served as `listen.serve_on`
serves it (the connection bounds of the command), on a thread: for the tests that talk to it with
the real `tinker` SDK."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from turnrl.models.loader import load_model, model_directory
from turnrl.servers.listen import bind, url_of


@contextmanager
def serving_tinker(base: str, root: Path, key: str, poll_wait_s: float) -> Iterator[str]:
    """The service over `base` (seed 0) with its state under `root`, keyed by `key`; yields its URL.
    `poll_wait_s`: how long a poll waits for a running future (short: "try again" is exercised)."""
    import uvicorn

    from turnrl.servers.connections import ConnectionLimits, Connections
    from turnrl.tinker.app import create_app
    from turnrl.tinker.backbone import Backbone
    from turnrl.tinker.checkpoints import StateRoot
    from turnrl.tinker.cli import HEADER_TIMEOUT_S
    from turnrl.tinker.service import ServiceLimits, TinkerService

    model, tokenizer = load_model(base, torch.device("cpu"), seed=0)
    backbone = Backbone(model, tokenizer, base, str(model_directory(base)))
    service = TinkerService(backbone, StateRoot(root), ServiceLimits(poll_wait_s=poll_wait_s))
    app = create_app(service, key)
    connections = Connections(ConnectionLimits(header_timeout_s=HEADER_TIMEOUT_S))
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
