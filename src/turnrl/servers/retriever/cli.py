"""`turnrl retriever index|serve`: build a search index, serve it over HTTP.

Only argparse is imported at module load: bm25s, FastAPI and (for dense retrieval) torch
are imported by the sub-command that needs them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from turnrl.errors import TurnrlInputError
from turnrl.keys import API_KEY_ENV, resolve_api_key
from turnrl.servers.connections import ConnectionLimits
from turnrl.servers.connections import add_arguments as add_connection_arguments
from turnrl.servers.listen import port_arg, positive_int
from turnrl.servers.options import add_log_level, add_options, values_of
from turnrl.servers.retriever.errors import RetrieverError
from turnrl.servers.retriever.limits import Limits


def _human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} GB"


def _guarded(name: str, body: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn a RetrieverError into one line on stderr and exit status 1, instead of a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            return body(args)
        except (RetrieverError, TurnrlInputError) as err:
            # Library messages (pyarrow, faiss) embedded in ours may span lines; keep it one line.
            print(f"turnrl retriever {name}: error: {' '.join(str(err).split())}", file=sys.stderr)
            return 1

    return run


def _index(args: argparse.Namespace) -> int:
    from turnrl.servers.retriever.index import build_index

    report = build_index(
        args.corpus,
        args.out,
        method=args.method,
        show_progress=not args.no_progress,
        model=args.model,
        device=args.device,
    )
    print(
        f"indexed {report.meta['num_docs']} documents ({args.method}) in {report.seconds:.1f} s; "
        f"index size {_human_bytes(report.size_bytes)} at {report.index_dir}"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    from turnrl.servers.retriever.server import serve

    limits = Limits(**values_of(args, LIMITS))
    connections = ConnectionLimits.from_args(args)  # a bad value: one line before the index loads
    serve(
        args.index,
        host=args.host,
        port=args.port,
        topk=args.topk,
        log_level=args.log_level,
        device=args.device,
        api_key=resolve_api_key(args.api_key),
        limits=limits,
        connections=connections,
    )
    return 0


LIMITS = ("max_queries", "max_results", "max_query_chars", "max_body")
"""The `Limits` fields `turnrl retriever serve` takes as options."""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "retriever",
        help="build and serve a search index (Search-R1-compatible /retrieve)",
        description=__doc__.splitlines()[0],
    )
    sub = parser.add_subparsers(dest="retriever_command", metavar="SUBCOMMAND")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])

    idx = sub.add_parser("index", help="build an index directory from a corpus file")
    idx.add_argument(
        "--corpus", required=True, help="JSONL(.gz) or parquet with rows {id, contents}; title = first line"
    )
    idx.add_argument("--out", required=True, help="index directory to create (holds the corpus too)")
    idx.add_argument("--method", choices=("bm25", "dense"), default="bm25", help="bm25 (default) or dense")
    idx.add_argument(
        "--model", default=None, help="dense: local sentence-transformers folder (default: bundled MiniLM)"
    )
    idx.add_argument("--device", default=None, help="dense: torch device for embedding (default: auto)")
    idx.add_argument("--no-progress", action="store_true", help="hide progress bars")
    idx.set_defaults(func=_guarded("index", _index))

    srv = sub.add_parser("serve", help="serve POST /retrieve and GET /health over an index directory")
    srv.add_argument("--index", required=True, help="index directory made by `turnrl retriever index`")
    srv.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1); any other needs a key"
    )
    srv.add_argument(
        "--port", type=port_arg, default=8000, help="port to bind (default 8000; 0 = any free port)"
    )
    srv.add_argument(
        "--api-key",
        default=None,
        help=f"key every request must send as 'Authorization: Bearer KEY' or 'X-API-Key: KEY' "
        f"(default ${API_KEY_ENV}; prefer it: a flag shows in ps); required beyond loopback",
    )
    srv.add_argument("--topk", type=int, default=3, help="documents per query when a request sends no topk")
    # the per-request limits: options made from the Limits dataclass (type, default, docstring)
    add_options(srv, Limits, LIMITS, types=dict.fromkeys(LIMITS, positive_int))
    add_connection_arguments(srv)
    srv.add_argument("--device", default=None, help="dense: torch device for query embedding")
    add_log_level(srv)
    srv.set_defaults(func=_guarded("serve", _serve))
