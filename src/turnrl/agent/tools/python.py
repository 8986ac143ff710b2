"""The `python` tool: run the model's program in a code sandbox (turnrl's or any SandboxFusion server)."""

from __future__ import annotations

import re
from typing import Any

from turnrl.agent.tools.base import ToolResult, text_parameter
from turnrl.agent.tools.supervisor import ServerSupervisor, supervised
from turnrl.servers.sandbox.client import RunResult, SandboxClient, SandboxUnavailable

_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_+-]*\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)


def strip_fence(code: str) -> str:
    """Models often wrap code in a markdown fence inside the tags; the interpreter must not see it."""
    match = _FENCE.match(code)
    return match.group(1) if match else code.strip("\n")


def render_run(result: RunResult) -> str:
    """What the model reads: the program's output, then why it stopped if it did not finish cleanly."""
    parts = [result.stdout]
    if result.stderr:
        parts.append(result.stderr)
    if result.timed_out:
        parts.append("[timed out]")
    elif result.status == "SandboxError" or result.run_status == "Error":
        parts.append(f"[sandbox error: {result.message or 'could not run'}]")
    elif result.return_code not in (0, None):
        parts.append(f"[exit code {result.return_code}]")
    text = "\n".join(p.rstrip("\n") for p in parts if p)
    return text if text.strip() else "[no output]"


class PythonTool:
    """Executes Python through `SandboxClient`; one client serves all concurrent calls."""

    name = "python"
    description = "Run a Python program and return its standard output and errors."
    parameters = text_parameter("code", "a complete Python program; print what you want to see")
    xml_argument = "code"

    def __init__(
        self,
        url: str,
        run_timeout: float = 5.0,
        memory_limit_mb: int = -1,
        tag: str = "code",
        obs_tag: str = "observation",
        retries: int = 2,
        server: ServerSupervisor | None = None,
        api_key: str | None = None,
    ):
        """`api_key`: the sandbox's key; None or '' = $TURNRL_API_KEY (none if unset)."""
        self.url, self.run_timeout, self.memory_limit_mb = url, run_timeout, memory_limit_mb
        self.tag, self.obs_tag = tag, obs_tag
        self.client = SandboxClient(url, timeout=30.0, retries=retries, api_key=api_key)
        self.server = server
        """Set when the sandbox is turnrl's own child: a dead one is restarted once (`supervisor`)."""

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolResult("error: no code to run", error=True)
        program = strip_fence(code)
        result = await supervised(
            self.server,
            lambda: self.client.run_code(
                program, run_timeout=self.run_timeout, memory_limit_MB=self.memory_limit_mb
            ),
            SandboxUnavailable,
        )
        metrics = {"timed_out": float(result.timed_out), "exit_nonzero": float(not result.ok)}
        # a failing program is a normal observation (the model learns from it); only the sandbox failing is an error
        return ToolResult(render_run(result), metrics, error=result.status == "SandboxError")

    async def aclose(self) -> None:
        await self.client.aclose()
