"""`turnrl sandbox serve`: start the code sandbox HTTP server (no torch import on this path).

Every refusal to start is one line, `turnrl sandbox serve: error: <flag>: <reason>`, exit status 2:
a bad option value, a non-loopback `--host` without a key, a port that cannot be bound.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from turnrl.errors import TurnrlInputError
from turnrl.keys import API_KEY_ENV, check_bind, resolve_api_key
from turnrl.servers.connections import ConnectionLimits
from turnrl.servers.connections import add_arguments as add_connection_arguments
from turnrl.servers.listen import port_arg, positive_int
from turnrl.servers.options import add_options, values_of
from turnrl.servers.sandbox.cleanup import remove_tree
from turnrl.servers.sandbox.config import SandboxConfig

COMMAND = "turnrl sandbox serve"


OPTIONS = (
    "host", "port", "workers", "queue", "isolation", "cgroup", "rootfs", "seccomp", "zygote",
    "max_run_timeout", "max_output", "max_body", "max_code", "max_stdin", "max_files",
    "max_files_bytes", "python", "max_sessions", "session_ttl_s", "session_max_ttl_s",
    "session_disk_bytes", "session_max_files",
)  # fmt: skip
"""The SandboxConfig fields `turnrl sandbox serve` takes as options (`servers.options`)."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("sandbox", help="code sandbox server (SandboxFusion-compatible /run_code)")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    cmds = parser.add_subparsers(dest="sandbox_command", metavar="COMMAND")
    serve = cmds.add_parser("serve", help="serve POST /run_code and GET /health")
    positive = dict.fromkeys(("max_output", "max_body", "max_code", "max_stdin", "max_files", "max_files_bytes", "session_disk_bytes", "session_max_files"), positive_int)  # fmt: skip
    add_options(
        serve,
        SandboxConfig,
        OPTIONS,
        types={"port": port_arg, **positive},
        choices={"isolation": ("auto", "basic")},
    )
    serve.add_argument(
        "--api-key",
        default=None,
        help=f"key every request must send as 'Authorization: Bearer KEY' or 'X-API-Key: KEY' "
        f"(default ${API_KEY_ENV}; prefer it: a flag shows in ps); required beyond loopback",
    )
    add_connection_arguments(serve)
    serve.set_defaults(func=serve_command)


def _refuse(message: str) -> int:
    print(f"{COMMAND}: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


def serve_command(args: argparse.Namespace) -> int:
    cfg = SandboxConfig(**values_of(args, OPTIONS), api_key=resolve_api_key(args.api_key))
    try:
        cfg.check()
        connections = ConnectionLimits.from_args(args)
    except (ValueError, TurnrlInputError) as err:
        return _refuse(str(err))
    if not (os.path.isfile(cfg.python) and os.access(cfg.python, os.X_OK)):
        return _refuse(f"--python {cfg.python!r} is not an executable file")
    try:
        return serve(cfg, connections)
    except TurnrlInputError as err:
        return _refuse(str(err))


def serve(cfg: SandboxConfig, connections: ConnectionLimits | None = None) -> int:
    """Bind, probe isolation, print both, serve until SIGINT/SIGTERM. Imports the server stack
    lazily. Raises TurnrlInputError (one line naming the flag) when it cannot listen as asked."""
    from turnrl.servers.connections import Connections
    from turnrl.servers.listen import bind, serve_on, url_of
    from turnrl.servers.sandbox.app import create_app
    from turnrl.servers.sandbox.probe import probe_isolation

    check_bind(cfg.host, cfg.api_key)
    sock = bind(cfg.host, cfg.port)  # first: a taken port is reported before the slow probe
    work_root = tempfile.mkdtemp(prefix="turnrl-sandbox-")
    try:
        os.chmod(work_root, 0o711)  # slot uids must traverse it to reach their own 0700 dir
        iso = probe_isolation(cfg, work_root)
        try:
            print("\n".join(iso.describe()), flush=True)
            app = create_app(cfg, iso, work_root)
            key = "an API key required" if cfg.api_key else "no API key (loopback only)"
            print(
                f"turnrl sandbox: languages {', '.join(sorted(cfg.languages()))}; workers {cfg.workers}, "
                f"queue {cfg.queue}; {key}; listening on {url_of(sock)}",
                flush=True,
            )
            serve_on(app, sock, Connections(connections), log_level="warning", loop="asyncio", lifespan="on")
            return 0
        finally:
            iso.close()
    finally:
        sock.close()
        remove_tree(work_root)
