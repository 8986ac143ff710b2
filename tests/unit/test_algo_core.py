"""Masked reductions and loss aggregation, checked against hand-worked numbers."""

from __future__ import annotations

import math

import pytest
import torch

from turnrl.algorithms.core import (
    LOSS_AGG_MODES,
    agg_denominator,
    agg_loss,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)

F64 = torch.float64


def t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def test_masked_sum_and_mean_by_hand() -> None:
    x = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    # 1 + 2 + 4 = 7 over 3 tokens
    assert masked_sum(x, mask).item() == pytest.approx(7.0)
    assert masked_mean(x, mask).item() == pytest.approx(7.0 / 3.0)
    # per row: (1+2)/2 = 1.5, 4/1 = 4
    assert torch.allclose(masked_mean(x, mask, dim=-1), t([1.5, 4.0]))
    # per column: (1+4)/2 = 2.5, 2/1 = 2, empty column -> 0
    assert torch.allclose(masked_mean(x, mask, dim=0), t([2.5, 2.0, 0.0]))


def test_masked_mean_of_empty_mask_is_zero_even_with_nan_and_inf_under_the_mask() -> None:
    x = t([[float("nan"), float("-inf")], [1.0, float("inf")]])
    mask = t([[0, 0], [1, 0]])
    assert masked_mean(x, mask).item() == 1.0
    per_row = masked_mean(x, mask, dim=-1)
    assert per_row.tolist() == [0.0, 1.0]
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0


def test_masked_mean_gradient_is_finite_when_masked_positions_hold_nan() -> None:
    x = t([[1.0, float("nan")], [float("nan"), float("nan")]]).requires_grad_()
    mask = t([[1, 0], [0, 0]])
    masked_mean(x, mask, dim=-1).sum().backward()
    # d/dx00 of (x00 / 1) = 1; everything else contributes nothing
    assert x.grad is not None
    assert x.grad.tolist() == [[1.0, 0.0], [0.0, 0.0]]


def test_masked_mean_accepts_bool_mask() -> None:
    x = t([1.0, 2.0, 9.0])
    assert masked_mean(x, torch.tensor([True, True, False])).item() == pytest.approx(1.5)


def test_masked_var_by_hand_matches_torch_var() -> None:
    x = t([1.0, 2.0, 3.0, 100.0])
    mask = t([1, 1, 1, 0])
    # mean 2, squared deviations 1 + 0 + 1 = 2; biased 2/3, unbiased 2/2 = 1
    assert masked_var(x, mask, unbiased=False).item() == pytest.approx(2.0 / 3.0)
    assert masked_var(x, mask).item() == pytest.approx(1.0)
    assert masked_var(x, mask).item() == pytest.approx(torch.var(x[:3]).item())


def test_masked_var_of_one_or_zero_elements_is_zero() -> None:
    x = t([5.0, 7.0])
    assert masked_var(x, t([1, 0])).item() == 0.0
    assert masked_var(x, t([0, 0])).item() == 0.0


def test_masked_whiten_by_hand() -> None:
    x = t([[2.0, 4.0], [6.0, 1000.0]])
    mask = t([[1, 1], [1, 0]])
    # mean 4, unbiased var ((-2)^2 + 0 + 2^2) / 2 = 4, std 2 -> [-1, 0, 1]; masked slot -> 0
    out = masked_whiten(x, mask)
    assert torch.allclose(out, t([[-1.0, 0.0], [1.0, 0.0]]), atol=1e-6)
    # shift_mean=False keeps the mean: (x - 4) / 2 + 4
    kept = masked_whiten(x, mask, shift_mean=False)
    assert torch.allclose(kept, t([[3.0, 4.0], [5.0, 0.0]]), atol=1e-6)


def test_masked_whiten_of_empty_mask_is_zero() -> None:
    out = masked_whiten(t([[1.0, float("nan")]]), t([[0, 0]]))
    assert out.tolist() == [[0.0, 0.0]]


# The 2x3 example for every aggregation mode:
#   loss = [[1, 2, 3],      mask = [[1, 1, 0],
#           [4, 5, 6]]              [1, 0, 0]]
LOSS_2X3 = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
MASK_2X3 = [[1, 1, 0], [1, 0, 0]]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # (1 + 2 + 4) / 3 tokens = 2.3333
        ("token-mean", 7.0 / 3.0),
        # row sums 3 and 4, mean over 2 rows = 3.5
        ("seq-mean-token-sum", 3.5),
        # row means 1.5 and 4, mean = 2.75
        ("seq-mean-token-mean", 2.75),
        # row sums / T=3: 1 and 1.3333, mean = 7/6 = 1.1667
        ("seq-mean-token-sum-norm", 7.0 / 6.0),
    ],
)
def test_agg_loss_modes_by_hand(mode: str, expected: float) -> None:
    assert agg_loss(t(LOSS_2X3), t(MASK_2X3), mode).item() == pytest.approx(expected)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # only row 0 has tokens: (1 + 2) / 2
        ("token-mean", 1.5),
        # row sums 3 and 0, mean over both rows
        ("seq-mean-token-sum", 1.5),
        # the empty row is not a sequence to average over: 1.5
        ("seq-mean-token-mean", 1.5),
        # (3/3 + 0/3) / 2
        ("seq-mean-token-sum-norm", 0.5),
    ],
)
def test_agg_loss_with_an_empty_row_and_nan_under_the_mask(mode: str, expected: float) -> None:
    loss = t([[1.0, 2.0, float("nan")], [float("nan"), 5.0, 6.0]])
    mask = t([[1, 1, 0], [0, 0, 0]])
    assert agg_loss(loss, mask, mode).item() == pytest.approx(expected)


