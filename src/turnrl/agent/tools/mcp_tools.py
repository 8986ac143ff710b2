"""MCP tools: `rollout.multi_turn.mcp_servers=["python my_server.py", "npx -y @scope/server /data"]`.

Each entry is a command line (split like a shell would, with `shlex`), started as a child process and
spoken to over stdio with the `mcp` SDK's client. Its `tools/list` answer becomes turnrl tools (name,
description, the tool's `inputSchema` as `parameters`) that join the tool set, and the agent loop calls
them like any other tool: under `tool_timeout`, their failures shown to the model and counted by kind.

Threads and event loops. The SDK's stdio client is an async context manager whose task group must be
entered and left by one task, on one loop, for the session's whole life. The tools' executor
(`agent.executor`) owns another loop, created after the tool set is built, and calls tools from it. So
the sessions live on a loop of their own, in the `turnrl-mcp` thread, started with the tool set and
stopped with it: one owner task per server enters the client and the session, initialises, lists the
tools, then waits for the stop. A call is sent to that loop with `run_coroutine_threadsafe` and awaited
from the executor's loop through `wrap_future`, so when the executor gives up on a call (its timeout),
the cancellation reaches the request on the MCP loop as well.

What a call returns: the text blocks of the result, joined by newlines; any other block (an image, audio,
a binary resource) described in one line, `[image: image/png, 67 bytes]`; no text block at all but
structured content: that, as JSON. An `isError` result is shown as the server wrote it and counted as
`reported`; a server that has stopped (it crashed, or closed stdout) turns its tools' calls into
`exception` errors naming its command, at once, without another request.

The servers' stderr goes to a temporary file (an MCP server may log every request there), whose last
line is quoted when a server fails to start or stops mid-run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import os
import shlex
import tempfile
import threading
from contextlib import AsyncExitStack
from typing import Any, TextIO

from turnrl.agent.tools.base import ToolError, ToolResult

log = logging.getLogger(__name__)

KEY = "rollout.multi_turn.mcp_servers"
INSTALL = 'pip install -e ".[agents]" (or pip install mcp)'
STOP_TIMEOUT_S = 15.0
"""Bound on stopping every server: the SDK closes stdin, waits 2 s, then SIGTERM and 2 s, then SIGKILL."""
_STDERR_TAIL_BYTES = 4096


class McpServerDown(RuntimeError):
    """A call to a server that has stopped; the executor shows it as an `exception` error."""


def split_command(command: str, index: int) -> list[str]:
    """The argv of `mcp_servers[index]`; a one-line ToolError naming it when it is not a command line."""
    where = f"{KEY}[{index}]"
    if not isinstance(command, str):
        raise ToolError(f"{where}: expected a command line (a string), got {type(command).__name__}")
    try:
        argv = shlex.split(command)
    except ValueError as err:
        raise ToolError(f"{where}: {quoted(command)} is not a command line ({err})") from None
    if not argv:
        raise ToolError(f"{where}: the command line is empty")
    return argv


def quoted(command: str) -> str:
    """A command as the messages show it: in double quotes, like the start-up line's."""
    return f'"{command}"'


def _import_sdk() -> tuple[Any, Any, Any]:
    """(ClientSession, StdioServerParameters, stdio_client), or the one line saying how to install them."""
    try:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
    except ImportError:
        raise ToolError(f"{KEY}: MCP tools need the mcp package: {INSTALL}") from None
    return ClientSession, StdioServerParameters, stdio_client


def _leaf(err: BaseException) -> BaseException:
    """The first real error inside the exception groups anyio's task groups wrap errors in."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return err


def _bad_line(err: Exception) -> str:
    """The unparseable stdout line in the SDK's validation error, quoted and cut short."""
    errors = getattr(err, "errors", None)
    value = errors()[0].get("input") if callable(errors) and errors() else None
    text = repr(value) if isinstance(value, str | bytes) else _one_line(err)
    return text if len(text) <= 120 else text[:117] + "..."


