"""MCP tools (`rollout.multi_turn.mcp_servers`): a real MCP server process (`tests/support/mcp_server.py`,
the SDK's own server) spoken to over stdio by the real `mcp` client, its tools called through the tool
set, the executor and the real agent loop (`AgentRollout`, a scripted policy on tiny-random's tokenizer).

Checked: the tools listed with their schemas and rendered by a chat template; results, an `isError`
result, a timeout and a server that died, as observations counted by kind; every bad server stopping
the run in one line naming its command; no server process left after the tool set stops.
"""

from __future__ import annotations

import importlib.util
import logging
import shlex
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.agent_batches import agent_cfg, chat_prompt, encode, gen_batch, segments
from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.proc_scan import cmdlines_with
from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.executor import ToolCall, ToolExecutor
from turnrl.agent.rollout import AgentRollout
from turnrl.agent.tools.base import ToolError, schema
from turnrl.agent.tools.toolset import ToolSet
from turnrl.config import load_config
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.config.checks import ConfigError
from turnrl.models.loader import load_tokenizer
from turnrl.rollout.base import SamplingParams

SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"
PIXEL_BYTES = 70  # tests/support/mcp_server.py's PNG
needs_mcp = pytest.mark.skipif(importlib.util.find_spec("mcp") is None, reason="needs the mcp package")
pytestmark = pytest.mark.timeout(60)


def server_command(tag: str, *options: str) -> str:
    """The test server as a user would name it, with this interpreter (the one that has `mcp`)."""
    return shlex.join([sys.executable, str(SERVER), "--tag", tag, *options])


@pytest.fixture
def tag() -> str:
    """A mark in the server's command line, to find its processes in /proc."""
    return f"mcp-test-{uuid.uuid4().hex[:12]}"


def toolset(tmp_path: Path, **cfg) -> ToolSet:
    return ToolSet(MultiTurnConfig(**cfg), tmp_path).start()


@needs_mcp
def test_tools_are_listed_with_schemas_and_called_through_the_toolset(tmp_path, tag, caplog):
    command = server_command(tag)
    with caplog.at_level(logging.WARNING, "turnrl.agent.tools.mcp_tools"):
        tools = toolset(tmp_path, tools=["calculator"], mcp_servers=[command])
    try:
        assert cmdlines_with(tag), "the server process is running"
        # the start-up line names every tool of the server
        assert f'mcp: "{command}": tools add, echo, fail, slow, picture, crash' in caplog.messages
        assert list(tools.tools) == ["calculator", "add", "echo", "fail", "slow", "picture", "crash"]
        add = tools.tools["add"]
        assert add.description == "Add two integers."
        assert add.parameters["properties"] == {
            "a": {"title": "A", "type": "integer"},
            "b": {"title": "B", "type": "integer"},
        }
        assert add.parameters["required"] == ["a", "b"]
        assert schema(add) == {
            "type": "function",
            "function": {"name": "add", "description": "Add two integers.", "parameters": add.parameters},
        }
        # the function schemas reach a chat template like the built-in tool's
        tok = load_tokenizer("tiny-random")
        tok.chat_template = TOOL_TEMPLATE
        rendered = tok.apply_chat_template(
            [{"role": "user", "content": "hi"}],
            tools=[schema(t) for t in tools.tools.values()],
            tokenize=False,
        )
        assert rendered.startswith(
            "<|im_start|>system\nTools: calculator, add, echo, fail, slow, picture, crash"
        )

        executor = ToolExecutor(tools.tools, timeout=1.0)
        try:
            outcomes = executor.run(
                [
                    ToolCall("add", {"a": 2, "b": 3}),
                    ToolCall("echo", {"text": "héllo\nworld"}),
                    ToolCall("picture", {}),
                    ToolCall("fail", {}),
                    ToolCall("slow", {"seconds": 30}),
                    ToolCall("calculator", {"expression": "6 * 7"}),
                ]
            )
            shown = [(o.text, o.kind) for o in outcomes]
            assert shown == [
                ("5", ""),
                ("héllo\nworld", ""),
                (f"a red pixel\n[image: image/png, {PIXEL_BYTES} bytes]", ""),
                ("Error executing tool fail: fail() was called", "reported"),  # the server's isError text
                ("error: tool 'slow' timed out after 1 s", "timeout"),
                ("42", ""),
            ]
            # calls to one server run concurrently: four 0.4 s calls take about 0.4 s, not 1.6 s
            start = time.perf_counter()
            outcomes = executor.run([ToolCall("slow", {"seconds": 0.4}) for _ in range(4)])
            assert [o.text for o in outcomes] == ["slept 0.4 s"] * 4
            assert time.perf_counter() - start < 1.2
            # a server that dies: the call that killed it and every later one are errors naming it
            crashed = executor.run([ToolCall("crash", {})])[0]
            later = executor.run([ToolCall("add", {"a": 1, "b": 1})])[0]
            for o in (crashed, later):
                assert o.kind == "exception", o
                assert o.text == (
                    f"error: tool '{'crash' if o is crashed else 'add'}' failed: McpServerDown: "
                    f'MCP server "{command}" stopped (connection closed)'
                )
            assert any("its last stderr line: mcp_server: crashing on purpose" in m for m in caplog.messages)
            assert executor.run([ToolCall("calculator", {"expression": "1 + 1"})])[0].text == "2"
        finally:
            executor.close()
    finally:
        tools.close()
    assert cmdlines_with(tag) == []


