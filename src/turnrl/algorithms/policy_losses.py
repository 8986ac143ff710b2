"""Policy losses as a table: PPO clip (vanilla, GSPO), CISPO, SAPO, GMPO, Clip-Cov, KL-Cov, and a user's own.

A loss is one entry of `POLICY_LOSSES`: a function `fn(x: LossInputs, params) -> TokenTerms` and the
dataclass of its own parameters, whose fields map to the actor's config keys (verl's flat names,
`actor.sapo_tau_pos`, ...). Every function returns its ``(B, T)`` per-token loss and what it clipped;
``losses.policy_loss`` validates the inputs, applies the rollout-correction ``weights``, reduces with
``agg_loss`` (so ``loss_agg_mode`` and the gradient-accumulation denominators work the same for every
mode) and turns the rest into metrics. A new loss is one function and one line in the table; a loss
of one's own needs no edit at all: `actor.policy_loss_mode=path/to/file.py:fn` (`losses.resolve_policy_loss`).

Conventions: ``x.mask`` is boolean; ``x.advantages`` is already exactly 0 where the mask is 0, in the
log-probs' dtype; the log-ratio is built with ``torch.where`` so padded -inf log-probs put no NaN in the
backward pass. Every returned loss is 0, with zero gradient, at masked positions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor

from turnrl.algorithms.core import masked_fill_zero, masked_mean

# exp(20) ~ 4.9e8 is already far outside any clip range; beyond it float32 heads for overflow.
LOG_RATIO_LIMIT = 20.0


@dataclass(frozen=True)
class Clip:
    """The clip range every mode reads (`actor.clip_ratio_low`, `_high`, `_c`)."""

    low: float = 0.2
    """The ratio's lower bound is 1 - low (GMPO: e^-low, in log space)."""
    high: float = 0.2
    """The ratio's upper bound is 1 + high (GMPO: e^high)."""
    dual_c: float | None = 3.0
    """Dual clip (Ye et al. 2020): for A < 0 the loss is capped at -A c; None: off. Must be > 1."""


@dataclass(frozen=True)
class LossInputs:
    """One micro-batch as every policy loss reads it, each tensor (B, T) over response positions."""

    old_log_prob: Tensor
    """log pi_old of each sampled token (the step-start policy's, or the engine's under bypass)."""
    log_prob: Tensor
    """log pi of each sampled token under the policy being trained (carries the gradient)."""
    advantages: Tensor
    """Per-token advantages (masked to exactly 0, in log_prob's dtype, when a mode sees them)."""
    mask: Tensor
    """Which tokens count (model tokens; observations and padding are out), boolean for a mode."""
    clip: Clip = field(default_factory=Clip)
    """The clip range."""
    generator: torch.Generator | None = None
    """Random draws of a mode that makes them (Clip-Cov); None = the global RNG."""


class TokenTerms(NamedTuple):
    """What a mode computed, per token."""

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


def sequence_log_ratio(old_log_prob: Tensor, log_prob: Tensor, mask: Tensor) -> Tensor:
    """GSPO's (Zheng et al. 2025, eq. 7 and the GSPO-token form, eq. 13) per-token log ratio: the
    sequence ratio is the geometric mean of token ratios, s_i = exp(mean_t log r_t). Per token
    log s_i,t = sg[log s_i] + log pi_t - sg[log pi_t]: its value is log s_i on every token, its gradient
    that of log pi_t, so the per-sequence objective's gradient is spread over the tokens."""
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    token = torch.where(mask, log_prob, zero) - torch.where(mask, old_log_prob, zero)
    seq = masked_mean(token, mask, dim=-1).unsqueeze(-1)
    masked_lp = torch.where(mask, log_prob, zero)
    combined = seq.detach() + masked_lp - masked_lp.detach()
    return masked_fill_zero(combined.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT), mask)


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


# -- the modes: fn(x, params) -> TokenTerms ----------------------------------------------------------


@dataclass(frozen=True)
class NoParams:
    """A mode with no parameters beyond the clip range."""


def vanilla(x: LossInputs, p: NoParams) -> TokenTerms:
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7) with DAPO's asymmetric range and the dual clip."""
    ratio = torch.exp(token_log_ratio(x.old_log_prob, x.log_prob, x.mask))
    return ppo_clip(x.advantages, ratio, x.clip.low, x.clip.high, x.clip.dual_c)


