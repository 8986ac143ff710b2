"""KL divergence to the frozen reference policy: per-token estimators, controllers, and their two uses
(a penalty folded into the reward, or a loss term added to the policy loss).

Estimators follow Schulman's "Approximating KL Divergence" (2020) with samples drawn from the current
policy, log-ratio ``d = log_prob - ref_log_prob``:
  k1 = d (unbiased, high variance, can be negative), abs = |d|, k2 = d^2 / 2 (low variance, biased),
  k3 = exp(-d) + d - 1 (unbiased and always >= 0; GRPO's choice).
"""

from __future__ import annotations

import torch
from torch import Tensor

from turnrl.algorithms.core import agg_loss, check_same_shape, masked_fill_zero

KL_ESTIMATORS: tuple[str, ...] = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")
_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
KL_CONTROLLERS: tuple[str, ...] = ("fixed", "adaptive")

# exp() of a log-ratio beyond ~88 overflows float32; 20 is far outside any useful ratio.
_LOG_RATIO_LIMIT = 20.0
# k3 grows exponentially in the log-ratio; one wild token must not dominate the batch.
_K3_LIMIT = 10.0


def kl_penalty(log_prob: Tensor, ref_log_prob: Tensor, kind: str) -> Tensor:
    """Per-token KL estimate, shape of the inputs. Mask it yourself (observation tokens are not the
    policy's actions). k3 is clamped to [-10, 10]."""
    name = _ALIASES.get(kind, kind)
    if name not in ("k1", "abs", "k2", "k3"):
        raise ValueError(f"unknown KL estimator {kind!r}; valid estimators: {', '.join(KL_ESTIMATORS)}")
    check_same_shape({"log_prob": log_prob, "ref_log_prob": ref_log_prob}, "kl_penalty")
    diff = log_prob - ref_log_prob
    if name == "k1":
        return diff
    if name == "abs":
        return diff.abs()
    if name == "k2":
        return 0.5 * diff.square()
    neg = (-diff).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    return (torch.exp(neg) - neg - 1.0).clamp(-_K3_LIMIT, _K3_LIMIT)


class FixedKLController:
    """A constant KL coefficient."""

    def __init__(self, kl_coef: float) -> None:
        if kl_coef < 0:
            raise ValueError(f"FixedKLController: kl_coef must be >= 0, got {kl_coef}")
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt; present so the trainer treats both controllers alike."""
        del current_kl, n_steps


class AdaptiveKLController:
    """Adaptive KL coefficient of Ziegler et al. 2019 ("Fine-Tuning Language Models from Human
    Preferences", sec. 2.2): steer the measured KL towards ``target_kl``.

    error = clip(current_kl / target_kl - 1, -0.2, 0.2); value *= 1 + error * n_steps / horizon.
    ``n_steps`` is the number of samples (responses) the KL was measured on.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        if init_kl_coef < 0:
            raise ValueError(f"AdaptiveKLController: init_kl_coef must be >= 0, got {init_kl_coef}")
        if target_kl <= 0:
            raise ValueError(f"AdaptiveKLController: target_kl must be > 0, got {target_kl}")
        if horizon <= 0:
            raise ValueError(f"AdaptiveKLController: horizon must be > 0, got {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + proportional_error * n_steps / self.horizon


def make_kl_controller(
    kind: str, init_kl_coef: float, target_kl: float | None = None, horizon: int | None = None
) -> FixedKLController | AdaptiveKLController:
    """Build the controller named ``kind`` ("fixed" or "adaptive"; the latter needs target_kl and horizon)."""
    if kind == "fixed":
        return FixedKLController(init_kl_coef)
    if kind == "adaptive":
        if target_kl is None or horizon is None:
            raise ValueError("make_kl_controller('adaptive'): target_kl and horizon are both required")
        return AdaptiveKLController(init_kl_coef, target_kl, horizon)
    raise ValueError(f"unknown KL controller {kind!r}; valid controllers: {', '.join(KL_CONTROLLERS)}")


def apply_kl_in_reward(
    token_level_scores: Tensor,
    old_log_prob: Tensor,
    ref_log_prob: Tensor,
    response_mask: Tensor,
    kl_coef: float,
    kind: str,
) -> tuple[Tensor, dict[str, float]]:
    """Fold a per-token KL penalty into the reward: r_t = score_t - kl_coef * KL_t on model tokens
    (InstructGPT-style; Ouyang et al. 2022, eq. 2).

    Metrics: ``critic/kl`` is the masked mean of the per-token KL within each response, then the mean over
    responses that have at least one model token (each response weighs the same whatever its length; this
    is the number an adaptive controller should be updated with). ``critic/kl_coeff`` is ``kl_coef``.
    """
    check_same_shape(
        {
            "token_level_scores": token_level_scores,
            "old_log_prob": old_log_prob,
            "ref_log_prob": ref_log_prob,
            "response_mask": response_mask,
        },
        "apply_kl_in_reward",
    )
    with torch.no_grad():
        kl = masked_fill_zero(kl_penalty(old_log_prob, ref_log_prob, kind), response_mask)
        rewards = token_level_scores - kl_coef * kl
        current_kl = agg_loss(kl, response_mask, "seq-mean-token-mean")
    return rewards, {"critic/kl": float(current_kl.item()), "critic/kl_coeff": float(kl_coef)}


def kl_loss(
    log_prob: Tensor,
    ref_log_prob: Tensor,
    response_mask: Tensor,
    kind: str,
    loss_agg_mode: str,
    loss_norm_length: int | None = None,
    loss_denominator: float | Tensor | None = None,
) -> Tensor:
    """KL to the reference as a loss term (GRPO's use), reduced with ``loss_agg_mode``; differentiable.

    ``loss_norm_length`` / ``loss_denominator`` are passed to ``agg_loss``."""
    check_same_shape(
        {"log_prob": log_prob, "ref_log_prob": ref_log_prob, "response_mask": response_mask}, "kl_loss"
    )
    # Zero the inputs at masked positions first: a -inf padded log-prob would give NaN gradients otherwise.
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    mask = response_mask != 0
    per_token = kl_penalty(torch.where(mask, log_prob, zero), torch.where(mask, ref_log_prob, zero), kind)
    return agg_loss(
        per_token, response_mask, loss_agg_mode, norm_length=loss_norm_length, denominator=loss_denominator
    )
