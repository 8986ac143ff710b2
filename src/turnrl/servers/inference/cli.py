"""`turnrl serve --model PATH`: serve a model over HTTP as a rollout engine (see docs/serve.md).

Only argparse is imported at module load; torch, transformers and the HTTP stack are imported
when the command runs.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from turnrl.servers.connections import add_arguments as add_connection_arguments
from turnrl.servers.listen import port_arg, positive_int


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "serve",
        help="inference server: OpenAI-style /v1/completions over token ids, /v1/chat/completions, "
        "/update_weights_from_disk",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="a Hugging Face model directory, a .gguf file, 'smollm2-135m-instruct' or 'tiny-random'",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default %(default)s); any other than loopback needs a key",
    )
    parser.add_argument("--port", type=port_arg, default=8000, help="TCP port (default %(default)s)")
    parser.add_argument(
        "--api-key",
        default=None,
        help="key every request must send as 'Authorization: Bearer KEY' (default: $TURNRL_API_KEY; "
        "none on loopback without either)",
    )
    parser.add_argument(
        "--weights-root",
        default="",
        help="the only directory /update_weights_from_disk may load from (symlinks followed); "
        "without it, weight updates are refused",
    )
    parser.add_argument(
        "--max-rows-per-request",
        type=positive_int,
        default=1024,
        help="output rows (prompts x n) one request may ask for (default %(default)s)",
    )
    parser.add_argument(
        "--max-tokens-per-request",
        type=positive_int,
        default=4 << 20,
        help="prompt tokens + rows x max_tokens one request may ask for (default %(default)s)",
    )
    parser.add_argument(
        "--max-body",
        type=positive_int,
        default=32 << 20,
        help="bytes of one request body (default %(default)s, 32 MiB)",
    )
    parser.add_argument(
        "--device", default="auto", help="auto (cuda if available), cpu, cuda or cuda:N (default %(default)s)"
    )
    parser.add_argument(
        "--dtype", default="auto", help="auto (bf16 on cuda, fp32 on cpu), float32, bfloat16, float16"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="initial weights of 'tiny-random' (a training run's trainer.seed)",
    )
    parser.add_argument("--cache-dir", default="", help="where converted GGUF models are cached")
    parser.add_argument(
        "--served-model-name", default="", help="the model id clients see (default: the --model value)"
    )
    parser.add_argument(
        "--chat-template",
        default="",
        help="a Jinja chat template file (or the template text) for /v1/chat/completions, in place of "
        "the model's own (as vLLM's option)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=64, help="responses per forward batch (default %(default)s)"
    )
    parser.add_argument(
        "--max-batch-rows",
        type=int,
        default=256,
        help="output rows (prompts x n) of one merged engine call when concurrent requests are "
        "batched together (default %(default)s)",
    )
    parser.add_argument(
        "--batch-wait-ms",
        type=float,
        default=5.0,
        help="how long a lone unseeded request waits for others to batch with (default %(default)s)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads for torch (0 = torch's default); 1 suits small models on a shared CPU",
    )
    parser.add_argument(
        "--max-waiting",
        type=int,
        default=64,
        help="generation requests waiting for the engine at once; one more is answered 503 with "
        "Retry-After (default %(default)s)",
    )
    add_connection_arguments(parser)
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default %(default)s)")
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
    import torch

    from turnrl.errors import TurnrlInputError
    from turnrl.models.loader import ModelError, load_model
    from turnrl.rollout.hf import HFEngine
    from turnrl.servers.connections import ConnectionLimits, Connections
    from turnrl.servers.inference.app import Limits, create_app
    from turnrl.servers.listen import serve_on, url_of

    device_name = args.device
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device_name)
    except RuntimeError:
        raise ModelError(f"--device {args.device!r}: use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"--device {args.device}: CUDA is not available on this machine")
    if args.dtype != "auto" and not isinstance(getattr(torch, args.dtype, None), torch.dtype):
        raise ModelError(f"--dtype {args.dtype!r}: not a torch dtype (e.g. float32, bfloat16)")
    if args.max_batch_rows < 1:
        raise TurnrlInputError(f"--max-batch-rows {args.max_batch_rows}: must be >= 1")
    if args.batch_wait_ms < 0:
        raise TurnrlInputError(f"--batch-wait-ms {args.batch_wait_ms}: must be >= 0")
    if args.max_waiting < 1:
        raise TurnrlInputError(f"--max-waiting {args.max_waiting}: must be >= 1")
    connections = Connections(ConnectionLimits.from_args(args))
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model, tokenizer = load_model(args.model, device, args.dtype, args.cache_dir, args.seed)
    model.eval().requires_grad_(False)
    if chat_template is not None:
        _check_chat_template(tokenizer, chat_template, args.chat_template)
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
    )
    print(
        f"turnrl serve: {model_id} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
        f"vocab {model.get_input_embeddings().weight.shape[0]}) on {device}; "
        f"listening on {url_of(sock)} ({'key required' if api_key else 'no key'}; weight updates "
        f"{'from ' + weights_root if weights_root else 'off'})",
        file=sys.stderr,
        flush=True,
    )
    serve_on(app, sock, connections, log_level=args.log_level)
    return 0
