"""Run turnrl's own sandbox server as a child process (used when no sandbox URL is configured).

    with SandboxProcess(workers=4) as sandbox:
        client = SandboxClient(sandbox.url)

The server gets a free port on 127.0.0.1, is waited for through /health, and is terminated
(SIGTERM, then SIGKILL) on exit, at interpreter exit, or, on Linux, when the process that
started it dies. Its output goes to a log file (`log_path`), removed at stop unless `keep_log`.

`restart()` starts a dead server again on the same port, so the URL every client holds stays
valid (the agent's supervisor does this once when the child dies mid-run).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from turnrl.servers.sandbox.client import SandboxUnavailable

logger = logging.getLogger("turnrl.sandbox")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    # SIGTERM, not SIGKILL: the server then kills its runs and removes its work dirs
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


class SandboxProcess:
    """A `turnrl sandbox serve` child process on a free localhost port."""

    def __init__(
        self,
        workers: int | None = None,
        queue: int | None = None,
        isolation: str = "auto",
        env: dict[str, str] | None = None,
        startup_timeout: float = 60.0,
        extra_args: list[str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.workers, self.queue, self.isolation = workers, queue, isolation
        self.env, self.startup_timeout = env, startup_timeout
        self.extra_args = list(extra_args or [])
        self.host = host
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.health: dict[str, Any] = {}
        self.log_path: Path | None = None
        self.keep_log = False
        """Leave the log file at stop (set when the server's death is reported with the log's path)."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "SandboxProcess not started"
        return self.proc.pid

    def _command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "turnrl.cli",
            "sandbox",
            "serve",
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]
        if self.workers is not None:
            cmd += ["--workers", str(self.workers)]
        if self.queue is not None:
            cmd += ["--queue", str(self.queue)]
        return [*cmd, "--isolation", self.isolation, *self.extra_args]

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None:
            return ""
        try:
            text = self.log_path.read_bytes().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def returncode(self) -> int | None:
        """The exit status of a server that has exited (negative: killed by that signal), else None."""
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _spawn(self, mode: str) -> None:
        """Start the server on `self.port`, its output written (`wb`) or appended (`ab`) to the log."""
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="turnrl-sandbox-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        with self.log_path.open(mode) as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )

    def start(self) -> SandboxProcess:
        for _attempt in range(3):  # another process may grab the free port before the server binds it
            self.port = free_port(self.host)
            self._spawn("wb")  # each attempt's log alone: "address already in use" must be this one's
            if self._wait_ready():
                atexit.register(self.stop)
                self._warn_if_weakened()
                return self
            if "address already in use" not in self.log_tail().lower():
                break
        tail = self.log_tail()
        self.stop()
        raise SandboxUnavailable(
            f"sandbox server did not start on {self.url}: {tail.splitlines()[-1:] or '?'}"
        )

    def restart(self) -> SandboxProcess:
        """Start the server again on the same port after it died (its log goes on in the same file)."""
        if self.alive():
            return self
        if self.log_path is None:
            raise SandboxUnavailable("sandbox server was never started, so it cannot be restarted")
        self._spawn("ab")
        if not self._wait_ready():
            last = (self.log_tail().splitlines() or ["no output"])[-1]
            self._kill()
            raise SandboxUnavailable(f"sandbox server did not restart on {self.url}: {last}")
        return self

    def _warn_if_weakened(self) -> None:
        # the server prints its layers, but into a log file nobody reads: repeat the bad news here
        from turnrl.servers.sandbox.isolation import FALLBACK_NOTE  # server-side module: Unix only

        for note in self.health.get("isolation", {}).get("notes", []):
            if note.startswith(FALLBACK_NOTE):
                logger.warning("sandbox server on %s runs with weaker isolation: %s", self.url, note)

    def _wait_ready(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            with contextlib.suppress(httpx.HTTPError, ValueError):
                response = httpx.get(self.url + "/health", timeout=2.0)
                if response.status_code == 200:
                    self.health = response.json()
                    return True
            time.sleep(0.1)
        return False

    def _kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self) -> None:
        self._kill()
        if self.log_path is not None and not self.keep_log:
            with contextlib.suppress(OSError):
                self.log_path.unlink()
            self.log_path = None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def __enter__(self) -> SandboxProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
