"""Hostile programs against the real sandbox server (a subprocess on a free localhost port).

Each program must be contained with the right status; afterwards the server still answers a
normal request, no process of the run survives and no file is left behind. Where a layer is
missing on this host, the test asserts that /health says so instead of pretending.

Tests that must hold whatever the layers take `any_server`: they run against the server with
every layer this host supports and against one started with `--isolation basic`, the weakest
mode (no namespaces, no uid, no cgroup), which is also what a host without them falls back to.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import platform
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import turnrl.servers.sandbox.app as sandbox_app
from tests.support.proc_scan import cmdlines_with, pids_of_uids
from turnrl.servers.sandbox import seccomp
from turnrl.servers.sandbox.isolation import FALLBACK_NOTE
from turnrl.servers.sandbox.process import SandboxProcess

SECRET_NAME = "TURNRL_SANDBOX_TEST_SECRET"
SECRET = f"s3cret-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def server() -> Iterator[SandboxProcess]:
    env = {**os.environ, SECRET_NAME: SECRET}
    with SandboxProcess(workers=4, queue=16, env=env) as proc:
        yield proc


@pytest.fixture(scope="module")
def basic_server() -> Iterator[SandboxProcess]:
    env = {**os.environ, SECRET_NAME: SECRET}
    with SandboxProcess(workers=2, queue=16, env=env, isolation="basic") as proc:
        yield proc


@pytest.fixture(params=["auto", "basic"])
def any_server(request: pytest.FixtureRequest) -> SandboxProcess:
    return request.getfixturevalue("server" if request.param == "auto" else "basic_server")


@pytest.fixture(scope="module")
def layers(server: SandboxProcess) -> dict[str, bool]:
    return server.health["isolation"]["layers"]


def fork_bounded(server: SandboxProcess) -> bool:
    """Whether a fork bomb meets a process bound (RLIMIT_NPROC is not enforced for root)."""
    iso = server.health["isolation"]
    return bool(iso["layers"]["unprivileged_uid"] or iso["layers"]["cgroup"] or not iso["server_is_root"])


def run(server: SandboxProcess, code: str, timeout: float = 60.0, **fields: Any) -> dict[str, Any]:
    response = httpx.post(server.url + "/run_code", json={"code": code, **fields}, timeout=timeout)
    assert response.status_code == 200, response.text
    return response.json()


def assert_clean(server: SandboxProcess, marker: str | None = None) -> None:
    """The server answers normally and the run left nothing behind."""
    ok = run(server, "print(6 * 7)", run_timeout=10)
    assert ok["status"] == "Success" and ok["run_result"]["stdout"] == "42\n", ok
    health = httpx.get(server.url + "/health", timeout=10).json()
    assert health["pid"] == server.pid
    assert os.listdir(health["work_root"]) == [], "a work dir was left behind"
    uids = health["isolation"]["uids"]
    if uids:
        assert pids_of_uids(*uids) == [], "a process of the run survived"
    if marker:
        assert cmdlines_with(marker) == [], f"a process with {marker!r} survived"


def test_infinite_loop_times_out(any_server: SandboxProcess) -> None:
    start = time.monotonic()
    out = run(any_server, "while True:\n    pass\n", run_timeout=1)
    assert out["status"] == "Failed"
    assert out["run_result"]["status"] == "TimeLimitExceeded"
    assert out["run_result"]["return_code"] is None
    assert 0.9 <= out["run_result"]["execution_time"] < 2.5
    assert time.monotonic() - start < 4
    assert_clean(any_server)


def test_sleep_past_timeout_keeps_earlier_output(any_server: SandboxProcess) -> None:
    out = run(any_server, "import time\nprint('before')\ntime.sleep(30)\nprint('after')\n", run_timeout=1)
    assert out["run_result"]["status"] == "TimeLimitExceeded"
    assert out["run_result"]["stdout"] == "before\n"  # unbuffered: printed text survives the kill
    assert "timed out after 1s" in out["message"]
    assert_clean(any_server)


def test_fork_bomb_is_contained(server: SandboxProcess) -> None:
    if not fork_bounded(server):
        assert any("fork bombs: NOT bounded" in n for n in server.health["isolation"]["notes"])
        pytest.skip("root server without uid or cgroup layer: fork bombs are not bounded, /health says so")
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    start = time.monotonic()
    out = run(server, code, run_timeout=1.5)
    assert out["status"] == "Failed"
    assert out["run_result"]["status"] == "TimeLimitExceeded"
    assert time.monotonic() - start < 6
    assert_clean(server)


def test_bash_fork_bomb_is_contained(server: SandboxProcess) -> None:
    if not fork_bounded(server):
        assert any("fork bombs: NOT bounded" in n for n in server.health["isolation"]["notes"])
        pytest.skip("root server without uid or cgroup layer: fork bombs are not bounded, /health says so")
    out = run(server, "bomb() { bomb | bomb & }\nbomb\nsleep 5\n", language="bash", run_timeout=1)
    assert out["run_result"]["status"] == "TimeLimitExceeded"
    assert "Resource temporarily unavailable" in out["run_result"]["stderr"]  # the process bound held
    assert_clean(server)


def test_memory_bomb_fails_cleanly(any_server: SandboxProcess) -> None:
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(32 << 20))\n"
    out = run(any_server, code, memory_limit_MB=256, run_timeout=5)
    assert out["status"] == "Failed"
    assert out["run_result"]["status"] == "Finished"
    assert "MemoryError" in out["run_result"]["stderr"]
    assert_clean(any_server)


def test_forked_memory_bomb_is_capped_in_total(server: SandboxProcess, layers: dict[str, bool]) -> None:
    if not layers["cgroup"]:
        pytest.skip("no cgroup layer on this host: memory is bounded per process only")
    # 6 children x 200 MB each fit their own 256 MB rlimit; only the cgroup bounds the sum
    code = (
        "import os, time\n"
        "for _ in range(6):\n"
        "    if os.fork() == 0:\n"
        "        b = bytearray(200 << 20)\n"
        "        b[::4096] = b'x' * len(b[::4096])\n"
        "        time.sleep(1)\n"
        "        os._exit(0)\n"
        "print(sum(os.waitpid(-1, 0)[1] != 0 for _ in range(6)))\n"
    )
    out = run(server, code, memory_limit_MB=256, run_timeout=10)
    killed = int(out["run_result"]["stdout"].strip() or 6)
    assert killed >= 5, out  # at most one 200 MB child fits in the 256 MB cgroup
    assert_clean(server)


def test_huge_output_is_capped(any_server: SandboxProcess) -> None:
    cap = any_server.health["limits"]["max_output_bytes"]
    out = run(any_server, "import sys\nsys.stdout.write('x' * (20 << 20))\n", run_timeout=10)
    assert out["status"] == "Success"
    assert len(out["run_result"]["stdout"]) == cap
    assert f"stdout truncated to {cap} of {20 << 20} bytes" in out["message"]
    endless = run(any_server, "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n", run_timeout=1)
    assert endless["run_result"]["status"] == "TimeLimitExceeded"
    assert len(endless["run_result"]["stdout"]) == cap
    assert_clean(any_server)


def test_binary_garbage_on_stdout(server: SandboxProcess) -> None:
    code = "import os, sys\nsys.stdout.buffer.write(bytes(range(256)) * 4 + os.urandom(4096))\nsys.stderr.buffer.write(b'\\xff\\xfe')\n"
    out = run(server, code)
    assert out["status"] == "Success"
    assert "\ufffd" in out["run_result"]["stdout"]
    assert out["run_result"]["stderr"] == "\ufffd\ufffd"
    assert_clean(server)


def test_file_size_limit(any_server: SandboxProcess) -> None:
    out = run(any_server, "open('big', 'wb').write(b'x' * (200 << 20))\n", run_timeout=10)
    assert out["status"] == "Failed"
    assert out["run_result"]["return_code"] != 0
    assert_clean(any_server)


def test_writes_outside_work_dir_do_not_land(
    server: SandboxProcess, layers: dict[str, bool], tmp_path
) -> None:
    if not (layers["unprivileged_uid"] or layers["mount_namespace"]):
        assert server.health["isolation"]["notes"], "missing layers must be explained"
        pytest.skip("runs share the server's uid and filesystem on this host")
    token = uuid.uuid4().hex
    os.chmod(tmp_path, 0o755)
    targets = [
        f"/tmp/escape-{token}",
        f"/etc/escape-{token}",
        f"{tmp_path}/escape-{token}",
        f"../escape-{token}",
    ]
    code = (
        "import os\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError as err:\n"
        "        print('refused', path, err.errno)\n"
    )
    out = run(server, code)
    assert out["status"] == "Success", out
    work_root = server.health["work_root"]
    for path in [*targets[:3], os.path.join(work_root, f"escape-{token}")]:
        assert not os.path.exists(path), f"{path} was written on the host"
    assert_clean(server)


def test_server_environment_is_invisible(server: SandboxProcess, layers: dict[str, bool]) -> None:
    code = (
        "import glob, os\n"
        "print(sorted(os.environ))\n"
        f"targets = glob.glob('/proc/*/environ') + ['/proc/{server.pid}/environ']\n"
        "for path in targets:\n"
        "    try:\n"
        "        data = open(path, 'rb').read()\n"
        "    except OSError:\n"
        "        continue\n"
        f"    if {SECRET_NAME!r}.encode() in data:\n"
        "        print('LEAK', path, data)\n"
    )
    out = run(server, code)
    assert out["status"] == "Success", out
    stdout = out["run_result"]["stdout"]
    env_names = stdout.splitlines()[0]
    assert SECRET_NAME not in env_names and "HOME" in env_names  # the environment itself is scrubbed
    if not (layers["unprivileged_uid"] or layers["pid_namespace"]):
        assert any("/proc entries" in n for n in server.health["isolation"]["notes"])
        pytest.skip(
            "same uid and pid namespace as the server: /proc/<server>/environ is readable, /health says so"
        )
    assert SECRET not in stdout and "LEAK" not in stdout


def test_network_is_cut(server: SandboxProcess) -> None:
    health = server.health["isolation"]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.3)
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n"
            "    print('connected')\n"
            "except OSError as err:\n"
            "    print('blocked', err)\n"
        )
        out = run(server, code)
        if not health["network_isolated"]:
            assert health["layers"]["network_namespace"] is False
            assert out["run_result"]["stdout"].startswith("connected")
            pytest.skip("network isolation unavailable here, and /health says so")
        assert out["run_result"]["stdout"].startswith("blocked"), out
        with pytest.raises(TimeoutError):
            listener.accept()
    assert_clean(server)


def test_killing_the_parent_or_server_fails(server: SandboxProcess, layers: dict[str, bool]) -> None:
    if not (layers["unprivileged_uid"] or layers["pid_namespace"]):
        # a user namespace alone does not help: it maps the run onto the server's own uid
        assert any("/proc entries" in n for n in server.health["isolation"]["notes"])
        pytest.skip("runs share the server's uid and pid namespace here; /health lists the missing layers")
    code = (
        "import os, signal\n"
        "for target in (os.getppid(), " + str(server.pid) + "):\n"
        "    try:\n"
        "        os.kill(target, signal.SIGKILL)\n"
        "        print('sent', target)\n"
        "    except OSError as err:\n"
        "        print('refused', target, err.errno)\n"
        "try:\n"
        "    os.kill(-1, signal.SIGKILL)\n"  # every process this uid may signal
        "except OSError:\n"
        "    pass\n"
    )
    run(server, code)
    assert_clean(server)


def test_child_outliving_the_run_is_killed(any_server: SandboxProcess) -> None:
    marker = f"{time.time_ns() % 10**6}.{os.getpid() % 1000 + 1000}"
    code = (
        "import os, subprocess\n"
        f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True,\n"
        "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "if os.fork() == 0:\n"  # classic double-fork daemon
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"  # keeps the run's stdout and stderr open
        f"        os.execvp('sleep', ['sleep', '{marker}1'])\n"
        "    os._exit(0)\n"
        "print('spawned')\n"
    )
    out = run(any_server, code, run_timeout=10)
    assert out["status"] == "Success", out  # the run ends with the program, not with its pipes
    assert out["run_result"]["stdout"] == "spawned\n"
    assert out["run_result"]["execution_time"] < 5
    assert_clean(any_server, marker=marker)


def test_program_leaving_its_session_is_killed_at_timeout(any_server: SandboxProcess) -> None:
    marker = f"{time.time_ns() % 10**6}.{os.getpid() % 1000 + 2000}"
    code = (
        "import os, subprocess, time\n"
        "os.setsid()\n"  # the program itself leaves the run's session, then starts a daemon
        f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        "print('hiding', flush=True)\n"
        "time.sleep(30)\n"
    )
    out = run(any_server, code, run_timeout=1)
    assert out["run_result"]["status"] == "TimeLimitExceeded", out
    assert out["run_result"]["stdout"] == "hiding\n"
    assert out["run_result"]["execution_time"] < 2.5
    assert_clean(any_server, marker=marker)


def test_exit_status_and_signal_deaths_pass_through(any_server: SandboxProcess) -> None:
    # without a pid namespace a per-run reaper may stand between the server and the program
    out = run(any_server, "import sys\nprint('partial')\nsys.exit(3)\n")
    assert out["status"] == "Failed" and out["run_result"]["return_code"] == 3
    assert out["run_result"]["stdout"] == "partial\n"
    code = "import os, signal, time\nprint(os.getpid(), flush=True)\nsignal.alarm(1)\ntime.sleep(5)\n"
    alarm = run(any_server, code)
    assert alarm["run_result"]["status"] == "Finished" and alarm["run_result"]["return_code"] == 128 + 14
    assert "killed by SIGALRM" in alarm["message"]
    assert_clean(any_server)


def test_fetching_a_symlink_out_of_the_work_dir_is_refused(any_server: SandboxProcess) -> None:
    code = "import os\nos.symlink('/etc/hostname', 'out.txt')\nos.mkfifo('pipe')\n"
    out = run(any_server, code, fetch_files=["out.txt", "pipe"])
    assert out["files"] == {}
    assert "'out.txt' not returned" in out["message"]
    assert "'pipe' is not a regular file" in out["message"]
    assert_clean(any_server)


# ---- the read-only root, /proc, seccomp, daemons and load ----


def skip_without(server: SandboxProcess, layer: str, what: str) -> None:
    """Skip, quoting the server's own explanation, when `layer` is off; it must have one."""
    iso = server.health["isolation"]
    if iso["layers"][layer]:
        return
    explains = (f"{layer}:", f"+{layer}:", FALLBACK_NOTE, "--isolation basic")
    reasons = [n for n in iso["notes"] if any(e in n for e in explains)]
    assert reasons, f"/health says nothing about why {layer} is off"
    pytest.skip(f"{what}: {layer} is off here ({reasons[0]})")


