"""An agent function: found by its entrypoint, called, and what it returned read as a reward.

    agent = load_agent("agents/calc.py:run")         # or "my_package.agents:run"
    agent.is_async                                   # `async def run(...)`: it gets an AsyncOpenAI client
    returned = read_return(agent.fn(client, model, row))

`run(client, model, row)` returns one of:
- a number: the episode's reward;
- a dict with `reward` (a number) and other numbers, which become the metrics `agent/fn/<name>`;
- a list of messages (its conversation as it ended): the row's rule scorer then reads the last
  assistant message's content, as it reads a response.
Anything else (a string, None, NaN, a dict without `reward`) is a bad return. An agent that is
not a Python function (`rollout.agent.command`, `process.py`) hands back a `Returned` as read, or
raises `EpisodeFailed` with its failure's kind.
"""

from __future__ import annotations

import inspect
import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnrl.errors import TurnrlInputError
from turnrl.plugins import load_function
from turnrl.servers.chat.template import ChatTemplateError, text_of


class AgentLoadError(TurnrlInputError):
    """An entrypoint that does not lead to a callable; the message names it."""


class EpisodeFailed(Exception):
    """An episode that failed in a way of its own (`agent/errors/<kind>`); the message is one line
    saying what the agent did, read after the agent's name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class AgentFunction:
    fn: Callable[..., Any]
    is_async: bool
    name: str
    """The entrypoint (or env, or command) as configured, for messages."""
    stop: Callable[[str | None], None] | None = None
    """Ends what an episode left running, by its key (None = every episode): called at its timeout,
    where a thread cannot be stopped, and at close."""
    error_kinds: tuple[str, ...] = ()
    """Its own `agent/errors/<kind>`, besides the rollout's."""
    close: Callable[[], None] | None = None
    """Stops what it started for every episode (a process agent's child sandbox), at the rollout's close."""


def load_agent(entrypoint: str, where: str = "rollout.agent.entrypoint") -> AgentFunction:
    """The function at `path/to/file.py:name` or `package.module:name`; AgentLoadError (one line
    naming it) when the file or module is missing, does not import, or `name` is not callable."""
    fn = load_function(entrypoint, where, AgentLoadError)
    # an object whose __call__ is `async def` is an async agent too
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
    return AgentFunction(fn, is_async, entrypoint.strip())


def load_env_agent(
    env: str, where: str = "rollout.agent.env", max_turns: int = 32, timeout_s: float = 300.0
) -> AgentFunction:
    """An environment as an agent function, by the kind its prefix names (`ENV_KINDS`): it loads
    (or reaches) the environment now, so a bad one is one line at start-up. `max_turns` and
    `timeout_s` bound an episode of an env that this side drives turn by turn (OpenEnv)."""
    kind = next((prefix for prefix in ENV_KINDS if env.startswith(prefix)), None)
    if kind is None:
        forms = " or ".join(f"{prefix}<{what}>" for prefix, what in ENV_KINDS.items())
        raise AgentLoadError(f"{where}: {env!r}: environments are named {forms}")
    return _ENV_LOADERS[kind](env, max_turns, timeout_s)


def _verifiers_agent(env: str, max_turns: int, timeout_s: float) -> AgentFunction:
    """`verifiers:<environment>`: a verifiers env's own rollout against the episode's client
    (`turnrl.agent.verifiers`); its turns and timeouts are the env's own."""
    from turnrl.agent.verifiers import PREFIX, load_verifiers_agent

    return AgentFunction(load_verifiers_agent(env.removeprefix(PREFIX)), True, env)


def _openenv_agent(env: str, max_turns: int, timeout_s: float) -> AgentFunction:
    """`openenv:<server>`: an OpenEnv server played turn by turn (`turnrl.agent.openenv`); an
    episode the server fails is `agent/errors/env`."""
    from turnrl.agent.openenv import FAILURE_KIND, OpenEnvEpisodeError, load_openenv_agent

    play = load_openenv_agent(env, max_turns, timeout_s)

    async def run(client: Any, model: str, row: dict[str, Any]) -> Any:
        try:
            return await play(client, model, row)
        except OpenEnvEpisodeError as err:
            raise EpisodeFailed(FAILURE_KIND, err.what) from None

    run.__qualname__ = run.__name__ = play.__name__
    return AgentFunction(run, True, env, error_kinds=(FAILURE_KIND,))