def gspo(x: LossInputs, p: NoParams) -> TokenTerms:
    """PPO's clip on GSPO's sequence-level ratio (`sequence_log_ratio`) for every token of a response
    (the paper uses small ranges such as 3e-4 / 4e-4 and `seq-mean-token-mean`)."""
    ratio = torch.exp(sequence_log_ratio(x.old_log_prob, x.log_prob, x.mask))
    return ppo_clip(x.advantages, ratio, x.clip.low, x.clip.high, x.clip.dual_c)


def cispo(x: LossInputs, p: NoParams) -> TokenTerms:
    """CISPO (MiniMax 2025, arXiv 2506.13585): loss_t = -sg(clip(r_t, 1 - low, 1 + high)) * A_t * log pi_t.

    The clipped ratio is only a detached weight, so every token keeps the gradient -w_t A_t grad log pi_t,
    even outside the range (PPO's clip would zero it). No dual clip. ``clip_active``: r outside the range.
    The loss value is that of the weighted log-likelihood, not of a surrogate ratio.
    """
    low, high, mask = x.clip.low, x.clip.high, x.mask
    ratio = torch.exp(token_log_ratio(x.old_log_prob, x.log_prob, mask))
    weight = ratio.detach().clamp(1.0 - low, 1.0 + high)
    loss_mat = -weight * x.advantages * masked_fill_zero(x.log_prob, mask)
    outside = ((ratio < 1.0 - low) | (ratio > 1.0 + high)) & mask
    return TokenTerms(loss_mat, ratio.detach(), outside, torch.zeros_like(outside), {})


@dataclass(frozen=True)
class SapoParams:
    tau_pos: float = 1.0
    """Gate temperature where A > 0 (`actor.sapo_tau_pos`, the paper's 1.0); > 0."""
    tau_neg: float = 1.05
    """Gate temperature where A <= 0 (`actor.sapo_tau_neg`, the paper's 1.05); > 0."""


def sapo(x: LossInputs, p: SapoParams) -> TokenTerms:
    """SAPO (Gao et al. 2025, arXiv 2511.20347): loss_t = -A_t f(r_t), f(r) = (4 / tau) sigmoid(tau (r - 1)).

    tau = ``tau_pos`` where A > 0, ``tau_neg`` where A <= 0. A soft gate instead of a hard clip: f'(r) =
    4 s (1 - s) with s = sigmoid(tau (r - 1)), so f'(1) = 1 (vanilla PG's gradient on-policy) and the
    gradient fades smoothly as r leaves 1. No dual clip. ``pg_clipfrac`` reports the mean gate attenuation
    1 - f'(r) (0 on-policy, towards 1 far off-policy); ``clip_active`` marks tokens with attenuation > 0.5.
    """
    if p.tau_pos <= 0 or p.tau_neg <= 0:
        raise ValueError(f"policy_loss: sapo temperatures must be > 0, got {p.tau_pos} and {p.tau_neg}")
    adv, mask = x.advantages, x.mask
    ratio = torch.exp(token_log_ratio(x.old_log_prob, x.log_prob, mask))
    pos, neg = (torch.full((), t, dtype=ratio.dtype, device=ratio.device) for t in (p.tau_pos, p.tau_neg))
    tau = torch.where(adv > 0, pos, neg)
    gate = torch.sigmoid(tau * (ratio - 1.0))
    loss_mat = -adv * (4.0 / tau) * gate
    with torch.no_grad():
        attenuation = masked_fill_zero(1.0 - 4.0 * gate * (1.0 - gate), mask)
    active = (attenuation > 0.5) & mask
    return TokenTerms(
        loss_mat, ratio.detach(), active, torch.zeros_like(active), {"pg_clipfrac": attenuation}
    )


