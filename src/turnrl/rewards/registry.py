"""Reward functions routed by `data_source`, with verl's signature:

    compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float | dict

A dict must hold `score`; its other numeric entries become `reward_extra/<key>` metrics.
`BUILTIN` maps each public dataset's data source to its scorer; `registered(sandbox_url, extra)` is
that table plus `extra` (the built-in tasks' scorers, `turnrl.tasks.scorers()`, which the run's
assembly passes in: this layer does not know the tasks), with the code scorers bound to a run's
sandbox. A user function loaded from a file replaces the table for every data source.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from math import isfinite
from typing import Any

from turnrl.errors import TurnrlInputError
from turnrl.plugins import load_attribute
from turnrl.rewards import code, gsm8k, math, qa

ScoreFn = Callable[..., float | dict[str, Any]]

# data_source -> scorer of the public datasets; the scorer modules import nothing from here
BUILTIN: dict[str, ScoreFn] = {
    **dict.fromkeys(math.MATH_SOURCES, math.compute_score),
    gsm8k.DATA_SOURCE: gsm8k.compute_score,  # verl's rule: the number after the last "####"
    **dict.fromkeys(qa.SEARCH_R1_SOURCES, qa.compute_score),
    **dict.fromkeys(code.CODE_SOURCES, code.compute_score),
}


class RewardError(TurnrlInputError):
    """A reward function that cannot be found or loaded; the message names it."""


def registered(
    sandbox_url: str | None = None,
    extra: Mapping[str, ScoreFn] | None = None,
    sandbox_api_key: str | None = None,
) -> dict[str, ScoreFn]:
    """A copy of the built-in table plus `extra` (data sources it adds or overrides); with
    `sandbox_url`, every scorer in it that takes a `sandbox_url` keyword sends programs there, with
    `sandbox_api_key` (that sandbox's key) when it takes that keyword too."""
    table = {**BUILTIN, **(extra or {})}
    if sandbox_url:
        table = {source: _bind_sandbox(fn, sandbox_url, sandbox_api_key) for source, fn in table.items()}
    return table


def _bind_sandbox(fn: ScoreFn, sandbox_url: str, sandbox_api_key: str | None = None) -> ScoreFn:
    """`fn` sending its programs to `sandbox_url` when it takes that keyword (the code scorer, and a
    task's scorer built on it, such as the code task's), else `fn` itself. The key is bound only
    when there is one: without it the scorer sends $TURNRL_API_KEY's."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a callable without a signature takes no sandbox
        return fn
    if "sandbox_url" not in params:
        return fn
    if sandbox_api_key and "sandbox_api_key" in params:
        return functools.partial(fn, sandbox_url=sandbox_url, sandbox_api_key=sandbox_api_key)
    return functools.partial(fn, sandbox_url=sandbox_url)


def load_custom(path: str, name: str) -> ScoreFn:
    fn = load_attribute(path, name, "reward.custom_function", RewardError)
    if not callable(fn):
        raise RewardError(f"reward.custom_function.name: '{name}' in {path} is not a function")
    params = inspect.signature(fn).parameters
    if len(params) < 3 and not any(p.kind == p.VAR_POSITIONAL for p in params.values()):
        raise RewardError(
            f"reward function {path}:{name} must take (data_source, solution_str, ground_truth, extra_info=None)"
        )
    return fn


def resolve(
    data_source: str, custom: ScoreFn | None = None, table: dict[str, ScoreFn] | None = None
) -> ScoreFn:
    """The user's function if there is one, else the scorer of `data_source` in `table` (the built-ins)."""
    if custom is not None:
        return custom
    table = BUILTIN if table is None else table
    fn = lookup(data_source, table)
    if fn is None:
        raise RewardError(
            f"no reward function for data_source '{data_source}'; registered: {sorted(table)}; "
            "or set reward.custom_function.path"
        )
    return fn


def lookup(data_source: str, table: Mapping[str, ScoreFn]) -> ScoreFn | None:
    """`table[data_source]`, else the entry of its family (`reasoning_gym/chain_sum` ->
    `reasoning_gym/*`: one scorer for a hundred generated datasets), else None."""
    if data_source in table:
        return table[data_source]
    family, sep, _ = data_source.partition("/")
    return table.get(f"{family}/*") if sep else None


class BadScore(ValueError):
    """A reward function's return value that is not a score; the message says what it returned."""


def number(value: Any) -> float:
    """A finite float from a score, or BadScore naming what came back instead."""
    # float("0.5") would parse a string: a string is a bug in the function, not a score
    if isinstance(value, str | bytes) or value is None:
        raise BadScore(f"returned {type(value).__name__} {shorten(repr(value))}, expected a number")
    try:
        x = float(value)  # a bool is a 0/1 score: `return verify(gold, answer)` is common
    except (TypeError, ValueError):
        raise BadScore(f"returned {type(value).__name__}, expected a number or a dict with 'score'") from None
    except OverflowError:  # an int past float's range (10**400)
        raise BadScore(f"returned an integer too large for a float (about {int(value.bit_length() * 0.30103) + 1} digits), expected a finite number") from None  # fmt: skip
    if not isfinite(x):  # one NaN turns its whole group's advantages into NaN
        raise BadScore(f"returned {x}, expected a finite number")
    return x


def check_score(result: Any) -> tuple[float, dict[str, float]]:
    """(score, extra numeric metrics) from a reward function's return value: a number, or a dict
    holding `score` whose other numeric entries are extras."""
    if not isinstance(result, dict):
        return number(result), {}
    if "score" not in result:
        raise BadScore(f"returned a dict without 'score': {sorted(map(str, result))}")
    score = number(result["score"])
    try:
        extra = {k: float(v) for k, v in result.items() if k != "score" and isinstance(v, int | float | bool)}
    except OverflowError:
        raise BadScore("returned a dict with an integer too large for a float among its metrics") from None
    return score, extra


def split_score(result: float | dict[str, Any], where: str) -> tuple[float, dict[str, float]]:
    """(score, extra numeric info) from a scorer's return value; RewardError names `where`."""
    try:
        return check_score(result)
    except BadScore as err:
        raise RewardError(f"{where} {err}") from None


def shorten(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
