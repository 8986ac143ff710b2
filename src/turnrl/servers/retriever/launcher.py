"""Run turnrl's own retriever as a child process, for runs that were given no retriever URL.

    with LocalRetriever("indexes/wiki") as server:
        client = RetrieverClient(server.url)

The child is `turnrl retriever serve` on a free loopback port; entering the context waits
until its /health answers, leaving it stops the child. A child that dies at start-up raises
RetrieverError carrying the child's own one-line error (bad index, missing extra, ...).
`restart()` starts a child that died again on the same port, so clients keep their URL.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from turnrl.servers.retriever.errors import RetrieverError, RetrieverUnavailable

_PORT_ATTEMPTS = 3  # a port picked free can be taken before the child binds it


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [line for line in lines if line]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[-1]


class LocalRetriever:
    """A `turnrl retriever serve` child process over `index_dir`; use as a context manager."""

    def __init__(
        self,
        index_dir: str | Path,
        topk: int = 3,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 120.0,
        log_path: str | Path | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.index_dir = Path(index_dir)
        self.topk, self.host, self.startup_timeout = topk, host, startup_timeout
        self._fixed_port = port
        self.port: int | None = None
        self.extra_args = list(extra_args or [])
        self._tmp: Path | None = None  # a plain directory: TemporaryDirectory would vanish with its object
        self.log_path = Path(log_path) if log_path else None
        self.log_file: Path | None = None
        """Where the child's output goes (a temporary file unless `log_path` was given)."""
        self.keep_log = False
        """Leave a temporary log at stop (set when the child's death is reported with the log's path)."""
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RetrieverError("LocalRetriever is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The /retrieve URL, the form Search-R1 configs and RetrieverClient take."""
        return f"{self.base_url}/retrieve"

    def _spawn(self, port: int, log_path: Path) -> subprocess.Popen[bytes]:
        command = [
            sys.executable, "-m", "turnrl.cli", "retriever", "serve",
            "--index", str(self.index_dir), "--host", self.host, "--port", str(port),
            "--topk", str(self.topk), *self.extra_args,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with log_path.open("ab") as log:
            return subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int, log_path: Path) -> bool:
        """True once /health answers; False if the port was taken; raises on any other failure."""
        deadline = time.monotonic() + self.startup_timeout
        health = f"http://{self.host}:{port}/health"
        while time.monotonic() < deadline:
            if process.poll() is not None:
                line = _last_line(log_path)
                if "address already in use" in line.lower() and self._fixed_port is None:
                    return False
                raise RetrieverError(
                    f"retriever over {self.index_dir} exited at start-up: {line or 'no output'}"
                )
            try:
                if httpx.get(health, timeout=1.0).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self._terminate(process)
        raise RetrieverUnavailable(
            f"retriever over {self.index_dir} did not answer {health} within {self.startup_timeout:.0f} s "
            f"(log: {log_path})"
        )

    def start(self) -> LocalRetriever:
        if self.process is not None:
            return self
        if self.log_path is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="turnrl-retriever-"))
            log_path = self._tmp / "server.log"
        else:
            log_path = self.log_path
            log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_file = log_path
        for _ in range(1 if self._fixed_port else _PORT_ATTEMPTS):
            port = self._fixed_port or free_port(self.host)
            process = self._spawn(port, log_path)
            try:
                ready = self._wait_ready(process, port, log_path)
            except BaseException:
                self._terminate(process)
                self._cleanup_tmp()
                raise
            if ready:
                self.process, self.port = process, port
                atexit.register(self.stop)  # a run that forgets to stop must not leave a server behind
                return self
        self._cleanup_tmp()
        raise RetrieverUnavailable(
            f"no free port for the retriever on {self.host} after {_PORT_ATTEMPTS} attempts"
        )

    @property
    def returncode(self) -> int | None:
        """The exit status of a child that has exited (negative: killed by that signal), else None."""
        return None if self.process is None else self.process.poll()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def restart(self) -> LocalRetriever:
        """Start the child again on its port after it died; its output is appended to the same log."""
        if self.alive():
            return self
        if self.port is None or self.log_file is None:
            raise RetrieverError("LocalRetriever was never started, so it cannot be restarted")
        process = self._spawn(self.port, self.log_file)
        try:
            ready = self._wait_ready(process, self.port, self.log_file)
        except BaseException:
            self._terminate(process)
            raise
        if not ready:  # only when the port was taken meanwhile: clients cannot follow a new port
            self._terminate(process)
            raise RetrieverUnavailable(f"retriever could not restart on {self.base_url}: the port is taken")
        self.process = process
        return self

    @staticmethod
    def _terminate(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.terminate()  # uvicorn shuts down gracefully on SIGTERM
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def _cleanup_tmp(self) -> None:
        if self._tmp is not None and not self.keep_log:
            shutil.rmtree(self._tmp, ignore_errors=True)
        self._tmp = None

    def stop(self) -> None:
        if self.process is not None:
            self._terminate(self.process)
            self.process = None
            atexit.unregister(self.stop)
        self._cleanup_tmp()

    def __enter__(self) -> LocalRetriever:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
