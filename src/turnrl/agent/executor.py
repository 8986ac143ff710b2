"""Run a turn's tool calls concurrently, each under a timeout, on one long-lived event loop.

The loop lives in a background thread for the whole run, so the HTTP clients of the tools stay
bound to one loop and keep their connections. A call that raises, times out or returns something
that is not usable text becomes an error observation: the episode, and the step, go on. Each
error outcome carries a `kind` (one of `ERROR_KINDS`), counted per step in `agent/tool_errors/<kind>`.

What is done so a faulty tool cannot stop or stall the run:
- a timed-out call is abandoned, not awaited: a tool that swallows its cancellation cannot make the
  turn wait for it (`asyncio.wait_for` would wait for the cancelled call to finish);
- blocking tools run in the executor's own thread pool, sized for `max_concurrent` calls plus the
  abandoned ones still running, so a few hung sync tools cannot starve every later call (the default
  pool has `cpu_count + 4` threads: 6 on a 2-core machine);
- output is checked before it is tokenised: undecodable bytes are shown with U+FFFD, an oversized
  output is an error showing its start (tokenising 10 MB took 25 s on a 2-core VM; the model sees at most
  `max_obs_length` tokens of it anyway), an empty one is shown empty and counted as failed;
- if the loop itself stops answering (a tool blocking it inside `async def call`), `run` raises
  `FatalToolError` in one line instead of waiting forever;
- a step reward (`ToolResult.reward`) that is not a finite number raises `FatalToolError` naming the
  tool: shown to no model, it would only corrupt the turns' returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from turnrl.agent.tools.base import FatalToolError, ToolResult

log = logging.getLogger(__name__)

ERROR_KINDS = (
    "timeout",  # the call ran past `tool_timeout`
    "exception",  # the tool raised (a server that stayed down after retries lands here)
    "bad_result",  # it returned something that is neither text nor a ToolResult with text
    "non_utf8",  # it returned bytes (or surrogate-escaped text) that are not valid UTF-8
    "empty",  # it returned no text at all (shown as an empty observation)
    "oversized",  # it returned more than MAX_OUTPUT_CHARS characters
    "reported",  # the tool itself said the call failed (ToolResult.error), e.g. a bad expression
    "unknown_tool",  # no tool of that name
)
MAX_OUTPUT_CHARS = 1 << 22
"""4 Mi characters: above the most turnrl's sandbox can return (two 1 MiB streams), so only a broken
tool reaches it. Beyond it the output is an error showing its first `OVERSIZED_HEAD_CHARS`."""
OVERSIZED_HEAD_CHARS = 16_384
_ERROR_HEAD_CHARS = 2_000  # of the decoded text shown after a non-UTF-8 error


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    workspace: Any = None
    """The episode's sandbox session, for the tools that act in it (`uses_workspace`); None: none."""


@dataclass
class ToolOutcome:
    text: str
    error: bool = False
    latency_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    kind: str = ""
    """Why the call failed, one of ERROR_KINDS; '' when it did not."""
    reward: float | None = None
    """The step reward the tool returned with it (`ToolResult.reward`); None: none."""

    def __post_init__(self) -> None:
        if self.error and not self.kind:
            self.kind = "reported"


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def decode_text(value: str | bytes | bytearray) -> tuple[str, bool]:
    """(text the tokenizer accepts, whether the value was valid UTF-8).

    Bytes are decoded with U+FFFD for what is not UTF-8. A str may hold lone surrogates (text decoded
    with `errors="surrogateescape"`, as `os.fsdecode` and subprocess pipes do): the tokenizer raises
    on those, so they are turned back into their bytes and decoded the same way."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value, True
        except UnicodeEncodeError:
            try:
                raw = value.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # surrogates outside the escape range
                raw = value.encode("utf-8", "surrogatepass")
    else:
        raw = bytes(value)
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), False


def step_reward(value: Any, name: str) -> float | None:
    """A tool's step reward as a float; one that is not a finite number stops the run in one line
    naming the tool (it would train on garbage, unlike a bad text, which the model is shown)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FatalToolError(
            f"tool '{name}' returned the step reward {value!r}: a step reward must be a finite number (or None)"
        )
    return float(value)


def normalise(result: Any, name: str) -> ToolOutcome:
    """A tool may return a ToolResult or a plain string (bytes are decoded); anything else, and text no
    model should be shown, is the tool's fault, shown as an error naming the tool. The step reward
    rides along, whatever the text (`step_reward` checks it)."""
    outcome = _normalise_text(result, name)
    if isinstance(result, ToolResult):
        outcome.reward = step_reward(result.reward, name)
    return outcome


