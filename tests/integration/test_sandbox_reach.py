"""Hostile programs against the real sandbox server, part two: what a program can reach (host files,
other runs, other processes, kernel interfaces), daemons that outlive their response, and a
thousand concurrent requests. Fixtures: tests/integration/conftest.py."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import platform
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import turnrl.servers.sandbox.app as sandbox_app
from tests.support.proc_scan import cmdlines_with
from tests.support.sandbox_runs import (
    MINIMAL_USERS,
    SECRET,
    SECRET_NAME,
    SYSTEM_TOPS,
    assert_clean,
    read_in_sandbox,
    run,
    skip_without,
)
from turnrl.servers.sandbox import seccomp
from turnrl.servers.sandbox.process import SandboxProcess


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
        async with httpx.AsyncClient(
            base_url=server.url, timeout=timeout, limits=limits, headers=server.headers
        ) as client:
            return await asyncio.gather(*[one(client, i) for i in range(n)])

    outcomes = asyncio.run(main())
    counts = {k: outcomes.count(k) for k in ("ok", "overloaded")}
    return counts, [o for o in outcomes if o not in counts]


def test_thousand_concurrent_requests_none_lost(server: SandboxProcess) -> None:
    before = httpx.get(server.url + "/health", headers=server.headers, timeout=10).json()["capacity"]
    counts, other = flood(server, 1000, timeout=120)
    assert other == [], other[:5]
    assert counts["ok"] + counts["overloaded"] == 1000
    assert counts["ok"] >= before["workers"] + before["queue"]  # the first wave all got a place
    after = httpx.get(server.url + "/health", headers=server.headers, timeout=10).json()["capacity"]
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
        capacity = httpx.get(deep.url + "/health", headers=deep.headers, timeout=10).json()["capacity"]
        assert capacity["completed"] == 1000 and capacity["running"] == capacity["queued"] == 0
        assert_clean(deep)
