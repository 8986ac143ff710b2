"""Shared by the hostile-program tests of the sandbox: run code on a server, check it left nothing
behind, read files from inside the sandbox."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import httpx
import pytest

from tests.support.proc_scan import cmdlines_with, pids_of_uids
from turnrl.servers.sandbox.isolation import FALLBACK_NOTE
from turnrl.servers.sandbox.process import SandboxProcess

SECRET_NAME = "TURNRL_SANDBOX_TEST_SECRET"
SECRET = f"s3cret-{uuid.uuid4().hex}"


def fork_bounded(server: SandboxProcess) -> bool:
    """Whether a fork bomb meets a process bound (RLIMIT_NPROC is not enforced for root)."""
    iso = server.health["isolation"]
    return bool(iso["layers"]["unprivileged_uid"] or iso["layers"]["cgroup"] or not iso["server_is_root"])


def run(server: SandboxProcess, code: str, timeout: float = 60.0, **fields: Any) -> dict[str, Any]:
    body = {"code": code, **fields}
    response = httpx.post(server.url + "/run_code", json=body, headers=server.headers, timeout=timeout)
    assert response.status_code == 200, response.text
    return response.json()


def assert_clean(server: SandboxProcess, marker: str | None = None) -> None:
    """The server answers normally and the run left nothing behind."""
    ok = run(server, "print(6 * 7)", run_timeout=10)
    assert ok["status"] == "Success" and ok["run_result"]["stdout"] == "42\n", ok
    health = httpx.get(server.url + "/health", headers=server.headers, timeout=10).json()
    assert health["pid"] == server.pid
    assert os.listdir(health["work_root"]) == [], "a work dir was left behind"
    uids = health["isolation"]["uids"]
    if uids:
        assert pids_of_uids(*uids) == [], "a process of the run survived"
    if marker:
        assert cmdlines_with(marker) == [], f"a process with {marker!r} survived"


def skip_without(server: SandboxProcess, layer: str, what: str) -> None:
    """Skip, quoting the server's own explanation, when `layer` is off; it must have one."""
    iso = server.health["isolation"]
    if iso["layers"][layer]:
        return
    explains = (f"{layer}:", f"+{layer}:", FALLBACK_NOTE, "--isolation basic")
    reasons = [n for n in iso["notes"] if any(e in n for e in explains)]
    assert reasons, f"/health says nothing about why {layer} is off"
    pytest.skip(f"{what}: {layer} is off here ({reasons[0]})")


READ_ALL = (
    "import json, os, sys\n"
    "def attempt(path):\n"
    "    try:\n"
    "        with open(path, 'rb') as f:\n"
    "            return f.read(1 << 16).decode(errors='replace')\n"
    "    except OSError as err:\n"
    "        return f'refused: {err.strerror}'\n"
    "def listing(path):\n"
    "    try:\n"
    "        return sorted(os.listdir(path))\n"
    "    except OSError as err:\n"
    "        return f'refused: {err.strerror}'\n"
    "targets = json.loads(sys.stdin.read())\n"
    "print(json.dumps({'read': {p: attempt(p) for p in targets['read']},\n"
    "                  'list': {p: listing(p) for p in targets['list']},\n"
    "                  'interpreter': [sys.prefix, sys.base_prefix, *sys.path[1:]]}))\n"
)


def read_in_sandbox(server: SandboxProcess, read: list[str], listed: list[str]) -> dict[str, Any]:
    out = run(server, READ_ALL, stdin=json.dumps({"read": read, "list": listed}))
    assert out["status"] == "Success", out
    return json.loads(out["run_result"]["stdout"])


MINIMAL_USERS = {"root", "nobody"}
SYSTEM_TOPS = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "tmp", "usr", "var"}
