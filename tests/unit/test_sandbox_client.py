"""Sandbox client parsing and the `turnrl sandbox` command line (no server needed)."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys

import pytest

from turnrl.cli import main
from turnrl.servers.sandbox.client import RunResult, base_url

# an answer as a SandboxFusion server writes it
FUSION_ANSWER = {
    "status": "Failed",
    "message": "",
    "compile_result": None,
    "run_result": {
        "status": "Finished",
        "execution_time": 0.031,
        "return_code": 1,
        "stdout": "",
        "stderr": "Traceback ...\nNameError: name 'x' is not defined\n",
    },
    "executor_pod_name": None,
    "files": {"out.txt": base64.b64encode(b"42").decode()},
}


def test_run_result_from_sandboxfusion_json() -> None:
    result = RunResult.from_json(FUSION_ANSWER, latency=0.2)
    assert result.status == "Failed" and not result.ok and not result.timed_out
    assert result.run_status == "Finished" and result.return_code == 1
    assert "NameError" in result.stderr and result.execution_time == 0.031
    assert result.files == {"out.txt": b"42"} and result.latency == 0.2


def test_run_result_without_run_result() -> None:
    result = RunResult.from_json({"status": "SandboxError", "message": "boom", "run_result": None})
    assert result.status == "SandboxError" and result.run_status is None and result.message == "boom"
    assert RunResult.from_json({}).status == "SandboxError"
    tle = RunResult.from_json({"status": "Failed", "run_result": {"status": "TimeLimitExceeded"}})
    assert tle.timed_out and tle.stdout == ""


@pytest.mark.parametrize(
    ("url", "root"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        ("http://host:8080/run_code", "http://host:8080"),
        (" https://host/api/v1/ping ", "https://host/api"),
    ],
)
def test_base_url_accepts_server_root_or_endpoint(url: str, root: str) -> None:
    assert base_url(url) == root


def test_base_url_rejects_missing_scheme() -> None:
    with pytest.raises(ValueError, match=r"must start with http:// or https://, got '127\.0\.0\.1:8080'"):
        base_url("127.0.0.1:8080")


def test_cli_refuses_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sandbox", "serve", "--workers", "0"]) == 2
    assert "turnrl sandbox serve: error: workers: must be >= 1, got 0" in capsys.readouterr().err
    assert main(["sandbox", "serve", "--python", "/nonexistent/python"]) == 2
    assert "--python '/nonexistent/python' is not an executable file" in capsys.readouterr().err
    assert main(["sandbox"]) == 2  # no sub-command: help


def test_cli_refusals_to_serve_are_one_line(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.delenv("TURNRL_API_KEY", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["sandbox", "serve", "--port", "99999"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "turnrl sandbox serve: error: argument --port: 99999 is not a port in [0, 65535]\n"
    )
    assert main(["sandbox", "serve", "--host", "0.0.0.0"]) == 2  # beyond loopback without a key
    err = capsys.readouterr().err
    assert err.startswith("turnrl sandbox serve: error: --host 0.0.0.0: binding beyond loopback needs a key")
    assert err.count("\n") == 1
    with socket.socket() as taken:  # refused before the isolation probe: nothing else printed
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["sandbox", "serve", "--port", str(port)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == (
        f"turnrl sandbox serve: error: --host 127.0.0.1 --port {port}: cannot listen (Address already in use)\n"
    )


def test_sandbox_modules_do_not_import_torch() -> None:
    code = (
        "import sys, turnrl.cli\n"
        "turnrl.cli.build_parser(['sandbox'])\n"
        "import turnrl.servers.sandbox.app, turnrl.servers.sandbox.client, turnrl.servers.sandbox.process\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
