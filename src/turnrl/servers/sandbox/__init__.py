"""turnrl's code sandbox: a SandboxFusion-compatible `/run_code` server, its client, and a helper
that runs the server as a child process. See docs/sandbox.md."""

from turnrl.servers.sandbox.client import (
    RunResult,
    SandboxClient,
    SandboxError,
    SandboxRequestError,
    SandboxUnavailable,
    check_server,
)
from turnrl.servers.sandbox.process import SandboxProcess

__all__ = [
    "RunResult",
    "SandboxClient",
    "SandboxError",
    "SandboxProcess",
    "SandboxRequestError",
    "SandboxUnavailable",
    "check_server",
]
