"""Sandbox sessions against the real server (a subprocess on a free localhost port): a workspace
that persists across commands, the file API, its limits (TTL, live sessions, disk, files), path
escapes, and the client. The hostile programs are in test_sandbox_sessions_hostile.py."""

from __future__ import annotations

import asyncio
import base64
import os
import time

import httpx
import pytest

from tests.support.session_server import (
    assert_idle,
    b64,
    create,
    delete,
    fixtures,
    health,
    http,
    roots,
    run,
)
from turnrl.servers.sandbox.client import SandboxClient, SandboxRequestError, SessionGone
from turnrl.servers.sandbox.process import SandboxProcess

server, basic, any_server = fixtures()


def test_files_persist_across_commands_and_the_file_api(any_server: SandboxProcess) -> None:
    before = roots(any_server)
    sid = create(any_server, {"src/a.py": "print('a')\n", "/tests/test.sh": "echo tested\n"})
    (root,) = roots(any_server) - before
    out = run(any_server, sid, "echo one > made.txt && python src/a.py")
    assert out["return_code"] == 0 and out["stdout"] == "a\n" and out["status"] == "Finished"
    assert not out["timed_out"]
    assert run(any_server, sid, "cat made.txt; bash $TURNRL_TESTS/test.sh")["stdout"] == "one\ntested\n"
    got = http(any_server, "GET", f"/sessions/{sid}/files", params={"path": "/app/made.txt"}).json()
    assert base64.b64decode(got["content"]) == b"one\n" and got["path"] == "/app/made.txt"
    put = http(
        any_server,
        "PUT",
        f"/sessions/{sid}/files",
        params={"path": "new/b.txt"},
        json={"content": b64("two")},
    )
    assert put.status_code == 204
    assert run(any_server, sid, "cat new/b.txt && echo 3 > new/b.txt")["stdout"] == "two"
    got = http(any_server, "GET", f"/sessions/{sid}/files", params={"path": "new/b.txt"}).json()
    assert base64.b64decode(got["content"]) == b"3\n"  # the command's file, owned by the same uid
    delete(any_server, sid)
    assert not os.path.exists(root)
    delete(any_server, sid)  # idempotent
    gone = http(any_server, "POST", f"/sessions/{sid}/run", json={"command": "true"})
    assert gone.status_code == 410 and "deleted" in gone.json()["detail"]
    assert http(any_server, "DELETE", "/sessions/ffffffffffffffffffffffff").status_code == 404
    assert_idle(any_server)


def test_fixed_paths_env_and_verifier_logs(server: SandboxProcess) -> None:
    if not server.health["isolation"]["layers"]["rootfs"]:
        pytest.skip("no rootfs layer: /app, /tests, /logs do not exist for commands (see /health notes)")
    sid = create(server, {"/tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n"})
    out = run(server, sid, "pwd; echo $TURNRL_WORKSPACE $HOME; bash /tests/test.sh; id -u")
    lines = out["stdout"].split("\n")
    assert lines[0] == "/app" and lines[1] == "/app /app", out
    first, last = health(server)["sessions"]["uids"]
    assert first <= int(lines[2]) <= last  # the session's own uid
    reward = http(
        server, "GET", f"/sessions/{sid}/files", params={"path": "/logs/verifier/reward.txt"}
    ).json()
    assert base64.b64decode(reward["content"]) == b"1\n"
    delete(server, sid)


def test_basic_mode_runs_in_the_host_dir_and_says_so(basic: SandboxProcess) -> None:
    sid = create(basic)
    out = run(basic, sid, 'pwd; echo "$TURNRL_WORKSPACE"; echo "$HOME"')
    cwd, workspace, home, _ = out["stdout"].split("\n")
    assert cwd == workspace == home and cwd.startswith(health(basic)["work_root"]) and cwd.endswith("/app")
    assert any("/app" in note for note in health(basic)["sessions"]["notes"])
    run(basic, sid, "echo hi > x")  # the host path of its own workspace works in the file API too
    got = http(basic, "GET", f"/sessions/{sid}/files", params={"path": f"{cwd}/x"}).json()
    assert base64.b64decode(got["content"]) == b"hi\n"
    delete(basic, sid)


