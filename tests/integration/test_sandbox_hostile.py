"""Hostile programs against the real sandbox server (a subprocess on a free localhost port).

Each program must be contained with the right status; afterwards the server still answers a
normal request, no process of the run survives and no file is left behind. Where a layer is
missing on this host, the test asserts that /health says so instead of pretending.

Tests that must hold whatever the layers take `any_server`: they run against the server with
every layer this host supports and against one started with `--isolation basic`, the weakest
mode (no namespaces, no uid, no cgroup), which is also what a host without them falls back to.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

import pytest

from tests.support.sandbox_runs import (
    SECRET,
    SECRET_NAME,
    assert_clean,
    fork_bounded,
    run,
)
from turnrl.servers.sandbox.process import SandboxProcess


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
