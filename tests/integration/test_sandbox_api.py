"""The sandbox HTTP API against the real server: response shape, files, bash, bad input,
overload, the async client and the child-process helper."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from turnrl.runtime import free_port
from turnrl.servers.sandbox.client import (
    SandboxClient,
    SandboxRequestError,
    SandboxUnavailable,
    check_server,
)
from turnrl.servers.sandbox.isolation import FALLBACK_NOTE
from turnrl.servers.sandbox.process import SandboxProcess


@pytest.fixture(scope="module")
def server() -> Iterator[SandboxProcess]:
    with SandboxProcess(workers=4, queue=16) as proc:
        yield proc


def post(server: SandboxProcess, body: Any, raw: bool = False) -> httpx.Response:
    if raw:
        headers = {"content-type": "application/json", **server.headers}
        return httpx.post(server.url + "/run_code", content=body, headers=headers, timeout=30)
    return httpx.post(server.url + "/run_code", json=body, headers=server.headers, timeout=30)


def assert_serving(server: SandboxProcess) -> None:
    out = post(server, {"code": "print('still here')"}).json()
    assert out["status"] == "Success" and out["run_result"]["stdout"] == "still here\n"


def test_success_response_has_sandboxfusion_shape(server: SandboxProcess) -> None:
    out = post(server, {"code": "import sys\nprint(sys.stdin.read().upper())", "stdin": "abc"}).json()
    assert set(out) == {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"}
    assert out["status"] == "Success" and out["message"] == "" and out["compile_result"] is None
    run = out["run_result"]
    assert set(run) == {"status", "execution_time", "return_code", "stdout", "stderr"}
    assert run["status"] == "Finished" and run["return_code"] == 0 and run["stdout"] == "ABC\n"
    assert 0 < run["execution_time"] < 5


def test_nonzero_exit_is_failed_with_stderr(server: SandboxProcess) -> None:
    out = post(server, {"code": "import sys\nprint('partial')\nsys.exit(3)"}).json()
    assert out["status"] == "Failed"
    assert out["run_result"]["status"] == "Finished" and out["run_result"]["return_code"] == 3
    assert out["run_result"]["stdout"] == "partial\n"
    for status in (163, 200):  # 128 + a real-time signal number; beyond every signal
        odd = post(server, {"code": f"import sys; sys.exit({status})"}).json()
        assert odd["status"] == "Failed" and odd["run_result"]["return_code"] == status
    error = post(server, {"code": "1/0"}).json()
    assert error["status"] == "Failed" and "ZeroDivisionError" in error["run_result"]["stderr"]


def test_signal_deaths_report_shell_style_status(server: SandboxProcess) -> None:
    # the program is not pid 1 of its namespace, so default signal actions work as usual
    code = "import os, signal, time\nprint(os.getpid() != 1, flush=True)\nsignal.alarm(1)\ntime.sleep(5)"
    out = post(server, {"code": code}).json()
    assert out["status"] == "Failed" and out["run_result"]["status"] == "Finished"
    assert out["run_result"]["stdout"] == "True\n"
    assert out["run_result"]["return_code"] == 128 + 14
    assert "killed by SIGALRM" in out["message"]


def test_files_in_and_fetch_files_out(server: SandboxProcess) -> None:
    code = (
        "import helper\n"
        "data = open('data/in.txt').read()\n"
        "open('out.txt', 'w').write(data[::-1])\n"
        "print(helper.VALUE)\n"
    )
    files = {
        "data/in.txt": base64.b64encode(b"hello").decode(),
        "helper.py": base64.b64encode(b"VALUE = 7\n").decode(),
    }
    out = post(server, {"code": code, "files": files, "fetch_files": ["out.txt", "missing.txt"]}).json()
    assert out["status"] == "Success", out
    assert out["run_result"]["stdout"] == "7\n"
    assert base64.b64decode(out["files"]["out.txt"]) == b"olleh"
    assert "missing.txt" not in out["files"] and "'missing.txt' not returned" in out["message"]


def test_bash_language(server: SandboxProcess) -> None:
    out = post(
        server, {"code": 'read x\necho "got $x $((6 * 7))"\nexit 0', "language": "bash", "stdin": "in\n"}
    )
    assert out.json()["run_result"]["stdout"] == "got in 42\n"


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        ({"language": "python"}, 422, "code: Field required"),
        ({"code": "1", "language": "cobol"}, 422, "language: unsupported 'cobol'"),
        ({"code": "1", "run_timeout": -1}, 422, "run_timeout: must be > 0"),
        ({"code": "1", "run_timeout": 1e9}, 422, "run_timeout: must be > 0 and <= 300"),
        ({"code": "1", "run_timeout": "soon"}, 422, "run_timeout: Input should be a valid number"),
        ({"code": "1", "compile_timeout": 0}, 422, "compile_timeout: must be > 0"),
        ({"code": "1", "memory_limit_MB": -5}, 422, "memory_limit_MB: must be -1"),
        ({"code": "1", "memory_limit_MB": 10**9}, 422, "memory_limit_MB: must be -1"),
        ({"code": "1", "files": {"a.txt": "not base64!"}}, 422, "files['a.txt']: invalid base64"),
        ({"code": "1", "files": {"../up.txt": ""}}, 422, "files['../up.txt']: path '../up.txt' leaves"),
        ({"code": "1", "files": {"main.py": ""}}, 422, "files['main.py']: 'main.py' is where the program"),
        (
            {"code": "1", "fetch_files": ["/etc/passwd"]},
            422,
            "fetch_files[0]: absolute paths are not allowed",
        ),
        ({"code": "1", "run_timout": 5}, 422, "run_timout: unknown field; did you mean 'run_timeout'?"),
        (
            {"code": "x" * (10 << 20)},
            413,
            "code: 10485760 bytes exceeds the server limit of 1048576 bytes (--max-code)",
        ),
        ([1, 2], 422, "request body: must be a JSON object"),
    ],
)
def test_bad_requests_name_the_field(server: SandboxProcess, body: Any, status: int, detail: str) -> None:
    response = post(server, body)
    assert response.status_code == status, response.text
    assert response.json()["detail"].startswith(detail), response.json()
    assert "\n" not in response.json()["detail"]


def test_malformed_json_and_nan(server: SandboxProcess) -> None:
    response = post(server, b'{"code": "print(1)",', raw=True)
    assert response.status_code == 422
    assert response.json()["detail"].startswith("request body: not valid JSON")
    nan = post(server, b'{"code": "print(1)", "run_timeout": NaN}', raw=True)
    assert nan.status_code == 422 and nan.json()["detail"].startswith("run_timeout:")
    assert_serving(server)


def test_oversized_body_is_refused_before_reading(server: SandboxProcess) -> None:
    # announce a 1 GB body and send nothing: the answer must come from the header alone
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(
            b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + server.api_key.encode() + b"\r\n"
            b"Content-Length: 1000000000\r\nConnection: close\r\n\r\n"
        )
        reply = b""
        while chunk := conn.recv(4096):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert json.loads(body)["detail"].startswith("request body: 1000000000 bytes exceeds")
    assert_serving(server)


def test_health_and_ping(server: SandboxProcess) -> None:
    health = httpx.get(server.url + "/health", headers=server.headers).json()
    assert health["status"] == "ok" and health["languages"] == ["bash", "python"]
    assert health["capacity"]["workers"] == 4 and health["capacity"]["queue"] == 16
    layers = health["isolation"]["layers"]
    assert layers["process_group"] and layers["rlimits"] and layers["scrubbed_env"]
    assert health["isolation"]["network_isolated"] == layers["network_namespace"]
    assert httpx.get(server.url + "/v1/ping", headers=server.headers).text == "pong"


def test_runs_beyond_workers_wait_their_turn(server: SandboxProcess) -> None:
    async def main() -> list[float]:
        async with SandboxClient(server.url, api_key=server.api_key) as client:
            start = time.monotonic()
            results = await asyncio.gather(
                *[client.run_code("import time; time.sleep(0.6)") for _ in range(8)]
            )
            assert all(r.ok for r in results)
            return [time.monotonic() - start]

    (elapsed,) = asyncio.run(main())
    assert 1.2 <= elapsed < 4, elapsed  # 8 runs on 4 workers: two waves of 0.6 s


def test_overload_is_answered_503_at_once() -> None:
    with SandboxProcess(workers=1, queue=0) as small:

        async def main() -> None:
            async with SandboxClient(small.url, retries=0, api_key=small.api_key) as client:
                busy = asyncio.create_task(client.run_code("import time; time.sleep(1.5)", run_timeout=5))
                await asyncio.sleep(0.4)
                start = time.monotonic()
                response = httpx.post(
                    small.url + "/run_code", json={"code": "print(1)"}, headers=small.headers, timeout=10
                )
                assert time.monotonic() - start < 0.5
                assert response.status_code == 503 and response.headers["retry-after"] == "1"
                assert response.json()["detail"].startswith("sandbox overloaded")
                with pytest.raises(SandboxUnavailable, match="HTTP 503"):
                    await client.run_code("print(1)")
                patient = SandboxClient(
                    small.url, retries=8, backoff=0.2, max_backoff=0.5, api_key=small.api_key
                )
                result = await patient.run_code("print('served after retries')")
                await patient.aclose()
                assert result.ok and result.stdout == "served after retries\n"
                assert (await busy).ok

        asyncio.run(main())
        assert httpx.get(small.url + "/health", headers=small.headers).json()["capacity"]["rejected"] >= 2


def test_client_result_fields_and_files(server: SandboxProcess) -> None:
    async def main() -> None:
        # a verl-style URL
        async with SandboxClient(server.url + "/run_code", timeout=30, api_key=server.api_key) as client:
            result = await client.run_code(
                "print(open('in.bin', 'rb').read().hex())\nopen('o.txt', 'w').write('done')",
                files={"in.bin": b"\x00\xff"},
                fetch_files=["o.txt"],
            )
            assert result.ok and not result.timed_out
            assert result.stdout == "00ff\n" and result.return_code == 0
            assert result.files == {"o.txt": b"done"}
            assert result.latency >= result.execution_time > 0
            slow = await client.run_code("while True: pass", run_timeout=1)
            assert slow.status == "Failed" and slow.timed_out and slow.return_code is None
            health = await client.health()
            assert health["status"] == "ok"

    asyncio.run(main())


def test_client_does_not_retry_4xx(server: SandboxProcess) -> None:
    async def main() -> float:
        async with SandboxClient(server.url, retries=5, backoff=1.0, api_key=server.api_key) as client:
            start = time.monotonic()
            with pytest.raises(SandboxRequestError, match="language: unsupported 'cobol'"):
                await client.run_code("1", language="cobol")
            return time.monotonic() - start

    assert asyncio.run(main()) < 0.9  # a single retry would have slept >= 0.5 s


def test_client_retries_connection_errors_then_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    async def main() -> None:
        async with SandboxClient(url, retries=2, backoff=0.05) as client:
            with pytest.raises(SandboxUnavailable, match=r"after 3 attempts: ConnectError") as err:
                await client.run_code("print(1)")
            assert url in str(err.value)

    asyncio.run(main())


def test_check_server(server: SandboxProcess) -> None:
    assert check_server(server.url, api_key=server.api_key)["status"] == "ok"
    for key, reason in [(None, "api key: missing"), ("nope", "api key: wrong key")]:
        with pytest.raises(SandboxUnavailable) as refused:
            check_server(server.url, api_key=key)
        message = str(refused.value)  # the server's own reason, in one line
        assert message.startswith(f"sandbox server at {server.url} refused the key (HTTP 401: {reason}")
        assert message.endswith("; send its key (api_key or $TURNRL_API_KEY)") and "\n" not in message
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SandboxUnavailable) as err:
        check_server(dead, timeout=2)
    message = str(err.value)
    assert message.startswith(f"sandbox server at {dead} is not usable") and "\n" not in message


def test_basic_isolation_mode_still_kills_and_cleans() -> None:
    with SandboxProcess(workers=1, isolation="basic") as basic:
        iso = basic.health["isolation"]
        assert iso["mode"] == "basic" and iso["network_isolated"] is False
        assert not iso["layers"]["pid_namespace"] and not iso["layers"]["unprivileged_uid"]
        assert any("--isolation basic" in note for note in iso["notes"])
        marker = f"{os.getpid() % 1000 + 5000}.{time.time_ns() % 10**5}"
        code = (
            "import os, subprocess, time\n"
            f"subprocess.Popen(['sleep', '{marker}'], process_group=0)\n"  # leaves the process group
            "time.sleep(30)\n"
        )
        body = {"code": code, "run_timeout": 1}
        out = httpx.post(basic.url + "/run_code", json=body, headers=basic.headers, timeout=30).json()
        assert out["run_result"]["status"] == "TimeLimitExceeded"
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    assert marker.encode() not in f.read(), "the process-group escapee survived"
            except OSError:
                continue
        assert os.listdir(basic.health["work_root"]) == []


def test_process_helper_stops_the_server() -> None:
    proc = SandboxProcess(workers=1).start()
    pid, work_root = proc.pid, proc.health["work_root"]
    assert os.path.isdir(work_root)
    proc.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not os.path.exists(work_root)  # graceful shutdown removed its work root
    with pytest.raises(SandboxUnavailable):
        check_server(proc.url, timeout=1)


def test_a_layer_that_fails_its_trial_is_reported_and_the_rest_still_serve() -> None:
    # an interpreter wrapper that needs a host file the minimal root does not have: the rootfs
    # trial fails, so the server must say so at start and in /health, and serve without that layer
    if not os.path.exists("/etc/os-release"):
        pytest.skip("this host has no /etc/os-release to make the wrapper depend on")
    base = tempfile.mkdtemp(dir="/tmp")
    try:
        os.chmod(base, 0o755)  # slot uids must reach the wrapper
        wrapper = os.path.join(base, "python")
        with open(wrapper, "w") as f:
            f.write(
                "#!/bin/sh\n"
                '[ -e /etc/os-release ] || { echo "wrapper: /etc/os-release missing" >&2; exit 3; }\n'
                f'exec {sys.executable} "$@"\n'
            )
        os.chmod(wrapper, 0o755)
        with SandboxProcess(workers=1, extra_args=["--python", wrapper]) as odd:
            iso = odd.health["isolation"]
            if not iso["layers"]["mount_namespace"]:
                pytest.skip("no mount namespace here, so no rootfs trial to fail")
            assert iso["layers"]["rootfs"] is False
            fallback = [n for n in iso["notes"] if n.startswith(FALLBACK_NOTE)]
            assert fallback and "+rootfs: wrapper: /etc/os-release missing" in fallback[0], iso["notes"]
            assert "WARNING: fell back to weaker isolation" in odd.log_tail(40)
            out = post(odd, {"code": "print('served')"}).json()
            assert out["status"] == "Success" and out["run_result"]["stdout"] == "served\n", out
    finally:
        shutil.rmtree(base, ignore_errors=True)