READ_ALL = (
    "import json, os, sys\n"
    "def attempt(path):\n"
    "    try:\n"
    "        with open(path, 'rb') as f:\n"
    "            return f.read(1 << 16).decode(errors='replace')\n"
    "    except OSError as err:\n"
    "        return f'refused: {err.strerror}'\n"
    "def listing(path):\n"
    "    try:\n"
    "        return sorted(os.listdir(path))\n"
    "    except OSError as err:\n"
    "        return f'refused: {err.strerror}'\n"
    "targets = json.loads(sys.stdin.read())\n"
    "print(json.dumps({'read': {p: attempt(p) for p in targets['read']},\n"
    "                  'list': {p: listing(p) for p in targets['list']},\n"
    "                  'interpreter': [sys.prefix, sys.base_prefix, *sys.path[1:]]}))\n"
)


def read_in_sandbox(server: SandboxProcess, read: list[str], listed: list[str]) -> dict[str, Any]:
    out = run(server, READ_ALL, stdin=json.dumps({"read": read, "list": listed}))
    assert out["status"] == "Success", out
    return json.loads(out["run_result"]["stdout"])


MINIMAL_USERS = {"root", "nobody"}
SYSTEM_TOPS = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "tmp", "usr", "var"}


def test_host_files_are_not_in_the_root(server: SandboxProcess) -> None:
    skip_without(server, "rootfs", "programs can read world-readable host files")
    source = str(Path(sandbox_app.__file__).resolve())
    checkout = Path(__file__).resolve().parents[2]
    host = [
        "/etc/shadow",
        "/etc/hostname",
        "/etc/os-release",
        "/root/.bash_history",
        "/proc/self/../1/environ",
        str(checkout / "pyproject.toml"),
        source,
    ]
    present = [p for p in host if os.path.lexists(p)]
    seen = read_in_sandbox(server, [*present, "/etc/passwd"], ["/", "/home", "/run", str(checkout)])
    for path in present:
        if path.startswith("/proc"):
            continue  # /proc is the run's own: the next tests look at it
        if path == source and Path(source).is_relative_to(sys.prefix):
            continue  # installed into the interpreter's site-packages: one of its libraries
        assert seen["read"][path].startswith("refused: No such file"), (path, seen["read"][path][:80])
    users = {line.split(":")[0] for line in seen["read"]["/etc/passwd"].splitlines()}
    host_users = {line.split(":")[0] for line in Path("/etc/passwd").read_text().splitlines() if line}
    assert users - MINIMAL_USERS <= {u for u in users if u.startswith("sandbox")}
    assert not (host_users - MINIMAL_USERS) & users, "host accounts visible in /etc/passwd"
    assert seen["list"]["/home"] == seen["list"]["/run"] == "refused: No such file or directory"
    # beyond the system dirs, only the way down to the interpreter's own dirs exists (a venv
    # inside the checkout, a pyenv under /root): nothing beside them
    inside = [Path(p) for p in seen["interpreter"]]

    def leads_to_interpreter(path: Path) -> bool:
        return any(p.is_relative_to(path) for p in inside)

    extra = set(seen["list"]["/"]) - SYSTEM_TOPS
    assert all(leads_to_interpreter(Path("/", name)) for name in extra), extra
    listed = seen["list"][str(checkout)]
    if not isinstance(listed, str):  # the checkout is on the way to the interpreter
        assert all(leads_to_interpreter(checkout / name) for name in listed), listed
    assert_clean(server)


