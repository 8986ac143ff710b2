"""A small MCP server over stdio for the MCP-tool tests: `python tests/support/mcp_server.py`.

Tools: `add(a, b)`, `echo(text)`, `fail()` (raises: the SDK answers `isError`), `slow(seconds)` (sleeps,
for the tool timeout), `picture()` (an image and a text block: non-text content), `crash()` (the server
process exits at once: a server that dies mid-run).

Options (the tests start it with them as a user would, in the command line):
    --tag TEXT          ignored; a mark a test finds in /proc to check that no process is left over
    --prefix P          prefix of every tool name (two servers without clashing names)
    --clash NAME        one more tool, named NAME (a name another tool has)
    --sleep-before S    sleep S seconds before serving (a server that hangs at start)
    --exit-at-start     print a line to stderr and exit with code 3 before serving
    --print-at-start    print a line that is not JSON-RPC to stdout before serving (a server that logs there)

Written against the SDK's high-level server: `MCPServer` in mcp 2.x, `FastMCP` in mcp 1.x.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import time

try:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.server.fastmcp import Image
except ImportError:  # mcp 2.x renamed FastMCP
    from mcp.server.mcpserver import Image
    from mcp.server.mcpserver import MCPServer as Server

# one red pixel, a valid PNG: what a screenshot tool would return
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


def build(prefix: str = "", clash: str = "") -> Server:
    server = Server("turnrl-test")

    @server.tool(name=f"{prefix}add")
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    @server.tool(name=f"{prefix}echo")
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool(name=f"{prefix}fail")
    def fail() -> str:
        """Always fails."""
        raise RuntimeError("fail() was called")

    @server.tool(name=f"{prefix}slow")
    async def slow(seconds: float) -> str:
        """Sleep, then say how long."""
        await asyncio.sleep(seconds)
        return f"slept {seconds:g} s"

    @server.tool(name=f"{prefix}picture")
    def picture():  # type: ignore[no-untyped-def]  # no return annotation: unstructured content blocks
        """A one-pixel picture with a caption."""
        return ["a red pixel", Image(data=PIXEL, format="png")]

    @server.tool(name=f"{prefix}crash")
    def crash() -> str:
        """The server process exits at once."""
        print("mcp_server: crashing on purpose", file=sys.stderr, flush=True)
        os._exit(7)

    if clash:

        @server.tool(name=clash)
        def clashing(text: str) -> str:
            """A tool named like another one."""
            return text

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", default="")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--clash", default="")
    parser.add_argument("--sleep-before", type=float, default=0.0)
    parser.add_argument("--exit-at-start", action="store_true")
    parser.add_argument("--print-at-start", action="store_true")
    args = parser.parse_args()
    if args.print_at_start:
        print("mcp_server: starting up", flush=True)
    if args.exit_at_start:
        print("mcp_server: refusing to start (--exit-at-start)", file=sys.stderr, flush=True)
        sys.exit(3)
    time.sleep(args.sleep_before)
    build(args.prefix, args.clash).run("stdio")


if __name__ == "__main__":
    main()
