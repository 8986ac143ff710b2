"""The child-process server base (`turnrl.servers.child`) with a real child: a stdlib HTTP server.

What every turnrl child server (sandbox, retriever, `turnrl serve`) relies on: a free port and
/health, a one-line start-up error that names the log and keeps it, a time-out, another port when
the picked one is taken, a restart on the same port, and a stop that leaves no process of the
child's group and no temporary file behind.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from turnrl.servers.child import ChildServer

# argv: port, mode ("ok", "fail", "mute", "taken-once:FILE"), a file to write a grandchild's pid to
SERVER = r"""
import http.server, json, os, subprocess, sys
port, mode, pid_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if mode == "fail":
    print("starting up"); print("error: the index is broken", flush=True); sys.exit(3)
if mode.startswith("taken-once:"):
    marker = mode.split(":", 1)[1]
    if not os.path.exists(marker):
        open(marker, "w").close()
        print("[Errno 98] error while attempting to bind: address already in use", flush=True); sys.exit(1)
if mode == "mute":
    import time; time.sleep(60)
if pid_file != "-":  # a grandchild in the server's process group, as a server's helpers would be
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    open(pid_file, "w").write(str(helper.pid))

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"pid": os.getpid(), "path": self.path}).encode()
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


class Stub(ChildServer):
    start_error = ValueError
    unavailable_error = TimeoutError
    timeout_setting = "stub.startup_timeout"

    def __init__(self, mode: str = "ok", pid_file: str = "-", **kwargs) -> None:
        super().__init__(**kwargs)
        self.mode, self.pid_file = mode, pid_file
        self.launches: list[int] = []

    def describe(self) -> str:
        return "stub server"

    def command(self, port: int) -> list[str]:
        self.launches.append(port)
        return [sys.executable, "-c", SERVER, str(port), self.mode, self.pid_file]


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_start_health_and_a_stop_that_leaves_nothing(tmp_path: Path) -> None:
    pid_file = tmp_path / "helper.pid"
    with Stub(pid_file=str(pid_file)) as child:
        assert child.alive() and child.health["pid"] == child.pid
        assert httpx.get(child.url + "/health", timeout=5).json()["pid"] == child.pid
        log = child.log_file
        assert log is not None and log.is_file()
        server, helper = child.pid, int(pid_file.read_text())
    assert not child.alive() and child.process is None
    assert gone(server) and gone(helper)  # the whole process group
    assert not log.exists() and not log.parent.exists()  # the temporary log went with it


def test_a_child_that_dies_at_start_up_is_one_line_naming_its_log(tmp_path: Path) -> None:
    child = Stub(mode="fail")
    with pytest.raises(ValueError) as err:
        child.start()
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("stub server exited at start-up: error: the index is broken (log: ")
    log = Path(message.rsplit("(log: ", 1)[1].rstrip(")"))
    assert "the index is broken" in log.read_text()  # kept, since the message sends people there
    assert child.launches and len(child.launches) == 1  # not an address clash: no second launch
    child.keep_log = False
    child.stop()


def test_a_child_that_never_answers_times_out(tmp_path: Path) -> None:
    child = Stub(mode="mute", startup_timeout=1.0, log_path=tmp_path / "logs" / "stub.log")
    expected = (
        r"stub server did not answer http://127\.0\.0\.1:\d+/health within 1 s \(stub.startup_timeout; "
    )
    with pytest.raises(TimeoutError, match=expected + r"last output: none\) \(log: "):
        child.start()
    assert child.process is None  # stopped, not left running
    assert (tmp_path / "logs" / "stub.log").is_file()


def test_a_taken_port_means_another_port(tmp_path: Path) -> None:
    with Stub(mode=f"taken-once:{tmp_path / 'clashed'}", log_path=tmp_path / "stub.log") as child:
        assert len(child.launches) == 2 and child.port == child.launches[1]
        assert child.health["path"] == "/health"
    assert "address already in use" in (tmp_path / "stub.log").read_text()  # both launches logged


def test_a_fixed_port_that_is_taken_is_an_error(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ValueError, match=r"exited at start-up: .*Address already in use"):
            Stub(port=port, log_path=tmp_path / "stub.log").start()


def test_restart_keeps_the_url(tmp_path: Path) -> None:
    with Stub(log_path=tmp_path / "stub.log") as child:
        url, first = child.url, child.pid
        os.kill(first, signal.SIGKILL)
        assert child.process is not None and child.process.wait(timeout=5) == -signal.SIGKILL
        assert not child.alive() and child.returncode == -signal.SIGKILL
        child.restart()
        assert child.alive() and child.pid != first and child.url == url
        assert httpx.get(url + "/health", timeout=5).json()["pid"] == child.pid


def test_restart_needs_a_start() -> None:
    with pytest.raises(ValueError, match="stub server was never started"):
        Stub().restart()