class _DropParseTracebacks(logging.Filter):
    """The SDK logs a traceback for each stdout line it cannot parse; `on_message` says it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to parse JSONRPC message")


logging.getLogger("mcp.client.stdio").addFilter(_DropParseTracebacks())


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _connection_closed(err: BaseException) -> bool:
    """Whether a call failed because the server is gone (its stdout closed), not because of the call."""
    import anyio

    if isinstance(err, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream):
        return True
    code = getattr(getattr(err, "error", None), "code", None)  # McpError (1.x) / MCPError (2.x)
    from mcp.types import CONNECTION_CLOSED

    return code == CONNECTION_CLOSED


def _dump(model: Any) -> dict[str, Any]:
    """An SDK object as its wire JSON (camelCase keys): the field names differ between mcp 1.x and 2.x."""
    return dict(model.model_dump(by_alias=True, mode="json", exclude_none=True))


def _size(data: str) -> int:
    """Bytes of base64 `data`."""
    return len(data) * 3 // 4 - data[-2:].count("=")


def describe_block(block: dict[str, Any]) -> str:
    """One content block as text: text blocks as they are, any other in one line."""
    kind = str(block.get("type", "?"))
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        return f"[{kind}: {block.get('mimeType', '?')}, {_size(str(block.get('data', '')))} bytes]"
    if kind == "resource":
        res = block.get("resource") or {}
        if isinstance(res.get("text"), str):  # an embedded text resource is text the model can read
            return str(res["text"])
        return f"[resource: {res.get('uri', '?')}, {res.get('mimeType', '?')}, {_size(str(res.get('blob', '')))} bytes]"
    if kind == "resource_link":
        return f"[resource link: {block.get('uri', '?')}]"
    return f"[{kind} content]"


def render_result(name: str, result: dict[str, Any]) -> ToolResult:
    """A `tools/call` result (wire JSON) as what the model reads."""
    blocks = result.get("content") or []
    text = "\n".join(describe_block(b) for b in blocks if isinstance(b, dict))
    structured = result.get("structuredContent")
    if not blocks and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    error = bool(result.get("isError"))
    if error and not text.strip():  # an empty error would read as an empty success
        text = f"error: tool '{name}' reported an error without a message"
    return ToolResult(text, error=error)


class McpServer:
    """One server: its command, its session (on the MCP loop), and whether it is still up."""

    def __init__(self, command: str, argv: list[str], loop: asyncio.AbstractEventLoop):
        self.command, self.argv, self.loop = command, argv, loop
        self.session: Any = None
        self.tools: list[dict[str, Any]] = []
        self.down = ""
        """Why the server is gone ('' while it is up): calls fail at once with it."""
        self.stderr: TextIO = tempfile.TemporaryFile("a+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._stop: asyncio.Event | None = None
        self.owner: asyncio.Task[None] | None = None
        self.ready: asyncio.Future[None] | None = None

    def stderr_tail(self) -> str:
        """The last non-empty line the server wrote to stderr ('' if none)."""
        try:
            fd = self.stderr.fileno()
            size = os.fstat(fd).st_size
            # pread leaves the offset alone; the file is O_APPEND, so the server's writes never move either
            tail = os.pread(fd, _STDERR_TAIL_BYTES, max(0, size - _STDERR_TAIL_BYTES))
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in tail.decode("utf-8", "replace").splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def _with_stderr(self, text: str) -> str:
        tail = self.stderr_tail()
        return f"{text}; its last stderr line: {tail}" if tail else text

    def begin(self, startup_timeout: float, sdk: tuple[Any, Any, Any]) -> asyncio.Future[None]:
        """On the MCP loop: start the owner task; the future is done once the tools are listed or it failed."""
        self._stop = asyncio.Event()
        self.ready = self.loop.create_future()
        self.owner = asyncio.ensure_future(self._serve(startup_timeout, sdk))
        return self.ready

    async def _serve(self, startup_timeout: float, sdk: tuple[Any, Any, Any]) -> None:
        """The owner task: start, list the tools, wait for `stop`, stop. Raises nothing but a cancellation:
        a failure to start is set on `ready`, a failure later is recorded in `down`."""
        import anyio

        assert self.ready is not None and self._stop is not None
        ClientSession, StdioServerParameters, stdio_client = sdk
        # the server inherits turnrl's environment, as a command run from its shell would (the SDK's
        # default keeps only HOME, PATH and a few others: servers read their API keys from it)
        params = StdioServerParameters(command=self.argv[0], args=self.argv[1:], env=dict(os.environ))
        # the start-up deadline is an anyio scope inside this task, lifted once the tools are listed:
        # cancelling the task from outside could defeat the SDK's shielded shutdown and leak the process
        scope = anyio.CancelScope(deadline=anyio.current_time() + startup_timeout)

        async def on_message(message: Any) -> None:
            # the SDK hands a stdout line it cannot parse to this handler (and logs a traceback,
            # filtered below); unheard, the start-up would wait out its whole deadline
            if not isinstance(message, Exception):
                return
            text = f"{KEY}: {quoted(self.command)} wrote a line to stdout that is not JSON-RPC: {_bad_line(message)} (an MCP stdio server writes only protocol messages there; log to stderr)"  # fmt: skip
            assert self.ready is not None
            if not self.ready.done():
                self.ready.set_exception(ToolError(self._with_stderr(text)))
                scope.cancel()
            else:
                log.warning("%s; the line was dropped", text)

        try:
            with scope:
                async with AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=self.stderr))
                    session = await stack.enter_async_context(
                        ClientSession(read, write, message_handler=on_message)
                    )
                    await session.initialize()
                    self.tools = await _list_tools(session)
                    self.session = session
                    scope.deadline = math.inf
                    self.ready.set_result(None)
                    await self._stop.wait()
            if not self.ready.done():  # the deadline cancelled the start-up
                self.ready.set_exception(ToolError(self._timeout_text(startup_timeout)))
        except BaseException as err:  # an owner task reports, it does not raise
            leaf = _leaf(err)
            ours = scope.cancel_called  # the start-up deadline (the SDK may turn it into another error)
            if not self.ready.done():
                text = self._timeout_text(startup_timeout) if ours else self._start_error(leaf)
                self.ready.set_exception(ToolError(text))
            elif not self._stop.is_set():
                self._went_down(f"stopped ({_one_line(leaf)})")
            if isinstance(leaf, KeyboardInterrupt | SystemExit) or (
                isinstance(leaf, asyncio.CancelledError) and not ours
            ):
                raise
        finally:
            self.session = None

    def _timeout_text(self, startup_timeout: float) -> str:
        return self._with_stderr(
            f"{KEY}: {quoted(self.command)} did not answer within mcp_startup_timeout_s={startup_timeout:g} s "
            "(start, initialize, list tools); raise rollout.multi_turn.mcp_startup_timeout_s if it is slow to start"
        )

    def _start_error(self, err: BaseException) -> str:
        if isinstance(err, FileNotFoundError):
            return f"{KEY}: {quoted(self.command)} cannot start: {self.argv[0]}: command not found"
        if _connection_closed(err) or isinstance(err, ConnectionError):  # the process ended under us
            return self._with_stderr(
                f"{KEY}: {quoted(self.command)} exited at start (it closed the connection before answering)"
            )
        if isinstance(err, OSError):  # the spawn itself failed: not executable, not a file, ...
            return f"{KEY}: {quoted(self.command)} cannot start: {self.argv[0]}: {err.strerror or err}"
        return self._with_stderr(f"{KEY}: {quoted(self.command)} failed at start: {_one_line(err)}")

    def _went_down(self, why: str) -> None:
        if not self.down:
            self.down = why
            log.warning(
                "mcp: %s",
                self._with_stderr(f"{quoted(self.command)} {why}; its tools' calls fail from now on"),
            )

    def stop(self) -> None:
        """On the MCP loop: let the owner task leave the session and the client (the SDK stops the process)."""
        if self._stop is not None:
            self._stop.set()

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """On the MCP loop: one `tools/call`."""
        if self.down or self.session is None:
            raise McpServerDown(f"MCP server {quoted(self.command)} {self.down or 'is not running'}")
        try:
            result = await self.session.call_tool(name, arguments)
        except Exception as err:
            if _connection_closed(err):
                self._went_down("stopped (connection closed)")
                raise McpServerDown(f"MCP server {quoted(self.command)} {self.down}") from None
            raise
        return render_result(name, _dump(result))


async def _list_tools(session: Any) -> list[dict[str, Any]]:
    """Every page of `tools/list`, as wire JSON."""
    import inspect

    result = await session.list_tools()
    tools = [_dump(t) for t in result.tools]
    cursor = getattr(result, "next_cursor", None) or getattr(result, "nextCursor", None)
    while cursor:
        if "cursor" in inspect.signature(session.list_tools).parameters:  # mcp 1.x
            result = await session.list_tools(cursor=cursor)
        else:  # mcp 2.x takes the request's params
            from mcp.types import PaginatedRequestParams

            result = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        tools += [_dump(t) for t in result.tools]
        cursor = getattr(result, "next_cursor", None) or getattr(result, "nextCursor", None)
    return tools


class McpTool:
    """One tool of an MCP server, as a turnrl tool; `call` runs on the caller's loop, the request on the MCP loop."""

    def __init__(self, server: McpServer, spec: dict[str, Any], clients: McpClients):
        self.server, self.clients = server, clients
        self.name = str(spec["name"])
        self.description = str(spec.get("description") or spec.get("title") or self.name)
        schema = spec.get("inputSchema")
        self.parameters: dict[str, Any] = (
            schema if isinstance(schema, dict) else {"type": "object", "properties": {}}
        )

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        return await asyncio.wrap_future(self.clients.submit(self.server.call(self.name, arguments)))


