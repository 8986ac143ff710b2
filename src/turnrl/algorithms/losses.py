"""Policy and value losses of the PPO family, and the entropy of a categorical from its logits."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor

from turnrl.algorithms import policy_losses as pl
from turnrl.algorithms.core import agg_loss, check_same_shape, masked_fill_zero, masked_mean
from turnrl.plugins import load_function

POLICY_LOSS_MODES: tuple[str, ...] = tuple(pl.POLICY_LOSSES)
LOSS_KEY = "actor.policy_loss_mode"


@dataclass(frozen=True)
class PolicyLoss:
    """A policy loss resolved from the config: its table entry (or a user's) and its parameters."""

    name: str
    spec: pl.LossSpec
    params: Any


@dataclass(frozen=True)
class Aggregation:
    """How per-token losses reduce to one number (`core.agg_loss`)."""

    mode: str = "token-mean"
    """`actor.loss_agg_mode`."""
    norm_length: int | None = None
    """The Dr. GRPO constant of `seq-mean-token-sum-norm` (the batch's response width)."""
    denominator: float | Tensor | None = None
    """The mini-batch's count, so that micro-batch losses add up to the mini-batch loss."""


def resolve_policy_loss(mode: str = "vanilla", config: Any = None, where: str = LOSS_KEY) -> PolicyLoss:
    """The loss `mode` names: a table entry, its parameters read from `config`'s flat keys (the actor
    config; None: the dataclass defaults), or a user's function `path/to/file.py:fn` /
    `package.module:fn` taking one `LossInputs` and returning the (B, T) per-token loss (0 at masked
    positions) or a `TokenTerms`. Unknown names and functions that do not load are one line naming
    `where`."""
    spec = pl.POLICY_LOSSES.get(mode)
    if spec is not None:
        fields = {f: getattr(config, key) for f, key in spec.keys} if config is not None else {}
        return PolicyLoss(mode, spec, spec.params(**fields))
    if ":" not in mode:
        raise ValueError(
            f"unknown policy loss mode {mode!r} (or path/to/file.py:function for a loss of your own); "
            f"valid modes: {', '.join(POLICY_LOSS_MODES)}"
        )
    fn = load_function(mode, where, ValueError)
    return PolicyLoss(
        mode,
        pl.LossSpec(partial(_user_terms, fn, mode), low=pl.ANY_LOW, flat_rows_inert=False),
        pl.NoParams(),
    )


def _user_terms(fn: Any, name: str, x: pl.LossInputs, p: Any) -> pl.TokenTerms:
    """A user's loss as a table entry: a bare (B, T) loss gets the token ratio and no clip flags."""
    out = fn(x)
    if isinstance(out, pl.TokenTerms):
        return out
    if not isinstance(out, Tensor) or out.shape != x.mask.shape:
        got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(
            f"{LOSS_KEY}={name}: must return a (B, T) per-token loss shaped like the mask "
            f"{tuple(x.mask.shape)} or a TokenTerms, got {got}"
        )
    ratio = torch.exp(pl.token_log_ratio(x.old_log_prob, x.log_prob, x.mask)).detach()
    flags = torch.zeros_like(x.mask)
    return pl.TokenTerms(masked_fill_zero(out, x.mask), ratio, flags, flags, {})


def _check_clip(loss: PolicyLoss, clip: pl.Clip) -> None:
    if not loss.spec.takes_low(clip.low):
        lowest, highest, inclusive = loss.spec.low
        bound = (
            ">= 0" if highest == float("inf") else f"in [{lowest:g}, {highest:g}{']' if inclusive else ')'}"
        )
        raise ValueError(f"policy_loss: clip_ratio_low must be {bound} for {loss.name}, got {clip.low}")
    if clip.high < 0.0:
        raise ValueError(f"policy_loss: clip_ratio_high must be >= 0, got {clip.high}")
    if clip.dual_c is not None and clip.dual_c <= 1.0:
        raise ValueError(f"policy_loss: clip_ratio_c (dual clip) must be > 1, got {clip.dual_c}")


def policy_loss(
    x: pl.LossInputs,
    loss: PolicyLoss | None = None,
    agg: Aggregation = Aggregation(),
    weights: Tensor | None = None,
    per_token: bool = False,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The policy loss `loss` (default: PPO's clipped surrogate, Schulman et al. 2017, eq. 7, with
    DAPO's asymmetric range and the dual clip of Ye et al. 2020) over one micro-batch, negated for
    minimisation, reduced by `agg`. Each mode's formula is in `algorithms/policy_losses.py`.

    Metrics (detached scalars over valid tokens): ``pg_clipfrac`` - fraction where the mode's clip decides
    the loss (PPO: the clipped term is larger and the dual clip is not active; cispo: r outside the range;
    gmpo: the log-ratio was clipped; sapo: the mean gate attenuation 1 - f'(r)); ``pg_clipfrac_lower`` -
    fraction where the dual clip decides it; ``ppo_kl`` - masked mean of old_log_prob - log_prob; a mode's
    own (clip_cov / kl_cov: ``pg_covfrac``). ``per_token`` adds the (B, T) ratio, loss and clip flags for
    the step inspector.

    ``weights`` (detached, same shape): per-token importance weights of the off-policy correction
    (``algorithms/rollout_corr.py``), multiplied into each token's loss (every mode).
    """
    loss = loss if loss is not None else resolve_policy_loss()
    _check_clip(loss, x.clip)
    check_same_shape(
        {
            "old_log_prob": x.old_log_prob,
            "log_prob": x.log_prob,
            "advantages": x.advantages,
            "response_mask": x.mask,
            "weights": weights,
        },
        "policy_loss",
    )
    mask = x.mask != 0
    adv = masked_fill_zero(x.advantages, mask).to(x.log_prob.dtype)
    terms = loss.spec.fn(dataclasses.replace(x, advantages=adv, mask=mask), loss.params)
    loss_mat = terms.loss_mat
    if weights is not None:  # the engine sampled from pi_rollout, not pi_old: reweight each token
        loss_mat = loss_mat * weights.to(loss_mat.dtype)

    value = agg_loss(loss_mat, mask, agg.mode, norm_length=agg.norm_length, denominator=agg.denominator)
    return value, _metrics(x, mask, terms._replace(loss_mat=loss_mat), per_token)


@torch.no_grad()
def _metrics(x: pl.LossInputs, mask: Tensor, terms: pl.TokenTerms, per_token: bool) -> dict[str, Tensor]:
    """`policy_loss`'s metrics over the valid tokens (`mask`); `terms.loss_mat` is the weighted loss."""
    dtype = x.log_prob.dtype
    metrics = {
        "pg_clipfrac": masked_mean(terms.clip_active.to(dtype), mask),
        "pg_clipfrac_lower": masked_mean(terms.dual_active.to(dtype), mask),
        "ppo_kl": masked_mean(-(x.log_prob - x.old_log_prob), mask).detach(),
    }
    metrics.update({k: masked_mean(v.to(dtype), mask) for k, v in terms.extra.items()})
    if per_token:  # for the step inspector: what the update did to each token
        metrics.update(
            ratio=terms.ratio,
            loss_mat=terms.loss_mat.detach(),
            clip_active=terms.clip_active & mask,
            dual_active=terms.dual_active & mask,
        )
    return metrics


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
