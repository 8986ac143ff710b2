"""turnrl's code sandbox: a SandboxFusion-compatible `/run_code` server, its client, and a helper
that runs the server as a child process. See docs/sandbox.md.

The names below are imported on first use: the sandbox's zygote imports this package's system-call
modules and must not pay for the HTTP client's imports (httpx) at every start."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turnrl.servers.sandbox.client import (
        CommandResult,
        RunResult,
        SandboxClient,
        SandboxError,
        SandboxRequestError,
        SandboxSession,
        SandboxUnavailable,
        SessionGone,
        check_server,
    )
    from turnrl.servers.sandbox.process import SandboxProcess

_HOMES = {
    "CommandResult": "client",
    "SandboxSession": "client",
    "SessionGone": "client",
    "RunResult": "client",
    "SandboxClient": "client",
    "SandboxError": "client",
    "SandboxRequestError": "client",
    "SandboxUnavailable": "client",
    "check_server": "client",
    "SandboxProcess": "process",
}

__all__ = [
    "CommandResult",
    "RunResult",
    "SandboxClient",
    "SandboxError",
    "SandboxProcess",
    "SandboxRequestError",
    "SandboxSession",
    "SandboxUnavailable",
    "SessionGone",
    "check_server",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