def test_other_runs_work_dirs_are_out_of_reach(server: SandboxProcess) -> None:
    iso = server.health["isolation"]
    if not (iso["layers"]["rootfs"] or iso["layers"]["unprivileged_uid"]):
        skip_without(server, "rootfs", "runs share the server's uid and see its work root")
    token = uuid.uuid4().hex
    work_root = server.health["work_root"]
    victim_code = f"open('secret.txt', 'w').write({token!r})\nimport time\ntime.sleep(4)\nprint('done')\n"
    with ThreadPoolExecutor(1) as pool:
        victim = pool.submit(run, server, victim_code, 30.0, run_timeout=10)
        deadline = time.monotonic() + 10
        while not (dirs := [d for d in os.listdir(work_root) if d.startswith("run-")]):
            assert time.monotonic() < deadline, "the first run never started"
            time.sleep(0.05)
        other = os.path.join(work_root, dirs[0])
        while not os.path.exists(os.path.join(other, "secret.txt")):
            assert time.monotonic() < deadline, "the first run never wrote its file"
            time.sleep(0.05)
        seen = read_in_sandbox(server, [os.path.join(other, "secret.txt")], [work_root, other])
        assert victim.result()["run_result"]["stdout"] == "done\n"
    assert token not in json.dumps(seen)
    assert seen["read"][os.path.join(other, "secret.txt")].startswith("refused")
    assert all(str(v).startswith("refused") for v in seen["list"].values()), seen
    assert_clean(server)


