"""One episode's session with the server: OpenEnv's WebSocket protocol (`/ws`, its own env instance).

The protocol is openenv-core's message types (`WSResetMessage`, `WSStepMessage`, `WSCloseMessage`
out; an `observation` or an `error` with its code back), spoken here rather than through
`GenericEnvClient`: episodes run concurrently on threads, and that client's connect edits the
process's `NO_PROXY`, and reports a server's error as text, where its code decides whether a reply
was a bad action (told to the model) or the env failed (the episode fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from turnrl.agent.openenv.common import OpenEnvEpisodeError, import_openenv, one_line
from turnrl.agent.openenv.spec import Spec

CONNECT_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 5.0
MAX_MESSAGE = 100 * 2**20
"""Bytes of one message from the server (an observation may hold a screenshot)."""
FULL = "CAPACITY_REACHED"
"""The error code of a server whose sessions are all taken (its `max_concurrent_envs`)."""


class EnvAnswer(Exception):
    """The server's error answer to a message: its code (`VALIDATION_ERROR`, `EXECUTION_ERROR`,
    ...) and message, with the first validation error's place and reason when it gives them."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.code = str(data.get("code") or "UNKNOWN")
        message = one_line(data.get("message") or "no message")
        errors = data.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            where = ".".join(str(p) for p in errors[0].get("loc") or ())
            message += f" ({where + ': ' if where else ''}{one_line(errors[0].get('msg', ''))})"
        super().__init__(message)
        self.message = message


class Session:
    """A WebSocket session: `reset`, then `step`s, then `close`."""

    def __init__(self, spec: Spec, timeout_s: float) -> None:
        self.spec, self.timeout_s = spec, timeout_s
        self.types = import_openenv(spec.where)
        self._ws: Any = None

    async def connect(self) -> None:
        from websockets.asyncio.client import connect

        try:
            self._ws = await connect(
                self.spec.ws_url,
                open_timeout=CONNECT_TIMEOUT_S,
                close_timeout=CLOSE_TIMEOUT_S,
                max_size=MAX_MESSAGE,
                proxy=None if self.spec.loopback else True,
            )
        except Exception as err:  # refused, a handshake the server answered with an HTTP error, DNS
            raise OpenEnvEpisodeError(
                self.spec.where,
                f"could not open an environment session at {self.spec.ws_url}: "
                f"{type(err).__name__}: {one_line(err)}",
            ) from None

    async def reset(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The reset's `{"observation": {...}, "reward": ..., "done": ...}`."""
        return await self._ask(self.types.WSResetMessage(data=arguments))

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return await self._ask(self.types.WSStepMessage(data=action))

    async def _ask(self, message: Any) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        where = self.spec.where
        # a server that refuses the session (all taken) says why and closes at once, maybe before
        # this message goes out: what it said is still read
        with contextlib.suppress(ConnectionClosed):
            await self._ws.send(message.model_dump_json())
        try:
            raw = await asyncio.wait_for(self._ws.recv(), timeout=self.timeout_s)
        except ConnectionClosed as err:
            raise OpenEnvEpisodeError(
                where, f"lost its environment session: the server closed it ({one_line(err)})"
            ) from None
        except TimeoutError:
            raise OpenEnvEpisodeError(
                where, f"got no answer from the environment server to a {message.type} in {self.timeout_s:g}s"
            ) from None
        try:
            answer = json.loads(raw)
        except ValueError:
            raise OpenEnvEpisodeError(
                where, f"got an answer to a {message.type} that is not JSON from the environment server"
            ) from None
        kind = answer.get("type") if isinstance(answer, dict) else None
        data = answer.get("data") if isinstance(answer, dict) else None
        if kind == "error" and isinstance(data, dict):
            raise EnvAnswer(data)
        if kind != "observation" or not isinstance(data, dict):
            raise OpenEnvEpisodeError(
                where, f"got {one_line(str(answer), 120)} from the environment server for a {message.type}"
            )
        return data

    async def close(self) -> None:
        """Say `close` and let the server end the connection (it frees the session's env), then
        close this side; a server already gone is left be."""
        ws, self._ws = self._ws, None
        if ws is None:
            return
        try:
            await ws.send(self.types.WSCloseMessage().model_dump_json())
            await asyncio.wait_for(ws.wait_closed(), timeout=CLOSE_TIMEOUT_S)
        except Exception:  # closing is best effort: the episode's outcome is already known
            pass
        finally:
            await ws.close()


async def open_session(
    spec: Spec, arguments: dict[str, Any], timeout_s: float, on_wait: Callable[[], None]
) -> tuple[Session, dict[str, Any]]:
    """A session, reset with `arguments`, and the reset's answer. A server whose sessions are all
    taken answers the reset `CAPACITY_REACHED` and closes: the episode waits (calling `on_wait`)
    and asks again, until one is free or the episode's timeout ends it."""
    delay = 0.05
    while True:
        session = Session(spec, timeout_s)
        await session.connect()
        try:
            return session, await session.reset(arguments)
        except EnvAnswer as err:
            await session.close()
            if err.code != FULL:
                raise
        except BaseException:
            await session.close()
            raise
        on_wait()
        await asyncio.sleep(delay)
        delay = min(2 * delay, 1.0)
