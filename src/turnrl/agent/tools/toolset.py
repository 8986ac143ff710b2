"""Build the configured tools, start the servers they need, check they answer, stop them at the end.

A tool server named by URL is health-checked at start-up: a server that is down stops the run
in one line naming the URL, instead of a hang at the first tool call. Without a URL, turnrl
starts its own sandbox / retriever (over `search.index`, else the index `default_index` builds) as
a child process, under a `ServerSupervisor`: restarted once if it dies mid-run, counted in
`servers/restarts`.

MCP servers (`mcp_servers`) start last, each over stdio on the MCP thread's loop (`mcp_tools`); their
tools join the set under their own names, and a name already taken stops the run in one line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from turnrl.agent.tools.base import ToolError
from turnrl.agent.tools.calculator import Calculator
from turnrl.agent.tools.custom import load_custom_tool
from turnrl.agent.tools.step_rewards import StepReward, new_evidence, program_ran, well_formed
from turnrl.agent.tools.supervisor import ServerSupervisor
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.rollout.base import Endpoint, Services

log = logging.getLogger(__name__)


class ToolSet:
    """Tools by name, plus the child servers started for them (use as a context manager)."""

    def __init__(
        self, cfg: MultiTurnConfig, cache_dir: Path, default_index: Callable[[Path], Path] | None = None
    ):
        """`default_index(cache_dir)`: the index directory a child retriever serves when `search`
        names neither a URL nor an index (a run passes the search task's, `turnrl.tasks.search`)."""
        self.cfg, self.cache_dir, self.default_index = cfg, cache_dir, default_index
        self.tools: dict[str, Any] = {}
        self._origin: dict[str, str] = {}
        """Where each tool came from, for the clash messages: `the built-in tool`, a custom spec, a server."""
        self._mcp: Any = None
        """The MCP servers' clients (`mcp_tools.McpClients`) while they run."""
        self._children: list[Any] = []
        self.supervisors: list[ServerSupervisor] = []
        self.services = Services()
        """The servers the tools run on (URL and key; a key '' = $TURNRL_API_KEY's): code rewards
        reuse the sandbox, and send its key."""
        self.step_rewards: dict[str, StepReward] = {}
        """The built-in tools' step rewards by tool name (`ToolSpec.step_reward`)."""

    def start(self) -> ToolSet:
        try:
            check_tool_names(self.cfg.tools)
            for name in self.cfg.tools:
                spec = TOOLS[name]
                tool = spec.build(self)
                self._add(tool, "the built-in tool")
                if spec.step_reward is not None:
                    self.step_rewards[tool.name] = spec.step_reward
            for spec in self.cfg.custom_tools:
                self._add(load_custom_tool(spec), f"the custom tool '{spec}'")
            if self.cfg.mcp_servers:
                self._start_mcp()
        except BaseException:
            self.close()
            raise
        return self

    def _add(self, tool: Any, origin: str) -> None:
        if tool.name in self.tools:
            raise ToolError(f"rollout.multi_turn: two tools are named '{tool.name}'")
        self.tools[tool.name] = tool
        self._origin[tool.name] = origin

    def _start_mcp(self) -> None:
        from turnrl.agent.tools.mcp_tools import KEY, McpClients, quoted

        self._mcp = McpClients(self.cfg.mcp_servers, self.cfg.mcp_startup_timeout_s)
        for tool in self._mcp.start():
            server = quoted(tool.server.command)
            if tool.name in self.tools:  # the model could not tell the two apart
                raise ToolError(
                    f"{KEY}: {server} has a tool named '{tool.name}', as has {self._origin[tool.name]}; "
                    "tool names must be unique (drop one of them)"
                )
            self._add(tool, f"MCP server {server}")

    @property
    def restarts(self) -> int:
        """Child servers restarted so far in this run."""
        return sum(s.restarts for s in self.supervisors)

    def server(
        self, key: str, url: str, check: Any, errors: tuple[type[Exception], ...], child: Any, what: str
    ) -> tuple[str, ServerSupervisor | None]:
        """A configured server's URL after a health check, or the URL of our own child server and its
        supervisor (a server someone else runs is theirs to restart: its client retries, then reports)."""
        if url:
            try:
                check(url)
            except errors as err:
                raise ToolError(f"{key}.url: {err}") from None
            return url, None
        try:
            child.start()
        except errors as err:
            raise ToolError(f"{key}: could not start turnrl's {what}: {err}") from None
        self._children.append(child)
        log.warning("started turnrl's %s at %s (no %s.url given)", what, child.url, key)
        supervisor = ServerSupervisor(child, what)
        self.supervisors.append(supervisor)
        return child.url, supervisor

    def search_index(self, index: str) -> Path:
        if index:
            return Path(index)
        if self.default_index is None:
            raise ToolError(
                "rollout.multi_turn.search: set url (a running retriever) or index (an index directory)"
            )
        return self.default_index(self.cache_dir)

    def close(self) -> None:
        """Stop the child servers (tool clients are closed by the executor that owns their event loop)."""
        if self._mcp is not None:
            mcp, self._mcp = self._mcp, None
            try:
                mcp.close()
            except Exception as err:  # stopping must go on for the others
                log.warning("stopping the MCP servers failed: %r", err)
        while self._children:
            child = self._children.pop()
            try:
                child.stop()
            except Exception as err:  # stopping must go on for the others
                log.warning("stopping %s failed: %r", type(child).__name__, err)

    def __enter__(self) -> ToolSet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the built-in tools: one builder each, and the table ToolSet dispatches by ----------------------


def build_calculator(tools: ToolSet) -> Any:
    c = tools.cfg.calculator
    return Calculator(c.tag, c.obs_tag)


def build_python(tools: ToolSet) -> Any:
    """The python tool over a sandbox: `python.url`'s, else a child sandbox of the run's own (whose
    URL and key the code rewards reuse: `tools.services.sandbox`)."""
    from turnrl.agent.tools.python import PythonTool
    from turnrl.servers.sandbox import SandboxError, SandboxProcess, check_server

    p = tools.cfg.python
    child = None if p.url else SandboxProcess(workers=p.workers or None)

    def check(url: str) -> dict[str, Any]:
        return check_server(url, api_key=p.api_key)

    url, supervisor = tools.server(
        "rollout.multi_turn.python", p.url, check, (SandboxError, ValueError), child, "code sandbox"
    )
    # our own child has a key of its own (fresh per child); someone else's server takes the configured one
    api_key = child.api_key if child is not None else p.api_key
    tools.services = replace(tools.services, sandbox=Endpoint(url, api_key))
    return PythonTool(
        url,
        p.run_timeout,
        p.memory_limit_mb,
        p.tag,
        p.obs_tag,
        server=supervisor,
        api_key=api_key,
    )


def build_search(tools: ToolSet) -> Any:
    """The search tool over a retriever: `search.url`'s, else a child retriever of the run's own
    over `search.index` (or the index `default_index` builds)."""
    from turnrl.agent.tools.search import SearchTool
    from turnrl.servers.retriever.client import check_server
    from turnrl.servers.retriever.errors import RetrieverError
    from turnrl.servers.retriever.launcher import LocalRetriever

    s = tools.cfg.search
    child = None if s.url else LocalRetriever(tools.search_index(s.index), topk=s.topk)

    def check(url: str) -> dict[str, Any]:
        return check_server(url, api_key=s.api_key)

    url, supervisor = tools.server(
        "rollout.multi_turn.search", s.url, check, (RetrieverError, ValueError), child, "retriever"
    )
    # our own child has a key of its own (fresh per child); someone else's server takes the configured one
    api_key = child.api_key if child is not None else s.api_key
    tools.services = replace(tools.services, retriever=Endpoint(url, api_key))
    return SearchTool(
        url, s.topk, s.tag, s.obs_tag, timeout=tools.cfg.tool_timeout, server=supervisor, api_key=api_key
    )


def workspace_server(tools: ToolSet) -> Endpoint:
    """The sessions' sandbox, started or checked once for both tools that use it: `workspace.url`'s,
    else a child sandbox of the run's own (`tools.services.workspace`)."""
    if tools.services.workspace is not None:
        return tools.services.workspace
    from turnrl.servers.sandbox import SandboxError, SandboxProcess, check_server

    w = tools.cfg.workspace
    child = None if w.url else SandboxProcess(workers=w.workers or None)

    def check(url: str) -> dict[str, Any]:
        health = check_server(url, api_key=w.api_key)
        if "sessions" not in health:  # a SandboxFusion server runs programs, it keeps no workspace
            raise SandboxError(f"sandbox server at {url} has no sessions (run `turnrl sandbox serve`)")
        return health

    url, _ = tools.server(
        "rollout.multi_turn.workspace", w.url, check, (SandboxError, ValueError), child, "workspace sandbox"
    )
    api_key = child.api_key if child is not None else w.api_key
    tools.services = replace(tools.services, workspace=Endpoint(url, api_key))
    return tools.services.workspace


def build_bash(tools: ToolSet) -> Any:
    from turnrl.agent.tools.workspace import BashTool

    workspace_server(tools)
    return BashTool(tools.cfg.workspace.command_timeout_s)


def build_editor(tools: ToolSet) -> Any:
    from turnrl.agent.tools.workspace import EditorTool

    workspace_server(tools)
    return EditorTool(tools.cfg.workspace.command_timeout_s)


@dataclass(frozen=True)
class ToolSpec:
    """A built-in tool: its config section and what builds it (starting the server it needs)."""

    section: str
    """Its settings: `rollout.multi_turn.<section>`."""
    build: Callable[[ToolSet], Any]
    """The tool, from the set (its config, and `server` to start or check what it needs)."""
    summary: str
    step_reward: StepReward | None = None
    """Its calls' step rewards with `rollout.multi_turn.step_rewards` (`step_rewards.py`); None: none."""


TOOLS: dict[str, ToolSpec] = {
    "calculator": ToolSpec("calculator", build_calculator, "exact arithmetic in Python, no server", well_formed),
    "python": ToolSpec("python", build_python, "runs code in the sandbox (a child of the run's, or python.url)", program_ran),
    "search": ToolSpec("search", build_search, "searches a retriever (a child of the run's, or search.url)", new_evidence),
    "bash": ToolSpec("workspace", build_bash, "a shell command in the episode's workspace (a sandbox session)"),
    "editor": ToolSpec("workspace", build_editor, "views, creates and edits the workspace's files"),
}  # fmt: skip
"""The built-in tools by name: a new one is a builder and a line here."""


def check_tool_names(names: list[str]) -> None:
    """Every name in `rollout.multi_turn.tools` is a built-in tool: checked where the run is
    assembled, before any model loads."""
    for name in names:
        if name not in TOOLS:
            raise ToolError(
                f"rollout.multi_turn.tools: unknown tool '{name}'; built-in: {', '.join(TOOLS)} "
                "(add your own with rollout.multi_turn.custom_tools)"
            )
