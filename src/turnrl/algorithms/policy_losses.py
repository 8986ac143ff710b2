"""Per-token terms of every policy-loss mode: PPO clip (vanilla, GSPO) and CISPO, SAPO, GMPO, Clip-Cov, KL-Cov.

Each mode returns its ``(B, T)`` per-token loss and what it clipped; ``losses.policy_loss`` validates the
inputs, applies the rollout-correction ``weights``, reduces with ``agg_loss`` (so ``loss_agg_mode`` and the
gradient-accumulation denominators work the same for every mode) and turns the rest into metrics.

Conventions: ``mask`` is boolean; ``adv`` is already exactly 0 where ``mask`` is 0, and the log-ratio is
built with ``torch.where`` so padded -inf log-probs put no NaN in the backward pass. Every returned loss is
0, with zero gradient, at masked positions.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from turnrl.algorithms.core import masked_fill_zero, masked_mean

# exp(20) ~ 4.9e8 is already far outside any clip range; beyond it float32 heads for overflow.
LOG_RATIO_LIMIT = 20.0

COV_MODES: tuple[str, ...] = ("clip_cov", "kl_cov")
EXTRA_METRICS: dict[str, tuple[str, ...]] = {m: ("pg_covfrac",) for m in COV_MODES}
"""Metrics a mode reports beside pg_clipfrac / pg_clipfrac_lower / ppo_kl (the actor logs them too)."""


class TokenTerms(NamedTuple):
    loss_mat: Tensor
    """(B, T) per-token loss, before the rollout-correction weights; 0 at masked positions."""
    ratio: Tensor
    """(B, T) detached ratio the mode used (the sequence ratio on every token for GSPO / GMPO)."""
    clip_active: Tensor
    """(B, T) bool: the mode's clip decided this token (``pg_clipfrac``, the inspector's ``clipped``)."""
    dual_active: Tensor
    """(B, T) bool: the dual clip decided this token (``pg_clipfrac_lower``)."""
    extra: dict[str, Tensor]
    """Per-token floats whose masked means become metrics of the same name (may override pg_clipfrac)."""


def token_log_ratio(old_log_prob: Tensor, log_prob: Tensor, mask: Tensor) -> Tensor:
    """log(pi / pi_old) per token, clamped to +-LOG_RATIO_LIMIT, exactly 0 at masked positions."""
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    # where() before subtracting: padded -inf log-probs would otherwise put NaN into the backward pass
    token = torch.where(mask, log_prob, zero) - torch.where(mask, old_log_prob, zero)
    return token.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)


def ppo_clip(adv: Tensor, ratio: Tensor, low: float, high: float, dual_c: float | None) -> TokenTerms:
    """PPO's pessimistic clip max(-A r, -A clip(r, 1 - low, 1 + high)), capped at -A c for A < 0 (dual clip)."""
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - low, 1.0 + high)
    loss_mat = torch.maximum(unclipped, clipped)
    clip_active = clipped > unclipped
    dual_active = torch.zeros_like(clip_active)
    if dual_c is not None:
        bound = -adv * dual_c
        dual_active = (adv < 0) & (loss_mat > bound)
        loss_mat = torch.where(dual_active, bound, loss_mat)
        clip_active = clip_active & ~dual_active
    return TokenTerms(loss_mat, ratio.detach(), clip_active, dual_active, {})


def cispo(
    old_log_prob: Tensor, log_prob: Tensor, adv: Tensor, mask: Tensor, low: float, high: float
) -> TokenTerms:
    """CISPO (MiniMax 2025, arXiv 2506.13585): loss_t = -sg(clip(r_t, 1 - low, 1 + high)) * A_t * log pi_t.

    The clipped ratio is only a detached weight, so every token keeps the gradient -w_t A_t grad log pi_t,
    even outside the range (PPO's clip would zero it). No dual clip. ``clip_active``: r outside the range.
    The loss value is that of the weighted log-likelihood, not of a surrogate ratio.
    """
    ratio = torch.exp(token_log_ratio(old_log_prob, log_prob, mask))
    weight = ratio.detach().clamp(1.0 - low, 1.0 + high)
    loss_mat = -weight * adv * masked_fill_zero(log_prob, mask)
    outside = ((ratio < 1.0 - low) | (ratio > 1.0 + high)) & mask
    return TokenTerms(loss_mat, ratio.detach(), outside, torch.zeros_like(outside), {})


