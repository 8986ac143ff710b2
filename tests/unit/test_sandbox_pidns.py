"""The run's PID namespace made in the forked child (pidns.py): launcher, init as pid 1, the
program as pid 2 with its filter, exit statuses and notes as dash gave them (no server)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from turnrl.servers.sandbox import seccomp
from turnrl.servers.sandbox.isolation import Isolation, Limits
from turnrl.servers.sandbox.nsetup import exposures
from turnrl.servers.sandbox.pidns import exit_code, signal_note

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces are Linux only")
LIMITS = Limits(1 << 30, 10, 1 << 20, 64, 1 << 20)
NOBODY = 65534


def test_exit_statuses_as_the_shell_reports_them() -> None:
    # raw wait statuses: exit(3) = 3 << 8 = 768; death by SIGKILL = 9, SIGALRM = 14, SIGPIPE = 13;
    # SIGSEGV with a core dump = 11 | 0x80 = 139
    assert (exit_code(768), signal_note(768)) == (3, "")
    assert (exit_code(9), signal_note(9)) == (137, "Killed\n")  # 128 + 9
    assert (exit_code(14), signal_note(14)) == (142, "Alarm clock\n")
    assert (exit_code(13), signal_note(13)) == (141, "")  # dash stays quiet about SIGPIPE and SIGINT
    assert signal_note(2) == ""
    assert (exit_code(139), signal_note(139)) == (139, "Segmentation fault (core dumped)\n")


@needs_linux
@pytest.mark.skipif(os.path.realpath("/bin/sh") != "/usr/bin/dash", reason="compares with dash")
def test_signal_notes_match_dash() -> None:
    for number in (1, 6, 9, 10, 14, 15, 34):  # SIGINT, SIGPIPE, SIGXFSZ: python handles or ignores them
        # SIG_DFL first: a test run started under nohup inherits SIGHUP ignored
        die = (
            "import os, resource, signal; resource.setrlimit(resource.RLIMIT_CORE, (0, 0)); "
            f"signal.signal(signal.SIGHUP, signal.SIG_DFL); os.kill(os.getpid(), {number})"
        )
        shell = subprocess.run(
            ["sh", "-c", '"$@"; exit $?', "init", sys.executable, "-c", die], capture_output=True, check=False
        )
        assert shell.returncode == exit_code(number)
        assert shell.stderr.decode() == signal_note(number)


def pid_isolation() -> Isolation:
    """PID and mount namespaces, with the program unprivileged: as root it runs as nobody, else
    in a user namespace. The interpreter stays in reach where the private /tmp or a directory
    nobody may enter (/root/.pyenv) would hide it."""
    root = os.geteuid() == 0
    paths = [sys.executable, sys.prefix, sys.base_prefix, *sys.path]
    return Isolation(
        uid_base=NOBODY if root else None,
        user_ns=not root,
        mount_ns=True,
        pid_ns=True,
        pdeathsig=True,
        expose=exposures(paths, uid_drop=root),
    )


def _namespaces_work() -> bool:
    iso = pid_isolation()
    try:
        out = subprocess.run(["true"], preexec_fn=iso.preexec(LIMITS, 0, 16), capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0


needs_pid_namespace = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _namespaces_work(),
    reason="no PID and mount namespaces here (neither root nor unprivileged user namespaces)",
)

LOOK = (
    "import json, os, sys\n"
    "def seccomp(pid):\n"
    "    lines = open(f'/proc/{pid}/status').read().splitlines()\n"
    "    return [l.split()[1] for l in lines if l.startswith('Seccomp:')][0]\n"
    "def cmdline(pid):\n"
    "    return open(f'/proc/{pid}/cmdline', 'rb').read().decode(errors='replace')\n"
    "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
    "def environ(pid):\n"
    "    try:\n"
    "        return open(f'/proc/{pid}/environ', 'rb').read().decode()\n"
    "    except OSError as err:\n"
    "        return err.strerror\n"
    "print(json.dumps({'me': os.getpid(), 'pids': pids, 'seccomp': [seccomp(2), seccomp(1)],\n"
    "    'fds': sorted(os.listdir('/proc/self/fd')), 'init': [cmdline(1), environ(1)]}))\n"
    "os.kill(os.getpid(), 14)\n"  # SIGALRM: the program dies of a signal pid 1 would ignore
)


@needs_pid_namespace
def test_program_is_pid_2_under_its_own_init(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)  # the program's cwd, for nobody too
    iso = pid_isolation()
    arch = seccomp.arch_for(platform.machine())
    if arch is not None:
        iso.seccomp = seccomp.build_filter(arch)
    out = subprocess.run(
        [sys.executable, "-c", LOOK],
        preexec_fn=iso.preexec(LIMITS, 0, 16),
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    seen = json.loads(out.stdout)
    assert seen["me"] == 2 and seen["pids"] == [1, 2]  # its own /proc: init and itself
    assert out.returncode == 128 + 14 and out.stderr == b"Alarm clock\n"  # as `sh -c` reported it
    if arch is not None:  # the filter is on the program only; init installed none
        assert seen["seccomp"] == ["2", "0"]
    assert seen["fds"] == ["0", "1", "2", "3"]  # 3: the directory being listed
    # init is a copy of this test process, but shows neither its command line nor its environment
    assert seen["init"][0].rstrip("\0") == "sandbox-init"
    assert seen["init"][1] == "Permission denied"


@needs_pid_namespace
def test_what_the_program_leaves_dies_with_init(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    marker = f"left-{uuid.uuid4().hex}"
    iso = pid_isolation()
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}],\n"
        "                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print('started')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], preexec_fn=iso.preexec(LIMITS, 0, 16), cwd=tmp_path, capture_output=True
    )
    assert out.returncode == 0 and out.stdout == b"started\n", out.stderr
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                left.append(pid)
        except OSError:
            continue
    assert left == [], "a setsid daemon outlived the namespace's init"


@needs_pid_namespace
def test_exec_failure_surfaces_and_leaves_nothing(tmp_path: Path) -> None:
    iso = pid_isolation()
    with pytest.raises(FileNotFoundError):
        subprocess.run(["/nonexistent/python"], preexec_fn=iso.preexec(LIMITS, 0, 16), cwd=tmp_path)
    assert not [c for c in _children() if c != os.getpid()], "launcher or init left behind"


def _children() -> list[int]:
    me = os.getpid()
    with open(f"/proc/{me}/task/{me}/children") as f:
        return [int(p) for p in f.read().split()]
