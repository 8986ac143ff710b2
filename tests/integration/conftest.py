"""Fixtures shared by integration test modules.

The bad-input tests of `turnrl train`: a work directory with good rows (`work`) and the run
in-process (`train`). The gateway's dialect tests: tiny-random with a template that renders tools
(`tiny_tool`). The sandbox's hostile-program tests: a server with every isolation layer this
host supports and one started with `--isolation basic` (one of each per test module)."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator

import pytest

from tests.support.bad_input import in_process_train, make_work
from tests.support.chat_templates import TOOL_TEMPLATE
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


@pytest.fixture
def work(tmp_path):
    return make_work(tmp_path)


@pytest.fixture
def train(cli):
    return in_process_train(cli)


@pytest.fixture(scope="module")
def tiny_tool(tiny):
    """tiny-random, and its tokenizer with a template that renders tools."""
    model, tok = tiny
    tool_tok = copy.copy(tok)
    tool_tok.chat_template = TOOL_TEMPLATE
    return model, tool_tok
