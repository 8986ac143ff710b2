"""`compute_advantage` called with verl-style keywords, as the estimator tests state their cases:
each call builds the one inputs record and resolves the table entry the way the trainer's advantage
stage does (its parameters from `algorithm.` keys), so the tests exercise the same path."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from torch import Tensor

from turnrl.algorithms.advantages import AdvantageInputs, resolve_estimator
from turnrl.algorithms.advantages import compute_advantage as table_compute_advantage


def compute_advantage(
    estimator: str,
    *,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Any = None,
    values: Tensor | None = None,
    reward_baselines: Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float | None = None,
    old_log_probs: Tensor | None = None,
    teacher_log_prob: Tensor | None = None,
    distill_coef: float = 0.0,
    responses: Tensor | None = None,
    gigpo: tuple[float, float] = (1.0, 0.95),
) -> tuple[Tensor, Tensor]:
    """`gigpo`: its `(step_weight, gamma)`; `epsilon` replaces the entry's own where it has one."""
    algorithm = SimpleNamespace(
        gamma=gamma,
        lam=lam,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        gigpo=SimpleNamespace(step_weight=gigpo[0], gamma=gigpo[1]),
    )
    x = AdvantageInputs(
        token_level_rewards,
        response_mask,
        index=index,
        values=values,
        reward_baselines=reward_baselines,
        old_log_probs=old_log_probs,
        teacher_log_prob=teacher_log_prob,
        responses=responses,
    )
    resolved = resolve_estimator(estimator, algorithm)
    if epsilon is not None and hasattr(resolved.params, "epsilon"):
        resolved = dataclasses.replace(resolved, params=dataclasses.replace(resolved.params, epsilon=epsilon))
    return table_compute_advantage(resolved, x, distill_coef)
