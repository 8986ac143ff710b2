"""Command lines, mount script, rlimits and output capping of the sandbox runner (no server)."""

from __future__ import annotations

import asyncio
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from turnrl.servers.sandbox.isolation import (
    WORK_PATH,
    Isolation,
    Limits,
    cpu_seconds_for,
    hidden_paths,
    mount_script,
)
from turnrl.servers.sandbox.runner import CappedOutput


def full() -> Isolation:
    return Isolation(
        uid_base=200_000,
        net_ns=True,
        pid_ns=True,
        mount_ns=True,
        unshare="/usr/bin/unshare",
        setpriv="/usr/bin/setpriv",
        sh="/bin/sh",
    )


def test_argv_layers_wrap_the_program_in_order() -> None:
    argv = full().argv(["python", "main.py"], slot=3, tmpfs_MB=32)
    assert argv[:7] == ["/usr/bin/unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--"]
    assert argv[7:9] == ["/bin/sh", "-c"]  # mounts run as root, before the uid drop
    assert argv[10:12] == ["turnrl-sandbox", "32m"]
    assert argv[12:18] == [
        "/usr/bin/setpriv",
        "--reuid=200003",
        "--regid=200003",
        "--clear-groups",
        "--no-new-privs",
        "--",
    ]
    assert argv[18:] == ["python", "main.py"]


def test_argv_without_namespaces_is_the_program() -> None:
    assert Isolation().argv(["bash", "main.sh"], 0, 64) == ["bash", "main.sh"]
    userns = Isolation(user_ns=True, net_ns=True, unshare="unshare")
    assert userns.argv(["p"], 0, 64) == ["unshare", "--user", "--map-root-user", "--net", "--", "p"]


def test_env_is_minimal_and_points_home_at_the_work_dir() -> None:
    env = full().env(full().work_path("/host/run-1"), ["/venv/bin"])
    assert env["HOME"] == WORK_PATH and env["TMPDIR"] == "/tmp"
    assert env["PATH"] == "/venv/bin:/usr/local/bin:/usr/bin:/bin"
    assert set(env) == {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
    }
    plain = Isolation().env("/host/run-1", [])
    assert plain["HOME"] == plain["TMPDIR"] == "/host/run-1"


def test_mount_script_parses_and_exposes_hidden_interpreters() -> None:
    script = mount_script([("/root/.pyenv/versions/3.11.7", "/root")])
    subprocess.run(["sh", "-n", "-c", script], check=True)  # syntax only
    assert "mount --bind /root/.pyenv/versions/3.11.7 /tmp/.expose0" in script
    assert "mount -t tmpfs -o size=1m,mode=755 tmpfs /root" in script
    assert script.index("/tmp/.expose0") < script.index("tmpfs /root")  # staged before /root is covered
    assert script.rstrip().endswith('exec "$@"')
    odd = mount_script([("/opt/my dir/py", "/opt/my dir")])
    assert shlex.quote("/opt/my dir/py") in odd


def test_hidden_paths_finds_the_blocking_ancestor() -> None:
    base = Path(tempfile.mkdtemp())  # pytest's tmp_path sits under a 0700 directory itself
    try:
        os.chmod(base, 0o755)
        locked = base / "locked"
        inner = locked / "py" / "lib"
        inner.mkdir(parents=True)
        os.chmod(locked, 0o700)
        (base / "open").mkdir()
        found = hidden_paths([str(locked / "py"), str(inner), str(base / "open"), "/nonexistent/x"])
        assert found == [(str(locked / "py"), str(locked))]  # inner is covered by its parent
    finally:
        shutil.rmtree(base)


def test_limits_never_raise_a_hard_limit() -> None:
    _, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    huge = Limits(address_space=1 << 30, cpu_seconds=3, file_size=1 << 20, open_files=10**9, processes=64)
    pairs = dict(huge.pairs())
    if nofile_hard != resource.RLIM_INFINITY:
        assert pairs[resource.RLIMIT_NOFILE] == (nofile_hard, nofile_hard)
    assert pairs[resource.RLIMIT_CPU] == (3, 4)  # SIGXCPU, then SIGKILL a second later
    assert pairs[resource.RLIMIT_CORE] == (0, 0)
    assert cpu_seconds_for(1.2) == 3


def test_preexec_applies_rlimits_in_the_child() -> None:
    limits = Limits(address_space=512 << 20, cpu_seconds=5, file_size=1 << 20, open_files=32, processes=10**6)
    code = "import resource as r; print(r.getrlimit(r.RLIMIT_AS)[0] >> 20, r.getrlimit(r.RLIMIT_NOFILE)[0])"
    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=Isolation().preexec(limits, 0),
        capture_output=True,
        check=True,
    )
    assert out.stdout.split() == [b"512", b"32"]


def test_capped_output_keeps_a_prefix_and_counts_the_rest() -> None:
    async def pump(data: bytes, cap: int) -> CappedOutput:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        out = CappedOutput(cap)
        await out.pump(reader)
        return out

    out = asyncio.run(pump(b"ab\xff" * 100_000, cap=5))
    assert out.kept == b"ab\xffab" and out.total == 300_000 and out.truncated
    assert out.text() == "ab\ufffdab"  # invalid UTF-8 is replaced, never raised
    small = asyncio.run(pump(b"ok", cap=5))
    assert not small.truncated and small.text() == "ok"
