"""The readers of the ranges the schemas declare on their fields (`rules.ranged`):
`checks.check_ranges` raises on a setting outside its rule. A numeric field declared without one is
held to `DEFAULT_RULE`, and tests/unit/test_config_ranges.py fails until it gets one."""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

from turnrl.config.rules import RANGE, Rule

AT_LEAST_0 = Rule(">= 0")
DEFAULT_RULE = AT_LEAST_0
"""A numeric field declared without a range is held to this (tests/unit/test_config_ranges.py fails
until its rule is written down)."""

_NUMBER = r"-?\d+(?:\.\d*)?(?:e-?\d+)?"
_BOUND = re.compile(rf"(>=|>|<=|<) ({_NUMBER})")
_INTERVAL = re.compile(rf"in ([\[(])({_NUMBER}), ({_NUMBER})([\])])")
_COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@cache
def accepts(spec: str) -> Callable[[float], bool]:
    """The test a rule's `spec` stands for (finiteness is checked apart); a spec it cannot read is
    a bug in a schema's `ranged` and raises ValueError."""
    tests: list[Callable[[float], bool]] = []
    for alt in spec.split(" or "):
        if alt == "finite":
            tests.append(lambda v: True)
        elif m := _INTERVAL.fullmatch(alt):
            lo_open, lo, hi, hi_open = m[1] == "(", float(m[2]), float(m[3]), m[4] == ")"
            low = operator.gt if lo_open else operator.ge
            high = operator.lt if hi_open else operator.le
            tests.append(lambda v, lo=lo, hi=hi, low=low, high=high: low(v, lo) and high(v, hi))
        elif m := _BOUND.fullmatch(alt):
            tests.append(lambda v, op=_COMPARE[m[1]], x=float(m[2]): op(v, x))
        elif re.fullmatch(_NUMBER, alt):
            tests.append(lambda v, x=float(alt): v == x)  # a sentinel (-1 = the server's default)
        else:
            raise ValueError(f"unreadable range rule {spec!r}")
    return lambda v: any(t(v) for t in tests)


def rule_of(section: type, name: str) -> Rule | None:
    """The rule field `name` of schema `section` declares (`ranged`), None if none."""
    for f in dataclasses.fields(section):
        if f.name == name:
            return f.metadata.get(RANGE)
    return None


def numeric_settings(node: Any, prefix: str = "") -> Iterator[tuple[str, float, Rule]]:
    """Every number in the config tree (each element of a list of numbers too) with its dotted key
    and rule, skipping sections whose `enable` is false."""
    if getattr(node, "enable", True) is False:
        return
    for f in dataclasses.fields(node):
        value, key = getattr(node, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from numeric_settings(value, key + ".")
            continue
        rule = rule_of(type(node), f.name) or DEFAULT_RULE
        if _is_number(value):
            yield key, value, rule
        elif isinstance(value, list) and value and all(_is_number(v) for v in value):
            yield from ((f"{key}[{i}]", v, rule) for i, v in enumerate(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
