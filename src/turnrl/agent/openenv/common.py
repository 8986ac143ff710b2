"""What the OpenEnv modules share: the names, the errors, the one-line rule, the import of openenv."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from turnrl.errors import TurnrlInputError

PREFIX = "openenv:"
INSTALL = 'pip install -e ".[openenv]"'
RESET_KEY = "openenv_reset"
"""`extra_info` key of a row: an object of keyword arguments for the env's `reset` (a seed, a level)."""
FAILURE_KIND = "env"
"""`agent/errors/env`: an episode the environment server failed (it raised, closed, stopped answering)."""

AgentFn = Callable[[Any, str, dict[str, Any]], Awaitable[dict[str, float]]]


class OpenEnvError(TurnrlInputError):
    """An environment that cannot be reached or used at start-up; one line naming it."""


class OpenEnvEpisodeError(RuntimeError):
    """An episode the environment server failed (`agent/errors/env`): `<where>: <what>`, one line;
    `what` says what happened to the agent, read after its name ("had a step fail ...")."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}")
        self.what = what


def one_line(err: BaseException | str, limit: int = 300) -> str:
    # server messages (pydantic's above all) span lines; what failed is said first
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def import_openenv(where: str) -> Any:
    """openenv-core's server types (the wire protocol's messages), or one line naming the extra."""
    try:
        from openenv.core.env_server import types
    except ImportError as err:
        missing = isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] == "openenv"
        why = "is not installed" if missing else f"does not import ({one_line(err)})"
        raise OpenEnvError(f"{where}: the openenv-core package {why}; {INSTALL}") from None
    return types