def sapo(
    old_log_prob: Tensor, log_prob: Tensor, adv: Tensor, mask: Tensor, tau_pos: float, tau_neg: float
) -> TokenTerms:
    """SAPO (Gao et al. 2025, arXiv 2511.20347): loss_t = -A_t f(r_t), f(r) = (4 / tau) sigmoid(tau (r - 1)).

    tau = ``tau_pos`` where A > 0, ``tau_neg`` where A <= 0. A soft gate instead of a hard clip: f'(r) =
    4 s (1 - s) with s = sigmoid(tau (r - 1)), so f'(1) = 1 (vanilla PG's gradient on-policy) and the
    gradient fades smoothly as r leaves 1. No dual clip. ``pg_clipfrac`` reports the mean gate attenuation
    1 - f'(r) (0 on-policy, towards 1 far off-policy); ``clip_active`` marks tokens with attenuation > 0.5.
    """
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"policy_loss: sapo temperatures must be > 0, got {tau_pos} and {tau_neg}")
    ratio = torch.exp(token_log_ratio(old_log_prob, log_prob, mask))
    pos, neg = (torch.full((), t, dtype=ratio.dtype, device=ratio.device) for t in (tau_pos, tau_neg))
    tau = torch.where(adv > 0, pos, neg)
    gate = torch.sigmoid(tau * (ratio - 1.0))
    loss_mat = -adv * (4.0 / tau) * gate
    with torch.no_grad():
        attenuation = masked_fill_zero(1.0 - 4.0 * gate * (1.0 - gate), mask)
    active = (attenuation > 0.5) & mask
    return TokenTerms(
        loss_mat, ratio.detach(), active, torch.zeros_like(active), {"pg_clipfrac": attenuation}
    )


def gmpo(
    old_log_prob: Tensor, log_prob: Tensor, adv: Tensor, mask: Tensor, low: float, high: float
) -> TokenTerms:
    """GMPO (Zhao et al. 2025, arXiv 2507.20673): the sequence objective A_i * (prod_t r_it)^(1 / |o_i|).

    ``low`` / ``high`` are read in LOG space (the paper: 0.4 each, i.e. ratios in [e^-0.4, e^0.4]). Per
    token l_t = log r_t is clipped pessimistically by the sign of the sequence advantage A_i (the masked
    mean of the token advantages): min(l_t, high) when A_i > 0, max(l_t, -low) when A_i < 0 (a clipped
    token passes no gradient; nothing is clipped when A_i = 0). ratio_i = exp(masked mean of the clipped
    l_t) and loss_i = -A_i * ratio_i, placed on every model token of response i, so ``agg_loss`` reduces
    it: ``seq-mean-token-mean`` gives the paper's mean over sequences, ``token-mean`` weighs each sequence
    by its number of model tokens. ``clip_active``: tokens whose l_t was clipped.
    """
    log_ratio = token_log_ratio(old_log_prob, log_prob, mask)
    a_seq = masked_mean(adv, mask, dim=-1).unsqueeze(-1)
    clip_high = (a_seq > 0) & (log_ratio > high) & mask
    clip_low = (a_seq < 0) & (log_ratio < -low) & mask
    hi = torch.full((), high, dtype=log_ratio.dtype, device=log_ratio.device)
    lo = torch.full((), -low, dtype=log_ratio.dtype, device=log_ratio.device)
    clipped = torch.where(clip_high, hi, torch.where(clip_low, lo, log_ratio))
    seq_ratio = torch.exp(masked_mean(clipped, mask, dim=-1)).unsqueeze(-1)
    loss_mat = masked_fill_zero((-a_seq * seq_ratio).expand_as(log_ratio), mask)
    active = clip_high | clip_low
    return TokenTerms(loss_mat, seq_ratio.detach().expand_as(log_ratio), active, torch.zeros_like(active), {})


def centred_cov(log_prob: Tensor, adv: Tensor, mask: Tensor) -> Tensor:
    """Detached (log pi_t - mean log pi) * (A_t - mean A), means over the valid tokens; 0 where masked."""
    lp = masked_fill_zero(log_prob.detach(), mask)
    a = adv.detach().to(lp.dtype)
    return masked_fill_zero((lp - masked_mean(lp, mask)) * (a - masked_mean(a, mask)), mask)


