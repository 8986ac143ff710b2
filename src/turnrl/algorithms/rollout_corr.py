"""Off-policy correction between the rollout engine and the trainer.

The engine records the log-prob of every token it sampled (``rollout_log_probs``); the trainer recomputes
them with its own model (``old_log_probs``). Different kernels, bf16 and a separate process make the two
differ, so the samples come from pi_rollout while the PPO objective assumes pi_old. The importance ratio
rho = pi_old / pi_rollout = exp(old - rollout) corrects for it (Yao et al. 2025, "Your Efficient RL
Framework Secretly Brings You Off-Policy RL Training"):

- TIS (truncated IS): weight min(rho, cap) - bounded variance at the price of some bias (Ionides 2008).
- MIS (masked IS): weight rho, but tokens / responses whose rho leaves [low, high] are dropped from the
  loss altogether; a mismatch that large means the sample is not worth correcting.

rho is taken per token, per sequence (the product of token ratios, the exact ratio of a whole response)
or as the geometric mean of the token ratios (length-independent, as in GSPO, Zheng et al. 2025).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from turnrl.algorithms.core import check_same_shape, masked_fill_zero, masked_mean

CORRECTION_MODES: tuple[str, ...] = ("none", "tis", "mis")
BYPASS_CHOICES: tuple[str, ...] = ("auto", "true", "false")


def bypass_choice(value: object) -> str:
    """`algorithm.rollout_correction.bypass` as one of BYPASS_CHOICES (YAML and the CLI may give a bool)."""
    return str(value).lower()


CORRECTION_LEVELS: tuple[str, ...] = ("token", "sequence", "geometric")

# exp() of a log-ratio beyond ~88 overflows float32; 20 (rho ~ 4.9e8) is far outside any useful ratio.
_LOG_RATIO_LIMIT = 20.0
_PREFIX = "rollout_corr/"


@dataclass
class Correction:
    """What the trainer multiplies into the policy loss.

    ``weights``: (B, T) float32, detached; the per-token importance weight, 0 where ``keep`` is 0.
    ``keep``: (B, T) float32 0/1; ``response_mask`` with the tokens MIS dropped zeroed. Use it as the loss
    mask so dropped tokens leave the denominator too.
    ``metrics``: python floats, keys prefixed ``rollout_corr/``.
    """

    weights: Tensor
    keep: Tensor
    metrics: dict[str, float]


def _check_arguments(
    old_log_probs: Tensor,
    rollout_log_probs: Tensor,
    response_mask: Tensor,
    mode: str,
    level: str,
    tis_cap: float,
    mis_low: float,
    mis_high: float,
) -> None:
    """ValueError naming the first argument `rollout_correction` cannot take."""
    if mode not in CORRECTION_MODES:
        raise ValueError(
            f"unknown rollout correction mode {mode!r}; valid modes: {', '.join(CORRECTION_MODES)}"
        )
    if level not in CORRECTION_LEVELS:
        raise ValueError(
            f"unknown rollout correction level {level!r}; valid levels: {', '.join(CORRECTION_LEVELS)}"
        )
    if tis_cap <= 0:
        raise ValueError(f"rollout_correction: tis_cap must be > 0, got {tis_cap}")
    if not 0 <= mis_low < mis_high:
        raise ValueError(f"rollout_correction: needs 0 <= mis_low < mis_high, got [{mis_low}, {mis_high}]")
    check_same_shape(
        {
            "old_log_probs": old_log_probs,
            "rollout_log_probs": rollout_log_probs,
            "response_mask": response_mask,
        },
        "rollout_correction",
    )
    if old_log_probs.dim() != 2:
        raise ValueError(
            f"rollout_correction: expects (B, T) tensors, got shape {tuple(old_log_probs.shape)}"
        )


def rollout_correction(
    old_log_probs: Tensor,
    rollout_log_probs: Tensor,
    response_mask: Tensor,
    mode: str = "none",
    level: str = "token",
    tis_cap: float = 2.0,
    mis_low: float = 0.5,
    mis_high: float = 2.0,
) -> Correction:
    """Importance weights rho = pi_old / pi_rollout for ``(B, T)`` log-probs, and the mismatch metrics.

    ``level``: ``token`` (rho_t = exp(d_t), d_t = old_t - rollout_t), ``sequence`` (rho_i = exp(sum_t d_t),
    on every token of the row) or ``geometric`` (rho_i = exp(mean_t d_t), on every token of the row).
    ``mode``: ``none`` (weights 1, metrics only), ``tis`` (weight min(rho, tis_cap)) or ``mis`` (keep only
    where mis_low <= rho <= mis_high - single tokens at token level, whole rows at the other levels - with
    weight rho). log rho is clamped to [-20, 20] before exp.

    Metrics, over tokens where ``response_mask`` is set (all 0.0 when there is none):
    ``abs_diff_mean`` / ``abs_diff_max`` of |d_t|; ``kl_k1`` = mean(rollout - old) and ``kl_k3`` =
    mean(rho_t - 1 - log rho_t), Schulman's k1 / k3 estimates of KL(pi_rollout || pi_old) from samples of
    pi_rollout (k3 with the token-level rho); ``weight_mean`` over kept tokens; ``capped_frac`` (tokens
    whose rho > tis_cap, tis only) and ``masked_frac`` (tokens dropped, mis only); and the spread over
    rows with at least one token of the per-sequence log-ratio sum_t d_t: ``seq_log_ratio_std``
    (population), ``_max``, ``_min``.
    """
    _check_arguments(old_log_probs, rollout_log_probs, response_mask, mode, level, tis_cap, mis_low, mis_high)

    with torch.no_grad():
        mask = response_mask != 0
        diff = _log_ratios(old_log_probs, rollout_log_probs, mask)
        seq_log_ratio = diff.sum(dim=-1)  # diff is exactly 0 off the mask
        log_rho = _level_log_ratio(diff, seq_log_ratio, mask, level)
        rho = torch.exp(log_rho.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT))
        weights, keep, capped = _mode_weights(rho, mask, mode, tis_cap, mis_low, mis_high)
        metrics = _metrics(diff, seq_log_ratio, mask, keep, weights, capped)
    return Correction(weights=weights.float(), keep=keep.float(), metrics=metrics)


def _log_ratios(old_log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor) -> Tensor:
    """d_t = old_t - rollout_t, exactly 0 off `mask`."""
    # At least float32: bf16 log-probs would put ~1% noise into rho, the very error being measured.
    dtype = torch.promote_types(
        torch.promote_types(old_log_probs.dtype, rollout_log_probs.dtype), torch.float32
    )
    zero = torch.zeros((), dtype=dtype, device=old_log_probs.device)
    # where() before subtracting: padded -inf or NaN log-probs must not turn into NaN ratios
    return torch.where(mask, old_log_probs.to(dtype), zero) - torch.where(
        mask, rollout_log_probs.to(dtype), zero
    )


def _level_log_ratio(diff: Tensor, seq_log_ratio: Tensor, mask: Tensor, level: str) -> Tensor:
    """log rho on every token: the token's own d_t, or its row's sum or mean of them."""
    if level == "token":
        return diff
    if level == "sequence":
        return seq_log_ratio.unsqueeze(-1).expand_as(diff)
    return masked_mean(diff, mask, dim=-1).unsqueeze(-1).expand_as(diff)


def _mode_weights(
    rho: Tensor, mask: Tensor, mode: str, tis_cap: float, mis_low: float, mis_high: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(weights, keep, capped) of `mode`: the weights, 0 where `keep` is not set; the tokens kept
    (MIS drops those out of range); the tokens whose rho TIS capped."""
    keep = mask
    capped = torch.zeros_like(mask)
    if mode == "none":
        weights = torch.ones_like(rho)
    elif mode == "tis":
        capped = mask & (rho > tis_cap)
        weights = rho.clamp(max=tis_cap)
    else:
        keep = mask & (rho >= mis_low) & (rho <= mis_high)
        weights = rho
    return masked_fill_zero(weights, keep), keep, capped


