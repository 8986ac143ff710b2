"""The executor and observation builder against misbehaving tools: every fault becomes an error outcome
of a known kind, in bounded time, and no output can crash or stall the tokenizer."""

from __future__ import annotations

import asyncio
import time

import pytest

from turnrl.agent.executor import MAX_OUTPUT_CHARS, ToolCall, ToolExecutor, decode_text, normalise
from turnrl.agent.observation import ObservationBuilder
from turnrl.agent.tools.base import FatalToolError, ToolResult

PARAMS = {"type": "object", "properties": {"x": {"type": "string"}}}


class Tool:
    """A tool whose call is `fn(arguments)`: a coroutine function or a plain one."""

    description, parameters = "test tool", PARAMS

    def __init__(self, name, fn):
        self.name, self.call = name, fn


def run(tools: dict, calls: list[ToolCall], timeout: float = 0.3, max_concurrent: int = 64):
    ex = ToolExecutor(tools, timeout=timeout, max_concurrent=max_concurrent)
    try:
        start = time.perf_counter()
        out = ex.run(calls)
        return out, time.perf_counter() - start
    finally:
        ex.close()


@pytest.mark.parametrize(
    "result, kind, text",
    [
        ("408", "", "408"),
        (ToolResult("408", {"n": 1}), "", "408"),
        (ToolResult("error: bad expression", error=True), "reported", "error: bad expression"),
        (b"408", "", "408"),  # bytes that are UTF-8 are text
        (b"\xff4\xc3", "non_utf8", "error: tool 't' returned invalid UTF-8 (shown as \ufffd): \ufffd4\ufffd"),
        # what a str decoded with surrogateescape holds: the tokenizer raises TypeError on it
        ("4\udcff", "non_utf8", "error: tool 't' returned invalid UTF-8 (shown as \ufffd): 4\ufffd"),
        (ToolResult(b"\xfe"), "non_utf8", "error: tool 't' returned invalid UTF-8 (shown as \ufffd): \ufffd"),
        ("", "empty", ""),
        (ToolResult(" \n"), "empty", " \n"),
        ({"a": 1}, "bad_result", "error: tool 't' returned dict, not text"),
        (ToolResult(None), "bad_result", "error: tool 't' returned NoneType, not text"),  # type: ignore[arg-type]
    ],
)
def test_normalise(result, kind, text):
    out = normalise(result, "t")
    assert (out.kind, out.error, out.text) == (kind, bool(kind), text)


def test_oversized_output_is_an_error_showing_its_start():
    out = normalise("7" * (MAX_OUTPUT_CHARS + 1), "t")
    assert out.error and out.kind == "oversized"
    assert out.text.startswith(
        f"error: tool 't' returned too much output ({MAX_OUTPUT_CHARS + 1:,} characters"
    )
    assert out.text.endswith("it begins: " + "7" * 16_384)
    assert not normalise("7" * MAX_OUTPUT_CHARS, "t").error  # the limit itself is fine


def test_lone_surrogates_in_both_ranges_decode():
    assert decode_text("a\ud800b") == ("a\ufffd\ufffd\ufffdb", False)  # outside surrogateescape's range
    assert decode_text("é") == ("é", True)


def test_a_tool_that_ignores_cancellation_is_abandoned_at_the_timeout():
    finished = []

    async def stubborn(arguments):
        try:
            await asyncio.sleep(2)
        except asyncio.CancelledError:  # catches everything and carries on
            await asyncio.sleep(2)
        finished.append(1)
        return "late"

    (out,), elapsed = run({"s": Tool("s", stubborn)}, [ToolCall("s", {})])
    # asyncio.wait_for would have waited for the cancelled call: 2 s, then 2 s more
    assert out.kind == "timeout" and out.text == "error: tool 's' timed out after 0.3 s"
    assert elapsed < 1.5 and not finished


def test_hung_blocking_tools_do_not_starve_the_calls_after_them():
    def hangs(arguments):
        time.sleep(3)
        return "late"

    def quick(arguments):
        time.sleep(0.05)
        return "ok"

    # 12 hung threads: more than the default pool's cpu_count + 4 on a small machine
    calls = [ToolCall("hang", {}) for _ in range(12)] + [ToolCall("quick", {}) for _ in range(24)]
    out, elapsed = run({"hang": Tool("hang", hangs), "quick": Tool("quick", quick)}, calls, timeout=1.0)
    assert [o.kind for o in out[:12]] == ["timeout"] * 12
    assert [o.text for o in out[12:]] == ["ok"] * 24
    assert elapsed < 2.5


def test_a_tool_blocking_the_event_loop_stops_the_run_in_one_line():
    async def blocks(arguments):
        time.sleep(1.5)  # blocking work inside `async def`: no timeout can fire
        return "late"

    ex = ToolExecutor({"b": Tool("b", blocks)}, timeout=0.3, loop_probe_s=0.3)
    try:
        start = time.perf_counter()
        with pytest.raises(FatalToolError) as err:
            ex.run([ToolCall("b", {})])
        assert time.perf_counter() - start < 1.4
    finally:
        ex.close()
    assert "\n" not in str(err.value) and "tools' event loop has not answered for 0.3 s" in str(err.value)


def test_fatal_tool_errors_are_raised_not_shown():
    async def fatal(arguments):
        raise FatalToolError("turnrl's code sandbox at http://127.0.0.1:1 died again")

    class Batched:
        name, description, parameters = "batched", "b", PARAMS

        async def call(self, arguments):
            raise AssertionError

        async def call_batch(self, arguments):
            raise FatalToolError("retriever died again")

    for tools, name in (({"f": Tool("f", fatal)}, "f"), ({"batched": Batched()}, "batched")):
        with pytest.raises(FatalToolError):
            run(tools, [ToolCall(name, {})])


def test_unknown_tool_kind():
    (out,), _ = run({}, [ToolCall("nope", {})])
    assert out.kind == "unknown_tool" and out.error


@pytest.fixture(scope="module")
def tok():
    from turnrl.models.loader import load_tokenizer

    return load_tokenizer("tiny-random")


def test_a_huge_output_is_cut_without_tokenising_all_of_it(tok):
    b = ObservationBuilder(tok, 32, "...[truncated]", "")
    huge = "12345 " * (2 << 20)  # 12 MB: about 15 s to tokenise whole
    start = time.perf_counter()
    ids, cut = b.cut_ids(huge)
    assert time.perf_counter() - start < 1.0 and cut and len(ids) == 32
    # the same cut as tokenising everything, on a text long enough to take the shortcut
    long = "".join(f"{i} apples, " for i in range(3000))
    assert len(long) > b.head_chars
    full = tok(long, add_special_tokens=False)["input_ids"]
    assert ids[-len(b.marker_ids) :] == b.marker_ids
    assert b.cut_ids(long)[0] == full[: 32 - len(b.marker_ids)] + b.marker_ids
    text, was_cut = b.cut_text(huge)
    assert was_cut and text.startswith("12345 12345") and text.endswith("...[truncated]")
