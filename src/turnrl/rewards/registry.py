"""Reward functions routed by `data_source`, with verl's signature:

    compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float | dict

A dict must hold `score`; its other numeric entries become `reward_extra/<key>` metrics.
A user function loaded from a file replaces the registry for every data source.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from turnrl.plugins import load_attribute

ScoreFn = Callable[..., float | dict[str, Any]]

_REGISTRY: dict[str, ScoreFn] = {}


class RewardError(ValueError):
    """A reward function that cannot be found or loaded; the message names it."""


def register(*data_sources: str) -> Callable[[ScoreFn], ScoreFn]:
    def wrap(fn: ScoreFn) -> ScoreFn:
        for source in data_sources:
            _REGISTRY[source] = fn
        return fn

    return wrap


def _builtin() -> None:
    # importing the scorer modules registers them
    from turnrl.rewards import addition, code, math, qa  # noqa: F401


def registered() -> dict[str, ScoreFn]:
    _builtin()
    return dict(_REGISTRY)


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


def resolve(data_source: str, custom: ScoreFn | None = None) -> ScoreFn:
    if custom is not None:
        return custom
    table = registered()
    if data_source not in table:
        raise RewardError(
            f"no reward function for data_source '{data_source}'; registered: {sorted(table)}; "
            "or set reward.custom_function.path"
        )
    return table[data_source]


def split_score(result: float | dict[str, Any], where: str) -> tuple[float, dict[str, float]]:
    """(score, extra numeric info) from a scorer's return value."""
    if isinstance(result, dict):
        if "score" not in result:
            raise RewardError(f"{where} returned a dict without 'score': {sorted(result)}")
        extra = {k: float(v) for k, v in result.items() if k != "score" and isinstance(v, int | float | bool)}
        return float(result["score"]), extra
    try:
        return float(result), {}
    except (TypeError, ValueError):
        raise RewardError(f"{where} returned {type(result).__name__}, expected a number or a dict") from None
