"""`turnrl tinker serve` as a command: its one-line refusals to start (in-process), and one real
start as a subprocess, keyed by $TINKER_API_KEY as a user's tinker script would be, answered by
the SDK's RestClient."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

tinker = pytest.importorskip("tinker")

from turnrl.runtime import free_port  # noqa: E402


def test_refusals_to_start_are_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.delenv("TURNRL_API_KEY", raising=False)
    base = ["tinker", "serve", "--model", "tiny-random", "--state-root", str(tmp_path / "state")]
    cases = [
        (["--host", "0.0.0.0"], "--host 0.0.0.0: binding beyond loopback needs a key"),
        (["--api-key", "s3cret"], "--api-key: the tinker SDK only sends keys that start with 'tml-'"),
    ]
    for extra, reason in cases:
        result = cli(*base, *extra)
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"turnrl tinker serve: error: {reason}"), result.stderr
    (tmp_path / "file").write_text("")
    result = cli("tinker", "serve", "--model", "tiny-random", "--state-root", str(tmp_path / "file" / "x"))
    assert result.returncode == 1 and result.stderr.startswith("turnrl tinker serve: error: --state-root")
    assert cli("tinker").returncode == 2  # the family alone prints its help


@pytest.mark.slow
def test_the_command_serves_the_sdk_with_the_key_from_tinker_api_key(tmp_path, monkeypatch):
    key = "tml-cli-test-key"
    port = free_port()
    # the user's environment: the server and the SDK both read the key from it
    monkeypatch.setenv("TINKER_API_KEY", key)
    monkeypatch.delenv("TURNRL_API_KEY", raising=False)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "turnrl.cli", "tinker", "serve", "--model", "tiny-random"]
    cmd += ["--state-root", str(tmp_path / "state"), "--port", str(port), "--threads", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(url + "/api/v1/healthz", headers={"X-API-Key": key}).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not start in 120 s"
            time.sleep(0.2)
        assert httpx.get(url + "/api/v1/healthz", headers={"X-API-Key": "tml-wrong"}).status_code == 401
        caps = tinker.RestClient(base_url=url).get_server_capabilities().result(timeout=30)
        assert [m.model_name for m in caps.supported_models] == ["tiny-random"]
        assert (tmp_path / "state").is_dir()
    finally:
        proc.terminate()
        proc.wait(30)