def _count(fraction: float, mask: Tensor) -> int:
    """round(fraction * number of valid tokens), halves rounded up."""
    return int(fraction * int(mask.sum().item()) + 0.5)


def clip_cov(
    old_log_prob: Tensor,
    log_prob: Tensor,
    adv: Tensor,
    mask: Tensor,
    low: float,
    high: float,
    dual_c: float | None,
    fraction: float,
    cov_lb: float,
    cov_ub: float,
    generator: torch.Generator | None,
) -> TokenTerms:
    """Clip-Cov (Cui et al. 2025, arXiv 2505.22617): PPO clip, but round(fraction * n_valid)
    tokens drawn at random among those with cov_lb <= cov_t <= cov_ub keep their loss value and lose
    their gradient. As in the authors' code, tokens the PPO (or dual) clip already stopped are not drawn
    (detaching them would change nothing). ``pg_covfrac``: fraction of valid tokens detached."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"policy_loss: clip_cov_ratio must be in [0, 1], got {fraction}")
    if cov_lb > cov_ub:
        raise ValueError(f"policy_loss: clip_cov_lb ({cov_lb}) must be <= clip_cov_ub ({cov_ub})")
    ratio = torch.exp(token_log_ratio(old_log_prob, log_prob, mask))
    ppo = ppo_clip(adv, ratio, low, high, dual_c)
    cov = centred_cov(log_prob, adv, mask)
    candidates = mask & (cov >= cov_lb) & (cov <= cov_ub) & ~ppo.clip_active & ~ppo.dual_active
    idx = torch.nonzero(candidates.flatten()).squeeze(-1)
    take = min(_count(fraction, mask), idx.numel())
    device = generator.device if generator is not None else torch.device("cpu")
    order = torch.randperm(idx.numel(), generator=generator, device=device).to(idx.device)
    chosen = torch.zeros(candidates.numel(), dtype=torch.bool, device=mask.device)
    chosen[idx[order[:take]]] = True
    chosen = chosen.view_as(mask)
    loss_mat = torch.where(chosen, ppo.loss_mat.detach(), ppo.loss_mat)
    extra = {"pg_covfrac": chosen.to(ratio.dtype)}
    return TokenTerms(loss_mat, ppo.ratio, ppo.clip_active, ppo.dual_active, extra)


def kl_cov(
    old_log_prob: Tensor,
    log_prob: Tensor,
    adv: Tensor,
    mask: Tensor,
    low: float,
    high: float,
    dual_c: float | None,
    fraction: float,
    coef: float,
) -> TokenTerms:
    """KL-Cov (Cui et al. 2025, arXiv 2505.22617): the round(fraction * n_valid) valid tokens of
    largest cov_t get loss -A_t r_t + coef * |log r_t| (no clip); every other token keeps PPO's clipped
    loss. ``pg_covfrac``: fraction of valid tokens penalised."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"policy_loss: kl_cov_ratio must be in [0, 1], got {fraction}")
    if coef < 0:
        raise ValueError(f"policy_loss: kl_cov_coef must be >= 0, got {coef}")
    log_ratio = token_log_ratio(old_log_prob, log_prob, mask)
    ratio = torch.exp(log_ratio)
    ppo = ppo_clip(adv, ratio, low, high, dual_c)
    cov = centred_cov(log_prob, adv, mask)
    ranked = torch.where(mask, cov, torch.full((), -torch.inf, dtype=cov.dtype, device=cov.device))
    top = torch.topk(ranked.flatten(), _count(fraction, mask)).indices
    chosen = torch.zeros(ranked.numel(), dtype=torch.bool, device=mask.device)
    chosen[top] = True
    chosen = chosen.view_as(mask)
    penalised = -adv * ratio + coef * log_ratio.abs()
    loss_mat = torch.where(chosen, penalised, ppo.loss_mat)
    extra = {"pg_covfrac": chosen.to(ratio.dtype)}
    return TokenTerms(loss_mat, ppo.ratio, ppo.clip_active & ~chosen, ppo.dual_active & ~chosen, extra)
