"""The policy loss called with verl-style keywords, as the loss tests state their cases: each call
builds the one inputs record and resolves the table entry the way the actor does (its parameters
from the flat `actor.` keys), so the tests exercise the same path."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor

from turnrl.algorithms.losses import Aggregation, resolve_policy_loss
from turnrl.algorithms.losses import policy_loss as table_policy_loss
from turnrl.algorithms.policy_losses import Clip, LossInputs
from turnrl.config.schema import ActorConfig


def policy_loss(
    *,
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float | None = 3.0,
    loss_agg_mode: str = "token-mean",
    mode: str = "vanilla",
    loss_norm_length: int | None = None,
    loss_denominator: Any = None,
    per_token: bool = False,
    weights: Tensor | None = None,
    generator: Any = None,
    **mode_params: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """`mode_params`: the mode's own `actor.` keys (`sapo_tau_pos=...`, `clip_cov_ratio=...`)."""
    actor = dataclasses.replace(ActorConfig(), **mode_params)
    inputs = LossInputs(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        Clip(clip_ratio_low, clip_ratio_high, clip_ratio_c),
        generator,
    )
    return table_policy_loss(
        inputs,
        resolve_policy_loss(mode, actor),
        Aggregation(loss_agg_mode, loss_norm_length, loss_denominator),
        weights,
        per_token,
    )
