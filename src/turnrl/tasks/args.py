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


MAX_ROWS = 100_000
"""The most rows a count argument (`n_train`, `n_val`) may ask for: far above any real run (the tasks'
defaults are 32 to 2048 rows), yet made in seconds (the code task's in about two minutes) and under a
gigabyte of memory; a million calculator rows would take about 7 GB. A larger count is a slip of the
keyboard, which would otherwise run until memory or patience ran out."""


def check_count(
    value: Any, what: str, most: int | None = MAX_ROWS, error: type[Exception] = TaskArgError
) -> int:
    """`value` when it is a whole number from 1 to `most` (None: no upper bound); else `error`, one
    line naming `what`: `task 'addition': argument 'n_train' must be a positive integer, got 'abc'`,
    `--n must be at most 5,000, got 9000`. A bool is refused although Python counts it an int:
    `n_train=true` is a mistake, not one row."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error(f"{what} must be a positive integer, got {value!r}")
    if most is not None and value > most:
        raise error(f"{what} must be at most {most:,}, got {value!r}")
    return value


def count_arg(args: Mapping[str, Any], key: str, default: int, task: str) -> int:
    """Task argument `key` of `task` (`default` when not given), a count of rows checked by `check_count`."""
    return check_count(args.get(key, default), f"task '{task}': argument '{key}'")


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