def test_proc_shows_no_other_process(server: SandboxProcess) -> None:
    skip_without(server, "pid_namespace", "programs see the host's processes")
    code = (
        "import json, os\n"
        "def attempt(path):\n"
        "    try:\n"
        "        return open(path, 'rb').read().decode(errors='replace')\n"
        "    except OSError as err:\n"
        "        return 'refused: ' + err.strerror\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        f"targets = ['/proc/1/environ', '/proc/1/cmdline', '/proc/{server.pid}/cmdline', '/proc/{server.pid}/environ']\n"
        "cmdlines = [attempt(f'/proc/{p}/cmdline') for p in pids]\n"
        "print(json.dumps({'pids': pids, 'read': {t: attempt(t) for t in targets}, 'cmdlines': cmdlines}))\n"
    )
    out = run(server, code)
    assert out["status"] == "Success", out
    seen = json.loads(out["run_result"]["stdout"])
    assert seen["pids"] == [1, 2], seen["pids"]  # the namespace's init and the program
    # init is a copy of the zygote (or of the server), not dumpable: nothing of it can be read
    assert seen["read"]["/proc/1/environ"] == "refused: Permission denied"
    text = out["run_result"]["stdout"]
    assert SECRET not in text and SECRET_NAME not in text
    assert "turnrl.cli" not in text and "sandbox serve" not in text, "the server's command line leaked"
    if server.pid not in seen["pids"]:
        assert seen["read"][f"/proc/{server.pid}/cmdline"] == "refused: No such file or directory"
    assert_clean(server)