ENV_KINDS: dict[str, str] = {"verifiers:": "environment", "openenv:": "server URL"}
"""`rollout.agent.env`'s kinds: prefix -> what follows it (`config.checks.ENV_KINDS`, which the
config layer keeps apart; a test keeps the two equal)."""
_ENV_LOADERS: dict[str, Callable[[str, int, float], AgentFunction]] = {
    "verifiers:": _verifiers_agent,
    "openenv:": _openenv_agent,
}


def _refusal(body: Any) -> str | None:
    """An API error's one-line reason: its `detail`, or the `message` of OpenAI's error object (the
    SDK hands over the object inside `{"error": {...}}`)."""
    if isinstance(body, dict):
        for key in ("detail", "message"):
            if isinstance(body.get(key), str):
                return body[key]
    return None


def describe_error(err: BaseException, agent: AgentFunction) -> str:
    """`BadRequestError: the gateway answered 400: tools: ... (agent.py:12)`: the type, the message's
    first line (a refusal's own one-line `detail` for an API error), and the line of the agent
    that was running (the deepest frame in the agent's own file), not the SDK's."""
    body = getattr(err, "body", None)
    status = getattr(err, "status_code", None)
    reason = _refusal(body)
    if reason is not None and status is not None:
        text = f"{type(err).__name__}: the gateway answered {status}: {reason}"
    else:
        lines = str(err).strip().splitlines()
        first = lines[0] if lines and len(lines[0]) <= 200 else (lines[0][:197] + "..." if lines else "")
        text = f"{type(err).__name__}: {first}" if first else type(err).__name__
    frames = traceback.extract_tb(err.__traceback__)
    own = getattr(getattr(agent.fn, "__code__", None), "co_filename", None)
    mine = [f for f in frames if own is not None and f.filename == own] or frames
    if mine:
        text += f" ({Path(mine[-1].filename).name}:{mine[-1].lineno})"
    return text


@dataclass
class Returned:
    """What an agent function returned, read: a reward, or an answer to score, or why neither."""

    reward: float | None = None
    answer: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    bad: str = ""
    """Why the return is not a reward ('' = it is one)."""
    recorded: bool = False
    """No reward and no answer came back: the rule scorer reads the last assistant message the
    gateway recorded for the episode."""


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value: Any) -> float | None:
    """A finite float, or None for anything else (a string, a bool's fine: it is a number)."""
    if isinstance(value, str | bytes) or value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


EXPECTED = "expected a number, a dict with 'reward', or a list of messages"


def read_return(value: Any) -> Returned:
    """Read `run(...)`'s return value (see the module docstring)."""
    if isinstance(value, Returned):  # already read (a process agent's output)
        return value
    if isinstance(value, dict):
        if "reward" not in value:
            return Returned(
                bad=f"returned a dict without 'reward' (keys: {sorted(map(str, value))}); {EXPECTED}"
            )
        reward = _number(value["reward"])
        if reward is None:
            return Returned(bad=f"returned reward {_short(value['reward'])}; expected a finite number")
        metrics = {str(k): x for k, v in value.items() if k != "reward" and (x := _number(v)) is not None}
        return Returned(reward=reward, metrics=metrics)
    if isinstance(value, list | tuple):
        return _answer(list(value))
    reward = _number(value)
    if reward is None:
        return Returned(bad=f"returned {type(value).__name__} {_short(value)}; {EXPECTED}")
    return Returned(reward=reward)


def _answer(messages: list[Any]) -> Returned:
    """The last assistant message's content, from messages as dicts or the SDK's message objects."""
    for message in reversed(messages):
        if hasattr(message, "model_dump"):
            message = message.model_dump()
        if not isinstance(message, dict):
            return Returned(
                bad=f"returned a list holding {type(message).__name__} {_short(message)}; {EXPECTED}"
            )
        if message.get("role") == "assistant":
            try:
                return Returned(answer=text_of(message.get("content")))
            except ChatTemplateError as err:
                return Returned(bad=f"returned an assistant message whose {err}")
    return Returned(bad=f"returned {len(messages)} messages without an assistant message; {EXPECTED}")
