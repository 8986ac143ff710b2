"""`turnrl tinker serve --model M --state-root DIR`: a Tinker-compatible training service, for
scripts written against the `tinker` SDK (see docs/tinker.md).

Only argparse is imported at module load; torch, transformers, the HTTP stack and the tinker SDK are
imported when the command runs. Every refusal to start is one line,
`turnrl tinker serve: error: <flag>: <reason>`, exit status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys

from turnrl.servers.connections import add_arguments as add_connection_arguments
from turnrl.servers.listen import port_arg, positive_int
from turnrl.servers.options import add_options, values_of
from turnrl.tinker.options import TinkerServeOptions

COMMAND = "turnrl tinker serve"
OPTIONS = tuple(f.name for f in dataclasses.fields(TinkerServeOptions))
POSITIVE = ("max_body", "max_training_clients", "max_samplers", "max_futures", "max_num_samples", "max_sample_tokens", "max_waiting", "max_sessions")  # fmt: skip
KEY_PREFIX = "tml-"
"""The SDK refuses to send a key without it (`ApiKeyAuthProvider`)."""
HEADER_TIMEOUT_S = 60.0
"""This server's --header-timeout default: the SDK keeps connections open between a client's steps
and sends a heartbeat every 10 s, so turnrl's usual 10 s would close them under it."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("tinker", help="a Tinker-compatible training service for the tinker SDK")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    cmds = parser.add_subparsers(dest="tinker_command", metavar="COMMAND")
    serve = cmds.add_parser(
        "serve",
        help="serve the tinker SDK's training and sampling API on one local base model (LoRA clients)",
    )
    types = {"port": port_arg, **dict.fromkeys(POSITIVE, positive_int)}
    add_options(serve, TinkerServeOptions, OPTIONS, types=types, required=("model", "state_root"))
    serve.add_argument(
        "--api-key",
        default=None,
        help=f"key every request must carry (the SDK's api_key; it must start with '{KEY_PREFIX}'); "
        "default $TINKER_API_KEY, then $TURNRL_API_KEY (prefer them: a flag shows in ps); "
        "required beyond loopback",
    )
    add_connection_arguments(serve)
    serve.set_defaults(func=serve_command, header_timeout=HEADER_TIMEOUT_S)


def resolve_key(flag: str | None) -> str:
    """The server's key: the flag, else $TINKER_API_KEY (what the user's tinker script sends), else
    $TURNRL_API_KEY (what every turnrl server reads), else '' (none: loopback only)."""
    from turnrl.keys import resolve_api_key

    return flag or os.environ.get("TINKER_API_KEY") or resolve_api_key(None)


def serve_command(args: argparse.Namespace) -> int:
    from turnrl.errors import TurnrlInputError

    try:
        return serve(args)
    except TurnrlInputError as err:
        print(f"{COMMAND}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1


def serve(args: argparse.Namespace) -> int:
    """Check the flags, bind, load the model, serve until SIGINT/SIGTERM."""
    from pathlib import Path

    from turnrl.errors import TurnrlInputError
    from turnrl.keys import check_bind
    from turnrl.runtime import ensure_writable_dir
    from turnrl.servers.connections import ConnectionLimits
    from turnrl.servers.listen import bind
    from turnrl.tinker.protobuf import pb

    opts = TinkerServeOptions(**values_of(args, OPTIONS))
    api_key = resolve_key(args.api_key)
    if api_key and not api_key.startswith(KEY_PREFIX):
        raise TurnrlInputError(
            f"--api-key: the tinker SDK only sends keys that start with {KEY_PREFIX!r}; choose one that does"
        )
    check_bind(opts.host, api_key)
    try:
        pb()
    except ImportError as err:
        raise TurnrlInputError(str(err)) from None
    ensure_writable_dir(Path(opts.state_root), "--state-root")
    for flag, value in (
        ("--future-ttl-s", opts.future_ttl_s),
        ("--session-timeout-s", opts.session_timeout_s),
    ):
        if not value > 0:
            raise TurnrlInputError(f"{flag} {value:g}: must be > 0")
    connections = ConnectionLimits.from_args(args)
    # bound before the model loads: a taken port costs no loading time, and "listening" is true
    sock = bind(opts.host, opts.port)
    try:
        return _serve_on(args, opts, sock, api_key, connections)
    finally:
        sock.close()


def _serve_on(
    args: argparse.Namespace, opts: TinkerServeOptions, sock: socket.socket, api_key: str, connections: object
) -> int:
    from pathlib import Path

    import torch

    from turnrl.models.loader import load_model, model_directory
    from turnrl.servers.connections import Connections
    from turnrl.servers.inference.cli import _checked_device
    from turnrl.servers.listen import serve_on, url_of
    from turnrl.tinker.app import create_app
    from turnrl.tinker.backbone import Backbone
    from turnrl.tinker.checkpoints import StateRoot
    from turnrl.tinker.sampling import SampleLimits
    from turnrl.tinker.service import ServiceLimits, TinkerService

    device = _checked_device(args)  # `turnrl serve`'s --device / --dtype rules
    if opts.threads > 0:
        torch.set_num_threads(opts.threads)
    model, tokenizer = load_model(opts.model, device, opts.dtype, opts.cache_dir, opts.seed)
    tokenizer_dir = str(model_directory(opts.model, opts.cache_dir))
    given = Path(opts.model).expanduser()
    source = str(given.resolve()) if given.exists() else opts.model  # a path, absolute: export finds it
    backbone = Backbone(model, tokenizer, opts.model, tokenizer_dir, source=source, seed=opts.seed)
    limits = ServiceLimits(
        max_training_clients=opts.max_training_clients,
        max_samplers=opts.max_samplers,
        max_futures=opts.max_futures,
        future_ttl_s=opts.future_ttl_s,
        max_body=opts.max_body,
        sample=SampleLimits(opts.max_num_samples, opts.max_sample_tokens),
        max_waiting=opts.max_waiting,
        max_sessions=opts.max_sessions,
        session_timeout_s=opts.session_timeout_s,
    )
    service = TinkerService(backbone, StateRoot(opts.state_root), limits)
    app = create_app(service, api_key)
    print(
        f"{COMMAND}: {opts.model} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters) on "
        f"{device}; state root {service.root.root}; listening on {url_of(sock)} "
        f"({'key required' if api_key else 'no key: loopback only'}); point the SDK at "
        f"ServiceClient(base_url={url_of(sock)!r})",
        file=sys.stderr,
        flush=True,
    )
    serve_on(app, sock, Connections(connections), log_level=opts.log_level)  # type: ignore[arg-type]
    return 0
