"""The sandbox's minimal root: what goes in (pure functions on made-up layouts), the plan for this
host, and entering it for real in a forked child (no server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import turnrl.servers.sandbox.app as sandbox_app
from turnrl.servers.sandbox.isolation import Isolation, Limits
from turnrl.servers.sandbox.nsetup import WORK_PATH
from turnrl.servers.sandbox.rootfs import etc_files, outermost, plan_root, python_dirs, resolve


def test_outermost_keeps_parents_only() -> None:
    paths = ["/usr/lib/python3", "/usr/lib", "/usr/lib64", "/a-b", "/a/b", "/a", "/usr/lib"]
    # "/a-b" sorts before "/a/b" ('-' < '/') and is no child of "/a"; "/usr/lib64" none of "/usr/lib"
    assert outermost(paths) == ["/a", "/a-b", "/usr/lib", "/usr/lib64"]


def test_python_dirs_of_a_venv_leave_the_checkout_out() -> None:
    prefixes = ["/w/.venv", "/opt/py", "/w/.venv", "/opt/py"]  # prefix, base, exec, base exec
    sys_path = [
        "",  # the script's dir: the work dir, bound anyway
        "/opt/py/lib/python311.zip",
        "/opt/py/lib/python3.11",
        "/w/.venv/lib/python3.11/site-packages",
        "/w/src",  # an editable checkout: the server's own source
        "/other/venv/site-packages",  # a .pth pointing at another site-packages
    ]
    holds = {"/other/venv/site-packages"}.__contains__
    assert python_dirs(prefixes, sys_path, holds) == [
        "/w/.venv",
        "/opt/py",
        "/opt/py/lib/python311.zip",
        "/opt/py/lib/python3.11",
        "/w/.venv/lib/python3.11/site-packages",
        "/other/venv/site-packages",
    ]


def test_python_dirs_of_the_system_python_bind_no_whole_usr() -> None:
    sys_path = [
        "/usr/lib/python3.11",
        "/usr/local/lib/python3.11/dist-packages",
        "/usr/lib/python3/dist-packages",
        "/usr/share/doc-tool",  # under /usr, but no library dir of it
    ]
    assert python_dirs(["/usr"] * 4, sys_path, lambda _: False) == sys_path[:3]


def test_resolve_records_every_link_on_the_way() -> None:
    links = {
        "/bin": "usr/bin",
        "/w/.venv/bin/python": "python3",
        "/w/.venv/bin/python3": "/opt/py/bin/python3",
        "/lib64": "usr/lib64",
        "/loop": "/loop",
    }
    assert resolve("/w/.venv/bin/python", links.get) == (
        "/opt/py/bin/python3",
        [("/w/.venv/bin/python", "python3"), ("/w/.venv/bin/python3", "/opt/py/bin/python3")],
    )
    assert resolve("/bin/bash", links.get) == ("/usr/bin/bash", [("/bin", "usr/bin")])
    assert resolve("/lib64/../etc", links.get) == (
        "/usr/etc",
        [("/lib64", "usr/lib64")],
    )  # ".." after the link
    with pytest.raises(OSError, match="too many levels"):
        resolve("/loop/x", links.get)


def test_etc_names_only_root_the_run_uids_and_nobody() -> None:
    files = dict(etc_files([200_000, 200_001]))
    names = [line.split(":")[0] for line in files["/etc/passwd"].splitlines()]
    assert names == ["root", "sandbox0", "sandbox1", "nobody"]
    assert "sandbox1:x:200001:200001::/tmp/sandbox:/bin/sh" in files["/etc/passwd"]
    assert "nogroup:x:65534:" in files["/etc/group"]
    assert [line.split(":")[0] for line in dict(etc_files([]))["/etc/passwd"].splitlines()] == [
        "root",
        "nobody",
    ]


def _layout() -> tuple[list[str], list[str]]:
    return [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix], list(sys.path)


needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


@needs_linux
def test_plan_for_this_host_has_the_interpreter_and_not_the_source() -> None:
    plan = plan_root(*_layout(), [sys.executable, "/bin/sh"], [])
    source = Path(sandbox_app.__file__).resolve()
    assert not any(source.is_relative_to(b) for b in plan.binds), "the server's source would be visible"
    real_python = os.path.realpath(sys.executable)
    assert any(real_python == b or real_python.startswith(b + "/") for b in plan.binds)
    assert "/usr/bin" in plan.binds and "/dev/null" in plan.devices
    if os.path.islink("/bin"):  # usr-merged hosts
        assert ("/bin", os.readlink("/bin")) in plan.links
    if os.path.isdir("/etc/alternatives"):  # awk -> /etc/alternatives/awk -> mawk
        assert "/etc/alternatives" in plan.binds


def _can_mount_namespace() -> bool:
    user = os.geteuid() != 0
    probe = ["unshare", "-Urm" if user else "-m", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


LOOK = (
    "import json, os, sys\n"
    "def readable(p):\n"
    "    try:\n"
    "        open(p, 'rb').read(1)\n"
    "        return True\n"
    "    except OSError:\n"
    "        return False\n"
    "print(json.dumps({'root': sorted(os.listdir('/')), 'cwd': os.getcwd(),\n"
    "    'prefix': sys.prefix, 'readable': {p: readable(p) for p in sys.argv[1:]}}))\n"
)


@needs_linux
def test_entering_the_root_in_a_forked_child(tmp_path: Path) -> None:
    if not _can_mount_namespace():
        pytest.skip("no mount namespace here (neither root nor unprivileged user namespaces)")
    plan = plan_root(*_layout(), [sys.executable], [])
    iso = Isolation(user_ns=os.geteuid() != 0, mount_ns=True, root=plan)
    limits = Limits(1 << 30, 10, 1 << 20, 64, 1 << 20)
    secret = tmp_path / "secret.txt"
    secret.write_text("host file")
    os.chmod(tmp_path, 0o755)
    source = sandbox_app.__file__
    out = subprocess.run(
        [sys.executable, "-c", LOOK, str(secret), source, "/etc/shadow", "/etc/passwd"],
        preexec_fn=iso.preexec(limits, 0, 16),
        cwd=tmp_path,
        env=iso.env(WORK_PATH, [os.path.dirname(sys.executable)]),
        capture_output=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr.decode()
    seen = json.loads(out.stdout)
    assert seen["cwd"] == WORK_PATH and seen["prefix"] == sys.prefix
    assert seen["readable"] == {str(secret): False, source: False, "/etc/shadow": False, "/etc/passwd": True}
    assert {"usr", "etc", "dev", "proc", "tmp"} <= set(seen["root"])
    assert not {"home", "run", "sys", "srv", "boot", "mnt", "opt"} & set(seen["root"]) - {
        p.split("/")[1] for p in plan.binds
    }
