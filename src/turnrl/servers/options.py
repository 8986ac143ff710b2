"""A server's command-line options, made from its config dataclass: one place per setting.

    add_options(serve, SandboxConfig, ("workers", "queue", "cgroup", "max_body"))
    cfg = SandboxConfig(**values_of(args, ("workers", ...)))

Each field becomes `--field-name` (underscores to dashes): its type from the annotation (int, float
or str), its default from the dataclass, its help from the docstring written under the field
(first sentence) and the default. A bool field that is true by default becomes `--no-field-name`
(switching it off); one false by default, `--field-name`. `types` overrides the argparse type of a
field (`port_arg`, `positive_int`), `choices` restricts one. A `log_level` field becomes the
`--log-level` every turnrl server declares (`add_log_level`): one of uvicorn's levels, or argparse's
one-line refusal (uvicorn itself would end in a KeyError traceback once the model has loaded).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
"""The values of every turnrl server's `--log-level` (uvicorn's levels)."""


def add_log_level(
    parser: argparse.ArgumentParser, default: str = "warning", help_text: str = "uvicorn's log level"
) -> None:
    """`--log-level`, one of `LOG_LEVELS`: a server command's own declaration, or a `log_level` field's."""
    parser.add_argument(
        "--log-level",
        dest="log_level",
        default=default,
        choices=LOG_LEVELS,
        help=f"{help_text} (default {default!r})",
    )


@cache
def field_help(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass `cls`, its first sentence, on one line."""
    from turnrl.config.loader import field_docstrings

    node = next(n for n in ast.parse(inspect.getsource(cls)).body if isinstance(n, ast.ClassDef))
    return {
        name: re.split(r"(?<=\.)\s", " ".join(doc.split()), maxsplit=1)[0].rstrip(".")
        for name, doc in field_docstrings(node).items()
    }


def flag(name: str, on_by_default: bool = False) -> str:
    return ("--no-" if on_by_default else "--") + name.replace("_", "-")


def add_options(
    parser: argparse.ArgumentParser,
    cls: type,
    names: Sequence[str],
    types: dict[str, Callable[[str], Any]] | None = None,
    choices: dict[str, Sequence[str]] | None = None,
    required: Sequence[str] = (),
) -> None:
    """`--name` options for the fields `names` of dataclass `cls` (see the module docstring);
    `required`: options that must be given (their dataclass default is only a placeholder)."""
    defaults = cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    helps = field_help(cls)
    for name in names:
        default = getattr(defaults, name)
        help_text = helps.get(name, "").replace("%", "%%")
        if isinstance(default, bool):
            parser.add_argument(
                flag(name, default),
                dest=name,
                action="store_false" if default else "store_true",
                help=f"switch off (on by default): {help_text}" if default else help_text,
            )
            continue
        if name == "log_level":
            add_log_level(parser, default, help_text or "uvicorn's log level")
            continue
        kind = (types or {}).get(name) or {"int": int, "float": float}.get(str(fields[name].type), str)
        if name in required:
            parser.add_argument(flag(name), dest=name, type=kind, required=True, help=help_text)
            continue
        parser.add_argument(
            flag(name),
            dest=name,
            type=kind,
            default=default,
            choices=(choices or {}).get(name),
            help=f"{help_text} (default {default!r})"
            if isinstance(default, str)
            else f"{help_text} (default {default})",
        )


def values_of(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The parsed values of the options `add_options` made, as keyword arguments of their class."""
    return {name: getattr(args, name) for name in names}
