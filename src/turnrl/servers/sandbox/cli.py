"""`turnrl sandbox serve`: start the code sandbox HTTP server (no torch import on this path)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from turnrl.servers.sandbox.config import SandboxConfig


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("sandbox", help="code sandbox server (SandboxFusion-compatible /run_code)")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    cmds = parser.add_subparsers(dest="sandbox_command", metavar="COMMAND")
    serve = cmds.add_parser("serve", help="serve POST /run_code and GET /health")
    defaults = SandboxConfig()
    serve.add_argument("--host", default=defaults.host, help="interface to bind (default %(default)s)")
    serve.add_argument("--port", type=int, default=defaults.port, help="TCP port (default %(default)s)")
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
        type=int,
        default=defaults.max_output,
        help="bytes of stdout and of stderr kept per run (default %(default)s)",
    )
    serve.add_argument(
        "--python", default=defaults.python, help="interpreter for language python (default: this one)"
    )
    serve.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    cfg = SandboxConfig(
        host=args.host,
        port=args.port,
        workers=args.workers,
        queue=args.queue,
        isolation=args.isolation,
        cgroup=not args.no_cgroup,
        rootfs=not args.no_rootfs,
        seccomp=not args.no_seccomp,
        zygote=not args.no_zygote,
        max_run_timeout=args.max_run_timeout,
        max_output=args.max_output,
        python=args.python,
    )
    try:
        cfg.check()
    except ValueError as err:
        print(f"turnrl sandbox serve: error: {err}", file=sys.stderr)
        return 2
    if not (os.path.isfile(cfg.python) and os.access(cfg.python, os.X_OK)):
        print(
            f"turnrl sandbox serve: error: --python {cfg.python!r} is not an executable file", file=sys.stderr
        )
        return 2
    return serve(cfg)


def serve(cfg: SandboxConfig) -> int:
    """Probe isolation, print it, serve until SIGINT/SIGTERM. Imports the server stack lazily."""
    import uvicorn

    from turnrl.servers.sandbox.app import create_app
    from turnrl.servers.sandbox.probe import probe_isolation

    work_root = tempfile.mkdtemp(prefix="turnrl-sandbox-")
    os.chmod(work_root, 0o711)  # slot uids must traverse it to reach their own 0700 dir
    iso = probe_isolation(cfg, work_root)
    try:
        print("\n".join(iso.describe()), flush=True)
        print(
            f"turnrl sandbox: languages {', '.join(sorted(cfg.languages()))}; workers {cfg.workers}, "
            f"queue {cfg.queue}; listening on http://{cfg.host}:{cfg.port}",
            flush=True,
        )
        app = create_app(cfg, iso, work_root)
        config = uvicorn.Config(
            app,
            host=cfg.host,
            port=cfg.port,
            log_level="warning",
            access_log=False,
            loop="asyncio",
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        uvicorn.Server(config).run()
        return 0
    finally:
        iso.close()
        shutil.rmtree(work_root, ignore_errors=True)