def _normalise_text(result: Any, name: str) -> ToolOutcome:
    value, reported, metrics = result, False, {}
    if isinstance(result, ToolResult):
        value, reported = result.text, bool(result.error)
        metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, int | float)}
    if not isinstance(value, str | bytes | bytearray):
        shown = type(result if not isinstance(result, ToolResult) else value).__name__
        return ToolOutcome(f"error: tool '{name}' returned {shown}, not text", True, kind="bad_result")
    text, valid = decode_text(value)
    if not valid:
        return ToolOutcome(
            f"error: tool '{name}' returned invalid UTF-8 (shown as \ufffd): {text[:_ERROR_HEAD_CHARS]}",
            True,
            metrics=metrics,
            kind="non_utf8",
        )
    if len(text) > MAX_OUTPUT_CHARS:
        return ToolOutcome(
            f"error: tool '{name}' returned too much output ({len(text):,} characters; the limit is "
            f"{MAX_OUTPUT_CHARS:,}); it begins: {text[:OVERSIZED_HEAD_CHARS]}",
            True,
            metrics=metrics,
            kind="oversized",
        )
    if not text.strip():
        # shown as it is, empty tags: the model sees that the tool said nothing; counted as a failure,
        # since a tool that answers nothing has almost always failed silently
        return ToolOutcome(text, True, metrics=metrics, kind="empty")
    return ToolOutcome(text, reported, metrics=metrics, kind="reported" if reported else "")


def _failed(name: str, err: BaseException) -> ToolOutcome:
    return ToolOutcome(f"error: tool '{name}' failed: {_one_line(err)}", True, kind="exception")


def _timed_out(name: str, timeout: float) -> ToolOutcome:
    return ToolOutcome(f"error: tool '{name}' timed out after {timeout:g} s", True, kind="timeout")


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Done-callback of an abandoned call: read its outcome so asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()


