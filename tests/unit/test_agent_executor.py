import asyncio
import time

import pytest

from turnrl.agent.executor import ToolCall, ToolExecutor
from turnrl.agent.tools.base import FunctionTool, ToolError, ToolResult, check_tool
from turnrl.agent.tools.custom import load_custom_tool

PARAMS = {"type": "object", "properties": {"x": {"type": "string"}}}


class Sleepy:
    name, description, parameters = "sleepy", "sleeps", PARAMS

    def __init__(self, delay: float):
        self.delay = delay

    async def call(self, arguments):
        await asyncio.sleep(self.delay)
        return ToolResult(f"slept {arguments['x']}", {"slept": self.delay})


class Broken:
    name, description, parameters = "broken", "raises", PARAMS

    async def call(self, arguments):
        raise KeyError("missing thing")


class Blocking:
    """A synchronous tool: run in a thread so it does not stall the loop."""

    name, description, parameters = "blocking", "sync", PARAMS

    def call(self, arguments):
        time.sleep(0.2)
        return "done"


class Batched:
    name, description, parameters = "batched", "one request per turn", PARAMS

    def __init__(self):
        self.batches: list[int] = []

    async def call(self, arguments):
        raise AssertionError("call_batch should be used")

    async def call_batch(self, arguments):
        self.batches.append(len(arguments))
        return [a["x"].upper() for a in arguments]


def test_calls_run_concurrently_with_timeouts_and_errors():
    batched = Batched()
    tools = {
        "sleepy": Sleepy(0.3),
        "slow": Sleepy(5.0),
        "broken": Broken(),
        "blocking": Blocking(),
        "batched": batched,
    }
    tools["slow"].name = "slow"
    ex = ToolExecutor(tools, timeout=1.0)
    try:
        calls = [ToolCall("sleepy", {"x": str(i)}) for i in range(20)] + [
            ToolCall("slow", {"x": "1"}),
            ToolCall("broken", {"x": "1"}),
            ToolCall("nope", {"x": "1"}),
            ToolCall("blocking", {"x": "1"}),
            ToolCall("blocking", {"x": "2"}),
            ToolCall("batched", {"x": "a"}),
            ToolCall("batched", {"x": "b"}),
        ]
        start = time.perf_counter()
        out = ex.run(calls)
        elapsed = time.perf_counter() - start
    finally:
        ex.close()
    # 20 x 0.3 s serially would be 6 s; concurrently the 1 s timeout of the slow call bounds it
    assert elapsed < 2.5, elapsed
    assert [o.text for o in out[:3]] == ["slept 0", "slept 1", "slept 2"] and not out[0].error
    assert out[0].metrics == {"slept": 0.3} and 0.25 < out[0].latency_s < 1.5
    assert out[20].error and "timed out after 1 s" in out[20].text
    assert out[21].error and out[21].text == "error: tool 'broken' failed: KeyError: 'missing thing'"
    assert out[22].error and "unknown tool 'nope'" in out[22].text
    assert [o.text for o in out[23:25]] == ["done", "done"]
    assert [o.text for o in out[25:]] == ["A", "B"] and batched.batches == [2]


def test_non_text_results_are_errors():
    class Weird:
        name, description, parameters = "weird", "w", PARAMS

        async def call(self, arguments):
            return {"not": "text"}

    ex = ToolExecutor({"weird": Weird()})
    try:
        (o,) = ex.run([ToolCall("weird", {})])
    finally:
        ex.close()
    assert o.error and o.text == "error: tool 'weird' returned dict, not text"


def test_function_tools_and_custom_tool_loading(tmp_path):
    def lookup(key: str, default: str = "?") -> str:
        """Look a key up."""
        return {"a": "1"}.get(key, default)

    tool = FunctionTool(lookup)
    assert tool.description == "Look a key up." and tool.parameters["required"] == ["key"]
    assert asyncio.run(tool.call({"key": "a"})) == "1"
    check_tool(tool, "here")

    f = tmp_path / "tools.py"
    f.write_text(
        "def weather(city):\n    '''Weather of a city.'''\n    return city + ': sunny'\n"
        "class Echo:\n    name = 'echo'\n    description = 'echo'\n    parameters = {'type': 'object'}\n"
        "    async def call(self, arguments):\n        return str(arguments)\n"
        "class NoName:\n    async def call(self, a):\n        return ''\n"
        "VALUE = 3\n"
    )
    assert load_custom_tool(f"{f}:weather").name == "weather"
    assert load_custom_tool(f"{f}:Echo").name == "echo"
    for spec, message in [
        (f"{f}:NoName", "needs a non-empty string attribute 'name'"),
        (f"{f}:VALUE", "needs a non-empty string attribute 'name'"),
        (f"{f}:missing", "defines no 'missing'"),
        (f"{tmp_path}/nope.py:X", "file not found"),
        ("no_colon", "expected 'path/to/file.py:Name'"),
    ]:
        with pytest.raises(ToolError, match=message) as err:
            load_custom_tool(spec)
        assert "\n" not in str(err.value) and "custom_tools" in str(err.value)
