"""`rollout.agent.env=openenv:<server>`: the server checked at start-up, and the agent function that plays it."""

from __future__ import annotations

import logging
import threading
from typing import Any

from turnrl.agent.openenv.common import AgentFn, import_openenv
from turnrl.agent.openenv.episode import play_episode
from turnrl.agent.openenv.probe import probe
from turnrl.agent.openenv.spec import parse_spec

log = logging.getLogger(__name__)

DEFAULT_TURNS = 32
DEFAULT_TIMEOUT_S = 300.0


def load_openenv_agent(
    text: str, max_turns: int = DEFAULT_TURNS, timeout_s: float = DEFAULT_TIMEOUT_S
) -> AgentFn:
    """`async def run(client, model, row) -> dict` playing the env at `text` (`openenv:<server>`
    or just `<server>`) against `client`, at most `max_turns` model calls an episode (fewer when
    the spec's `max_turns` says so), each message to the server answered within `timeout_s`.
    OpenEnvError (one line) when openenv-core is missing or the server does not answer."""
    spec = parse_spec(text)
    import_openenv(spec.where)
    shape = probe(spec)
    turns = min(spec.max_turns or max_turns, max_turns)
    warned = threading.Event()

    def waited() -> None:
        if not warned.is_set():
            warned.set()
            log.warning(
                "%s: the server's sessions are all taken; episodes wait for one (its max_concurrent_envs "
                "is below rollout.agent.max_concurrency: lower that, or let the server hold more)",
                spec.where,
            )

    async def run(client: Any, model: str, row: dict[str, Any]) -> dict[str, float]:
        return await play_episode(spec, shape, client, model, row, turns, timeout_s, waited)

    mode = f"{len(shape.tools)} tool(s)" if shape.tools else (shape.action_field or "json")
    run.__qualname__ = run.__name__ = f"openenv_agent[{spec.url}, {mode}]"
    return run
