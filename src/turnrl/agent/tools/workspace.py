"""Tools that act in the episode's workspace: `bash` runs a command there, `editor` views, creates
and edits its files. Both need a task that brings a workspace (a Harbor task, `data.task=harbor:...`):
the rollout opens one sandbox session per episode before its first turn and hands it to these tools
with each call (`uses_workspace`), so files one call writes are there for the next.

The session is any object with the three coroutines of `turnrl.servers.sandbox.client.SandboxSession`:
`run(command, timeout_s)`, `read(path)` and `write(path, data)`.

The editor's commands (the shape coding agents of 2026 are trained on):

    view         a file with line numbers (optionally `view_range: [first, last]`), or a directory's listing
    create       a new file with `file_text` (an existing file is overwritten: say so in the answer)
    str_replace  `old_str` -> `new_str` where `old_str` occurs exactly once; 0 or 2+ matches change nothing
"""

from __future__ import annotations

import shlex
from typing import Any, ClassVar, Protocol

from turnrl.agent.tools.base import ToolResult

VIEW_MAX_LINES = 400
"""A longer file is shown up to here, with a note naming `view_range` to see the rest."""


class Workspace(Protocol):
    async def run(self, command: str, timeout_s: float = 30.0) -> Any: ...
    async def read(self, path: str) -> bytes: ...
    async def write(self, path: str, data: bytes | str) -> None: ...


def render_command(result: Any) -> str:
    """What the model reads from a command: its output, then how it ended when not cleanly."""
    parts = [p.rstrip("\n") for p in (result.stdout, result.stderr) if p]
    if result.timed_out:
        parts.append("[timed out]")
    elif result.return_code not in (0, None):
        parts.append(f"[exit code {result.return_code}]")
    text = "\n".join(parts)
    return text if text.strip() else "[no output]"


class BashTool:
    """`bash`: one shell command in the episode's workspace (its working directory, /app)."""

    name = "bash"
    description = "Run a bash command in the task's workspace and return its output and exit code."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "a bash command line"}},
        "required": ["command"],
    }
    xml_argument = "command"
    uses_workspace = True

    def __init__(self, timeout_s: float = 30.0, tag: str = "bash", obs_tag: str = "observation") -> None:
        self.timeout_s, self.tag, self.obs_tag = timeout_s, tag, obs_tag

    async def call(self, arguments: dict[str, Any], workspace: Workspace) -> ToolResult:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            return ToolResult("error: bash needs a non-empty string `command`", error=True)
        result = await workspace.run(command, self.timeout_s)
        failed = bool(result.timed_out or result.return_code not in (0, None))
        metrics = {
            "exit_nonzero": float(failed and not result.timed_out),
            "timed_out": float(result.timed_out),
        }
        return ToolResult(render_command(result), metrics=metrics)


def numbered(text: str, first: int = 1) -> str:
    """`text`'s lines numbered from `first`, as `cat -n` shows them."""
    return "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(text.split("\n"), first))


def replace_once(text: str, old: str, new: str) -> tuple[str | None, str]:
    """(`text` with its one `old` made `new`, "") or (None, why not): `old` must occur exactly once."""
    if not old:
        return None, "`old_str` is empty"
    count = text.count(old)
    if count != 1:
        where = "does not occur" if count == 0 else f"occurs {count} times; add context to make it unique"
        return None, f"`old_str` {where}"
    return text.replace(old, new, 1), ""


class EditorTool:
    """`editor`: view, create, or replace a unique string in the workspace's files."""

    name = "editor"
    description = (
        "View a file or directory, create a file, or replace a string that occurs exactly once in a file."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "enum": ["view", "create", "str_replace"]},
            "path": {"type": "string", "description": "a path in the workspace, e.g. src/app.py"},
            "file_text": {"type": "string", "description": "create: the whole file"},
            "old_str": {"type": "string", "description": "str_replace: the text to replace, exactly once"},
            "new_str": {"type": "string", "description": "str_replace: its replacement"},
            "view_range": {
                "type": "array",
                "items": {"type": "integer"},
                "description": "view: [first, last]",
            },
        },
        "required": ["command", "path"],
    }
    uses_workspace = True

    def __init__(self, timeout_s: float = 30.0, tag: str = "editor", obs_tag: str = "observation") -> None:
        self.timeout_s, self.tag, self.obs_tag = timeout_s, tag, obs_tag

    async def call(self, arguments: dict[str, Any], workspace: Workspace) -> ToolResult:
        command, path = arguments.get("command"), arguments.get("path")
        if not isinstance(path, str) or not path.strip():
            return ToolResult("error: editor needs a string `path`", error=True)
        if command == "view":
            return await self._view(workspace, path, arguments.get("view_range"))
        if command == "create":
            text = arguments.get("file_text")
            if not isinstance(text, str):
                return ToolResult("error: create needs a string `file_text`", error=True)
            await workspace.write(path, text)
            return ToolResult(f"created {path} ({len(text.splitlines())} lines)")
        if command == "str_replace":
            return await self._replace(workspace, path, arguments.get("old_str"), arguments.get("new_str"))
        return ToolResult(
            f"error: unknown editor command {command!r}; use view, create or str_replace", error=True
        )

    async def _view(self, workspace: Workspace, path: str, view_range: Any) -> ToolResult:
        quoted = shlex.quote(path)
        listing = await workspace.run(
            f"if [ -d {quoted} ]; then find {quoted} -maxdepth 2 -not -path '*/.*' | sort; else exit 3; fi",
            self.timeout_s,
        )
        if listing.return_code == 0:
            return ToolResult(listing.stdout.rstrip("\n") or "[empty directory]")
        text = (await workspace.read(path)).decode("utf-8", errors="replace")
        lines = text.split("\n")
        first, last = 1, min(len(lines), VIEW_MAX_LINES)
        if view_range is not None:
            if not (
                isinstance(view_range, list)
                and len(view_range) == 2
                and all(type(v) is int for v in view_range)
            ):
                return ToolResult("error: view_range must be [first, last], two line numbers", error=True)
            first = max(1, view_range[0])
            last = len(lines) if view_range[1] == -1 else min(view_range[1], len(lines))
        shown = numbered("\n".join(lines[first - 1 : last]), first)
        if last < len(lines) and view_range is None:
            shown += f"\n[{len(lines) - last} more lines: view_range=[{last + 1}, -1]]"
        return ToolResult(shown)

    async def _replace(self, workspace: Workspace, path: str, old: Any, new: Any) -> ToolResult:
        if not isinstance(old, str) or not isinstance(new, str):
            return ToolResult("error: str_replace needs strings `old_str` and `new_str`", error=True)
        text = (await workspace.read(path)).decode("utf-8")
        changed, why = replace_once(text, old, new)
        if changed is None:
            return ToolResult(f"error: {path}: {why}; nothing changed", error=True)
        await workspace.write(path, changed)
        start = text[: text.index(old)].count("\n") + 1  # the first line of the replacement
        around = changed.split("\n")[max(0, start - 3) : start + new.count("\n") + 2]
        return ToolResult(f"edited {path}:\n" + numbered("\n".join(around), max(1, start - 2)))