def test_ttl_expiry_removes_everything(any_server: SandboxProcess) -> None:
    before = roots(any_server)
    sid = create(any_server, {"a": "x"}, ttl_s=1)
    (root,) = roots(any_server) - before
    run(any_server, sid, "mkdir -p d && echo y > d/f")
    deadline = time.monotonic() + 5
    while os.path.exists(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(root)
    gone = http(any_server, "POST", f"/sessions/{sid}/run", json={"command": "true"})
    assert gone.status_code == 410 and "expired" in gone.json()["detail"]
    assert health(any_server)["sessions"]["expired"] >= 1
    assert_idle(any_server)


def test_ttl_expiry_kills_a_running_command(server: SandboxProcess) -> None:
    sid = create(server, ttl_s=1.5)
    start = time.monotonic()
    out = run(server, sid, "sleep 30", timeout_s=60, status=410)
    assert "expired" in out["detail"] and "killed" in out["detail"]
    assert time.monotonic() - start < 5
    assert_idle(server)


def test_ttl_bounds_are_checked(server: SandboxProcess) -> None:
    for ttl in (0, -1, 1e9):
        response = http(server, "POST", "/sessions", json={"ttl_s": ttl})
        assert response.status_code == 422 and "ttl_s" in response.json()["detail"]


def test_live_sessions_are_capped(server: SandboxProcess) -> None:
    cap = health(server)["sessions"]["max"]
    sids = [create(server) for _ in range(cap)]
    refused = http(server, "POST", "/sessions", json={})
    assert refused.status_code == 503 and "--max-sessions" in refused.json()["detail"]
    assert refused.headers["retry-after"] == "1"
    delete(server, sids.pop())
    sids.append(create(server))
    for sid in sids:
        delete(server, sid)
    assert_idle(server)


def test_disk_quota_kills_the_command_and_freezes_the_session(any_server: SandboxProcess) -> None:
    sid = create(any_server)
    start = time.monotonic()
    out = run(any_server, sid, "for i in $(seq 200); do head -c 1000000 /dev/zero > f$i; sleep 0.01; done")
    assert out["status"] == "Error" and "quota" in out["message"], out
    assert time.monotonic() - start < 4
    refused = run(any_server, sid, "rm f*", status=409)
    assert "limits" in refused["detail"]
    put = http(any_server, "PUT", f"/sessions/{sid}/files", params={"path": "x"}, json={"content": b64("x")})
    assert put.status_code == 409
    assert http(any_server, "GET", f"/sessions/{sid}/files", params={"path": "f1"}).status_code == 200
    delete(any_server, sid)
    assert_idle(any_server)


def test_file_count_limit(any_server: SandboxProcess) -> None:
    sid = create(any_server)
    out = run(any_server, sid, "mkdir many && cd many && touch $(seq 1000)")
    assert "over the limit of 300" in out["message"], out
    run(any_server, sid, "true", status=409)
    delete(any_server, sid)
    assert_idle(any_server)


def test_a_write_past_the_quota_is_refused(server: SandboxProcess) -> None:
    sid = create(server)
    big = b64(b"x" * (9 << 20))
    put = http(server, "PUT", f"/sessions/{sid}/files", params={"path": "big"}, json={"content": big})
    assert put.status_code == 413 and "quota" in put.json()["detail"]
    assert run(server, sid, "ls | wc -l")["stdout"] == "0\n"
    refused = http(server, "POST", "/sessions", json={"files": {"big": big}})
    assert refused.status_code == 413
    delete(server, sid)
    assert_idle(server)


@pytest.mark.parametrize(
    "path", ["../../etc/passwd", "/etc/shadow", "/app/../../etc/shadow", "/proc/self/environ", "/tmp/x", "/"]
)
def test_paths_out_of_the_session_are_refused(server: SandboxProcess, path: str) -> None:
    sid = create(server)
    got = http(server, "GET", f"/sessions/{sid}/files", params={"path": path})
    assert got.status_code == 400, got.text
    put = http(server, "PUT", f"/sessions/{sid}/files", params={"path": path}, json={"content": b64("x")})
    assert put.status_code == 400
    delete(server, sid)


def test_links_made_by_a_command_are_not_followed(any_server: SandboxProcess) -> None:
    sid = create(any_server)
    work_root = health(any_server)["work_root"]
    run(any_server, sid, f"ln -s /etc/shadow shadow; ln -s /etc etc; ln -s {work_root} wr; mkfifo fifo; true")
    for path in ("shadow", "etc/shadow", "etc/passwd", "wr", "fifo"):
        got = http(any_server, "GET", f"/sessions/{sid}/files", params={"path": path})
        assert got.status_code == 400, (path, got.text)
        assert "root:" not in got.text
    put = http(
        any_server, "PUT", f"/sessions/{sid}/files", params={"path": "etc/evil"}, json={"content": b64("x")}
    )
    assert put.status_code == 400 and not os.path.exists("/etc/evil")
    delete(any_server, sid)
    assert_idle(any_server)


def test_one_command_at_a_time(server: SandboxProcess) -> None:
    sid = create(server)

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=30) as client:
            slow = asyncio.ensure_future(
                client.post(f"/sessions/{sid}/run", json={"command": "sleep 1; echo done"})
            )
            await asyncio.sleep(0.4)
            second = await client.post(f"/sessions/{sid}/run", json={"command": "echo second"})
            return [await slow, second]

    first, second = asyncio.run(both())
    assert first.json()["stdout"] == "done\n"
    assert second.status_code == 409 and "one command at a time" in second.json()["detail"]
    delete(server, sid)