class ToolExecutor:
    """Owns the tools' event loop; `run(calls)` blocks until every call has an outcome."""

    def __init__(
        self,
        tools: dict[str, Any],
        timeout: float = 30.0,
        max_concurrent: int = 64,
        loop_probe_s: float | None = None,
    ):
        """loop_probe_s: how long the tools' event loop may leave a no-op unanswered before `run` calls it
        blocked (default: the timeout, at least 5 s, so a GC pause or a busy GIL is not taken for it)."""
        self.tools, self.timeout = tools, timeout
        self.loop_probe_s = max(timeout, 5.0) if loop_probe_s is None else loop_probe_s
        self.max_concurrent = max(1, max_concurrent)
        self.loop = asyncio.new_event_loop()
        # blocking tools (and FunctionTool's sync functions) run here: room for every call in flight
        # plus as many abandoned after a timeout that are still running in their threads
        self._pool = concurrent.futures.ThreadPoolExecutor(2 * self.max_concurrent, "turnrl-tool")
        self.loop.set_default_executor(self._pool)
        self._thread = threading.Thread(target=self.loop.run_forever, name="turnrl-tools", daemon=True)
        self._thread.start()
        self._limit = asyncio.Semaphore(self.max_concurrent)  # binds to self.loop on first use
        self._abandoned: set[asyncio.Task[Any]] = set()

    def run(self, calls: list[ToolCall]) -> list[ToolOutcome]:
        if not calls:
            return []
        future = asyncio.run_coroutine_threadsafe(self._run_all(calls), self.loop)
        while True:
            done, _ = concurrent.futures.wait([future], timeout=self.timeout)
            if done:
                return future.result()
            # calls may legitimately queue behind `max_concurrent` others for many timeouts; only a loop
            # that cannot even run a no-op is stuck
            if not self._loop_answers(within=self.loop_probe_s):
                future.cancel()
                raise FatalToolError(
                    f"the tools' event loop has not answered for {self.loop_probe_s:g} s: a tool's async "
                    "call() is blocking it (make call() a plain function or run the blocking work in a thread)"
                )

    def gather(self, coroutines: list[Coroutine[Any, Any, Any]], timeout: float) -> list[Any]:
        """Run `coroutines` on the tools' loop (where the tools' clients live: opening and closing the
        episodes' workspaces) and return their results in order, an exception in place of a failed one's;
        TimeoutError past `timeout` s."""

        async def every() -> list[Any]:
            return await asyncio.gather(*coroutines, return_exceptions=True)

        return asyncio.run_coroutine_threadsafe(every(), self.loop).result(timeout)

    def _loop_answers(self, within: float) -> bool:
        probe = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self.loop)
        done, _ = concurrent.futures.wait([probe], timeout=within)
        return bool(done)

    async def _run_all(self, calls: list[ToolCall]) -> list[ToolOutcome]:
        outcomes: list[ToolOutcome | None] = [None] * len(calls)
        batched: dict[str, list[int]] = defaultdict(list)
        singles: list[int] = []
        for i, call in enumerate(calls):
            tool = self.tools.get(call.name)
            if tool is not None and callable(getattr(tool, "call_batch", None)):
                batched[call.name].append(i)
            else:
                singles.append(i)

        async def single(i: int) -> None:
            outcomes[i] = await self._call(calls[i])

        async def batch(name: str, idx: list[int]) -> None:
            for i, outcome in zip(idx, await self._call_batch(name, [calls[i] for i in idx]), strict=True):
                outcomes[i] = outcome

        await asyncio.gather(*(single(i) for i in singles), *(batch(n, idx) for n, idx in batched.items()))
        return [
            o if o is not None else ToolOutcome("error: no result", True, kind="exception") for o in outcomes
        ]

    async def _bounded(self, call: Awaitable[Any]) -> Any:
        """The call's result, or TimeoutError after `timeout` s without waiting for the call to stop."""
        task = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({task}, timeout=self.timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task in done:
            return task.result()
        task.cancel()  # a cooperative tool stops here; a stubborn one runs on, abandoned
        self._abandoned.add(task)
        task.add_done_callback(self._abandoned.discard)
        task.add_done_callback(_retrieve)
        raise TimeoutError

    async def _call(self, call: ToolCall) -> ToolOutcome:
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolOutcome(
                f"error: unknown tool '{call.name}'; available: {', '.join(self.tools)}",
                True,
                kind="unknown_tool",
            )
        args: tuple[Any, ...] = (call.arguments,)
        if getattr(tool, "uses_workspace", False):
            if call.workspace is None:
                return ToolOutcome(
                    f"error: tool '{call.name}' acts in a task's workspace, and this episode has none",
                    True,
                    kind="exception",
                )
            args = (call.arguments, call.workspace)
        async with self._limit:
            start = time.perf_counter()
            try:
                if inspect.iscoroutinefunction(tool.call):
                    result = await self._bounded(tool.call(*args))
                else:  # a blocking tool runs in a thread so it cannot stall the others
                    result = await self._bounded(asyncio.to_thread(tool.call, *args))
                outcome = normalise(result, call.name)
            except FatalToolError:
                raise  # the run cannot go on (a child server that keeps dying): not the model's business
            except TimeoutError:
                outcome = _timed_out(call.name, self.timeout)
            except Exception as err:
                outcome = _failed(call.name, err)
            outcome.latency_s = time.perf_counter() - start
        return outcome

    async def _call_batch(self, name: str, calls: list[ToolCall]) -> list[ToolOutcome]:
        tool = self.tools[name]
        start = time.perf_counter()
        try:
            results = await self._bounded(tool.call_batch([c.arguments for c in calls]))
            if not isinstance(results, list) or len(results) != len(calls):
                raise TypeError(f"call_batch returned {type(results).__name__} for {len(calls)} calls")
            outcomes = [normalise(r, name) for r in results]
        except FatalToolError:
            raise
        except TimeoutError:
            outcomes = [_timed_out(name, self.timeout) for _ in calls]
        except Exception as err:
            outcomes = [_failed(name, err) for _ in calls]
        latency = time.perf_counter() - start
        for o in outcomes:
            o.latency_s = latency
        return outcomes

    def close(self) -> None:
        """Close the tools' clients on their own loop, cancel abandoned calls, then stop the loop."""
        if self.loop.is_closed():
            return

        async def close_all() -> None:
            for task in list(self._abandoned):
                task.cancel()
            for tool in self.tools.values():
                closer = getattr(tool, "aclose", None)
                if callable(closer):
                    try:
                        await asyncio.wait_for(closer(), 5.0)
                    except Exception:  # closing must reach every tool
                        continue

        try:
            asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(timeout=10)
        except TimeoutError:  # a loop blocked by a tool: stop it as far as it can be stopped
            log.warning("closing the tools timed out; their event loop is blocked")
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self.loop.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
