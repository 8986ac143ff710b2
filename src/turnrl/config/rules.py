"""A numeric setting's range, declared on its field: `lr: float = ranged(2e-5, "> 0")`.

`Rule` is what `checks.check_ranges` holds a value to and what `turnrl train --list-keys` shows;
`ranged` puts it in the field's metadata, so a key's type, default, range and docstring sit in one
place, the schema. A module of its own, free of the schemas, so that every schema file can use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple


class Rule(NamedTuple):
    """The values a numeric setting may take. `spec` is what the error message says: `>= 0`, `> 0`,
    `in (0, 1]`, `finite`, or alternatives joined by ` or ` (`>= 1 or -1`, a bare number being a
    sentinel). NaN and +-inf are refused by every rule. `note` says what a sentinel value at the
    edge of the range means (the field's docstring's `0 = ...`), so the message explains why it is
    allowed."""

    spec: str
    note: str = ""


RANGE = "turnrl.range"
"""The field-metadata key holding a field's `Rule`."""


def ranged(
    default: Any = dataclasses.MISSING,
    spec: str = "",
    note: str = "",
    *,
    default_factory: Callable[[], Any] | None = None,
) -> Any:
    """A dataclass field whose values must satisfy `Rule(spec, note)` (a list: each element)."""
    metadata = {RANGE: Rule(spec, note)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)
