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
from turnrl.servers.sandbox.cleanup import remove_tree
from turnrl.servers.sandbox.config import SandboxConfig

COMMAND = "turnrl sandbox serve"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("sandbox", help="code sandbox server (SandboxFusion-compatible /run_code)")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    cmds = parser.add_subparsers(dest="sandbox_command", metavar="COMMAND")
    serve = cmds.add_parser("serve", help="serve POST /run_code and GET /health")
    defaults = SandboxConfig()
    serve.add_argument(
        "--host",
        default=defaults.host,
        help="interface to bind (default %(default)s); any other needs a key",
    )
    serve.add_argument("--port", type=port_arg, default=defaults.port, help="TCP port (default %(default)s)")
    serve.add_argument(
        "--api-key",
        default=None,
        help=f"key every request must send as 'Authorization: Bearer KEY' or 'X-API-Key: KEY' "
        f"(default ${API_KEY_ENV}; prefer it: a flag shows in ps); required beyond loopback",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=defaults.workers,
        help="runs at the same time (default: CPU count, %(default)s)",
    )
    serve.add_argument(
        "--queue",
        type=int,
        default=defaults.queue,
        help="requests that may wait; beyond: 503 (default %(default)s)",
    )
    serve.add_argument(
        "--isolation",
        choices=["auto", "basic"],
        default=defaults.isolation,
        help="auto: every layer the host supports; basic: no namespaces/uid/cgroup (default %(default)s)",
    )
    serve.add_argument(
        "--no-cgroup",
        action="store_true",
        help="skip the per-run cgroup (total memory/process cap)",
    )
    serve.add_argument(
        "--no-rootfs",
        action="store_true",
        help="let programs see the host's files (read-only) instead of a minimal root",
    )
    serve.add_argument(
        "--no-seccomp",
        action="store_true",
        help="skip the seccomp filter",
    )
    serve.add_argument(
        "--no-zygote",
        action="store_true",
        help="fork and set up each run from the server while its request waits (slower)",
    )
    serve.add_argument(
        "--max-run-timeout",
        type=float,
        default=defaults.max_run_timeout,
        help="largest run_timeout a request may ask for, seconds (default %(default)s)",
    )
    serve.add_argument(
        "--max-output",
        type=positive_int,
        default=defaults.max_output,
        help="bytes of stdout and of stderr kept per run (default %(default)s)",
    )
    serve.add_argument(
        "--max-body",
        type=positive_int,
        default=defaults.max_body,
        help="largest request body in bytes, counted as it streams in (default %(default)s)",
    )
    serve.add_argument(
        "--max-code",
        type=positive_int,
        default=defaults.max_code,
        help="largest `code` in bytes (default %(default)s)",
    )
    serve.add_argument(
        "--max-stdin",
        type=positive_int,
        default=defaults.max_stdin,
        help="largest `stdin` in bytes (default %(default)s)",
    )
    serve.add_argument(
        "--max-files",
        type=positive_int,
        default=defaults.max_files,
        help="most entries in `files`, and in `fetch_files` (default %(default)s)",
    )
    serve.add_argument(
        "--max-files-bytes",
        type=positive_int,
        default=defaults.max_files_bytes,
        help="largest total decoded size of `files` in bytes (default %(default)s)",
    )
    serve.add_argument(
        "--python", default=defaults.python, help="interpreter for language python (default: this one)"
    )
    add_connection_arguments(serve)
    serve.set_defaults(func=serve_command)


def _refuse(message: str) -> int:
    print(f"{COMMAND}: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


def serve_command(args: argparse.Namespace) -> int:
    cfg = SandboxConfig(
        host=args.host,
        port=args.port,
        api_key=resolve_api_key(args.api_key),
        workers=args.workers,
        queue=args.queue,
        isolation=args.isolation,
        cgroup=not args.no_cgroup,
        rootfs=not args.no_rootfs,
        seccomp=not args.no_seccomp,
        zygote=not args.no_zygote,
        max_run_timeout=args.max_run_timeout,
        max_output=args.max_output,
        max_body=args.max_body,
        max_code=args.max_code,
        max_stdin=args.max_stdin,
        max_files=args.max_files,
        max_files_bytes=args.max_files_bytes,
        python=args.python,
    )
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