def gmpo(x: LossInputs, p: NoParams) -> TokenTerms:
    """GMPO (Zhao et al. 2025, arXiv 2507.20673): the sequence objective A_i * (prod_t r_it)^(1 / |o_i|).

    ``low`` / ``high`` are read in LOG space (the paper: 0.4 each, i.e. ratios in [e^-0.4, e^0.4]). Per
    token l_t = log r_t is clipped pessimistically by the sign of the sequence advantage A_i (the masked
    mean of the token advantages): min(l_t, high) when A_i > 0, max(l_t, -low) when A_i < 0 (a clipped
    token passes no gradient; nothing is clipped when A_i = 0). ratio_i = exp(masked mean of the clipped
    l_t) and loss_i = -A_i * ratio_i, placed on every model token of response i, so ``agg_loss`` reduces
    it: ``seq-mean-token-mean`` gives the paper's mean over sequences, ``token-mean`` weighs each sequence
    by its number of model tokens. ``clip_active``: tokens whose l_t was clipped.
    """
    low, high, mask = x.clip.low, x.clip.high, x.mask
    log_ratio = token_log_ratio(x.old_log_prob, x.log_prob, mask)
    a_seq = masked_mean(x.advantages, mask, dim=-1).unsqueeze(-1)
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


@dataclass(frozen=True)
class ClipCovParams:
    ratio: float = 2e-4
    """Fraction of the model tokens whose gradient is detached (`actor.clip_cov_ratio`); in [0, 1]."""
    lb: float = 1.0
    """Lowest centred covariance of a token that may be drawn (`actor.clip_cov_lb`)."""
    ub: float = 5.0
    """Highest centred covariance of a token that may be drawn (`actor.clip_cov_ub`); >= lb."""


def clip_cov(x: LossInputs, p: ClipCovParams) -> TokenTerms:
    """Clip-Cov (Cui et al. 2025, arXiv 2505.22617): PPO clip, but round(ratio * n_valid) tokens drawn
    at random among those with lb <= cov_t <= ub keep their loss value and lose their gradient. As in
    the authors' code, tokens the PPO (or dual) clip already stopped are not drawn (detaching them would
    change nothing). ``pg_covfrac``: fraction of valid tokens detached."""
    if not 0.0 <= p.ratio <= 1.0:
        raise ValueError(f"policy_loss: clip_cov_ratio must be in [0, 1], got {p.ratio}")
    if p.lb > p.ub:
        raise ValueError(f"policy_loss: clip_cov_lb ({p.lb}) must be <= clip_cov_ub ({p.ub})")
    mask, generator = x.mask, x.generator
    ratio = torch.exp(token_log_ratio(x.old_log_prob, x.log_prob, mask))
    ppo = ppo_clip(x.advantages, ratio, x.clip.low, x.clip.high, x.clip.dual_c)
    cov = centred_cov(x.log_prob, x.advantages, mask)
    candidates = mask & (cov >= p.lb) & (cov <= p.ub) & ~ppo.clip_active & ~ppo.dual_active
    idx = torch.nonzero(candidates.flatten()).squeeze(-1)
    take = min(_count(p.ratio, mask), idx.numel())
    device = generator.device if generator is not None else torch.device("cpu")
    order = torch.randperm(idx.numel(), generator=generator, device=device).to(idx.device)
    chosen = torch.zeros(candidates.numel(), dtype=torch.bool, device=mask.device)
    chosen[idx[order[:take]]] = True
    chosen = chosen.view_as(mask)
    loss_mat = torch.where(chosen, ppo.loss_mat.detach(), ppo.loss_mat)
    extra = {"pg_covfrac": chosen.to(ratio.dtype)}
    return TokenTerms(loss_mat, ppo.ratio, ppo.clip_active, ppo.dual_active, extra)


@dataclass(frozen=True)
class KlCovParams:
    ratio: float = 2e-3
    """Fraction of the model tokens, those of largest covariance, that are penalised (`actor.kl_cov_ratio`)."""
    coef: float = 1.0
    """Weight of the |log r| penalty on them (`actor.kl_cov_coef`); >= 0."""


