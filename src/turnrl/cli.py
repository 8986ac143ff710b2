"""`turnrl <command>`: one entry point, one module per command family.

Each command family lives next to the code it drives and exposes
`register(subparsers)`, which adds its parser and sets `func` to a callable taking the
parsed namespace and returning an exit code. The modules are imported lazily so that
`turnrl sandbox serve` never pays for importing torch. A command that needs an optional package
which is not installed says so in one line naming the extra that installs it (`EXTRAS`); any other
import error, a missing turnrl module included, is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from turnrl.servers.listen import OneLineParser

# command name -> module providing register(subparsers)
COMMANDS: dict[str, str] = {
    "train": "turnrl.trainer.cli",
    "eval": "turnrl.evaluate.cli",
    "compare": "turnrl.evaluate.compare",
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
    "live": "turnrl.live.cli",
}

EXTRAS: dict[str, str] = {
    "ray": "distributed",
    "vllm": "vllm",
    "trl": "bench",
    "reasoning_gym": "gym",
    "openai": "agents",
    "mcp": "agents",
    "tinker": "tinker",
    "verifiers": "verifiers",
    "tensorboard": "loggers",
    "wandb": "loggers",
    "faiss": "dense",
    "sentence_transformers": "dense",
}
"""An optional package's import name -> the extra of pyproject.toml's `optional-dependencies` that
installs it. Only these are worded as a missing install; any other missing module is a bug or a
broken environment, and its traceback is the useful report."""


class MissingExtra(Exception):
    """A command needs an optional package that is not installed; the message is one line."""

    def __init__(self, command: str | None, package: str, extra: str):
        self.package, self.install = package, f'pip install -e ".[{extra}]"'
        who = f"turnrl {command}" if command else "turnrl"
        super().__init__(
            f"{who}: error: needs the optional package '{package}', which is not installed: {self.install}"
        )


def missing_extra(err: ModuleNotFoundError, command: str | None) -> MissingExtra | None:
    """The one-line explanation of `err` when the missing module is an optional extra's package
    (`ray`, `vllm.config`, ...), else None: a missing turnrl module is a bug, never a hint."""
    package = (err.name or "").split(".")[0]
    extra = EXTRAS.get(package)
    if extra is None or importlib.util.find_spec(package) is not None:
        return None  # not an extra's, or installed but broken inside: the traceback says where
    return MissingExtra(command, package, extra)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser of every command family, or of the one `argv` names (only its module is imported).
    A family that needs a missing optional package raises `MissingExtra` when it is the one named,
    and is listed on the help screen with the install it needs; any other import error propagates."""
    parser = OneLineParser(prog="turnrl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = argv[0] if argv and argv[0] in COMMANDS else None
    # a module may register several commands: import each module once
    modules = dict.fromkeys(m for n, m in COMMANDS.items() if wanted is None or n == wanted)
    missing: dict[str, MissingExtra] = {}
    for module in modules:
        try:
            importlib.import_module(module).register(sub)
        except ModuleNotFoundError as err:
            explained = missing_extra(err, wanted)
            if explained is None:
                raise
            if wanted is not None:  # the command asked for cannot run: say why in one line
                raise explained from None
            missing[module] = explained
    for name, module in COMMANDS.items():
        if name not in sub.choices:  # a valid choice without importing it (argv named another)
            why = missing.get(module)
            sub.add_parser(name, **({"help": f"needs {why.package}: {why.install}"} if why else {}))
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
    command = argv[0] if argv and argv[0] in COMMANDS else None
    try:
        return run(argv)
    except MissingExtra as err:
        print(err, file=sys.stderr)
        return 1
    except ModuleNotFoundError as err:  # an optional package a command imports when it runs
        explained = missing_extra(err, command)
        if explained is None:
            raise
        print(explained, file=sys.stderr)
        return 1


def run(argv: list[str]) -> int:
    """Parse `argv` and run the command it names; its exit code."""
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
