"""Task arguments: `data.task_args` in a config, `--arg KEY=VALUE` on `turnrl data task`.

A task's `rows(split, seed, **args)` and `corpus(out_dir, **args)` take them as keywords. Each task
names the keys it knows (`reject_unknown`); a key it does not know is an error, not silently
ignored, since a misspelt `size` would otherwise train on the default number of rows.

The rows a run writes for a task are cached under a directory whose name carries `args_key(args)`,
so two runs with different arguments never share cached rows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from turnrl.errors import TurnrlInputError


class TaskArgError(TurnrlInputError):
    """A task argument the task does not take, or one written in a form that cannot be read."""


def reject_unknown(args: Mapping[str, Any], allowed: Iterable[str], task: str = "the task") -> None:
    """TaskArgError naming the first key of `args` not in `allowed`, and the keys `task` takes.
    A task's `rows(split, seed, **args)` calls it first: `reject_unknown(args, ("n_train",), "addition")`."""
    known = tuple(allowed)
    unknown = sorted(k for k in args if k not in known)
    if unknown:
        takes = ", ".join(known) if known else "none"
        raise TaskArgError(f"task '{task}' takes no argument '{unknown[0]}'; its arguments: {takes}")


def args_key(args: Mapping[str, Any] | None) -> str:
    """A short, stable name for a set of arguments ("" for none): the same mapping in any key order
    gives the same name, on any machine and Python version (no `hash()`, which is salted)."""
    if not args:
        return ""
    text = json.dumps(dict(args), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def parse_arg(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` -> (key, value), the value read as a YAML scalar: `size=20` is an int,
    `allow_negation=true` a bool, `format_style=simple` a string, `ops=[+, -]` a list."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not key.replace("_", "a").isalnum():
        raise TaskArgError(f"--arg '{text}' is not of the form KEY=VALUE (e.g. --arg size=200)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw  # not YAML (an unbalanced bracket, say): the text as written
    return key, value


def parse_args(items: Iterable[str] | None) -> dict[str, Any]:
    """Every `--arg` of a command line, later ones winning."""
    return dict(parse_arg(item) for item in items or ())