def test_bad_bodies_name_the_field(server: SandboxProcess) -> None:
    sid = create(server)
    cases = [
        ({"command": 5}, 422, "command"),
        ({"command": "ls", "timout_s": 1}, 422, "did you mean 'timeout_s'"),
        ({"command": "true", "timeout_s": -1}, 422, "timeout_s"),
        ({"command": "true", "timeout_s": 1e6}, 422, "--max-run-timeout"),
        ({"command": "x" * 200_000}, 413, "bytes exceeds"),
    ]
    for body, status, words in cases:
        response = http(server, "POST", f"/sessions/{sid}/run", json=body)
        assert response.status_code == status and words in response.json()["detail"], response.text
    missing = http(server, "GET", f"/sessions/{sid}/files")
    assert missing.status_code == 422 and "path" in missing.json()["detail"]
    assert http(server, "GET", f"/sessions/{sid}/files", params={"path": "nope"}).status_code == 404
    delete(server, sid)


def test_timeout_and_output_cap_per_command(any_server: SandboxProcess) -> None:
    sid = create(any_server)
    start = time.monotonic()
    out = run(any_server, sid, "echo before; sleep 30", timeout_s=1)
    assert out["timed_out"] and out["status"] == "TimeLimitExceeded" and out["return_code"] is None
    assert out["stdout"] == "before\n" and time.monotonic() - start < 4
    cap = health(any_server)["limits"]["max_output_bytes"]
    out = run(any_server, sid, "head -c 3000000 /dev/zero | tr '\\0' x")
    assert len(out["stdout"]) == cap and "truncated" in out["message"]
    assert run(any_server, sid, "exit 3")["return_code"] == 3
    delete(any_server, sid)


def test_client_methods_and_session_context(server: SandboxProcess) -> None:
    async def main() -> None:
        async with SandboxClient(server.url, api_key=server.api_key, retries=1, backoff=0.05) as client:
            sid = await client.create_session({"x.txt": "hello", "/tests/t.sh": b"echo t"}, ttl_s=60)
            result = await client.session_run(sid, "cat x.txt; cat > y.txt", stdin="from stdin")
            assert result.ok and result.stdout == "hello" and not result.timed_out
            assert await client.read_file(sid, "/app/y.txt") == b"from stdin"
            await client.write_file(sid, "z.txt", b"\x00\xff")
            assert await client.read_file(sid, "z.txt") == b"\x00\xff"
            with pytest.raises(SandboxRequestError, match="400"):
                await client.read_file(sid, "/etc/passwd")
            await client.delete_session(sid)
            await client.delete_session(sid)  # already gone: fine
            with pytest.raises(SessionGone, match="deleted"):
                await client.session_run(sid, "true")
            async with client.session(files={"a": "1"}) as s:
                assert (await s.run("cat a")).stdout == "1"
                await s.write("b", "2")
                assert await s.read("b") == b"2"
                kept = s.id
            with pytest.raises(SessionGone):
                await client.read_file(kept, "a")
            expiring = await client.create_session(ttl_s=0.5)
            await asyncio.sleep(2)
            with pytest.raises(SessionGone, match="expired"):
                await client.session_run(expiring, "true")

    asyncio.run(main())
    assert_idle(server)
