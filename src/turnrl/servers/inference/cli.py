"""`turnrl serve --model PATH`: serve a model over HTTP as a rollout engine (see docs/serve.md).

Only argparse is imported at module load; torch, transformers and the HTTP stack are imported
when the command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from turnrl.servers.chat.tool_calls import TOOL_CALL_FORMATS
from turnrl.servers.connections import add_arguments as add_connection_arguments
from turnrl.servers.inference.options import ServeOptions
from turnrl.servers.listen import port_arg, positive_int
from turnrl.servers.options import add_options

if TYPE_CHECKING:  # torch loads only when the command runs
    import torch

POSITIVE = ("max_rows_per_request", "max_tokens_per_request", "max_body")
MAX_BATCH_WAIT_MS = 60_000
"""The longest `--batch-wait-ms`: a lone request waits that long for others to batch with."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "serve",
        help="inference server: OpenAI-style /v1/completions over token ids, /v1/chat/completions, "
        "/update_weights_from_disk",
    )
    names = [f.name for f in dataclasses.fields(ServeOptions)]
    add_options(parser, ServeOptions, names, types={"port": port_arg, **dict.fromkeys(POSITIVE, positive_int)}, required=("model",), choices={"tool_call_format": TOOL_CALL_FORMATS})  # fmt: skip
    parser.add_argument(
        "--api-key",
        default=None,
        help="key every request must send as 'Authorization: Bearer KEY' (default: $TURNRL_API_KEY; "
        "none on loopback without either)",
    )
    add_connection_arguments(parser)
    parser.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    from turnrl.errors import TurnrlInputError

    try:
        return serve(args)
    except TurnrlInputError as err:
        print(f"turnrl serve: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1


def serve(args: argparse.Namespace) -> int:
    from turnrl.errors import TurnrlInputError
    from turnrl.keys import check_bind, resolve_api_key
    from turnrl.servers.listen import bind

    api_key = resolve_api_key(args.api_key)
    check_bind(args.host, api_key)
    weights_root = None
    if args.weights_root:
        if not os.path.isdir(args.weights_root):
            raise TurnrlInputError(f"--weights-root {args.weights_root}: not a directory")
        weights_root = os.path.realpath(args.weights_root)
    chat_template = read_chat_template(args.chat_template) if args.chat_template else None
    # bound before the model loads: a taken port costs no loading time, and "listening" is true
    sock = bind(args.host, args.port)
    try:
        return _serve_on(args, sock, api_key, weights_root, chat_template)
    finally:
        sock.close()


def read_chat_template(setting: str) -> str:
    """`--chat-template`: a file's text, or the template itself when it is no file but reads as Jinja."""
    from turnrl.errors import TurnrlInputError

    if os.path.isfile(setting):
        try:
            with open(setting, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as err:
            raise TurnrlInputError(f"--chat-template {setting}: cannot be read ({err})") from None
    if "{{" in setting or "{%" in setting:
        return setting
    raise TurnrlInputError(
        f"--chat-template {setting}: no such file (give a Jinja file or the template text)"
    )


def _check_chat_template(tokenizer: object, template: str, setting: str) -> None:
    """Give the tokenizer `template` and render one message with it: a template that cannot is
    refused at start-up, not at every chat request."""
    from turnrl.errors import TurnrlInputError

    tokenizer.chat_template = template  # type: ignore[attr-defined]
    hello = [{"role": "user", "content": "Hello"}]
    try:
        tokenizer.apply_chat_template(hello, tokenize=False, add_generation_prompt=True)  # type: ignore[attr-defined]
    except Exception as err:  # jinja's syntax and runtime errors, raise_exception() in the template
        raise TurnrlInputError(
            f"--chat-template {setting}: cannot render a user message ({type(err).__name__}: {err})"
        ) from None


def _serve_on(
    args: argparse.Namespace,
    sock: socket.socket,
    api_key: str,
    weights_root: str | None,
    chat_template: str | None = None,
) -> int:
    """Check the remaining flags, load the model, then serve it on `sock` until stopped."""
    from turnrl.rollout.hf import HFEngine
    from turnrl.servers.connections import ConnectionLimits, Connections
    from turnrl.servers.inference.app import Limits, create_app
    from turnrl.servers.listen import serve_on

    # the flags are checked before the model loads: a bad one costs no loading time
    device = _checked_device(args)
    _check_batching(args)
    connections = Connections(ConnectionLimits.from_args(args))
    model, tokenizer = _load_model(args, device, chat_template)
    max_len = getattr(model.config, "max_position_embeddings", None)
    model_id = args.served_model_name or args.model
    engine = HFEngine(model, tokenizer, args.batch_size)
    limits = Limits(args.max_rows_per_request, args.max_tokens_per_request, args.max_body, args.max_waiting)
    app = create_app(
        engine,
        model_id,
        max_len,
        args.max_batch_rows,
        args.batch_wait_ms,
        api_key=api_key,
        limits=limits,
        weights_root=weights_root,
        tool_call_format=args.tool_call_format,
    )
    _announce(model, model_id, device, sock, api_key, weights_root)
    serve_on(app, sock, connections, log_level=args.log_level)
    return 0


def _checked_device(args: argparse.Namespace) -> torch.device:
    """`--device` resolved (auto: cuda when there is one) and `--dtype` checked, or ModelError."""
    import torch

    from turnrl.config.checks import DTYPES  # model.dtype's: the float types weights load in
    from turnrl.models.loader import ModelError

    device_name = args.device
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device_name)
    except RuntimeError:
        raise ModelError(f"--device {args.device!r}: use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"--device {args.device}: CUDA is not available on this machine")
    if args.dtype not in DTYPES:  # int8 or bool would end in a TypeError once the weights load
        raise ModelError(f"--dtype {args.dtype!r}: use {', '.join(DTYPES[:-1])} or {DTYPES[-1]}")
    return device


def _check_batching(args: argparse.Namespace) -> None:
    """`--max-batch-rows`, `--batch-wait-ms` and `--max-waiting` in range, or TurnrlInputError."""
    from turnrl.errors import TurnrlInputError

    if args.max_batch_rows < 1:
        raise TurnrlInputError(f"--max-batch-rows {args.max_batch_rows}: must be >= 1")
    wait_ms = args.batch_wait_ms
    if not (math.isfinite(wait_ms) and wait_ms >= 0):  # NaN waited for ever, inf overflowed the wait
        raise TurnrlInputError(f"--batch-wait-ms {wait_ms:g}: must be finite and >= 0")
    if wait_ms > MAX_BATCH_WAIT_MS:
        raise TurnrlInputError(
            f"--batch-wait-ms {wait_ms:g}: at most {MAX_BATCH_WAIT_MS} (a minute; every lone request waits that long)"
        )
    if args.max_waiting < 1:
        raise TurnrlInputError(f"--max-waiting {args.max_waiting}: must be >= 1")


def _load_model(args: argparse.Namespace, device: torch.device, chat_template: str | None) -> tuple[Any, Any]:
    """The model (eval mode, no gradients) and tokenizer, with `chat_template` checked on it."""
    import torch

    from turnrl.models.loader import load_model

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model, tokenizer = load_model(args.model, device, args.dtype, args.cache_dir, args.seed)
    model.eval().requires_grad_(False)
    if chat_template is not None:
        _check_chat_template(tokenizer, chat_template, args.chat_template)
    return model, tokenizer


def _announce(
    model: Any,
    model_id: str,
    device: torch.device,
    sock: socket.socket,
    api_key: str,
    weights_root: str | None,
) -> None:
    """The one start-up line on stderr, printed once the app is built and the socket listens."""
    from turnrl.servers.listen import url_of

    print(
        f"turnrl serve: {model_id} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
        f"vocab {model.get_input_embeddings().weight.shape[0]}) on {device}; "
        f"listening on {url_of(sock)} ({'key required' if api_key else 'no key'}; weight updates "
        f"{'from ' + weights_root if weights_root else 'off'})",
        file=sys.stderr,
        flush=True,
    )
