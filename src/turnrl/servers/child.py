"""One way to run a turnrl server as a child process: the sandbox, the retriever, the inference server.

    class Echo(ChildServer):
        def command(self, port: int) -> list[str]:
            return [sys.executable, "-m", "turnrl.cli", "echo", "--port", str(port)]

    with Echo() as child:            # free port, log file, waits for GET /health
        httpx.get(child.url + "/ping")

Why one base: a run depends on these children the same way, so they fail the same way. A child
gets a free loopback port (or a fixed one), writes its output to a log file (`log_path`, else a
temporary directory removed at stop unless `keep_log`), and is ready once `GET /health` answers
200 (its JSON body is kept as `health`). Each child gets a fresh random API key (`api_key`,
passed in its environment as $TURNRL_API_KEY, never on its command line where `ps` shows it);
clients send `headers`. A child that exits at start-up, or never answers within
`startup_timeout`, raises one line naming the child, its last log line and the log file, which is
then kept so that the line can be followed.

A port picked free can be taken before the child binds it: the child is then launched again on
another port, `PORT_ATTEMPTS` times in all. `restart()` starts a dead child again on its port, so
every client keeps its URL (the agent's tool supervisor does this once). `stop()` (also run at
interpreter exit and, on Linux, by the kernel when the thread that started the child dies) sends
SIGTERM to the child's process group, which lets a server stop cleanly, then SIGKILL to whatever
of the group is left after `stop_grace_s`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx

from turnrl.keys import API_KEY_ENV, auth_headers
from turnrl.runtime import free_port

PORT_ATTEMPTS = 3
"""Launches per child before giving up on finding a port nobody takes first."""

C = TypeVar("C", bound="ChildServer")


def die_with_parent() -> None:
    """preexec_fn (Linux): SIGTERM the child when the thread that started it dies. SIGTERM, not
    SIGKILL: the server then stops what it started (a sandbox kills its runs, removes its work root)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def last_line(text: str) -> str:
    """The line that best says why a child failed: the last one naming an error, else the last one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[-1]


class ChildServer:
    """A server command run as a child process on `host`; subclasses say which command (`command`)
    and how to name it in errors (`describe`, `start_error`, `unavailable_error`)."""

    start_error: type[Exception] = RuntimeError
    """Raised when the child exits before it answers (a bad argument, a missing file)."""
    unavailable_error: type[Exception] = RuntimeError
    """Raised when the child does not answer in time, or no port could be had."""
    log_prefix = "turnrl-server-"
    timeout_setting = ""
    """The setting that raises `startup_timeout`, named in the time-out error."""
    stop_grace_s = 10.0

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 60.0,
        log_path: str | Path | None = None,
        env: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
        api_key: str | None = None,
    ) -> None:
        """`api_key`: the key the child requires; None = a fresh random one, '' = none."""
        self.api_key = secrets.token_urlsafe(24) if api_key is None else api_key
        self.host, self.fixed_port, self.startup_timeout = host, port, startup_timeout
        self.log_path = Path(log_path) if log_path else None
        self.env, self.extra_args = env, list(extra_args or [])
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.health: dict[str, Any] = {}
        """The JSON body of the last `/health` that made the child ready."""
        self.log_file: Path | None = None
        """Where the child's output goes: `log_path`, or a temporary file once started."""
        self.keep_log = False
        """Leave a temporary log at stop (set when an error sends people to read it)."""
        self._tmp: Path | None = None
        self._log_start = 0  # where the current launch's output begins in the log

    def command(self, port: int) -> list[str]:
        """The server's command line, listening on `self.host`:`port`."""
        raise NotImplementedError

    def describe(self) -> str:
        """The child as error messages name it."""
        return type(self).__name__

    # -- where it is, how it is ------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if not self.port:
            raise self.start_error(f"{self.describe()} is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return self.base_url

    @property
    def headers(self) -> dict[str, str]:
        """What a client sends to be let in (empty for a child started without a key)."""
        return auth_headers(self.api_key) if self.api_key else {}

    @property
    def pid(self) -> int:
        if self.process is None:
            raise self.start_error(f"{self.describe()} is not started")
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status of a child that has exited (negative: killed by that signal), else None."""
        return None if self.process is None else self.process.poll()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """The last `lines` lines of the log, all launches included."""
        return "\n".join(self._read_log(0).splitlines()[-lines:])

    def _read_log(self, start: int) -> str:
        if self.log_file is None:
            return ""
        try:
            with self.log_file.open("rb") as log:
                log.seek(start)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    # -- life cycle ------------------------------------------------------------------------
    def start(self: C) -> C:
        start_all([self])
        return self

    def launch(self) -> None:
        """Spawn the child on a fresh free port (or the fixed one); `ready()` waits for it."""
        self.port = self.fixed_port or free_port(self.host)
        self._spawn()

    def ready(self) -> bool:
        """Wait for the launched child. False: another process took its port (launch again);
        any other failure stops the child and raises."""
        try:
            if self._wait(may_move=self.fixed_port is None, phase="start-up"):
                atexit.register(self.stop)  # a run that forgets to stop must not leave a server behind
                return True
        except BaseException:
            self.stop()
            raise
        self._terminate()
        return False

    def restart(self: C) -> C:
        """Start a dead child again on its port; its output goes on in the same log."""
        if self.alive():
            return self
        if not self.port or self.log_file is None:
            raise self.start_error(f"{self.describe()} was never started, so it cannot be restarted")
        self._spawn()
        try:
            self._wait(may_move=False, phase="restart")
        except BaseException:
            self._terminate()
            raise
        return self

    def stop(self) -> None:
        self._terminate()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self._tmp is not None and not self.keep_log:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = self.log_file = None

    def __enter__(self: C) -> C:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the parts -------------------------------------------------------------------------
    def _open_log(self) -> Path:
        if self.log_file is None:
            if self.log_path is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                self.log_file = self.log_path
            else:  # a directory of its own: the log is kept after a failure, its neighbours are not
                self._tmp = Path(tempfile.mkdtemp(prefix=self.log_prefix))
                self.log_file = self._tmp / "server.log"
        return self.log_file

    def _spawn(self) -> None:
        env = {**(os.environ if self.env is None else self.env), "PYTHONUNBUFFERED": "1"}
        env[API_KEY_ENV] = self.api_key
        with self._open_log().open("ab") as log:  # the child keeps its own copy of the descriptor
            self._log_start = log.seek(0, os.SEEK_END)
            self.process = subprocess.Popen(
                self.command(self.port),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group, stopped whole
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
            )

    def _wait(self, may_move: bool, phase: str) -> bool:
        """True once /health answers 200; False if the port was taken and `may_move`; else raises."""
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        health = f"http://{self.host}:{self.port}/health"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self._read_log(self._log_start)
                if may_move and "address already in use" in output.lower():
                    return False
                raise self._failure(
                    self.start_error, f"exited at {phase}: {last_line(output) or 'no output'}"
                )
            with contextlib.suppress(httpx.HTTPError, ValueError):
                response = httpx.get(health, timeout=2.0, headers=self.headers)
                if response.status_code == 200:
                    body = response.json()
                    self.health = body if isinstance(body, dict) else {}
                    return True
            time.sleep(0.1)
        setting = f"{self.timeout_setting}; " if self.timeout_setting else ""
        line = last_line(self._read_log(self._log_start))
        raise self._failure(
            self.unavailable_error,
            f"did not answer {health} within {self.startup_timeout:.0f} s "
            f"({setting}last output: {line or 'none'})",
        )

    def _failure(self, cls: type[Exception], why: str) -> Exception:
        """The one-line error; the log it names is kept for reading."""
        self.keep_log = True
        return cls(f"{self.describe()} {why} (log: {self.log_file})")

    def _terminate(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
        _signal_group(process, signal.SIGKILL)  # whatever the child left behind in its group


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):  # the group is already empty
        os.killpg(process.pid, sig)


def start_all(children: Sequence[C]) -> list[C]:
    """Start several children at once (their start-ups overlap), from the calling thread.

    Call it from a thread that outlives the children: on Linux a child gets SIGTERM when the thread
    that started it exits (PR_SET_PDEATHSIG), so a short-lived worker thread would stop it."""
    pending = [c for c in children if c.process is None]
    try:
        for child in pending:
            child.launch()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            pending = [c for c in pending if not c.ready()]
            if not pending:
                return list(children)
            if attempt < PORT_ATTEMPTS:
                for child in pending:
                    child.launch()
        first = pending[0]
        raise first._failure(
            first.unavailable_error, f"found no free port on {first.host} in {PORT_ATTEMPTS} attempts"
        )
    except BaseException:
        for child in children:
            child.stop()
        raise
