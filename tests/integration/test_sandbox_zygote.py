"""The zygote and the sandboxes it prepares (zygote.py, launch.py), against the real server: runs
one after another in the same worker slot share nothing; a zygote that dies is replaced and costs
only the runs in flight; the zygote holds nothing of the server; the fallback without it still
serves. Then the zygote on its own: a run killed through it, a prepared sandbox that died while
waiting, a sandbox whose set-up fails."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.proc_scan import cmdlines_with, pids_of_uids
from turnrl.servers.sandbox.isolation import Isolation
from turnrl.servers.sandbox.launch import RunRequest
from turnrl.servers.sandbox.process import SandboxProcess
from turnrl.servers.sandbox.zygote_client import ZygoteClient, supported

SECRET_NAME = "TURNRL_SANDBOX_TEST_SECRET"
SECRET = f"s3cret-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def server() -> Iterator[SandboxProcess]:
    # one worker slot: consecutive runs get the same uid and cgroup, the closest two runs can be
    with SandboxProcess(workers=1, queue=8, env={**os.environ, SECRET_NAME: SECRET}) as proc:
        yield proc


def health(server: SandboxProcess) -> dict[str, Any]:
    return httpx.get(server.url + "/health", headers=server.headers, timeout=10).json()


def run(server: SandboxProcess, code: str, **fields: Any) -> dict[str, Any]:
    body = {"code": code, **fields}
    response = httpx.post(server.url + "/run_code", json=body, headers=server.headers, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def zygote_pid(server: SandboxProcess) -> int:
    zygote = health(server)["zygote"]
    if zygote is None:
        pytest.skip("no zygote on this host: " + "; ".join(health(server)["isolation"]["notes"]))
    return int(zygote["pid"])


LEAVE_TRACES = (
    "import subprocess, sys\n"
    "for path in ['left.txt', '/tmp/left.txt', '/var/tmp/left.txt', '/dev/shm/left.txt']:\n"
    "    try:\n"
    "        open(path, 'w').write('from the first run')\n"
    "    except OSError:\n"
    "        pass\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[0], '{marker}'],\n"
    "                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print('done')\n"
)
LOOK_AROUND = (
    "import json, os\n"
    "def listing(path):\n"
    "    try:\n"
    "        return sorted(os.listdir(path))\n"
    "    except OSError as err:\n"
    "        return err.strerror\n"
    "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
    "cmdlines = [open(f'/proc/{p}/cmdline', 'rb').read().decode(errors='replace') for p in pids]\n"
    "dirs = {p: listing(p) for p in ['.', '/tmp', '/var/tmp', '/dev/shm']}\n"
    "print(json.dumps({'dirs': dirs, 'pids': pids, 'cmdlines': cmdlines}))\n"
)


def test_consecutive_runs_share_nothing(server: SandboxProcess) -> None:
    layers = health(server)["isolation"]["layers"]
    if not (layers["pid_namespace"] and layers["mount_namespace"]):
        pytest.skip("needs the PID and mount namespace layers")
    zygote_pid(server)
    marker = f"first-run-{uuid.uuid4().hex}"
    first = run(server, LEAVE_TRACES.format(marker=marker))
    assert first["status"] == "Success" and first["run_result"]["stdout"] == "done\n", first
    second = run(server, LOOK_AROUND)
    assert second["status"] == "Success", second
    seen = json.loads(second["run_result"]["stdout"])
    # a fresh work dir and temp dirs, and no process of the first run (namespace inode numbers
    # cannot tell: the kernel hands a freed one out again)
    assert seen["dirs"]["."] == ["main.py"]
    # in /tmp: the work dir's mount point, and the interpreter's dir if it lives there (a venv in
    # a CI clone); not the first run's file, nor where the sandbox kept the work root staged
    interpreter_tops = {p.split("/")[2] for p in (sys.prefix, sys.executable) if p.startswith("/tmp/")}
    assert set(seen["dirs"]["/tmp"]) - interpreter_tops == {"sandbox"}
    assert seen["dirs"]["/var/tmp"] == [] and seen["dirs"]["/dev/shm"] == []
    assert seen["pids"] == [1, 2]
    assert seen["cmdlines"][0].rstrip("\0") == "sandbox-init"  # init, a copy of the zygote
    assert not any(marker in c for c in seen["cmdlines"])
    assert SECRET not in second["run_result"]["stdout"] and "turnrl.cli" not in second["run_result"]["stdout"]
    assert cmdlines_with(marker) == [], "the first run's daemon survived it"


def test_a_dead_zygote_costs_only_the_runs_in_flight(server: SandboxProcess) -> None:
    old = zygote_pid(server)
    restarts = health(server)["zygote"]["restarts"]
    uids = health(server)["isolation"]["uids"]
    if not uids:
        pytest.skip("needs the uid layer to tell the run's processes apart")
    code = "import time\nprint('started')\nopen('started', 'w').close()\ntime.sleep(30)\n"
    work_root = health(server)["work_root"]
    with ThreadPoolExecutor(1) as pool:
        victim = pool.submit(run, server, code, run_timeout=20)
        deadline = time.monotonic() + 20
        while not any(os.path.exists(os.path.join(work_root, d, "started")) for d in os.listdir(work_root)):
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.05)
        os.kill(old, signal.SIGKILL)
        start = time.monotonic()
        lost = victim.result()
    assert time.monotonic() - start < 10  # answered when the zygote died, not at run_timeout
    assert lost["status"] == "SandboxError" and "zygote" in lost["message"], lost
    assert lost["run_result"]["stdout"] == "started\n"
    deadline = time.monotonic() + 5
    while pids_of_uids(*uids):  # the run's processes die with the zygote (parent-death signals)
        assert time.monotonic() < deadline, "the run outlived its zygote"
        time.sleep(0.05)
    after = run(server, "print(6 * 7)")
    assert after["status"] == "Success" and after["run_result"]["stdout"] == "42\n", after
    assert zygote_pid(server) != old and health(server)["zygote"]["restarts"] == restarts + 1
    assert os.listdir(health(server)["work_root"]) == []


def test_the_zygote_holds_nothing_of_the_server(server: SandboxProcess) -> None:
    assert run(server, "print('warm')")["status"] == "Success"
    pid = zygote_pid(server)
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read()
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read()
    assert SECRET.encode() not in environ and SECRET_NAME.encode() not in environ
    assert b"turnrl.cli" not in cmdline and b"--port" not in cmdline
    # beyond stdio: its control socket, and a channel and a pidfd per prepared sandbox; no run's
    # pipe end stays open in it
    held = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd") if int(fd) > 2]
    assert held and not [h for h in held if h.startswith("pipe:")], held


def test_shell_pipelines_get_default_sigpipe(server: SandboxProcess) -> None:
    # the zygote (python) ignores SIGPIPE; a run must not inherit that, or `yes` would complain
    out = run(server, "yes | head -n 2\n", language="bash")
    assert out["status"] == "Success", out
    assert out["run_result"]["stdout"] == "y\ny\n" and out["run_result"]["stderr"] == ""


def test_without_the_zygote_the_server_still_runs() -> None:
    with SandboxProcess(workers=1, queue=4, extra_args=["--no-zygote"]) as server:
        info = health(server)
        assert info["zygote"] is None
        assert any(n.startswith("zygote: disabled by --no-zygote") for n in info["isolation"]["notes"])
        out = run(server, "import sys\nprint(sys.stdin.read()[::-1])", stdin="abc")
        assert out["status"] == "Success" and out["run_result"]["stdout"] == "cba\n", out


# ---- the zygote on its own (zygote_client.ZygoteClient), no HTTP server ----


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


async def _launch(client: Any, work_root: str, argv: list[str], slot: int = 0, half: int = 0) -> Any:
    """A run through the zygote: (its id, its exit status future, the read end of its output)."""
    workdir = tempfile.mkdtemp(dir=work_root, prefix="run-")
    request = RunRequest(argv, {"PATH": "/usr/bin:/bin"}, workdir, [])
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    os.close(stdin_w)
    run_id, _, exited = await client.launch(slot, half, request, [stdin_r, out_w, os.dup(out_w)])
    return run_id, exited, out_r


def _zygote_test(body: Any, iso: Isolation | None = None) -> None:
    async def main() -> None:
        work_root = tempfile.mkdtemp(prefix="turnrl-zygote-test-")
        client = ZygoteClient(iso or Isolation(mode="basic"), workers=1, tmpfs_MB=16, work_root=work_root)
        client.start()
        try:
            await client.wait_ready()
            await body(client, work_root)
        finally:
            client.close()
            shutil.rmtree(work_root, ignore_errors=True)

    asyncio.run(main())


needs_zygote = pytest.mark.skipif(supported() is not None, reason=f"no zygote here: {supported()}")


@needs_zygote
def test_a_run_killed_through_the_zygote_ends() -> None:
    async def body(client: ZygoteClient, work_root: str) -> None:
        run_id, exited, out = await _launch(client, work_root, ["/bin/sleep", "30"])
        client.kill(run_id)
        status = await asyncio.wait_for(exited, 10)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        os.close(out)

    _zygote_test(body)


@needs_zygote
def test_a_prepared_sandbox_that_died_waiting_is_replaced() -> None:
    async def body(client: ZygoteClient, work_root: str) -> None:
        assert client.proc is not None
        deadline = time.monotonic() + 10
        while not _children(client.proc.pid):  # slot 0's sandbox, made ready at start
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        for pid in _children(client.proc.pid):
            os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.2)
        _, exited, out = await _launch(client, work_root, ["/bin/echo", "fresh"])
        assert os.waitstatus_to_exitcode(await asyncio.wait_for(exited, 10)) == 0
        assert os.read(out, 100) == b"fresh\n"

    _zygote_test(body)


@needs_zygote
@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace as root keeps the test short")
def test_a_sandbox_that_cannot_be_prepared_fails_its_run_with_the_reason() -> None:
    broken = Isolation(mount_ns=True, expose=[("/nonexistent/turnrl-python", None)])

    async def body(client: ZygoteClient, work_root: str) -> None:
        with pytest.raises(OSError, match=r"setup failed.*nonexistent/turnrl-python"):
            await _launch(client, work_root, ["/bin/true"])

    _zygote_test(body, broken)
