"""Policy and value losses of the PPO family, and the entropy of a categorical from its logits."""

from __future__ import annotations

import torch
from torch import Tensor

from turnrl.algorithms import policy_losses as pl
from turnrl.algorithms.core import agg_loss, check_same_shape, masked_fill_zero, masked_mean

POLICY_LOSS_MODES: tuple[str, ...] = ("vanilla", "gspo", "cispo", "sapo", "gmpo", "clip_cov", "kl_cov")
EXTRA_METRICS = pl.EXTRA_METRICS


def _log_ratio(old_log_prob: Tensor, log_prob: Tensor, mask: Tensor, mode: str) -> Tensor:
    """log(pi / pi_old) per token for the chosen mode, clamped, 0 at masked positions."""
    if mode == "vanilla":
        return pl.token_log_ratio(old_log_prob, log_prob, mask)
    # GSPO (Zheng et al. 2025, eq. 7 and the GSPO-token form, eq. 13): the sequence ratio is the
    # geometric mean of token ratios, s_i = exp(mean_t log r_t). Per token we use
    # log s_i,t = sg[log s_i] + log pi_t - sg[log pi_t]: its value is log s_i on every token, its gradient
    # that of log pi_t, so the per-sequence objective's gradient is spread over the tokens.
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    token = torch.where(mask, log_prob, zero) - torch.where(mask, old_log_prob, zero)
    seq = masked_mean(token, mask, dim=-1).unsqueeze(-1)
    masked_lp = torch.where(mask, log_prob, zero)
    combined = seq.detach() + masked_lp - masked_lp.detach()
    return masked_fill_zero(combined.clamp(-pl.LOG_RATIO_LIMIT, pl.LOG_RATIO_LIMIT), mask)


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
    loss_denominator: float | Tensor | None = None,
    per_token: bool = False,
    weights: Tensor | None = None,
    sapo_tau_pos: float = 1.0,
    sapo_tau_neg: float = 1.05,
    clip_cov_ratio: float = 2e-4,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    kl_cov_ratio: float = 2e-3,
    kl_cov_coef: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped surrogate loss (Schulman et al. 2017, eq. 7), negated for minimisation, or one of its variants.

    - Asymmetric clip range [1 - clip_ratio_low, 1 + clip_ratio_high]: DAPO's clip-higher (Yu et al. 2025)
      raises only the upper bound so low-probability tokens can still grow.
    - Dual clip (Ye et al. 2020, eq. 5) when ``clip_ratio_c`` is set: for A < 0 the loss is capped at
      -A * c, so a huge ratio on a bad action cannot produce an unbounded update. Must be > 1.
    - ``mode="gspo"`` uses the sequence-level ratio of GSPO for every token of a response (same clipping;
      GSPO's paper uses small ranges such as 3e-4 / 4e-4 and ``seq-mean-token-mean``).
    - ``cispo``, ``sapo``, ``gmpo``, ``clip_cov``, ``kl_cov``: see ``algorithms/policy_losses.py`` (one
      function each, with its paper and formula). ``cispo`` / ``sapo`` / ``gmpo`` have no dual clip;
      ``gmpo`` reads ``clip_ratio_low`` / ``clip_ratio_high`` in log space; ``clip_cov`` / ``kl_cov`` are
      PPO clip (with dual clip) plus covariance-selected tokens; ``generator`` draws Clip-Cov's tokens
      (a CPU ``torch.Generator``; None = the global RNG).

    Metrics (detached scalars over valid tokens): ``pg_clipfrac`` - fraction where the PPO clip decides the
    loss (the clipped term is larger and dual clip is not active; for cispo: r outside the range, gmpo:
    the log-ratio was clipped, sapo: the mean gate attenuation 1 - f'(r)); ``pg_clipfrac_lower`` - fraction
    where the dual clip decides it; ``ppo_kl`` - masked mean of old_log_prob - log_prob; with clip_cov /
    kl_cov also ``pg_covfrac``, the fraction of tokens detached / KL-penalised.

    ``loss_norm_length`` and ``loss_denominator`` are passed to ``agg_loss`` (``norm_length`` and
    ``denominator``: the Dr. GRPO constant and the gradient-accumulation count).

    ``weights`` (detached, same shape): per-token importance weights of the off-policy correction
    (``algorithms/rollout_corr.py``), multiplied into each token's loss (every mode).
    """
    if mode not in POLICY_LOSS_MODES:
        raise ValueError(f"unknown policy loss mode {mode!r}; valid modes: {', '.join(POLICY_LOSS_MODES)}")
    # the lower bound 1 - low must stay a ratio > 0; CISPO may drop it (low = 1: the paper's setting),
    # GMPO's bound is e^-low (log space)
    if mode == "gmpo":
        low_ok, bound = clip_ratio_low >= 0.0, ">= 0"
    elif mode == "cispo":
        low_ok, bound = 0.0 <= clip_ratio_low <= 1.0, "in [0, 1]"
    else:
        low_ok, bound = 0.0 <= clip_ratio_low < 1.0, "in [0, 1)"
    if not low_ok:
        raise ValueError(f"policy_loss: clip_ratio_low must be {bound} for {mode}, got {clip_ratio_low}")
    if clip_ratio_high < 0.0:
        raise ValueError(f"policy_loss: clip_ratio_high must be >= 0, got {clip_ratio_high}")
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"policy_loss: clip_ratio_c (dual clip) must be > 1, got {clip_ratio_c}")
    check_same_shape(
        {
            "old_log_prob": old_log_prob,
            "log_prob": log_prob,
            "advantages": advantages,
            "response_mask": response_mask,
            "weights": weights,
        },
        "policy_loss",
    )
    mask = response_mask != 0
    adv = masked_fill_zero(advantages, mask).to(log_prob.dtype)
    low, high, c = clip_ratio_low, clip_ratio_high, clip_ratio_c
    if mode in ("vanilla", "gspo"):
        terms = pl.ppo_clip(adv, torch.exp(_log_ratio(old_log_prob, log_prob, mask, mode)), low, high, c)
    elif mode == "cispo":
        terms = pl.cispo(old_log_prob, log_prob, adv, mask, low, high)
    elif mode == "sapo":
        terms = pl.sapo(old_log_prob, log_prob, adv, mask, sapo_tau_pos, sapo_tau_neg)
    elif mode == "gmpo":
        terms = pl.gmpo(old_log_prob, log_prob, adv, mask, low, high)
    elif mode == "clip_cov":
        cov_args = (clip_cov_ratio, clip_cov_lb, clip_cov_ub, generator)
        terms = pl.clip_cov(old_log_prob, log_prob, adv, mask, low, high, c, *cov_args)
    else:
        terms = pl.kl_cov(old_log_prob, log_prob, adv, mask, low, high, c, kl_cov_ratio, kl_cov_coef)
    loss_mat = terms.loss_mat
    if weights is not None:  # the engine sampled from pi_rollout, not pi_old: reweight each token
        loss_mat = loss_mat * weights.to(loss_mat.dtype)

    loss = agg_loss(loss_mat, mask, loss_agg_mode, norm_length=loss_norm_length, denominator=loss_denominator)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": masked_mean(terms.clip_active.to(log_prob.dtype), mask),
            "pg_clipfrac_lower": masked_mean(terms.dual_active.to(log_prob.dtype), mask),
            "ppo_kl": masked_mean(-(log_prob - old_log_prob), mask).detach(),
        }
        metrics.update({k: masked_mean(v.to(log_prob.dtype), mask) for k, v in terms.extra.items()})
        if per_token:  # for the step inspector: what the update did to each token
            metrics.update(
                ratio=terms.ratio,
                loss_mat=loss_mat.detach(),
                clip_active=terms.clip_active & mask,
                dual_active=terms.dual_active & mask,
            )
    return loss, metrics


def value_loss(
    *,
    vpreds: Tensor,
    values: Tensor,
    returns: Tensor,
    response_mask: Tensor,
    cliprange_value: float | None = 0.5,
    loss_agg_mode: str = "token-mean",
    loss_norm_length: int | None = None,
    loss_denominator: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped value loss: 0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2).

    The pessimistic max keeps the critic from moving far from the values the advantages were computed
    with (as in PPO implementations since OpenAI baselines). ``cliprange_value=None`` disables clipping.
    Metrics: ``vf_clipfrac`` (valid tokens where the clipped term is the larger), ``vpred_mean``.
    ``loss_norm_length`` / ``loss_denominator`` are passed to ``agg_loss``.
    """
    check_same_shape(
        {"vpreds": vpreds, "values": values, "returns": returns, "response_mask": response_mask}, "value_loss"
    )
    if cliprange_value is not None and cliprange_value < 0:
        raise ValueError(f"value_loss: cliprange_value must be >= 0 or None, got {cliprange_value}")
    mask = response_mask != 0
    zero = torch.zeros((), dtype=vpreds.dtype, device=vpreds.device)
    v = torch.where(mask, vpreds, zero)
    v_old = torch.where(mask, values, zero).to(v.dtype)
    target = torch.where(mask, returns, zero).to(v.dtype)
    unclipped = (v - target).square()
    if cliprange_value is None:
        loss_mat = 0.5 * unclipped
        clip_active = torch.zeros_like(mask)
    else:
        v_clipped = v_old + (v - v_old).clamp(-cliprange_value, cliprange_value)
        clipped = (v_clipped - target).square()
        loss_mat = 0.5 * torch.maximum(unclipped, clipped)
        clip_active = clipped > unclipped
    loss = agg_loss(loss_mat, mask, loss_agg_mode, norm_length=loss_norm_length, denominator=loss_denominator)
    with torch.no_grad():
        metrics = {
            "vf_clipfrac": masked_mean(clip_active.to(v.dtype), mask),
            "vpred_mean": masked_mean(v, mask).detach(),
        }
    return loss, metrics


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy H = logsumexp(z) - sum_v softmax(z)_v z_v over the last dim, shape (...,).

    Stable for large logits (computed on max-shifted logits) and for -inf logits (masked vocabulary
    entries add 0).
    16-bit logits are upcast to float32 for the reduction; pass chunks of rows to bound memory.
    """
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    # H is shift-invariant; subtracting the row max first avoids the cancellation of two huge terms
    # (logits of 1e4 in float32 would otherwise lose three digits).
    shift = z.detach().amax(dim=-1, keepdim=True)
    zero = torch.zeros((), dtype=z.dtype, device=z.device)
    z = z - torch.where(torch.isfinite(shift), shift, zero)
    lse = torch.logsumexp(z, dim=-1)
    probs = torch.softmax(z, dim=-1)
    finite = torch.where(torch.isneginf(z), zero, z)
    return lse - (probs * finite).sum(dim=-1)