def test_daemon_outliving_its_response_is_gone(any_server: SandboxProcess, tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o777)  # so that a run without a root of its own could write its heartbeat
    beat = tmp_path / f"beat-{uuid.uuid4().hex}"
    daemon = (
        "import sys, time\n"
        "while True:\n"
        "    try:\n"
        "        with open(sys.argv[1], 'a') as f:\n"
        "            f.write('.')\n"
        "    except OSError:\n"
        "        pass\n"
        "    time.sleep(0.02)\n"
    )
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {daemon!r}, {str(beat)!r}], start_new_session=True,\n"
        "                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "time.sleep(0.5)\n"
        "print('answered')\n"
    )
    out = run(any_server, code, run_timeout=10)
    assert out["status"] == "Success" and out["run_result"]["stdout"] == "answered\n", out
    assert out["run_result"]["execution_time"] < 5  # answered when the program ended
    assert cmdlines_with(beat.name) == [], "the daemon outlived the response"
    if beat.exists():  # no root of its own: the heartbeat landed here, and must have stopped
        size = beat.stat().st_size
        time.sleep(0.5)
        assert beat.stat().st_size == size, "the daemon is still writing after the response"
    assert_clean(any_server, marker=beat.name)


ERRNO_OF = (
    "import ctypes, errno, json, os, sys\n"
    "nr = json.loads(sys.argv[1])\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def err(result):\n"
    "    return 0 if result >= 0 else ctypes.get_errno()\n"
    "def call(name, *args):\n"
    "    return err(libc.syscall(nr[name], *args))\n"
    "results = {\n"
    "    'ptrace': call('ptrace', 0, 0, 0, 0),\n"  # PTRACE_TRACEME: allowed to anyone without a filter
    "    'mount': err(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),\n"
    "    'umount2': err(libc.umount2(b'/proc', 2)),\n"
    "    'pivot_root': call('pivot_root', b'.', b'.'),\n"
    "    'unshare': call('unshare', 0x10000000),\n"  # CLONE_NEWUSER: allowed to anyone without a filter
    "    'setns': call('setns', 0, 0),\n"
    "    'bpf': call('bpf', 0, 0, 0),\n"
    "    'keyctl': call('keyctl', 0, -3, 0),\n"  # KEYCTL_GET_KEYRING_ID of the session keyring
    "    'add_key': call('add_key', b'user', b'k', b'v', 1, -3),\n"
    "    'perf_event_open': call('perf_event_open', 0, 0, -1, -1, 0),\n"
    "    'userfaultfd': call('userfaultfd', 0),\n"
    "    'personality': call('personality', 0xFFFFFFFF),\n"  # only asks: allowed without a filter
    "    'process_vm_readv': call('process_vm_readv', os.getppid(), 0, 0, 0, 0, 0),\n"
    "    'kexec_load': call('kexec_load', 0, 0, 0, 0),\n"
    "    'init_module': call('init_module', 0, 0, b''),\n"
    "    'io_uring_setup': call('io_uring_setup', 1, 0),\n"
    "    'open_by_handle_at': call('open_by_handle_at', 0, 0, 0),\n"
    "}\n"
    "child = libc.syscall(nr['clone'], 0x10000000 | 17, 0, 0, 0, 0)\n"  # clone(CLONE_NEWUSER | SIGCHLD)
    "if child == 0:\n"
    "    os._exit(0)\n"
    "results['clone(CLONE_NEWUSER)'] = err(child)\n"
    "print(json.dumps(results))\n"
)


