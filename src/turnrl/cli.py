"""`turnrl <command>`: one entry point, one module per command family.

Each command family lives next to the code it drives and exposes
`register(subparsers)`, which adds its parser and sets `func` to a callable taking the
parsed namespace and returning an exit code. The modules are imported lazily so that
`turnrl sandbox serve` never pays for importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from turnrl.servers.listen import OneLineParser

# command name -> module providing register(subparsers)
COMMANDS: dict[str, str] = {
    "train": "turnrl.trainer.cli",
    "eval": "turnrl.evaluate.cli",
    "sandbox": "turnrl.servers.sandbox.cli",
    "retriever": "turnrl.servers.retriever.cli",
    "trace": "turnrl.inspector.cli",
    "report": "turnrl.tracking.cli",
    "export": "turnrl.export",
    "serve": "turnrl.servers.inference.cli",
    "sft": "turnrl.supervised.cli",
    "rm": "turnrl.supervised.cli",
    "data": "turnrl.data.prepare.cli",
    "tinker": "turnrl.tinker.cli",
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="turnrl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = argv[0] if argv and argv[0] in COMMANDS else None
    # a module may register several commands: import each module once
    modules = dict.fromkeys(m for n, m in COMMANDS.items() if wanted is None or n == wanted)
    for module in modules:
        try:
            importlib.import_module(module).register(sub)
        except ModuleNotFoundError as err:
            if err.name and err.name.startswith("turnrl"):
                continue  # command family not built yet
            raise
    for name in COMMANDS:
        if name not in sub.choices:
            sub.add_parser(name)  # listed in --help without importing it
    return parser


def resolve_served_model(args: argparse.Namespace) -> str | None:
    """`turnrl serve --model RUN_DIR`: the inference server sits below the trainer and loads what it
    is handed, so a training run or checkpoint named there is exported here, above every command,
    as the other commands do for `model.path`; clients still see the path as given. Returns the
    error line, or None."""
    from turnrl.errors import TurnrlInputError
    from turnrl.trainer.run_dirs import resolve_model_path

    try:
        path = resolve_model_path(args.model, args.cache_dir)
    except TurnrlInputError as err:
        return f"turnrl serve: error: {' '.join(str(err).split())}"
    if path != args.model:
        args.served_model_name = args.served_model_name or args.model
        args.model = path
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.command == "serve" and (error := resolve_served_model(args)):
        print(error, file=sys.stderr)
        return 1
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