def _metrics(
    diff: Tensor, seq_log_ratio: Tensor, mask: Tensor, keep: Tensor, weights: Tensor, capped: Tensor
) -> dict[str, float]:
    """The mismatch metrics of ``rollout_correction``; every reduction is 0.0 (not NaN) when empty."""
    abs_diff = diff.abs()
    token_log_rho = diff.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    # expm1 keeps the digits of rho - 1 - log rho for the tiny log-ratios a healthy engine gives
    # (exp(1e-4) - 1 cancels most of them); the clamp removes rounding below the true minimum 0.
    k3 = (torch.expm1(token_log_rho) - token_log_rho).clamp(min=0.0)
    rows = seq_log_ratio[mask.any(dim=-1)]
    if rows.numel() > 0:
        seq_std, seq_max, seq_min = rows.std(unbiased=False), rows.max(), rows.min()
    else:
        seq_std = seq_max = seq_min = torch.zeros((), dtype=diff.dtype)
    values = {
        "abs_diff_mean": masked_mean(abs_diff, mask),
        # masked positions hold 0 and |d| >= 0, so the plain max is the masked max (0 when empty)
        "abs_diff_max": abs_diff.max() if abs_diff.numel() > 0 else torch.zeros(()),
        "kl_k1": masked_mean(-diff, mask),
        "kl_k3": masked_mean(k3, mask),
        "weight_mean": masked_mean(weights, keep),
        "capped_frac": masked_mean(capped.to(diff.dtype), mask),
        "masked_frac": masked_mean((mask & ~keep).to(diff.dtype), mask),
        "seq_log_ratio_std": seq_std,
        "seq_log_ratio_max": seq_max,
        "seq_log_ratio_min": seq_min,
    }
    return {_PREFIX + name: float(value.item()) for name, value in values.items()}
