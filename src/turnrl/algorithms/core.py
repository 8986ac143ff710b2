"""Masked reductions shared by every estimator and loss.

All of turnrl's per-token tensors are ``(B, T)`` response tensors with a ``response_mask`` that is 1 on
tokens the policy generated and 0 on padding and on observation (tool output) tokens. Positions with
mask 0 may hold anything, even NaN or -inf (a padded log-prob), so the helpers select with
``torch.where`` instead of multiplying: ``nan * 0`` is still NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def _as_bool(mask: Tensor) -> Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def masked_fill_zero(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` where ``mask`` is set, exactly 0 elsewhere (NaN/inf at masked positions do not leak)."""
    return torch.where(_as_bool(mask), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over positions where ``mask`` is set, over ``dim`` (all elements when None)."""
    kept = masked_fill_zero(x, mask)
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over the masked positions; 0 (not NaN) where the mask selects nothing."""
    total = masked_sum(x, mask, dim)
    bmask = _as_bool(mask)
    count = bmask.sum() if dim is None else bmask.sum(dim=dim)
    count = count.to(total.dtype)
    # clamp keeps the unused branch finite so the backward pass of torch.where stays NaN-free too
    return torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of ``x`` over all masked positions (a scalar).

    With ``unbiased`` the Bessel factor n/(n-1) is applied. Fewer than two selected elements carry no
    information about spread, so the result is 0 there rather than NaN or a division by zero.
    """
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = _as_bool(mask).sum().to(var.dtype)
        var = torch.where(n > 1, var * n / (n - 1).clamp(min=1), torch.zeros_like(var))
    return var


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Normalise ``x`` to unit variance over the masked positions, as PPO does with advantages.

    Statistics are token-weighted (every valid token counts once, so long responses weigh more), using the
    unbiased variance. With ``shift_mean`` the result has mean 0; without it the mean is kept (only the
    scale changes). Masked positions come back as exactly 0.
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask, unbiased=True)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return masked_fill_zero(whitened, mask)


def _agg_terms(loss_mat: Tensor, mask: Tensor, mode: str, norm_length: int | None) -> tuple[Tensor, Tensor]:
    """(numerator, local denominator) with agg_loss = numerator / denominator."""
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; valid modes: {', '.join(LOSS_AGG_MODES)}")
    bmask = _as_bool(mask)
    if mode == "token-mean":
        return masked_sum(loss_mat, bmask), bmask.sum()
    if loss_mat.dim() != 2:
        raise ValueError(f"agg_loss mode {mode!r} needs a (B, T) loss, got shape {tuple(loss_mat.shape)}")
    if mode == "seq-mean-token-mean":
        return masked_mean(loss_mat, bmask, dim=-1).sum(), bmask.any(dim=-1).sum()
    seq_sum = masked_sum(loss_mat, bmask, dim=-1)
    if mode == "seq-mean-token-sum-norm":
        length = loss_mat.shape[-1] if norm_length is None else norm_length
        if length <= 0:
            raise ValueError(f"agg_loss norm_length must be positive, got {length}")
        seq_sum = seq_sum / length
    return seq_sum.sum(), torch.tensor(loss_mat.shape[0], device=loss_mat.device)


def flat_rows(advantages: Tensor, mask: Tensor) -> Tensor:
    """(B,) bool: the responses whose every counted token has advantage exactly 0 (a GRPO group of
    equal scores). A NaN advantage is not 0, so such a row stays in and its NaN is seen."""
    return ~((advantages != 0) & _as_bool(mask)).any(dim=-1)


def agg_denominator(mask: Tensor, mode: str) -> int:
    """The count ``agg_loss`` divides by for this mask: valid tokens (token-mean), sequences with a valid
    token (seq-mean-token-mean) or sequences (the other modes).

    For gradient accumulation, sum this over the micro-batches (and ranks) of a mini-batch and pass the
    total as ``agg_loss(..., denominator=total)``: the micro-batch losses then add up exactly to the loss
    of the whole mini-batch, instead of a mean of means that over-weighs short micro-batches.
    """
    _, local = _agg_terms(torch.zeros(mask.shape, device=mask.device), mask, mode, None)
    return int(local.item())


def agg_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str,
    norm_length: int | None = None,
    denominator: float | Tensor | None = None,
) -> Tensor:
    """Reduce a ``(B, T)`` per-token loss to a scalar.

    - ``token-mean``: sum over all valid tokens / number of valid tokens (every token weighs the same;
      DAPO's choice, so long responses are not diluted).
    - ``seq-mean-token-sum``: per-sequence sum, averaged over all B sequences (an empty sequence adds 0).
    - ``seq-mean-token-mean``: per-sequence mean, averaged over sequences with at least one valid token
      (the original GRPO formulation; empty rows would otherwise drag the mean to 0).
    - ``seq-mean-token-sum-norm``: per-sequence sum divided by a constant length, averaged over all B
      sequences (Dr. GRPO, Liu et al. 2025: removes the length bias of the per-sequence mean). The constant
      is ``norm_length`` when given (e.g. the configured max response length), else the padded length T.

    ``denominator`` replaces the local count (see ``agg_denominator``) for gradient accumulation.
    Returns 0 (not NaN) when the denominator is 0.
    """
    numerator, local = _agg_terms(loss_mat, mask, mode, norm_length)
    if denominator is None:
        denom = local.to(numerator.dtype)
    else:
        denom = torch.as_tensor(denominator, dtype=numerator.dtype, device=numerator.device)
        if bool(denom < 0):
            raise ValueError(f"agg_loss denominator must be >= 0, got {float(denom)}")
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.where(denom > 0, numerator / safe, torch.zeros_like(numerator))


def check_same_shape(name_to_tensor: dict[str, Tensor | None], where: str) -> None:
    """Raise a one-line ValueError naming the first tensor whose shape differs from the first one given."""
    ref_name, ref_shape = None, None
    for name, tensor in name_to_tensor.items():
        if tensor is None:
            continue
        if ref_shape is None:
            ref_name, ref_shape = name, tensor.shape
        elif tensor.shape != ref_shape:
            raise ValueError(
                f"{where}: {name} has shape {tuple(tensor.shape)} but {ref_name} has {tuple(ref_shape)}"
            )
