"""Careless and hostile clients against one real sandbox server (a child process, real httpx).

Every request here is bad in its own way: malformed or non-UTF-8 bodies, wrong types, no content
type, bodies too big by Content-Length or while they stream in chunked, deep nesting, paths out of
the work dir, too many or too large files, no key or a wrong one, NaN and out-of-range numbers,
files that cannot be written, a run that times out, a client that leaves mid-run. After each, the
answer is a 4xx with a one-line `detail` naming the culprit (or the run's own answer), /health is
healthy, the work root is empty, and `print(6*7)` answers exactly as it did the first time.

The server runs with small limits (`LIMITS`) so that every bound is reached in a few milliseconds.
"""

from __future__ import annotations

import base64
import os
import select
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.cli import console_script
from tests.support.proc_scan import cmdlines_with
from turnrl.servers.sandbox.config import cpu_count, max_workers
from turnrl.servers.sandbox.process import SandboxProcess

MAX_BODY, MAX_FILES, MAX_FILES_BYTES, MAX_CODE, MAX_STDIN = 4 << 20, 8, 1 << 20, 64 << 10, 64 << 10
LIMITS = [
    *("--max-body", str(MAX_BODY), "--max-files", str(MAX_FILES)),
    *("--max-files-bytes", str(MAX_FILES_BYTES), "--max-code", str(MAX_CODE), "--max-stdin", str(MAX_STDIN)),
]
CANARY = {"code": "print(6*7)"}
JSON = {"content-type": "application/json"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def server() -> Iterator[SandboxProcess]:
    with SandboxProcess(workers=2, queue=4, extra_args=LIMITS) as proc:
        yield proc


def canary_answer(server: SandboxProcess) -> dict[str, Any]:
    """The fixed program's answer, without its timing."""
    response = httpx.post(server.url + "/run_code", json=CANARY, headers=server.headers, timeout=30)
    assert response.status_code == 200, response.text
    out = response.json()
    out["run_result"].pop("execution_time")
    return out


@pytest.fixture(scope="module")
def first_answer(server: SandboxProcess) -> dict[str, Any]:
    out = canary_answer(server)
    assert out["status"] == "Success" and out["run_result"]["stdout"] == "42\n", out
    return out


@pytest.fixture
def healthy_after(server: SandboxProcess, first_answer: dict[str, Any]) -> Iterator[None]:
    """After the test: /health answers ok with nothing running, the work root is empty, and the
    fixed program answers as it did the first time."""
    yield
    deadline = time.monotonic() + 10  # a stopped run's clean-up may finish just after its answer
    while True:
        health = httpx.get(server.url + "/health", headers=server.headers, timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        body = health.json()
        idle = body["capacity"]["running"] == 0 and body["capacity"]["queued"] == 0
        if (idle and os.listdir(body["work_root"]) == []) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert idle, body["capacity"]
    assert os.listdir(body["work_root"]) == [], "a run dir was left behind"
    assert canary_answer(server) == first_answer


def assert_refused(response: httpx.Response, status: int, start: str) -> None:
    """A 4xx whose whole body is a one-line `detail` starting with the culprit."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert list(body) == ["detail"] and isinstance(body["detail"], str), body
    assert body["detail"].startswith(start), body["detail"]
    assert "\n" not in body["detail"] and len(body["detail"]) < 500


def post(server: SandboxProcess, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    """`body` as JSON (a dict or list) or as raw bytes, with the key unless `headers` replace it."""
    sent = {**server.headers, **(headers or {})}
    if isinstance(body, bytes):
        return httpx.post(server.url + "/run_code", content=body, headers=sent, timeout=30)
    return httpx.post(server.url + "/run_code", json=body, headers=sent, timeout=30)


DEEP = 100_000
REFUSALS: list[tuple[str, Any, int, str]] = [
    # not JSON, not UTF-8, not an object
    ("truncated JSON", b'{"code": "print(1)",', 422, "request body: not valid JSON"),
    ("empty body", b"", 422, "request body: missing; expected a JSON object like"),
    ("non-UTF-8", b'{"code": "print(\xff\xfe)"}', 400, "request body: not valid UTF-8"),
    ("lone surrogate", b'{"code": "\\ud800"}', 422, "request body: not valid JSON"),
    ("a list", [1, 2], 422, "request body: must be a JSON object, got list"),
    ("a string", b'"print(1)"', 422, "request body: must be a JSON object, got str"),
    ("null", b"null", 422, "request body: must be a JSON object"),
    ("deeply nested", b'{"code": "1", "files": ' + b"[" * DEEP, 422, "request body: not valid JSON"),
    ("deeply nested objects", b'{"a":' * DEEP + b"1" + b"}" * DEEP, 422, "request body: not valid JSON"),
    # wrong types, unknown fields
    ("no code", {}, 422, "code: Field required"),
    ("code a number", {"code": 5}, 422, "code: Input should be a valid string"),
    ("files a list", {"code": "1", "files": ["a"]}, 422, "files: Input should be an object"),
    (
        "file content a number",
        {"code": "1", "files": {"a": 3}},
        422,
        "files.a: Input should be a valid string",
    ),
    (
        "fetch_files a string",
        {"code": "1", "fetch_files": "x"},
        422,
        "fetch_files: Input should be a valid array",
    ),
    ("stdin a dict", {"code": "1", "stdin": {}}, 422, "stdin: Input should be a valid string"),
    ("language", {"code": "1", "language": "cobol\n" * 100}, 422, "language: unsupported 'cobol\\ncobol"),
    (
        "misspelt field",
        {"code": "1", "run_timout": 5},
        422,
        "run_timout: unknown field; did you mean 'run_timeout'?",
    ),
    ("field with a newline", {"code": "1", "x\ny": 1}, 422, "x\\ny: unknown field"),
    # numbers
    ("NaN run_timeout", b'{"code": "1", "run_timeout": NaN}', 422, "run_timeout: must be > 0 and <= 300"),
    ("Infinity run_timeout", b'{"code": "1", "run_timeout": Infinity}', 422, "run_timeout: must be > 0"),
    ("1e400 run_timeout", b'{"code": "1", "run_timeout": 1e400}', 422, "run_timeout: must be > 0"),
    ("negative run_timeout", {"code": "1", "run_timeout": -1}, 422, "run_timeout: must be > 0"),
    (
        "huge run_timeout",
        {"code": "1", "run_timeout": 1e9},
        422,
        "run_timeout: must be > 0 and <= 300 seconds",
    ),
    (
        "run_timeout a string",
        {"code": "1", "run_timeout": "soon"},
        422,
        "run_timeout: Input should be a valid number",
    ),
    ("NaN compile_timeout", b'{"code": "1", "compile_timeout": NaN}', 422, "compile_timeout: must be > 0"),
    (
        "NaN memory",
        b'{"code": "1", "memory_limit_MB": NaN}',
        422,
        "memory_limit_MB: Input should be a valid integer",
    ),
    (
        "huge memory",
        {"code": "1", "memory_limit_MB": 10**30},
        422,
        "memory_limit_MB: must be -1 (server default)",
    ),
    ("tiny memory", {"code": "1", "memory_limit_MB": 1}, 422, "memory_limit_MB: must be -1 (server default)"),
    (
        "fractional memory",
        {"code": "1", "memory_limit_MB": 100.5},
        422,
        "memory_limit_MB: Input should be a valid integer",
    ),
    # paths
    (
        "file out of the work dir",
        {"code": "1", "files": {"../x": ""}},
        422,
        "files['../x']: path '../x' leaves",
    ),
    ("file deeper out", {"code": "1", "files": {"a/../../x": ""}}, 422, "files['a/../../x']: path"),
    (
        "absolute file",
        {"code": "1", "files": {"/etc/cron.d/x": ""}},
        422,
        "files['/etc/cron.d/x']: absolute paths",
    ),
    ("empty file name", {"code": "1", "files": {"": ""}}, 422, "files['']: path must be a non-empty string"),
    ("NUL in a file name", {"code": "1", "files": {"a\x00b": ""}}, 422, "files['a\\x00b']: path must be"),
    (
        "the program's own file",
        {"code": "1", "files": {"main.py": ""}},
        422,
        "files['main.py']: 'main.py' is",
    ),
    (
        "a file under the program",
        {"code": "1", "files": {"main.py/x": ""}},
        422,
        "files['main.py/x']: 'main.py'",
    ),
    ("a file twice", {"code": "1", "files": {"a": "", "./a": ""}}, 422, "files['./a']: the same file as"),
    ("a name too long", {"code": "1", "files": {"n" * 300: ""}}, 422, "files['nnnn"),
    ("bad base64", {"code": "1", "files": {"a": "not base64!"}}, 422, "files['a']: invalid base64"),
    (
        "fetch out of the work dir",
        {"code": "1", "fetch_files": ["../../etc/passwd"]},
        422,
        "fetch_files[0]: path",
    ),
    (
        "fetch absolute",
        {"code": "1", "fetch_files": ["ok", "/etc/shadow"]},
        422,
        "fetch_files[1]: absolute paths",
    ),
    # sizes: each bound names its option
    (
        "too many files",
        {"code": "1", "files": {f"f{i}": "" for i in range(MAX_FILES + 1)}},
        413,
        f"files: {MAX_FILES + 1} files exceeds the server limit of {MAX_FILES} (--max-files)",
    ),
    (
        "too many fetch_files",
        {"code": "1", "fetch_files": [f"f{i}" for i in range(MAX_FILES + 1)]},
        413,
        f"fetch_files: {MAX_FILES + 1} paths exceeds the server limit of {MAX_FILES} (--max-files)",
    ),
    (
        "files too large",
        {
            "code": "1",
            "files": {"a": b64(b"x" * (MAX_FILES_BYTES // 2 + 1)), "b": b64(b"y" * (MAX_FILES_BYTES // 2))},
        },
        413,
        f"files: decoded size exceeds the server limit of {MAX_FILES_BYTES} bytes (--max-files-bytes)",
    ),
    (
        "code too large",
        {"code": "#" * (MAX_CODE + 1)},
        413,
        f"code: {MAX_CODE + 1} bytes exceeds the server limit of {MAX_CODE} bytes (--max-code)",
    ),
    (
        "stdin too large",
        {"code": "1", "stdin": "s" * (MAX_STDIN + 1)},
        413,
        f"stdin: {MAX_STDIN + 1} bytes exceeds the server limit of {MAX_STDIN} bytes (--max-stdin)",
    ),
    (
        "body too large",
        b" " * (MAX_BODY + 1),
        413,
        f"request body: {MAX_BODY + 1} bytes exceeds the server limit of {MAX_BODY} bytes (--max-body)",
    ),
]


@pytest.mark.usefixtures("healthy_after")
@pytest.mark.parametrize(("body", "status", "start"), [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS])
def test_bad_requests_get_one_line_naming_the_field(
    server: SandboxProcess, body: Any, status: int, start: str
) -> None:
    assert_refused(post(server, body, JSON if isinstance(body, bytes) else None), status, start)


@pytest.mark.usefixtures("healthy_after")
@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({**CANARY, "run_timeout": "5"}, "run_timeout: Input should be a valid number"),
        ({**CANARY, "run_timeout": True}, "run_timeout: Input should be a valid number"),
        ({**CANARY, "memory_limit_MB": "128"}, "memory_limit_MB: Input should be a valid integer"),
    ],
)
def test_a_string_or_a_bool_for_a_number_is_refused(server: SandboxProcess, body: Any, detail: str) -> None:
    """Strict types (servers.validation.StrictRequest): each was once run with the number it looks
    like (5 s, 1 s, 128 MB); a JSON integer is still a number of seconds."""
    r = post(server, body)
    assert r.status_code == 422 and r.json() == {"detail": detail}, r.text
    ok = post(server, {**CANARY, "run_timeout": 5, "memory_limit_MB": 128})
    assert ok.status_code == 200 and ok.json()["run_result"]["stdout"] == "42\n", ok.text


@pytest.mark.usefixtures("healthy_after")
def test_bodies_without_the_json_content_type_are_read_all_the_same(
    server: SandboxProcess, first_answer: dict[str, Any]
) -> None:
    for headers in (
        {},
        {"content-type": "text/plain"},
        {"content-type": "application/x-www-form-urlencoded"},
    ):
        good = httpx.post(
            server.url + "/run_code", content=b'{"code": "print(6*7)"}', headers={**server.headers, **headers}
        )
        assert good.status_code == 200, good.text
        assert good.json()["run_result"]["stdout"] == first_answer["run_result"]["stdout"]
        bad = httpx.post(
            server.url + "/run_code", content=b"code=print(1)", headers={**server.headers, **headers}
        )
        assert_refused(bad, 422, "request body: not valid JSON")


@pytest.mark.usefixtures("healthy_after")
def test_every_route_needs_the_key(server: SandboxProcess) -> None:
    for method, path in (("POST", "/run_code"), ("GET", "/health"), ("GET", "/v1/ping")):
        missing = httpx.request(method, server.url + path, json=CANARY)
        assert_refused(missing, 401, "api key: missing")
        wrong = httpx.request(
            method, server.url + path, json=CANARY, headers={"Authorization": "Bearer nope"}
        )
        assert_refused(wrong, 401, "api key: wrong key")
        empty = httpx.request(method, server.url + path, json=CANARY, headers={"X-API-Key": ""})
        assert_refused(empty, 401, "api key: wrong key")
    assert httpx.get(server.url + "/v1/ping", headers={"X-API-Key": server.api_key}).text == "pong"
    # the key is checked before the body is read: a huge body without it is refused just the same
    huge = post(server, b" " * (MAX_BODY + 1), {**JSON, "Authorization": "Bearer nope"})
    assert_refused(huge, 401, "api key: wrong")


def raw_exchange(server: SandboxProcess, head: bytes, chunks: Iterator[bytes]) -> tuple[bytes, int]:
    """Send `head`, then `chunks` until the server answers; its answer and the bytes sent."""
    sent = 0
    reply = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(head)
        for chunk in chunks:
            if select.select([conn], [], [], 0)[0]:
                break  # the server has answered: stop sending
            try:
                conn.sendall(chunk)
            except OSError:  # it closed meanwhile; its answer is already here
                break
            sent += len(chunk)
        try:
            while data := conn.recv(65536):
                reply += data
        except ConnectionResetError:
            pass  # closed with our unread bytes in its buffer: what came before the reset is kept
    return reply, sent


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.mark.usefixtures("healthy_after")
def test_a_huge_announced_body_is_refused_from_its_header(server: SandboxProcess) -> None:
    key = server.api_key.encode()
    head = (
        b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + key + b"\r\nContent-Length: 1000000000000\r\n\r\n"
    )
    reply, _ = raw_exchange(server, head, iter([]))  # not one byte of the body: the header decides
    status, _, body = reply.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"1000000000000 bytes exceeds the server limit of 4194304 bytes (--max-body)" in body


@pytest.mark.usefixtures("healthy_after")
def test_a_chunked_body_is_refused_while_it_streams_in(server: SandboxProcess) -> None:
    total = 100 << 20  # 25 times the limit
    piece = b"x" * (64 << 10)
    framed = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"

    def chunks() -> Iterator[bytes]:
        for _ in range(total // len(piece)):
            yield framed

    head = (
        b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + server.api_key.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    before = rss_kb(server.pid)
    reply, sent = raw_exchange(server, head, chunks())
    grown_mb = (rss_kb(server.pid) - before) / 1024
    status, _, body = reply.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"more bytes than that exceeds the server limit of 4194304 bytes (--max-body)" in body
    assert sent < total // 4, sent  # refused long before it was all sent
    assert grown_mb < 50, f"the server grew by {grown_mb:.0f} MB while refusing a 100 MB body"
    # and the same through httpx's own chunked upload (a generator body): refused, never served
    try:
        refused = httpx.post(server.url + "/run_code", content=chunks(), headers=server.headers, timeout=30)
        assert_refused(refused, 413, "request body: more bytes than that exceeds the server limit")
    except httpx.TransportError:
        pass  # the server closed while httpx still wrote: refused all the same


@pytest.mark.usefixtures("healthy_after")
def test_files_that_cannot_be_written_leave_no_run_dir(server: SandboxProcess) -> None:
    # "a" is written (large enough to be written by a worker thread), then "a/b" needs "a" to be a
    # directory: the write fails midway, and the half-made run dir must go
    big = b64(b"z" * (200 << 10))
    for files, culprit in (({"a": big, "a/b": ""}, "a/b"), ({"d/e": big, "d": ""}, "d")):
        response = post(server, {"code": "print(1)", "files": files})
        assert_refused(response, 422, f"files['{culprit}']: cannot be written in the work dir (")


@pytest.mark.usefixtures("healthy_after")
def test_a_timed_out_run_leaves_no_run_dir(server: SandboxProcess) -> None:
    out = post(
        server, {"code": "import time\nopen('junk', 'w').write('x' * 1000)\ntime.sleep(30)", "run_timeout": 1}
    )
    assert out.status_code == 200 and out.json()["run_result"]["status"] == "TimeLimitExceeded", out.text


@pytest.mark.usefixtures("healthy_after")
def test_a_client_that_leaves_mid_run_frees_its_slot_and_dir(server: SandboxProcess) -> None:
    marker = f"fuzz-{uuid.uuid4().hex[:12]}"
    code = f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\ntime.sleep(60)\n"
    start = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        post_timeout = httpx.Timeout(1.0, connect=10.0)
        httpx.post(
            server.url + "/run_code",
            json={"code": code, "run_timeout": 60},
            headers=server.headers,
            timeout=post_timeout,
        )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        health = httpx.get(server.url + "/health", headers=server.headers, timeout=10).json()
        if health["capacity"]["running"] == 0 and os.listdir(health["work_root"]) == []:
            break
        time.sleep(0.05)
    assert health["capacity"]["running"] == 0, "the slot of the departed client is still held"
    assert os.listdir(health["work_root"]) == [], "the departed client's run dir is still there"
    assert time.monotonic() - start < 8  # not at the run's 60 s timeout
    assert cmdlines_with(marker) == [], "the departed client's program still runs"


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--max-run-timeout", "0"], "--max-run-timeout 0: must be finite and > 0"),
        (["--max-run-timeout", "nan"], "--max-run-timeout nan: must be finite and > 0"),
        (["--max-run-timeout", "inf"], "--max-run-timeout inf: must be finite and > 0"),
        (["--max-run-timeout", "5"], "--max-run-timeout 5: must be >= 10, the run_timeout of a request that sends none (default_run_timeout)"),
        (["--max-run-timeout", "1e300"], "--max-run-timeout 1e+300: at most 86400 seconds (a day)"),
        (
            ["--workers", "100000"],
            f"--workers 100000: at most {max_workers()} here (64 per CPU, {cpu_count()} CPUs): each worker "
            "is a run at once, with a prepared sandbox process and two cgroups of its own",
        ),
        (["--header-timeout", "inf"], "--header-timeout inf: must be finite and >= 1 second (a connection that sends nothing would hold its socket for ever)"),
    ],
    ids=["timeout 0", "timeout nan", "timeout inf", "timeout below the default", "timeout 1e300", "100000 workers", "header timeout inf"],
)  # fmt: skip
def test_impossible_settings_are_one_line_at_start_up(flags: list[str], line: str) -> None:
    """The real console script: once `--max-run-timeout 0` named an internal field and the wrong
    value (`default_run_timeout: must be in (0, 0.0], got 10.0`), inf was served, and 100000
    workers made cgroups for minutes without a word (a server that starts anyway fails by the timeout)."""
    env = {k: v for k, v in os.environ.items() if k != "TURNRL_API_KEY"}
    proc = subprocess.run(
        [console_script(), "sandbox", "serve", "--port", "0", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2 and proc.stdout == "", (
        proc.returncode,
        proc.stdout[-2000:],
        proc.stderr[-2000:],
    )
    assert proc.stderr == f"turnrl sandbox serve: error: {line}\n"


@pytest.mark.usefixtures("healthy_after")
def test_the_python_tool_sends_the_configured_key(server: SandboxProcess, tmp_path) -> None:
    from turnrl.agent.executor import ToolCall, ToolExecutor
    from turnrl.agent.tools.base import ToolError
    from turnrl.agent.tools.toolset import ToolSet
    from turnrl.config.agent_schema import MultiTurnConfig

    cfg = MultiTurnConfig(enable=True, tools=["python"])
    cfg.python.url, cfg.python.api_key = server.url, "nope"
    with pytest.raises(ToolError) as err:  # checked at start-up, not at the first call
        ToolSet(cfg, tmp_path).start()
    assert str(err.value) == (
        f"rollout.multi_turn.python.url: sandbox server at {server.url} refused the key "
        "(HTTP 401: api key: wrong key); send its key (api_key or $TURNRL_API_KEY)"
    )
    cfg.python.api_key = server.api_key
    with ToolSet(cfg, tmp_path) as toolset:
        assert (toolset.services.sandbox.url, toolset.services.sandbox.api_key) == (
            server.url,
            server.api_key,
        )
        executor = ToolExecutor(toolset.tools, timeout=30)
        try:
            (out,) = executor.run([ToolCall("python", {"code": "print(6*7)"})])
        finally:
            executor.close()
        assert (out.text, out.error) == ("42", False)