def test_agg_loss_norm_length_overrides_padded_length() -> None:
    # row sums 3 and 4 divided by the configured max length 4 (not T=3): (0.75 + 1) / 2 = 0.875
    assert agg_loss(t(LOSS_2X3), t(MASK_2X3), "seq-mean-token-sum-norm", norm_length=4).item() == 0.875


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss_fully_masked_is_zero_with_zero_gradient(mode: str) -> None:
    loss = t([[float("nan"), 1.0], [2.0, float("-inf")]]).requires_grad_()
    out = agg_loss(loss, torch.zeros(2, 2), mode)
    out.backward()
    assert out.item() == 0.0
    assert loss.grad is not None
    assert torch.equal(loss.grad, torch.zeros(2, 2, dtype=F64))


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss_empty_batch_is_zero(mode: str) -> None:
    assert agg_loss(torch.zeros(0, 4), torch.zeros(0, 4), mode).item() == 0.0


def test_agg_loss_token_mean_weights_tokens_and_seq_mean_weights_sequences() -> None:
    # one long row of loss 1 (4 tokens) and one short row of loss 0 (1 token)
    loss = t([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    mask = t([[1, 1, 1, 1], [1, 0, 0, 0]])
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(4.0 / 5.0)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(0.5)


def test_agg_loss_unknown_mode_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="token-means") as info:
        agg_loss(t(LOSS_2X3), t(MASK_2X3), "token-means")
    for name in LOSS_AGG_MODES:
        assert name in str(info.value)


def test_agg_loss_is_differentiable_by_hand() -> None:
    loss = t(LOSS_2X3).requires_grad_()
    agg_loss(loss, t(MASK_2X3), "seq-mean-token-mean").backward()
    # row 0: each of 2 tokens weighs 1/2 * 1/2 = 0.25; row 1: its one token weighs 1/2
    assert loss.grad is not None
    assert torch.allclose(loss.grad, t([[0.25, 0.25, 0.0], [0.5, 0.0, 0.0]]))
    assert math.isfinite(loss.grad.sum().item())


@pytest.mark.parametrize(
    ("mode", "count"),
    # MASK_2X3 has 3 valid tokens, 2 sequences, 2 non-empty sequences
    [
        ("token-mean", 3),
        ("seq-mean-token-sum", 2),
        ("seq-mean-token-mean", 2),
        ("seq-mean-token-sum-norm", 2),
    ],
)
def test_agg_denominator_by_hand(mode: str, count: int) -> None:
    assert agg_denominator(t(MASK_2X3), mode) == count
    assert agg_denominator(t([[1, 0, 0], [0, 0, 0]]), "seq-mean-token-mean") == 1


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batches_with_global_denominator_add_up_to_the_full_loss(mode: str) -> None:
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(6, 5, generator=g, dtype=F64)
    mask = (torch.rand(6, 5, generator=g) > 0.4).to(F64)
    mask[2] = 0  # an empty row
    full = agg_loss(loss, mask, mode)
    chunks = [slice(0, 1), slice(1, 4), slice(4, 6)]  # uneven micro-batches
    total = sum(agg_denominator(mask[c], mode) for c in chunks)
    assert total == agg_denominator(mask, mode)
    summed = sum(agg_loss(loss[c], mask[c], mode, denominator=total) for c in chunks)
    assert torch.allclose(summed, full)
    # the naive mean of per-micro-batch losses is not the same number (that is why the option exists)
    naive = sum(agg_loss(loss[c], mask[c], mode) for c in chunks) / len(chunks)
    assert not torch.allclose(naive, full)


def test_agg_loss_denominator_zero_and_negative() -> None:
    assert agg_loss(t(LOSS_2X3), torch.zeros(2, 3), "token-mean", denominator=0).item() == 0.0
    with pytest.raises(ValueError, match="denominator must be >= 0"):
        agg_loss(t(LOSS_2X3), t(MASK_2X3), "token-mean", denominator=-1)
