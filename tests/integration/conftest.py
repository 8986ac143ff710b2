"""Fixtures shared by the sandbox's hostile-program tests: a server with every isolation layer this
host supports and one started with `--isolation basic` (one of each per test module)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.sandbox_runs import SECRET, SECRET_NAME
from turnrl.servers.sandbox.process import SandboxProcess


@pytest.fixture(scope="module")
def server() -> Iterator[SandboxProcess]:
    env = {**os.environ, SECRET_NAME: SECRET}
    with SandboxProcess(workers=4, queue=16, env=env) as proc:
        yield proc


@pytest.fixture(scope="module")
def basic_server() -> Iterator[SandboxProcess]:
    env = {**os.environ, SECRET_NAME: SECRET}
    with SandboxProcess(workers=2, queue=16, env=env, isolation="basic") as proc:
        yield proc


@pytest.fixture(params=["auto", "basic"])
def any_server(request: pytest.FixtureRequest) -> SandboxProcess:
    return request.getfixturevalue("server" if request.param == "auto" else "basic_server")


@pytest.fixture(scope="module")
def layers(server: SandboxProcess) -> dict[str, bool]:
    return server.health["isolation"]["layers"]
