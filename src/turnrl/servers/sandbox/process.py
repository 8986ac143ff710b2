"""Run turnrl's own sandbox server as a child process (used when no sandbox URL is configured).

    with SandboxProcess(workers=4) as sandbox:
        client = SandboxClient(sandbox.url, api_key=sandbox.api_key)

Port, log, /health, restart on the same port and stop are `turnrl.servers.child`'s, and so is the
key: a fresh random one per child unless `api_key` is given (`''` = none), in the child's
environment, never on its command line; raw HTTP clients send `sandbox.headers`. What is the
sandbox's own: its command line, and repeating at start a weakened isolation that the server
reports in /health, since its log is a file nobody reads.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from turnrl.servers.child import ChildServer
from turnrl.servers.sandbox.client import SandboxUnavailable

logger = logging.getLogger("turnrl.sandbox")


class SandboxProcess(ChildServer):
    """A `turnrl sandbox serve` child process on a free localhost port."""

    start_error = SandboxUnavailable
    unavailable_error = SandboxUnavailable
    log_prefix = "turnrl-sandbox-"

    def __init__(
        self,
        workers: int | None = None,
        queue: int | None = None,
        isolation: str = "auto",
        env: dict[str, str] | None = None,
        startup_timeout: float = 60.0,
        extra_args: list[str] | None = None,
        host: str = "127.0.0.1",
        log_path: str | Path | None = None,
        api_key: str | None = None,
    ) -> None:
        super().__init__(
            host=host,
            startup_timeout=startup_timeout,
            log_path=log_path,
            env=env,
            extra_args=extra_args,
            api_key=api_key,
        )
        self.workers, self.queue, self.isolation = workers, queue, isolation

    def describe(self) -> str:
        return "sandbox server"

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        """The server's `subprocess.Popen` (`process`), under its older name."""
        return self.process

    def command(self, port: int) -> list[str]:
        cmd = [sys.executable, "-m", "turnrl.cli", "sandbox", "serve"]
        cmd += ["--host", self.host, "--port", str(port), "--isolation", self.isolation]
        if self.workers is not None:
            cmd += ["--workers", str(self.workers)]
        if self.queue is not None:
            cmd += ["--queue", str(self.queue)]
        return [*cmd, *self.extra_args]

    def start(self) -> SandboxProcess:
        super().start()
        self._warn_if_weakened()
        return self

    def _warn_if_weakened(self) -> None:
        # the server prints its layers, but into a log file nobody reads: repeat the bad news here
        from turnrl.servers.sandbox.isolation import FALLBACK_NOTE  # server-side module: Unix only

        for note in self.health.get("isolation", {}).get("notes", []):
            if note.startswith(FALLBACK_NOTE):
                logger.warning("sandbox server on %s runs with weaker isolation: %s", self.url, note)
