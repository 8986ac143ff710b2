"""Hostile commands against sandbox sessions on the real server: a fork bomb, a disk fill, a deep
directory tree, a daemon left behind, a symlink out of the workspace, and one session reaching for
another's files by path and through /proc. After each the server answers normally, nothing of the
sessions' uids is alive and no session dir is left on the host. Tests that need no root-only
layer also run against a server started with `--isolation basic`."""

from __future__ import annotations

import asyncio
import os
import time

import httpx
import pytest

from tests.support.sandbox_runs import fork_bounded
from tests.support.sandbox_runs import run as run_code
from tests.support.session_server import (
    assert_idle,
    create,
    delete,
    fixtures,
    health,
    http,
    roots,
    run,
)
from turnrl.servers.sandbox.process import SandboxProcess

server, basic, any_server = fixtures()


def serving(server: SandboxProcess) -> None:
    """/run_code still answers as before, and the sessions are all gone."""
    ok = run_code(server, "print(6 * 7)")
    assert ok["run_result"]["stdout"] == "42\n", ok
    assert_idle(server)


def test_fork_bomb_in_a_session(server: SandboxProcess) -> None:
    if not fork_bounded(server):
        pytest.skip("root server without uid or cgroup layer: fork bombs are not bounded (/health says so)")
    sid = create(server)
    start = time.monotonic()
    out = run(server, sid, "bomb() { bomb | bomb & }; bomb; sleep 5", timeout_s=1.5)
    assert out["timed_out"] and time.monotonic() - start < 8
    assert run(server, sid, "echo alive")["stdout"] == "alive\n"  # the session goes on
    delete(server, sid)
    serving(server)


def test_disk_fill_is_stopped(any_server: SandboxProcess) -> None:
    sid = create(any_server)
    before = roots(any_server)
    (root,) = before
    # several writers at once, each file under RLIMIT_FSIZE: only the session quota (8 MiB) stops them
    out = run(any_server, sid, "for i in 1 2 3 4; do (cat /dev/zero > fill$i) & done; wait", timeout_s=20)
    assert out["status"] == "Error" and "quota" in out["message"], out
    used = sum(
        os.stat(os.path.join(root, "app", n)).st_blocks * 512 for n in os.listdir(os.path.join(root, "app"))
    )
    assert used < 1 << 30, used  # stopped within one check interval, far below the disk
    delete(any_server, sid)
    serving(any_server)


def test_deep_directory_tree_is_stopped_and_removed(any_server: SandboxProcess) -> None:
    sid = create(any_server)
    # 600 levels: well past the depth limit (128); more only costs rmdir time (ms each on some disks)
    code = "import os\\nfor i in range(600):\\n    os.mkdir('d'); os.chdir('d')"
    out = run(any_server, sid, f'python -c "$(printf "{code}")"', timeout_s=20)
    assert "deeper than" in out["message"] or "over the limit" in out["message"], out
    delete(any_server, sid)
    serving(any_server)


def test_a_daemon_dies_with_its_command(any_server: SandboxProcess) -> None:
    sid = create(any_server)
    daemon = (
        "setsid bash -c 'while true; do date +%s%N >> beat; sleep 0.02; done' > /dev/null 2>&1 < /dev/null &"
    )
    out = run(any_server, sid, f"{daemon} sleep 0.3; echo started")
    assert out["stdout"] == "started\n"
    first = run(any_server, sid, "wc -l < beat")["stdout"]
    time.sleep(0.5)
    assert run(any_server, sid, "wc -l < beat")["stdout"] == first  # nothing beats any more
    uids = health(any_server)["sessions"]["uids"]
    if uids:
        from tests.support.proc_scan import pids_of_uids

        assert pids_of_uids(*uids) == []
    delete(any_server, sid)
    serving(any_server)


def test_a_symlink_out_of_the_workspace_reads_nothing_of_the_host(any_server: SandboxProcess) -> None:
    sid = create(any_server)
    run(any_server, sid, "ln -s /etc/shadow s; ln -s / top; ln -s ../../.. up; true")
    for path in ("s", "top/etc/shadow", "up/etc/shadow", "/app/s"):
        got = http(any_server, "GET", f"/sessions/{sid}/files", params={"path": path})
        assert got.status_code == 400 and "root:" not in got.text, (path, got.text)
    delete(any_server, sid)
    serving(any_server)


def test_a_session_cannot_reach_another_sessions_files(server: SandboxProcess) -> None:
    secret = f"s3cret-{os.getpid()}-{time.time_ns()}"
    victim = create(server, {"secret.txt": secret})
    thief = create(server)
    work_root = health(server)["work_root"]
    (victim_root,) = [r for r in roots(server) if os.path.exists(os.path.join(r, "app", "secret.txt"))]
    looks = [
        f"cat {victim_root}/app/secret.txt",
        f"cat {work_root}/session-*/app/secret.txt",
        f"ls {work_root}",
        "cat /proc/*/root/app/secret.txt",
        "cat /proc/*/cwd/secret.txt",
        "grep -rs s3cret /proc/*/environ /proc/*/cmdline",
        "find / -xdev -name secret.txt 2>/dev/null",
    ]

    async def steal() -> list[str]:
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=30) as client:
            # the victim's command is alive meanwhile, its cwd in its workspace and the secret in its argv
            holding = asyncio.ensure_future(
                client.post(f"/sessions/{victim}/run", json={"command": f"sleep 2 # {secret}"})
            )
            await asyncio.sleep(0.3)
            seen = []
            for look in looks:
                response = await client.post(f"/sessions/{thief}/run", json={"command": look})
                seen.append(response.json()["stdout"])
            await holding
            return seen

    for look, seen in zip(looks, asyncio.run(steal()), strict=True):
        assert secret not in seen, look
    read = http(server, "GET", f"/sessions/{thief}/files", params={"path": f"{victim_root}/app/secret.txt"})
    assert read.status_code == 400
    delete(server, victim)
    delete(server, thief)
    serving(server)


@pytest.mark.slow
def test_many_sessions_many_commands(server: SandboxProcess) -> None:
    """Every session slot used at once, each running commands in a loop; all answered right."""
    cap = health(server)["sessions"]["max"]

    async def main() -> None:
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=120) as client:

            async def one(i: int) -> None:
                sid = (await client.post("/sessions", json={})).json()["session_id"]
                for j in range(20):
                    out = (
                        await client.post(
                            f"/sessions/{sid}/run", json={"command": f"echo {i}-{j} >> log; wc -l < log"}
                        )
                    ).json()
                    assert out["stdout"] == f"{j + 1}\n", out
                assert (await client.delete(f"/sessions/{sid}")).status_code == 204

            await asyncio.gather(*(one(i) for i in range(cap)))

    asyncio.run(main())
    serving(server)
