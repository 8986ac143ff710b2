"""What every converter shares: the verl row, and the two ways a source row can be rejected."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class SkipRow(Exception):
    """A row whose answer the upstream script's extractor cannot read (no `#### <number>`, no
    `\\boxed{}`): verl's scripts assert and stop on such a row; turnrl skips and counts it."""


class BadRow(Exception):
    """A row of the wrong shape (a field missing or not of its type): the file is most likely not
    this dataset, so the conversion stops with the file and row named."""


def text_field(example: dict[str, Any], key: str) -> str:
    if key not in example:
        fields = ", ".join(sorted(map(str, example))) or "none"
        raise BadRow(f"row has no '{key}' field; its fields: {fields}")
    value = example[key]
    if not isinstance(value, str):
        raise BadRow(f"'{key}' must be a string, got {type(value).__name__}")
    return value


def verl_row(
    example: dict[str, Any],
    consumed: Iterable[str],
    *,
    data_source: str,
    prompt: str,
    ability: str,
    ground_truth: Any,
    extra_info: dict[str, Any],
) -> dict[str, Any]:
    """The row verl reads, after the source fields the script did not consume.

    The upstream scripts build rows with `datasets.map`, which keeps every column the function
    does not pop: so verl's MATH files carry `level` and `type`, and Search-R1's carry `id`,
    `question` and `golden_answers`. Keeping them here makes the files column-for-column alike.
    """
    dropped = set(consumed)
    kept = {k: v for k, v in example.items() if k not in dropped}
    return {
        **kept,
        "data_source": data_source,
        "prompt": [{"role": "user", "content": prompt}],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": extra_info,
    }
