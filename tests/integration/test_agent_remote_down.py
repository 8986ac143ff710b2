"""A tool server given by URL (someone else's, so not ours to restart) that is down: each call is retried
with backoff, then becomes an error observation in one line naming the URL, and the run goes on; when
the server is back, calls succeed again. Real closed localhost ports and a real retriever."""

from __future__ import annotations

import time

import pytest

from turnrl.agent.executor import ToolCall, ToolExecutor
from turnrl.agent.tools.python import PythonTool
from turnrl.agent.tools.search import SearchTool
from turnrl.agent.tools.toolset import ToolSet
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.runtime import free_port
from turnrl.servers.retriever.launcher import LocalRetriever
from turnrl.tasks.search.corpus import builtin_index

# the tools' default 2 retries: backoff 0.5 s then 1 s, jittered (sandbox x0.5-1, retriever x0.8-1.2)
CASES = {
    "python": (lambda url: PythonTool(url), {"code": "print(1)"}, 0.75, ""),
    "search": (lambda url: SearchTool(url), {"query": "Dransk"}, 1.2, "/retrieve"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(CASES))
def test_a_closed_port_is_retried_then_named_in_one_line(name):
    make, arguments, least_backoff_s, suffix = CASES[name]
    url = f"http://127.0.0.1:{free_port()}{suffix}"
    tool = make(url)
    ex = ToolExecutor({name: tool}, timeout=30)
    try:
        outcomes = ex.run([ToolCall(name, arguments), ToolCall(name, arguments)])
    finally:
        ex.close()
    for o in outcomes:
        assert o.error and o.kind == "exception", o
        assert "\n" not in o.text and url in o.text and "after 3 attempts" in o.text, o.text
        assert least_backoff_s <= o.latency_s < 10, o.latency_s  # it waited between attempts, not forever


@pytest.mark.timeout(120)
def test_a_remote_retriever_going_down_mid_run_and_coming_back(tmp_path):
    index = builtin_index(tmp_path)
    port = free_port()
    remote = LocalRetriever(index, port=port).start()  # stands in for someone else's server
    cfg = MultiTurnConfig(enable=True, tools=["search"], tool_timeout=30)
    cfg.search.url, cfg.search.api_key = remote.url, remote.api_key
    toolset = ToolSet(cfg, tmp_path).start()
    ex = ToolExecutor(toolset.tools, timeout=30)
    try:
        assert toolset.supervisors == []  # a URL we were given: not ours to restart
        call = ToolCall("search", {"query": "Dransk river"})
        (ok,) = ex.run([call])
        assert not ok.error and ok.text.startswith("Doc 1(Title: ")
        remote.stop()
        start = time.perf_counter()
        (down,) = ex.run([call])
        assert down.kind == "exception" and time.perf_counter() - start >= 1.2
        assert down.text.startswith(
            f"error: tool 'search' failed: RetrieverUnavailable: retriever at {remote.url} failed after 3 "
            "attempts (last: "
        ), down.text
        remote.start()  # the same port: the client reconnects by itself
        (back,) = ex.run([call])
        assert not back.error and back.text == ok.text
    finally:
        ex.close()
        toolset.close()
        remote.stop()