class McpClients:
    """The MCP servers of a tool set, their sessions, and the thread and loop they live on."""

    def __init__(self, commands: list[str], startup_timeout: float):
        self.argvs = [split_command(c, i) for i, c in enumerate(commands)]
        self.commands, self.startup_timeout = list(commands), startup_timeout
        self.servers: list[McpServer] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._calls: set[concurrent.futures.Future[Any]] = set()

    def start(self) -> list[McpTool]:
        """Start every server (at once), list their tools; a one-line ToolError for the first that fails."""
        sdk = _import_sdk()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="turnrl-mcp", daemon=True)
        self._thread.start()
        self.servers = [McpServer(c, a, self.loop) for c, a in zip(self.commands, self.argvs, strict=True)]

        async def start_all() -> None:
            readies = [s.begin(self.startup_timeout, sdk) for s in self.servers]
            await asyncio.wait(readies)
            errors = [r.exception() for r in readies]  # every one read, so asyncio logs none as lost
            first = next((e for e in errors if e is not None), None)  # the first failure in config order
            if first is not None:
                raise first

        try:
            # the owners' own deadlines end the start-up; this bound only guards against a stuck shutdown
            self._run(start_all(), self.startup_timeout + STOP_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise ToolError(
                f"{KEY}: the servers did not start or stop within {self.startup_timeout:g} s"
            ) from None
        tools = [McpTool(s, spec, self) for s in self.servers for spec in s.tools]
        for s in self.servers:
            names = ", ".join(str(t["name"]) for t in s.tools) or "none"
            log.warning("mcp: %s: tools %s", quoted(s.command), names)
        return tools

    def _run(self, coro: Any, timeout: float) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        """Run a call on the MCP loop; tracked, so `close` can cancel what is still in flight."""
        if self.loop is None or self.loop.is_closed():
            coro.close()
            raise McpServerDown("the MCP servers have been stopped")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        self._calls.add(future)
        future.add_done_callback(self._calls.discard)
        return future

    def close(self) -> None:
        """Cancel calls in flight, stop every server and wait for its process to end, stop the loop."""
        if self.loop is None or self.loop.is_closed():
            return

        async def stop_all() -> None:
            for s in self.servers:
                s.stop()
            owners = [s.owner for s in self.servers if s.owner is not None]
            if owners:
                await asyncio.wait(owners, timeout=STOP_TIMEOUT_S)

        for future in list(self._calls):
            future.cancel()
        try:
            self._run(stop_all(), STOP_TIMEOUT_S + 5)
        except concurrent.futures.TimeoutError:
            log.warning("mcp: stopping the MCP servers timed out")
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=10)
            if self._thread is None or not self._thread.is_alive():
                self.loop.close()
            for s in self.servers:
                s.stderr.close()