def kl_cov(x: LossInputs, p: KlCovParams) -> TokenTerms:
    """KL-Cov (Cui et al. 2025, arXiv 2505.22617): the round(ratio * n_valid) valid tokens of largest
    cov_t get loss -A_t r_t + coef * |log r_t| (no clip); every other token keeps PPO's clipped loss.
    ``pg_covfrac``: fraction of valid tokens penalised."""
    if not 0.0 <= p.ratio <= 1.0:
        raise ValueError(f"policy_loss: kl_cov_ratio must be in [0, 1], got {p.ratio}")
    if p.coef < 0:
        raise ValueError(f"policy_loss: kl_cov_coef must be >= 0, got {p.coef}")
    adv, mask = x.advantages, x.mask
    log_ratio = token_log_ratio(x.old_log_prob, x.log_prob, mask)
    ratio = torch.exp(log_ratio)
    ppo = ppo_clip(adv, ratio, x.clip.low, x.clip.high, x.clip.dual_c)
    cov = centred_cov(x.log_prob, adv, mask)
    ranked = torch.where(mask, cov, torch.full((), -torch.inf, dtype=cov.dtype, device=cov.device))
    top = torch.topk(ranked.flatten(), _count(p.ratio, mask)).indices
    chosen = torch.zeros(ranked.numel(), dtype=torch.bool, device=mask.device)
    chosen[top] = True
    chosen = chosen.view_as(mask)
    penalised = -adv * ratio + p.coef * log_ratio.abs()
    loss_mat = torch.where(chosen, penalised, ppo.loss_mat)
    extra = {"pg_covfrac": chosen.to(ratio.dtype)}
    return TokenTerms(loss_mat, ppo.ratio, ppo.clip_active & ~chosen, ppo.dual_active & ~chosen, extra)


# -- the table ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LossSpec:
    """One policy loss: its function, its parameters and where the config keeps them."""

    fn: Callable[[LossInputs, Any], TokenTerms]
    params: type = NoParams
    """The dataclass of the mode's own parameters."""
    keys: tuple[tuple[str, str], ...] = ()
    """(parameter field, `actor.` config key) pairs: verl's flat names fill the parameters."""
    low: tuple[float, float, bool] = (0.0, 1.0, False)
    """The valid `clip.low`: (lowest, highest, highest included); the ratio's bound 1 - low stays > 0."""
    low_note: str = ""
    """Why `low` differs from PPO's [0, 1), as the config error words it."""
    ordered: tuple[tuple[str, str, str], ...] = ()
    """(lower field, upper field, what crossing them leaves) of parameters that must not cross."""
    extra_metrics: tuple[str, ...] = ()
    """Metrics the mode reports beside pg_clipfrac / pg_clipfrac_lower / ppo_kl (the actor logs them)."""
    flat_rows_inert: bool = True
    """A response whose every advantage is 0 adds exactly 0 to the loss and to its gradient, and no
    other response's term reads it, so the update may leave it out (`actor.skip_flat_responses`).
    False for modes that draw on a micro-batch's statistics (`clip_cov`, `kl_cov`) and for a user's."""

    def takes_low(self, low: float) -> bool:
        """Whether `clip.low` (`actor.clip_ratio_low`) is in the mode's range `low`."""
        lowest, highest, inclusive = self.low
        return lowest <= low and (low <= highest if inclusive else low < highest)


ANY_LOW = (0.0, float("inf"), True)
POLICY_LOSSES: dict[str, LossSpec] = {
    "vanilla": LossSpec(vanilla),
    "gspo": LossSpec(gspo),
    # the paper drops the lower bound: low = 1
    "cispo": LossSpec(cispo, low=(0.0, 1.0, True), low_note="no lower bound"),
    "sapo": LossSpec(sapo, SapoParams, (("tau_pos", "sapo_tau_pos"), ("tau_neg", "sapo_tau_neg"))),
    "gmpo": LossSpec(gmpo, low=ANY_LOW, low_note="reads it in log space"),  # e^-low > 0 for any low
    "clip_cov": LossSpec(
        clip_cov,
        ClipCovParams,
        (("ratio", "clip_cov_ratio"), ("lb", "clip_cov_lb"), ("ub", "clip_cov_ub")),
        ordered=(("lb", "ub", "no token could be detached"),),
        extra_metrics=("pg_covfrac",),
        flat_rows_inert=False,  # the covariance is centred on the micro-batch's means
    ),
    "kl_cov": LossSpec(
        kl_cov,
        KlCovParams,
        (("ratio", "kl_cov_ratio"), ("coef", "kl_cov_coef")),
        extra_metrics=("pg_covfrac",),
        flat_rows_inert=False,  # its penalty needs no advantage, on tokens ranked across the micro-batch
    ),
}
"""`actor.policy_loss_mode` -> its loss."""