def _syscall_numbers() -> dict[str, int]:
    arch = seccomp.arch_for(platform.machine())
    assert arch is not None
    clone = arch.number(seccomp.CLONE)
    assert clone is not None
    return {**arch.denied(), "clone": clone}


def test_seccomp_denies_kernel_interfaces(server: SandboxProcess) -> None:
    skip_without(server, "seccomp", "programs may make every system call")
    out = run(server, ERRNO_OF.replace("sys.argv[1]", repr(json.dumps(_syscall_numbers()))))
    assert out["status"] == "Success", out
    results = json.loads(out["run_result"]["stdout"])
    assert results == dict.fromkeys(results, errno.EPERM), results
    bash = run(server, "grep Seccomp: /proc/self/status", language="bash")
    assert bash["run_result"]["stdout"].split() == ["Seccomp:", "2"]  # bash programs too
    assert_clean(server)


def test_without_seccomp_the_same_calls_go_through(basic_server: SandboxProcess) -> None:
    # the control: the calls the filter answers EPERM are allowed to the program in basic mode,
    # so the EPERM above comes from the filter, not from missing privileges
    assert not basic_server.health["isolation"]["layers"]["seccomp"]
    numbers = json.dumps(_syscall_numbers())
    code = (
        "import ctypes, json\n"
        f"nr = json.loads({numbers!r})\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.syscall(nr['personality'], 0xFFFFFFFF) >= 0)\n"
    )
    out = run(basic_server, code)
    assert out["run_result"]["stdout"] == "True\n", out
    assert_clean(basic_server)


