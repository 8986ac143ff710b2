"""Small OpenEnv environments (openenv-core's server framework) for the `openenv:` agent tests,
served by uvicorn on a loopback port in a thread of the test process.

- `CountingEnv` (text actions): its observation asks for a word; each step's reward is
  `word_score(message)`, a number the test can recompute from what the env received, and the
  episode ends after `STEPS` steps. Every step is logged in `CountingEnv.log` (one list per
  reset), so a test reads back what the env was sent and what it paid.
- `BrokenEnv`: a `CountingEnv` whose steps raise (an env that errors mid-episode: after the reset
  and the model's first reply); `FlakyEnv`: one whose every second session does.
- `AdderEnv` (MCP tools): one tool, `add(a, b)`; a call whose sum is `TARGET` earns 1 and ends the
  episode, any other call earns 0.

    with serve(counting_app()) as url:   # http://127.0.0.1:<port>
        ...

`ScriptedClient` stands in for the episode's AsyncOpenAI client where a test needs the model's
moves chosen (a tool call, a bad action): its replies are the SDK's own types.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from fastmcp import FastMCP
from openenv.core.env_server import (
    CallToolAction,
    CallToolObservation,
    Environment,
    MCPEnvironment,
    create_fastapi_app,
)
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

STEPS = 2
"""Steps of a `CountingEnv` episode."""
TARGET = 7
"""The sum `AdderEnv` pays for."""
SESSIONS = 16
"""Concurrent sessions a server allows (each episode holds one)."""


def word_score(message: str) -> float:
    """A `CountingEnv` step's reward: the share of the message's characters that are letters
    (0 for an empty message), so different replies earn different rewards."""
    return sum(c.isalpha() for c in message) / len(message) if message else 0.0


class WordAction(Action):
    message: str = Field(..., description="A word")


class WordObservation(Observation):
    text: str = Field(default="", description="What the env says")


class CountingEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    log: ClassVar[list[list[tuple[str, float]]]] = []
    """One list per reset: each step's (message, reward), in order."""
    _lock = threading.Lock()

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self._steps: list[tuple[str, float]] = []
        self.number = -1

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> WordObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        self._steps = []
        with self._lock:
            self.number = len(self.log)  # this reset's place in the log
            self.log.append(self._steps)
        topic = kwargs.get("topic", "anything")
        return WordObservation(text=f"Say a word about {topic}.", reward=None, done=False)

    def step(self, action: WordAction, timeout_s: float | None = None, **kwargs: Any) -> WordObservation:  # type: ignore[override]
        self._state.step_count += 1
        reward = word_score(action.message)
        self._steps.append((action.message, reward))
        done = self._state.step_count >= STEPS
        return WordObservation(
            text=f"You said {len(action.message)} characters. Another word.", reward=reward, done=done
        )

    @property
    def state(self) -> State:
        return self._state


class BrokenEnv(CountingEnv):
    log: ClassVar[list[list[tuple[str, float]]]] = []

    def broken(self) -> bool:
        return True

    def step(self, action: WordAction, timeout_s: float | None = None, **kwargs: Any) -> WordObservation:  # type: ignore[override]
        if self.broken():
            raise RuntimeError("the env's simulator crashed")
        return super().step(action, timeout_s, **kwargs)


class FlakyEnv(BrokenEnv):
    log: ClassVar[list[list[tuple[str, float]]]] = []

    def broken(self) -> bool:
        return self.number % 2 == 1  # the 2nd, 4th, ... reset


class AdderEnv(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("adder")

        @mcp.tool()
        def add(a: int, b: int) -> int:
            """Add two integers and return the sum."""
            return a + b

        super().__init__(mcp)
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        self._state = State(episode_id=episode_id, step_count=0)
        return WordObservation(text=f"Use the add tool to make {TARGET}.", reward=None, done=False)

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        raise ValueError(f"this env takes tool calls only, not {type(action).__name__}")

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        obs = await super().step_async(action, timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and isinstance(obs, CallToolObservation):
            self._state.step_count += 1
            hit = obs.error is None and action.arguments.get("a", 0) + action.arguments.get("b", 0) == TARGET
            obs.reward, obs.done = (1.0 if hit else 0.0), hit
        return obs

    @property
    def state(self) -> State:
        return self._state


def counting_app(env: type[CountingEnv] = CountingEnv, sessions: int = SESSIONS) -> Any:
    return create_fastapi_app(env, WordAction, WordObservation, max_concurrent_envs=sessions)


def adder_app() -> Any:
    return create_fastapi_app(AdderEnv, CallToolAction, CallToolObservation, max_concurrent_envs=SESSIONS)


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on a free loopback port until the block ends; yields its URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


class ScriptedClient:
    """`client.chat.completions.create(...)` answering with scripted replies, in order: a string is
    a text reply, a list of `(name, arguments)` a reply of tool calls (arguments: a dict, or a
    string sent as it is). Each call's messages and options are kept in `calls`."""

    def __init__(self, replies: list[Any], delay_s: float = 0.0) -> None:
        self.replies, self.delay_s = list(replies), delay_s
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
        self.chat = self.completions = self

    async def create(self, model: str, messages: list[dict[str, Any]], **options: Any) -> Any:
        from openai.types.chat import ChatCompletion

        self.calls.append((json.loads(json.dumps(messages)), options))
        await asyncio.sleep(self.delay_s)
        reply = self.replies.pop(0)
        if isinstance(reply, str):
            message: dict[str, Any] = {"role": "assistant", "content": reply}
        else:
            calls = [
                {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": _args(args)}}
                for i, (name, args) in enumerate(reply)
            ]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
        choice = {"index": 0, "finish_reason": "stop", "message": message}
        return ChatCompletion.model_validate(
            {"id": "x", "object": "chat.completion", "created": 0, "model": model, "choices": [choice]}
        )


def _args(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)
