"""The server-backed tools against real child servers: turnrl's retriever over the built-in corpus
index and turnrl's code sandbox, started and stopped by the tool set; dead URLs fail fast in one line."""

from __future__ import annotations

import pytest

from turnrl.agent.executor import ToolCall, ToolExecutor
from turnrl.agent.tools.base import ToolError
from turnrl.agent.tools.toolset import ToolSet
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.rewards.registry import registered
from turnrl.runtime import free_port
from turnrl.tasks import scorers
from turnrl.tasks.search.corpus import ENTITIES, SEED, builtin_index, builtin_qa


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    cfg = MultiTurnConfig(enable=True, tools=["search", "python", "calculator"], tool_timeout=30)
    cfg.python.workers = 2
    cfg.python.run_timeout = 2
    toolset = ToolSet(cfg, tmp_path_factory.mktemp("cache"), builtin_index).start()  # as a run passes it
    executor = ToolExecutor(toolset.tools, timeout=30)
    yield toolset, executor
    executor.close()
    children = list(toolset._children)
    toolset.close()
    for child in children:  # the run's servers are gone after close
        assert child.process is None if hasattr(child, "process") else child.proc is None


def test_search_answers_from_the_builtin_corpus(tools):
    _, executor = tools
    qa = builtin_qa(ENTITIES, SEED)[:6]
    out = executor.run(
        [ToolCall("search", {"query": q.question}) for q in qa] + [ToolCall("search", {"query": " "})]
    )
    for q, o in zip(qa, out, strict=False):
        assert not o.error and o.text.startswith("Doc 1(Title: ")
        assert f"(Title: {q.title})" in o.text and any(a in o.text for a in q.answers)
        assert o.metrics == {"passages": 3.0}
    assert out[-1].error and "empty search query" in out[-1].text
    assert len({o.latency_s for o in out}) == 1  # one batched request for the whole turn


def test_python_runs_in_the_sandbox(tools):
    _, executor = tools
    ok, failing, slow, fenced = executor.run(
        [
            ToolCall("python", {"code": "print(6 * 7)"}),
            ToolCall("python", {"code": "import sys\nprint('partial')\nsys.exit('bad input')"}),
            ToolCall("python", {"code": "import time\nprint('start', flush=True)\ntime.sleep(30)"}),
            ToolCall("python", {"code": "```python\nprint('fenced')\n```"}),
        ]
    )
    assert (ok.text, ok.error) == ("42", False)
    assert failing.text == "partial\nbad input\n[exit code 1]" and not failing.error
    assert (
        slow.text.startswith("start")
        and slow.text.endswith("[timed out]")
        and slow.metrics["timed_out"] == 1.0
    )
    assert fenced.text == "fenced"


def test_code_reward_runs_hidden_tests_in_the_same_sandbox(tools):
    toolset, _ = tools
    # RuleReward(sandbox_url=..., sandbox_api_key=...)'s table: the tool's child sandbox and its key
    sandbox = toolset.services.sandbox
    assert sandbox.api_key == toolset.tools["python"].server.child.api_key != ""
    table = registered(sandbox.url, scorers(), sandbox.api_key)
    truth = {"inputs": ["abc\n", "hello\n"], "outputs": ["cba\n", "olleh\n"]}
    good = "<answer>\n```python\nprint(input()[::-1])\n```\n</answer>"
    half = "<answer>\n```python\ns = input()\nprint('cba' if s == 'abc' else s)\n```\n</answer>"
    # the public sources' scorer: all or nothing
    assert table["apps"]("apps", good, truth) == {"score": 1.0, "pass_rate": 1.0, "formatted": 1.0}
    assert table["apps"]("apps", half, truth) == {"score": 0.0, "pass_rate": 0.5, "formatted": 1.0}
    asserts = {"assert": "assert double(4) == 8"}
    assert table["apps"]("apps", "```python\ndef double(x):\n    return 2 * x\n```", asserts)["score"] == 1.0
    # the code task's: 0.1 for a program that runs, plus 0.9 x the fraction of tests passed
    task = table["turnrl/code"]
    assert task("turnrl/code", good, truth) == {
        "score": 1.0,
        "acc": 1.0,
        "formatted": 1.0,
        "pass_rate": 1.0,
        "ran": 1.0,
    }
    assert task("turnrl/code", half, truth)["score"] == pytest.approx(0.1 + 0.9 * 0.5)


# a refused connection is not retried until a start-up deadline: the timeout mark fails a run that
# waits, without a wall-clock assert that a loaded machine would break
@pytest.mark.timeout(60)
@pytest.mark.parametrize("tool", ["search", "python"])
def test_dead_server_url_fails_fast_in_one_line(tool, tmp_path):
    cfg = MultiTurnConfig(enable=True, tools=[tool])
    url = f"http://127.0.0.1:{free_port()}"
    getattr(cfg, tool).url = url
    with pytest.raises(ToolError) as err:
        ToolSet(cfg, tmp_path).start()
    message = str(err.value)
    assert "\n" not in message and f"127.0.0.1:{url.rsplit(':', 1)[1]}" in message
    assert message.startswith(f"rollout.multi_turn.{tool}.url: ")
