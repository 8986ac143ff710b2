"""Keep turnrl's own tool servers up: a child that dies mid-run is restarted once, then the run stops.

A sandbox or retriever child can die in a long run (the OOM killer, a crash in a native library, an
operator's `kill`). Losing it would turn every later tool call into an error observation, and the
policy would learn from a broken environment. So the first death is repaired: the child is started
again on the same port (every client, the tool's and the code reward's, keeps its URL), the call
that met the dead server is sent once more, and `servers/restarts` counts it. A second death is no
longer bad luck: the run stops with one line naming the server and its log, which is kept to read.

All of it runs on the tools' event loop; the restart itself (seconds: a new process answering its
/health) runs in a thread, shared by every call that meets the dead server meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol, TypeVar

from turnrl.agent.tools.base import FatalToolError

log = logging.getLogger(__name__)

T = TypeVar("T")


class ChildServer(Protocol):
    """What `SandboxProcess` and `LocalRetriever` offer for supervision."""

    keep_log: bool

    @property
    def url(self) -> str: ...

    @property
    def returncode(self) -> int | None: ...

    def alive(self) -> bool: ...

    def restart(self) -> object: ...


def exit_text(returncode: int | None) -> str:
    """How a process ended, for people: `killed by SIGKILL`, `exited with code 1`."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def log_of(child: object) -> Path | None:
    """The child's log file: `log_path` for SandboxProcess, `log_file` for LocalRetriever."""
    for attr in ("log_file", "log_path"):
        path = getattr(child, attr, None)
        if isinstance(path, Path):
            return path
    return None


class ServerSupervisor:
    """Restarts one child server at most `max_restarts` times; raises FatalToolError after that."""

    def __init__(self, child: ChildServer, what: str, max_restarts: int = 1):
        self.child, self.what, self.max_restarts = child, what, max_restarts
        self.restarts = 0
        self.generation = 0
        """+1 per restart: a call that began before the current generation met the old server."""
        self._restarting: asyncio.Task[None] | None = None
        self._fatal = ""

    def _give_up(self, why: str) -> FatalToolError:
        self.child.keep_log = True  # the line below sends people to it
        self._fatal = (
            f"turnrl's {self.what} at {self.child.url} {why}; its log: {log_of(self.child) or 'none'}"
        )
        log.error(self._fatal)
        return FatalToolError(self._fatal)

    async def ensure(self) -> None:
        """Before a call: a child found dead is restarted first, so the call is not wasted on it."""
        if self._fatal or self._restarting is not None or not self.child.alive():
            await self.recover(self.generation)

    async def recover(self, seen_generation: int) -> bool:
        """After a call failed to reach the server: True when it has been restarted since the call began
        (send the call again), False when it is alive and was never down (the failure is the call's)."""
        if self._fatal:
            raise FatalToolError(self._fatal)
        if self._restarting is None:
            if self.generation != seen_generation:
                return True
            if self.child.alive():
                return False
            died = exit_text(self.child.returncode)
            if self.restarts >= self.max_restarts:
                plural = "s" if self.restarts != 1 else ""
                raise self._give_up(f"died again after {self.restarts} restart{plural} ({died})")
            self.restarts += 1
            log.warning(
                "turnrl's %s at %s %s; restarting it (restart %d)",
                self.what,
                self.child.url,
                died,
                self.restarts,
            )
            self._restarting = asyncio.ensure_future(self._restart())
            self._restarting.add_done_callback(_retrieve)
        # shielded: a call that times out while waiting must not cancel the restart the others wait for
        await asyncio.shield(self._restarting)
        return True

    async def _restart(self) -> None:
        try:
            await asyncio.to_thread(self.child.restart)
        except Exception as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise self._give_up(f"could not be restarted ({reason})") from None
        finally:
            self.generation += 1
            self._restarting = None


def _retrieve(task: asyncio.Task[None]) -> None:
    """The restart's failure reaches whoever awaits it; read it here too, so asyncio never logs it as lost."""
    if not task.cancelled():
        task.exception()


async def supervised(
    server: ServerSupervisor | None,
    send: Callable[[], Awaitable[T]],
    down: type[Exception] | tuple[type[Exception], ...],
) -> T:
    """`send()` to a supervised child server; sent once more if the server died and was restarted meanwhile.

    `down` is the client's error for a server it could not reach after its own retries."""
    if server is None:
        return await send()
    await server.ensure()
    seen = server.generation
    try:
        return await send()
    except down:
        if not await server.recover(seen):
            raise
    return await send()
