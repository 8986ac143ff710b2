"""A process agent's sandbox session, for an episode whose row brings a workspace (a Harbor task):
opened before the process starts, named to it in its environment, verified by the task's tests
after it exits, and deleted whatever happened.

    server = WorkspaceServer(cfg.rollout.multi_turn)      # nothing started yet
    with EpisodeWorkspace(server, row) as ws:             # the session opened, or EpisodeFailed('workspace')
        env |= ws.env                                     # TURNRL_SANDBOX_URL / _SESSION / _KEY, TURNRL_WORKSPACE
        ...                                               # the process runs
        returned = ws.verify()                            # the verifier's reward, or EpisodeFailed('workspace')
    server.close()                                        # a child sandbox stopped

The sandbox is `rollout.multi_turn.workspace.url`'s, else turnrl's own child sandbox, started once
by the first episode that needs it (`workspace_server`, which starts the `bash` and `editor` tools'
too). Each episode runs on a thread of its own, so each talks to the sandbox on an event loop of
its own (`Workspaces` is async, its HTTP client bound to one loop).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from turnrl.agent.functions.entrypoint import EpisodeFailed, Returned
from turnrl.agent.harbor.spec import WORKSPACE
from turnrl.agent.workspaces import Workspaces, one_line
from turnrl.keys import resolve_api_key
from turnrl.rollout.base import Endpoint

STOP_S = 30.0
"""How long close waits for a child sandbox to stop."""
KIND = "workspace"
"""`agent/errors/workspace`: the episode's session could not be opened, or its verifier not run or read."""


class WorkspaceServer:
    """The sandbox the episodes' sessions live on: checked or started on first use, stopped at close.

    A child sandbox is started, and held, by a thread of its own: a child gets SIGTERM when the
    thread that started it ends (PR_SET_PDEATHSIG), and an episode's thread ends with the episode."""

    def __init__(self, cfg: Any) -> None:
        """`cfg`: `rollout.multi_turn` (its `workspace` section names the sandbox)."""
        self.cfg = cfg
        self.lock = threading.Lock()
        self.endpoint: Endpoint | None = None
        self.failure = ""
        """Why the sandbox could not be had: every later episode fails with it, not a slow retry."""
        self.keeper: threading.Thread | None = None
        self.stopping = threading.Event()

    def get(self) -> Endpoint:
        """The sandbox's URL and key; EpisodeFailed('workspace') when it is down or cannot start."""
        with self.lock:
            if self.keeper is None:
                ready = threading.Event()
                self.keeper = threading.Thread(
                    target=self._keep, args=(ready,), name="turnrl-workspace-sandbox", daemon=True
                )
                self.keeper.start()
                ready.wait()
            if self.endpoint is None:
                raise EpisodeFailed(KIND, self.failure or "workspace: the sandbox was stopped")
            return self.endpoint

    def _keep(self, ready: threading.Event) -> None:
        """Check `url`'s sandbox or start turnrl's own (`workspace_server`), then hold it until close."""
        from turnrl.agent.tools.toolset import ToolSet, workspace_server

        tools = ToolSet(self.cfg, Path("."))  # no tools of its own: only the sandbox it starts
        try:
            self.endpoint = workspace_server(tools)
        except Exception as err:  # a ToolError's one line, or what else stopped the start
            self.failure = f"workspace: {err}"
        finally:
            ready.set()
        self.stopping.wait()
        tools.close()

    def close(self) -> None:
        """Stop a child sandbox; safe to call twice."""
        with self.lock:
            keeper, self.endpoint = self.keeper, None
            self.stopping.set()
        if keeper is not None:
            keeper.join(STOP_S)


class EpisodeWorkspace:
    """One episode's session on `server` (see the module docstring); use it on one thread."""

    def __init__(self, server: WorkspaceServer, row: dict[str, Any]) -> None:
        self.server, self.row = server, row
        self.loop: asyncio.AbstractEventLoop | None = None
        self.workspaces: Workspaces | None = None
        self.session: Any = None
        self.env: dict[str, str] = {}
        """What the process is told: where its session is, and the sandbox's key."""

    def __enter__(self) -> EpisodeWorkspace:
        endpoint = self.server.get()
        self.loop = asyncio.new_event_loop()
        self.workspaces = Workspaces(endpoint.url, endpoint.api_key or None, self.server.cfg.workspace.ttl_s)
        try:
            self.session = self.loop.run_until_complete(self.workspaces.open(self.row))
        except Exception as err:  # the sandbox refused or failed: the episode cannot start
            self._close()
            raise EpisodeFailed(
                KIND, f"workspace: the session could not be opened: {one_line(err)}"
            ) from None
        self.env = {
            "TURNRL_SANDBOX_URL": endpoint.url,
            "TURNRL_SANDBOX_SESSION": self.session.id,
            "TURNRL_SANDBOX_KEY": resolve_api_key(endpoint.api_key or None),
            "TURNRL_WORKSPACE": WORKSPACE,
        }
        return self

    def verify(self) -> Returned:
        """Run the task's tests in the session, then delete it: the verifier's reward, or
        EpisodeFailed('workspace') when it could not be run or read."""
        assert self.loop is not None and self.workspaces is not None
        session, self.session = self.session, None
        finished = self.loop.run_until_complete(self.workspaces.finish(session, self.row))
        if finished.reward is None:
            raise EpisodeFailed(KIND, finished.error)
        return Returned(reward=finished.reward)

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        """Delete a session not verified (the process failed, or printed its own reward), then
        close the client and the loop."""
        if self.loop is None:
            return
        if self.session is not None:
            session, self.session = self.session, None
            self.loop.run_until_complete(session.delete())  # errors are left to its ttl_s
        if self.workspaces is not None:
            self.loop.run_until_complete(self.workspaces.aclose())
        self.loop.close()
        self.loop = None