def _categorize(response: httpx.Response, expected: str) -> str:
    """'ok', 'overloaded' (the documented 503), or what was wrong with the answer."""
    if response.status_code == 503:
        body = response.json()
        if body["detail"].startswith("sandbox overloaded") and response.headers.get("retry-after") == "1":
            return "overloaded"
        return f"bad 503: {response.text[:200]}"
    if response.status_code != 200:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    body = response.json()
    if body["status"] == "Success" and body["run_result"]["stdout"] == expected:
        return "ok"
    return f"wrong answer: {json.dumps(body)[:300]}"


def flood(server: SandboxProcess, n: int, timeout: float) -> tuple[dict[str, int], list[str]]:
    """n requests at once, each `print(i * i)`: counts of ok and overloaded, and every other outcome."""

    async def one(client: httpx.AsyncClient, i: int) -> str:
        try:
            response = await client.post("/run_code", json={"code": f"print({i} * {i})", "run_timeout": 20})
        except httpx.HTTPError as err:  # a lost request
            return f"lost: {type(err).__name__}: {err}"
        return _categorize(response, f"{i * i}\n")

    async def main() -> list[str]:
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=server.url, timeout=timeout, limits=limits) as client:
            return await asyncio.gather(*[one(client, i) for i in range(n)])

    outcomes = asyncio.run(main())
    counts = {k: outcomes.count(k) for k in ("ok", "overloaded")}
    return counts, [o for o in outcomes if o not in counts]


def test_thousand_concurrent_requests_none_lost(server: SandboxProcess) -> None:
    before = httpx.get(server.url + "/health", timeout=10).json()["capacity"]
    counts, other = flood(server, 1000, timeout=120)
    assert other == [], other[:5]
    assert counts["ok"] + counts["overloaded"] == 1000
    assert counts["ok"] >= before["workers"] + before["queue"]  # the first wave all got a place
    after = httpx.get(server.url + "/health", timeout=10).json()["capacity"]
    assert after["running"] == after["queued"] == 0
    assert after["completed"] - before["completed"] == counts["ok"]
    assert after["rejected"] - before["rejected"] == counts["overloaded"]
    assert_clean(server)


@pytest.mark.slow
def test_thousand_concurrent_requests_all_served_with_a_deep_queue() -> None:
    # every request fits in the queue: all 1,000 must come back right, none overloaded
    with SandboxProcess(workers=2, queue=1000) as deep:
        counts, other = flood(deep, 1000, timeout=600)
        assert other == [] and counts == {"ok": 1000, "overloaded": 0}, (counts, other[:5])
        capacity = httpx.get(deep.url + "/health", timeout=10).json()["capacity"]
        assert capacity["completed"] == 1000 and capacity["running"] == capacity["queued"] == 0
        assert_clean(deep)
