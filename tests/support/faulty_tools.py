"""A calculator that misbehaves on purpose, for reliability tests and `benchmarks/fault_soak.py`.

Registered the way users register their tools (the loader instantiates it without arguments):

    rollout.multi_turn.tools=[] rollout.multi_turn.custom_tools=[tests/support/faulty_tools.py:FaultyCalculator]

so its settings come from the environment, read when it is built:

    TURNRL_FAULT_RATE   share of calls that fail (default 0.1)
    TURNRL_FAULT_SEED   which calls fail (default 0)
    TURNRL_FAULT_KINDS  comma-separated subset of FAULT_KINDS (default all)
    TURNRL_FAULT_HANG_S how long a `timeout` fault sleeps: set it past `tool_timeout` (default 5)

A fault is one of: `raise` (an exception), `timeout` (sleeps past the tool timeout and shrugs off
the first cancellation, like a tool that catches everything), `huge` (10 MB of output), `empty`
(no output), `non_utf8` (bytes, or surrogate-escaped text, that are not UTF-8). Whether a call
fails, and how, is a hash of (seed, expression, how many times that expression was seen), not of
call order, so concurrent calls inject the same faults in any schedule. Every fault is recorded in
`injected` before it happens, so a test can compare the loop's counts with it exactly.

`BlockingFaultyCalculator` is the same with a plain (blocking) `call`, which the executor runs in a
thread: there a `timeout` fault keeps its thread asleep after the call was given up.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from turnrl.agent.tools.base import ToolResult
from turnrl.agent.tools.calculator import Calculator

FAULT_KINDS = ("raise", "timeout", "huge", "empty", "non_utf8")
ERROR_KIND = {  # the executor's `ToolOutcome.kind` each fault must be counted as
    "raise": "exception",
    "timeout": "timeout",
    "huge": "oversized",
    "empty": "empty",
    "non_utf8": "non_utf8",
}
HUGE_CHARS = 10 << 20


class InjectedFault(RuntimeError):
    """The `raise` fault."""


@dataclass(frozen=True)
class Injection:
    expression: str
    kind: str


def draw_fault(
    seed: int, expression: str, occurrence: int, rate: float, kinds: tuple[str, ...]
) -> str | None:
    """The fault of one call, or None: a pure function of its inputs (str seeds hash the same in every process)."""
    rng = random.Random(f"{seed}|{expression}|{occurrence}")
    if rng.random() >= rate:
        return None
    return kinds[rng.randrange(len(kinds))]


def corrupt(kind: str | None, result: ToolResult, flip: bool) -> ToolResult | bytes | str:
    """The calculator's `result` as the fault `kind` returns it (a `timeout` returns it, too late)."""
    text = result.text
    if kind == "huge":
        return ToolResult(text + " " + "7" * HUGE_CHARS)
    if kind == "empty":
        return ToolResult("")
    if kind == "non_utf8":
        raw = b"\xff\xfe" + text.encode() + b"\xc3"
        # both ways undecodable output reaches a tool: raw bytes, or a str decoded with surrogateescape
        return raw if flip else raw.decode("utf-8", "surrogateescape")
    return result


class FaultyCalculator:
    """The calculator, failing on `rate` of its calls; `injected` lists what it did."""

    name = Calculator.name
    description = Calculator.description
    parameters = Calculator.parameters
    xml_argument = Calculator.xml_argument
    tag, obs_tag = "calculator", "result"

    def __init__(
        self,
        rate: float | None = None,
        seed: int | None = None,
        kinds: tuple[str, ...] | None = None,
        hang_s: float | None = None,
    ):
        env = os.environ
        self.rate = float(env.get("TURNRL_FAULT_RATE", "0.1")) if rate is None else rate
        self.seed = int(env.get("TURNRL_FAULT_SEED", "0")) if seed is None else seed
        named = tuple(k for k in env.get("TURNRL_FAULT_KINDS", "").split(",") if k)
        self.kinds = kinds or named or FAULT_KINDS
        unknown = set(self.kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(
                f"TURNRL_FAULT_KINDS: unknown {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}"
            )
        self.hang_s = float(env.get("TURNRL_FAULT_HANG_S", "5")) if hang_s is None else hang_s
        self.inner = Calculator(self.tag, self.obs_tag)
        self.injected: list[Injection] = []
        self.calls = 0
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()  # the blocking variant is called from several threads

    def _draw(self, arguments: dict[str, Any]) -> tuple[str | None, bool]:
        """(the fault of this call, a coin for the non_utf8 variant), recorded before it happens."""
        expression = str(arguments.get("expression", ""))
        with self._lock:
            self.calls += 1
            occurrence = self._seen[expression]
            self._seen[expression] += 1
            kind = draw_fault(self.seed, expression, occurrence, self.rate, self.kinds)
            if kind is not None:
                self.injected.append(Injection(expression, kind))
        return kind, (occurrence + len(expression)) % 2 == 0

    async def call(self, arguments: dict[str, Any]) -> ToolResult | bytes | str:
        kind, flip = self._draw(arguments)
        if kind == "raise":
            raise InjectedFault("injected fault")
        if kind == "timeout":
            try:
                await asyncio.sleep(self.hang_s)
            except asyncio.CancelledError:  # a stubborn tool: the loop must not wait for it to give up
                await asyncio.sleep(self.hang_s)
        return corrupt(kind, await self.inner.call(arguments), flip)


class BlockingFaultyCalculator(FaultyCalculator):
    """The same faults from a plain function: the executor runs it in a thread it cannot stop."""

    def call(self, arguments: dict[str, Any]) -> ToolResult | bytes | str:  # type: ignore[override]
        kind, flip = self._draw(arguments)
        if kind == "raise":
            raise InjectedFault("injected fault")
        if kind == "timeout":
            time.sleep(self.hang_s)
        return corrupt(kind, asyncio.run(self.inner.call(arguments)), flip)
