"""Run a turn's tool calls concurrently, each under a timeout, on one long-lived event loop.

The loop lives in a background thread for the whole run, so the HTTP clients of the tools stay
bound to one loop and keep their connections. A call that raises, times out or returns something
that is not text becomes an error observation: the episode, and the step, go on.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from turnrl.agent.tools.base import ToolResult


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class ToolOutcome:
    text: str
    error: bool = False
    latency_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def normalise(result: Any, name: str) -> ToolOutcome:
    """A tool may return a ToolResult or a plain string; anything else is the tool's bug, shown as an error."""
    if isinstance(result, str):
        return ToolOutcome(result)
    if isinstance(result, ToolResult) and isinstance(result.text, str):
        metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, int | float)}
        return ToolOutcome(result.text, result.error, metrics=metrics)
    return ToolOutcome(f"error: tool '{name}' returned {type(result).__name__}, not text", error=True)


class ToolExecutor:
    """Owns the tools' event loop; `run(calls)` blocks until every call has an outcome."""

    def __init__(self, tools: dict[str, Any], timeout: float = 30.0, max_concurrent: int = 64):
        self.tools, self.timeout = tools, timeout
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="turnrl-tools", daemon=True)
        self._thread.start()
        self._limit = asyncio.Semaphore(max(1, max_concurrent))  # binds to self.loop on first use

    def run(self, calls: list[ToolCall]) -> list[ToolOutcome]:
        if not calls:
            return []
        return asyncio.run_coroutine_threadsafe(self._run_all(calls), self.loop).result()

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
        return [o if o is not None else ToolOutcome("error: no result", error=True) for o in outcomes]

    async def _call(self, call: ToolCall) -> ToolOutcome:
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolOutcome(f"error: unknown tool '{call.name}'; available: {', '.join(self.tools)}", True)
        async with self._limit:
            start = time.perf_counter()
            try:
                if inspect.iscoroutinefunction(tool.call):
                    result = await asyncio.wait_for(tool.call(call.arguments), self.timeout)
                else:  # a blocking tool runs in a thread so it cannot stall the others
                    result = await asyncio.wait_for(
                        asyncio.to_thread(tool.call, call.arguments), self.timeout
                    )
                outcome = normalise(result, call.name)
            except TimeoutError:
                outcome = ToolOutcome(f"error: tool '{call.name}' timed out after {self.timeout:g} s", True)
            except Exception as err:
                outcome = ToolOutcome(f"error: tool '{call.name}' failed: {_one_line(err)}", True)
            outcome.latency_s = time.perf_counter() - start
        return outcome

    async def _call_batch(self, name: str, calls: list[ToolCall]) -> list[ToolOutcome]:
        tool = self.tools[name]
        start = time.perf_counter()
        try:
            results = await asyncio.wait_for(tool.call_batch([c.arguments for c in calls]), self.timeout)
            if not isinstance(results, list) or len(results) != len(calls):
                raise TypeError(f"call_batch returned {type(results).__name__} for {len(calls)} calls")
            outcomes = [normalise(r, name) for r in results]
        except TimeoutError:
            outcomes = [
                ToolOutcome(f"error: tool '{name}' timed out after {self.timeout:g} s", True) for _ in calls
            ]
        except Exception as err:
            outcomes = [ToolOutcome(f"error: tool '{name}' failed: {_one_line(err)}", True) for _ in calls]
        latency = time.perf_counter() - start
        for o in outcomes:
            o.latency_s = latency
        return outcomes

    def close(self) -> None:
        """Close the tools' clients on their own loop, then stop the loop."""
        if self.loop.is_closed():
            return

        async def close_all() -> None:
            for tool in self.tools.values():
                closer = getattr(tool, "aclose", None)
                if callable(closer):
                    try:
                        await asyncio.wait_for(closer(), 5.0)
                    except Exception:  # closing must reach every tool
                        continue

        try:
            asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            self.loop.close()