@needs_mcp
def test_servers_stop_with_the_toolset_and_two_servers_share_the_set(tmp_path, tag):
    first, second = server_command(tag), server_command(tag, "--prefix", "b_")
    tools = toolset(tmp_path, tools=[], mcp_servers=[first, second])
    try:
        assert len(cmdlines_with(tag)) >= 2
        assert {"add", "b_add", "echo", "b_echo"} <= set(tools.tools)
        executor = ToolExecutor(tools.tools, timeout=0.5)
        try:
            out = executor.run(
                [
                    ToolCall("b_add", {"a": 20, "b": 22}),
                    ToolCall("echo", {"text": "x"}),
                    ToolCall("b_slow", {"seconds": 60}),  # given up on, still running on the server
                ]
            )
            assert [o.kind for o in out] == ["", "", "timeout"] and [o.text for o in out[:2]] == ["42", "x"]
        finally:
            executor.close()
    finally:
        start = time.perf_counter()
        tools.close()
        tools.close()  # twice is harmless
    assert cmdlines_with(tag) == []
    assert time.perf_counter() - start < 10


def scripted_calls(tok, calls: dict[str, str]):
    """A policy that sends each prompt's tool call(s) in its first message, then answers."""
    eos = tok.eos_token_id
    first = {tuple(chat_prompt(tok, p)): [*encode(tok, text), eos] for p, text in calls.items()}

    def script(context: list[int]) -> list[int]:
        if tuple(context) in first:
            return first[tuple(context)]
        return [*encode(tok, "<answer>done</answer>"), eos]

    return script


def call(name: str, **arguments) -> str:
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@needs_mcp
@pytest.mark.parametrize("streaming", [False, True], ids=["turn-locked", "streaming"])
def test_agent_loop_calls_mcp_tools_and_counts_their_errors(tmp_path, tag, streaming):
    tok = load_tokenizer("tiny-random")
    calls = {
        "Add 2 and 3.": call("add", a=2, b=3) + call("echo", text="twice"),
        "Fail please.": call("fail"),
        "Be slow.": call("slow", seconds=30),
    }
    cfg = agent_cfg(
        tmp_path,
        **{
            "rollout.multi_turn.format": "json",
            "rollout.multi_turn.tools": "[]",
            "rollout.multi_turn.mcp_servers": f"['{server_command(tag)}']",
            "rollout.multi_turn.tool_timeout": 0.5,
            "rollout.multi_turn.max_obs_length": 64,
        },
    )
    engine = ScriptedEngine(scripted_calls(tok, calls), eos_ids={tok.eos_token_id})
    with AgentRollout(engine, tok, cfg, tok.pad_token_id, streaming=streaming) as agent:
        params = SamplingParams(max_new_tokens=160, n=1, seed=0)
        batch, metrics = agent.generate(gen_batch(tok, list(calls)), params)
    assert cmdlines_with(tag) == []  # closing the rollout stopped the server
    observations = [
        [tok.decode(ids) for kind, ids in segments(batch, i) if kind == 0] for i in range(len(calls))
    ]
    # results arrive as tool messages of the chat template, one per call, in the calls' order
    assert observations[0] == [
        "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>tool\ntwice<|im_end|>\n<|im_start|>assistant\n"
    ]
    assert "tool\nError executing tool fail: fail() was called<|im_end|>" in observations[1][0]
    assert "tool\nerror: tool 'slow' timed out after 0.5 s<|im_end|>" in observations[2][0]
    assert metrics["agent/tool_calls/mean"] == pytest.approx(4 / 3)
    assert metrics["agent/tool_errors/reported"] == 1 and metrics["agent/tool_errors/timeout"] == 1
    assert metrics["agent/tool_error_ratio"] == 0.5
    assert list(batch["agent_tool_errors"]) == [0, 1, 1]
    assert metrics["agent/answered_ratio"] == 1.0


@needs_mcp
def test_xml_format_uses_the_tool_name_as_tag(tmp_path, tag):
    tok = load_tokenizer("tiny-random")
    eos = tok.eos_token_id
    prompt = chat_prompt(tok, "Echo hello.")

    def script(context: list[int]) -> list[int]:
        return (
            encode(tok, "<echo>hello there</echo>")
            if context == prompt
            else [*encode(tok, "<answer>ok</answer>"), eos]
        )

    cfg = agent_cfg(
        tmp_path,
        **{"rollout.multi_turn.tools": "[]", "rollout.multi_turn.mcp_servers": f"['{server_command(tag)}']"},
    )
    with AgentRollout(ScriptedEngine(script, eos_ids={eos}), tok, cfg, tok.pad_token_id) as agent:
        batch, metrics = agent.generate(
            gen_batch(tok, ["Echo hello."]), SamplingParams(max_new_tokens=64, n=1)
        )
    # the text between the tags is the tool's first parameter; the output comes back in <observation>
    assert [tok.decode(ids) for kind, ids in segments(batch, 0) if kind == 0] == [
        "\n\n<observation>hello there</observation>\n\n"
    ]
    assert metrics["agent/tool_error_ratio"] == 0.0


