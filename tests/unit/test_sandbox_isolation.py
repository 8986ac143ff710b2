"""Environment, exposures, rlimits, preexec and output capping of the sandbox runner (no server)."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from turnrl.servers.sandbox.isolation import (
    FALLBACK_NOTE,
    SETUP_EXIT,
    SETUP_FAILED,
    Isolation,
    Limits,
    cpu_seconds_for,
)
from turnrl.servers.sandbox.nsetup import WORK_PATH, exposures
from turnrl.servers.sandbox.runner import CappedOutput


def full() -> Isolation:
    return Isolation(uid_base=200_000, net_ns=True, pid_ns=True, mount_ns=True)


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
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
    }
    assert not any(k.startswith(("TURNRL", "HF_", "AWS", "CUDA")) for k in env)  # nothing of the server
    plain = Isolation().env("/host/run-1", [])
    assert plain["HOME"] == plain["TMPDIR"] == "/host/run-1"


def test_exposures_find_the_blocking_ancestor() -> None:
    base = Path(tempfile.mkdtemp(dir="/var/lib"))  # pytest's tmp_path sits under /tmp, a temp dir itself
    try:
        os.chmod(base, 0o755)
        locked = base / "locked"
        inner = locked / "py" / "lib"
        inner.mkdir(parents=True)
        os.chmod(locked, 0o700)
        (base / "open").mkdir()
        paths = [str(locked / "py"), str(inner), str(base / "open"), "/nonexistent/x"]
        assert exposures(paths, uid_drop=True) == [(str(locked / "py"), str(locked))]  # inner is covered
        assert exposures(paths, uid_drop=False) == []  # the server's own uid can enter it
    finally:
        shutil.rmtree(base)


def test_exposures_bring_back_paths_under_temp_dirs() -> None:
    # a venv or checkout under /tmp (where CI may clone) vanishes under the private /tmp tmpfs
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        venv = base / "venv"
        (venv / "bin").mkdir(parents=True)
        (venv / "lib" / "site-packages").mkdir(parents=True)
        target = base / "python3"
        target.write_text("")
        (venv / "bin" / "python").symlink_to(target)
        link = base / "link"
        link.symlink_to("/usr/lib")
        paths = [str(venv / "bin" / "python"), str(venv), str(venv / "lib" / "site-packages"), str(link)]
        found = exposures([*paths, "/tmp", WORK_PATH + "/x", "/usr/bin"], uid_drop=True)
        # the venv (its bin/python link), the link's target file, the link under its own name;
        # never a temp dir itself, the work dir, or a path the mounts do not hide
        assert found == [(str(link), None), (str(target), None), (str(venv), None)]
    finally:
        shutil.rmtree(base)


def test_describe_shouts_about_a_fallback_and_why() -> None:
    why = "mount: FileNotFoundError: [Errno 2] No such file or directory: '/x/bin/python'"
    iso = Isolation(fallbacks=[why], notes=[f"{FALLBACK_NOTE}: {why}", "cgroup: needs root"])
    lines = iso.describe()
    warning = next(i for i, line in enumerate(lines) if "WARNING: fell back to weaker isolation" in line)
    assert lines[warning + 1].strip() == why  # the reason, on a line of its own
    assert sum(why in line for line in lines) == 1 and "  note: cgroup: needs root" in lines
    assert not any(
        "WARNING: fell back" in line for line in Isolation(notes=["cgroup: needs root"]).describe()
    )


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
        preexec_fn=Isolation().preexec(limits, 0, 64),
        capture_output=True,
        check=True,
    )
    assert out.stdout.split() == [b"512", b"32"]


def test_preexec_failure_is_reported_not_raised() -> None:
    broken = Isolation(uid_base=None)
    broken.cgroups = type("NoCgroup", (), {"procs_files": lambda self, slot: ["/nonexistent/cgroup.procs"]})()
    limits = Limits(address_space=512 << 20, cpu_seconds=5, file_size=1 << 20, open_files=32, processes=10**6)
    out = subprocess.run(
        [sys.executable, "-c", "pass"], preexec_fn=broken.preexec(limits, 0, 64), capture_output=True
    )
    assert out.returncode == SETUP_EXIT
    assert out.stderr.startswith(SETUP_FAILED.encode()) and b"/nonexistent/cgroup.procs" in out.stderr


def test_capped_output_keeps_a_prefix_and_counts_the_rest() -> None:
    out = CappedOutput(cap=5)
    for _ in range(100_000):
        out.add(b"ab\xff")
    assert out.kept == b"ab\xffab" and out.total == 300_000 and out.truncated
    assert out.text() == "ab\ufffdab"  # invalid UTF-8 is replaced, never raised
    small = CappedOutput(cap=5)
    small.add(b"ok")
    assert not small.truncated and small.text() == "ok"
