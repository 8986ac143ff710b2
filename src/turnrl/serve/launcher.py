"""Run `turnrl serve` as a child process, for `rollout.engine=server` with no server URLs.

    server = ServeProcess("tiny-random", log_path="runs/x/rollout_server.log").start()
    engine = ServerEngine([server.url], ...)
    server.stop()

The child gets a free loopback port, is waited for through /health, writes to a log file, and
is terminated (SIGTERM, then SIGKILL) by `stop()`, at interpreter exit, or, on Linux, when the
process that started it dies. A child that exits at start-up raises ServerError with the last
line of its log (a bad model path, say).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from turnrl.rollout.server import ServerError
from turnrl.servers.sandbox.process import _die_with_parent, free_port

_PORT_ATTEMPTS = 3  # a port picked free can be taken before the child binds it


def _last_line(path: Path) -> str:
    try:
        lines = [s.strip() for s in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [s for s in lines if s]
    errors = [s for s in lines if "error" in s.lower()]
    return (errors or lines or [""])[-1]


class ServeProcess:
    """A `turnrl serve` child process serving `model_path` on 127.0.0.1."""

    def __init__(
        self,
        model_path: str,
        device: str = "cpu",
        dtype: str = "auto",
        cache_dir: str = "",
        log_path: str | Path | None = None,
        startup_timeout_s: float = 300.0,
        seed: int = 0,
        host: str = "127.0.0.1",
        extra_args: list[str] | None = None,
    ) -> None:
        self.model_path, self.device, self.dtype, self.cache_dir = model_path, device, dtype, cache_dir
        self.startup_timeout_s, self.seed, self.host = startup_timeout_s, seed, host
        self.extra_args = list(extra_args or [])
        self.log_path = Path(log_path) if log_path else None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.process is None:
            raise ServerError(f"the turnrl serve child for {self.model_path} is not started")
        return f"http://{self.host}:{self.port}"

    def _spawn(self, port: int, log_path: Path) -> subprocess.Popen[bytes]:
        command = [
            sys.executable, "-m", "turnrl.cli", "serve", "--model", self.model_path,
            "--host", self.host, "--port", str(port), "--device", self.device, "--dtype", self.dtype,
            "--seed", str(self.seed), *(["--cache-dir", self.cache_dir] if self.cache_dir else []),
            *self.extra_args,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with log_path.open("ab") as log:
            return subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int, log_path: Path) -> bool:
        """True once /health answers; False if the port was taken; raises on any other failure."""
        deadline = time.monotonic() + self.startup_timeout_s
        health = f"http://{self.host}:{port}/health"
        while time.monotonic() < deadline:
            if process.poll() is not None:
                line = _last_line(log_path)
                if "address already in use" in line.lower():
                    return False
                raise ServerError(
                    f"turnrl serve --model {self.model_path} exited at start-up: {line or 'no output'} "
                    f"(log: {log_path})"
                )
            try:
                if httpx.get(health, timeout=1.0).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise ServerError(
            f"turnrl serve --model {self.model_path} did not answer {health} within "
            f"{self.startup_timeout_s:.0f} s (rollout.server.startup_timeout_s; log: {log_path})"
        )

    def start(self) -> ServeProcess:
        return start_all([self])[0]

    def _log_file(self) -> Path:
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            return self.log_path
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="turnrl-serve-")
        return Path(self._tmp.name) / "server.log"

    def _launch(self) -> None:
        self.port = free_port(self.host)
        self.process = self._spawn(self.port, self._log_file())

    def _ready(self) -> bool:
        """Wait for the launched child; False if its port was taken (launch again)."""
        assert self.process is not None
        try:
            ready = self._wait_ready(self.process, self.port, self._log_file())
        except BaseException:
            self.stop()
            raise
        if ready:
            atexit.register(self.stop)  # a run that forgets to stop must not leave a server behind
        else:
            self._terminate(self.process)
            self.process = None
        return ready

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
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def stop(self) -> None:
        if self.process is not None:
            self._terminate(self.process)
            self.process = None
            atexit.unregister(self.stop)
        self._cleanup_tmp()

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_all(servers: list[ServeProcess]) -> list[ServeProcess]:
    """Start several children at once (their model loads overlap), from the calling thread.

    Call it from a thread that outlives the children: on Linux a child gets SIGTERM when the thread
    that started it exits (PR_SET_PDEATHSIG), so a short-lived worker thread would kill it."""
    pending = [s for s in servers if s.process is None]
    try:
        for server in pending:
            server._launch()
        for _ in range(_PORT_ATTEMPTS):
            pending = [s for s in pending if not s._ready()]
            for server in pending:
                server._launch()
            if not pending:
                return servers
        raise ServerError(f"no free port for turnrl serve after {_PORT_ATTEMPTS} attempts")
    except BaseException:
        for server in servers:
            server.stop()
        raise