BAD_SERVERS = {
    "missing": (
        ("/no/such/mcp-server",),
        '"/no/such/mcp-server" cannot start: /no/such/mcp-server: command not found',
    ),
    "exits": (
        ("--exit-at-start",),
        "exited at start (it closed the connection before answering); its last stderr line: "
        "mcp_server: refusing to start (--exit-at-start)",
    ),
    "hangs": (
        ("--sleep-before", "60"),
        "did not answer within mcp_startup_timeout_s=1 s (start, initialize, list tools); "
        "raise rollout.multi_turn.mcp_startup_timeout_s if it is slow to start",
    ),
    # once a traceback from the SDK, then a wait to the deadline and "did not answer"
    "prints to stdout": (
        ("--print-at-start",),
        "wrote a line to stdout that is not JSON-RPC: 'mcp_server: starting up' (an MCP stdio server "
        "writes only protocol messages there; log to stderr)",
    ),
    "clashes with a built-in": (
        ("--clash", "calculator"),
        "has a tool named 'calculator', as has the built-in tool; tool names must be unique (drop one of them)",
    ),
}


@needs_mcp
@pytest.mark.parametrize("case", list(BAD_SERVERS))
def test_a_bad_server_stops_the_run_in_one_line_naming_it(tmp_path, tag, case):
    options, expected = BAD_SERVERS[case]
    command = options[0] if case == "missing" else server_command(tag, *options)
    # 1 s makes the hanging server's case short; the others end by themselves, and on a loaded
    # machine a Python server's own start can pass 1 s before it exits (seen once: reported as a hang)
    timeout = 1.0 if case == "hangs" else 10.0
    start = time.perf_counter()
    with pytest.raises(ToolError) as err:
        toolset(tmp_path, tools=["calculator"], mcp_servers=[command], mcp_startup_timeout_s=timeout)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(
        f'rollout.multi_turn.mcp_servers: "{command}" ' if case != "missing" else "rollout."
    )
    assert expected in line, line
    assert time.perf_counter() - start < 15  # a hanging server is given up after its timeout (+ the stop)
    assert cmdlines_with(tag) == []


@needs_mcp
def test_clashing_names_across_servers_and_custom_tools(tmp_path, tag):
    first, second = server_command(tag), server_command(tag, "--prefix", "x_", "--clash", "add")
    with pytest.raises(ToolError) as err:
        toolset(tmp_path, tools=[], mcp_servers=[first, second])
    assert str(err.value) == (
        f'rollout.multi_turn.mcp_servers: "{second}" has a tool named \'add\', as has MCP server "{first}"; '
        "tool names must be unique (drop one of them)"
    )
    custom = tmp_path / "mine.py"
    custom.write_text('def echo(text):\n    """Mine."""\n    return text\n')
    with pytest.raises(ToolError, match=f"as has the custom tool '{custom}:echo'"):
        toolset(tmp_path, tools=[], custom_tools=[f"{custom}:echo"], mcp_servers=[first])
    assert cmdlines_with(tag) == []


def test_without_the_mcp_package_the_line_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` raises ImportError
    with pytest.raises(ToolError) as err:
        toolset(tmp_path, tools=[], mcp_servers=["python server.py"])
    assert str(err.value) == (
        'rollout.multi_turn.mcp_servers: MCP tools need the mcp package: pip install -e ".[agents]" '
        "(or pip install mcp)"
    )


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "['python \"unclosed']",
            '\'rollout.multi_turn.mcp_servers[0]\' "python "unclosed" is not a command line (No closing quotation)',
        ),
        ("['']", "'rollout.multi_turn.mcp_servers[0]' must be a command line, got ''"),
        ("['python s.py']", None),
    ],
)
def test_config_checks_the_command_lines_and_the_timeout(tmp_path, value, message):
    overrides = [
        "rollout.multi_turn.enable=true",
        "rollout.multi_turn.tools=[]",
        f"rollout.multi_turn.mcp_servers={value}",
        f"model.cache_dir={tmp_path}",
    ]
    if message is None:  # an MCP server alone is a tool set
        assert load_config(None, overrides).rollout.multi_turn.mcp_servers == ["python s.py"]
        with pytest.raises(
            ConfigError, match=r"'rollout.multi_turn.mcp_startup_timeout_s' must be > 0, got 0"
        ):
            load_config(None, [*overrides, "rollout.multi_turn.mcp_startup_timeout_s=0"])
        return
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert str(err.value) == message
