"""Rollout correction (TIS / MIS at token, sequence and geometric level) by hand and by noise injection."""

from __future__ import annotations

import math

import pytest
import torch

from turnrl.algorithms.rollout_corr import (
    CORRECTION_LEVELS,
    CORRECTION_MODES,
    Correction,
    rollout_correction,
)

F64 = torch.float64
LN = math.log
METRIC_KEYS = {
    "rollout_corr/abs_diff_mean",
    "rollout_corr/abs_diff_max",
    "rollout_corr/kl_k1",
    "rollout_corr/kl_k3",
    "rollout_corr/weight_mean",
    "rollout_corr/capped_frac",
    "rollout_corr/masked_frac",
    "rollout_corr/seq_log_ratio_std",
    "rollout_corr/seq_log_ratio_max",
    "rollout_corr/seq_log_ratio_min",
}

# The shared worked example: 2 rows, mask [[1,1,0],[1,1,1]], token ratios rho_t = exp(old - rollout)
#   row 0: rho = [4, 0.25]       product 1 -> sequence rho 1, geometric rho 1
#   row 1: rho = [1.5, 3, 4/3]   product 6 -> sequence rho 6, geometric rho 6^(1/3) = 1.81712
# Defaults: tis_cap 2, MIS range [0.5, 2]. No ratio sits on a boundary.
MASK = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
D = [[LN(4.0), LN(0.25), 0.0], [LN(1.5), LN(3.0), LN(4.0 / 3.0)]]
ROLLOUT = [[-1.0, -0.5, 0.0], [-2.0, -3.0, -0.25]]
GEO1 = 6.0 ** (1.0 / 3.0)


def _example() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rollout = torch.tensor(ROLLOUT, dtype=F64)
    old = rollout + torch.tensor(D, dtype=F64)
    return old, rollout, torch.tensor(MASK, dtype=F64)


def _t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


@pytest.mark.parametrize(
    ("mode", "level", "weights", "keep", "capped_frac", "masked_frac", "weight_mean"),
    [
        # none: weight 1 on every model token, whatever the level
        ("none", "token", [[1, 1, 0], [1, 1, 1]], MASK, 0.0, 0.0, 1.0),
        ("none", "sequence", [[1, 1, 0], [1, 1, 1]], MASK, 0.0, 0.0, 1.0),
        ("none", "geometric", [[1, 1, 0], [1, 1, 1]], MASK, 0.0, 0.0, 1.0),
        # tis token: min(rho, 2) = [2, 0.25], [1.5, 2, 1.3333]; rho 4 and 3 capped -> 2/5;
        # mean (2 + 0.25 + 1.5 + 2 + 1.3333) / 5 = 7.0833 / 5 = 1.41667
        ("tis", "token", [[2, 0.25, 0], [1.5, 2, 4 / 3]], MASK, 2 / 5, 0.0, 7.0833333 / 5),
        # tis sequence: row rho 1 -> 1, row rho 6 -> capped 2 on its 3 tokens -> 3/5; mean (1+1+2+2+2)/5 = 1.6
        ("tis", "sequence", [[1, 1, 0], [2, 2, 2]], MASK, 3 / 5, 0.0, 1.6),
        # tis geometric: 1 and 1.81712 < 2, nothing capped; mean (2 + 3 * 1.81712) / 5 = 1.49027
        ("tis", "geometric", [[1, 1, 0], [GEO1] * 3], MASK, 0.0, 0.0, (2 + 3 * GEO1) / 5),
        # mis token: 4, 0.25 and 3 leave [0.5, 2] -> dropped (3/5); kept 1.5 and 1.3333 -> mean 1.41667
        ("mis", "token", [[0, 0, 0], [1.5, 0, 4 / 3]], [[0, 0, 0], [1, 0, 1]], 0.0, 3 / 5, (1.5 + 4 / 3) / 2),
        # mis sequence: row 1's rho 6 > 2 drops the whole row (3/5); row 0 kept with weight 1
        ("mis", "sequence", [[1, 1, 0], [0, 0, 0]], [[1, 1, 0], [0, 0, 0]], 0.0, 3 / 5, 1.0),
        # mis geometric: 1.81712 is in range, so geometric keeps the row the sequence level dropped
        ("mis", "geometric", [[1, 1, 0], [GEO1] * 3], MASK, 0.0, 0.0, (2 + 3 * GEO1) / 5),
    ],
)
def test_worked_example_every_mode_and_level(
    mode: str,
    level: str,
    weights: list,
    keep: list,
    capped_frac: float,
    masked_frac: float,
    weight_mean: float,
) -> None:
    old, rollout, mask = _example()
    out = rollout_correction(old, rollout, mask, mode=mode, level=level)
    assert out.weights.dtype == torch.float32
    assert out.keep.dtype == torch.float32
    assert torch.allclose(out.weights, _t(weights), atol=1e-6)
    assert torch.equal(out.keep, _t(keep))
    m = out.metrics
    assert set(m) == METRIC_KEYS
    assert all(isinstance(v, float) for v in m.values())
    assert m["rollout_corr/capped_frac"] == pytest.approx(capped_frac, abs=1e-12)
    assert m["rollout_corr/masked_frac"] == pytest.approx(masked_frac, abs=1e-12)
    assert m["rollout_corr/weight_mean"] == pytest.approx(weight_mean, abs=1e-6)


@pytest.mark.parametrize("mode", CORRECTION_MODES)
@pytest.mark.parametrize("level", CORRECTION_LEVELS)
def test_worked_example_mismatch_metrics(mode: str, level: str) -> None:
    old, rollout, mask = _example()
    m = rollout_correction(old, rollout, mask, mode=mode, level=level).metrics
    # |d| = ln4, ln4, ln1.5, ln3, ln(4/3); the last three sum to ln 6 -> mean (2 ln4 + ln6) / 5 = 0.912870
    assert m["rollout_corr/abs_diff_mean"] == pytest.approx((2 * LN(4) + LN(6)) / 5, abs=1e-12)
    assert m["rollout_corr/abs_diff_max"] == pytest.approx(LN(4), abs=1e-12)
    # k1 = mean(rollout - old) = -(ln4 - ln4 + ln6) / 5 = -0.358352
    assert m["rollout_corr/kl_k1"] == pytest.approx(-LN(6) / 5, abs=1e-12)
    # k3 = mean(rho - 1 - ln rho) = (sum rho - 5 - sum d) / 5 = (10.083333 - 5 - 1.791759) / 5 = 0.658315
    assert m["rollout_corr/kl_k3"] == pytest.approx((4 + 0.25 + 1.5 + 3 + 4 / 3 - 5 - LN(6)) / 5, abs=1e-12)
    # per-row log ratio sums: 0 and ln 6; population std = ln6 / 2 = 0.895880
    assert m["rollout_corr/seq_log_ratio_std"] == pytest.approx(LN(6) / 2, abs=1e-12)
    assert m["rollout_corr/seq_log_ratio_max"] == pytest.approx(LN(6), abs=1e-12)
    assert m["rollout_corr/seq_log_ratio_min"] == pytest.approx(0.0, abs=1e-12)


def test_mis_bounds_are_inclusive_and_configurable() -> None:
    # rho = [1 (= e^0, exactly), 1.5, 3]; range [1, 1.5]: both ends kept, 3 dropped
    old = torch.tensor([[0.0, LN(1.5), LN(3.0)]], dtype=F64)
    out = rollout_correction(old, torch.zeros_like(old), torch.ones_like(old), "mis", "token", 2.0, 1.0, 1.5)
    assert torch.equal(out.keep, _t([[1, 1, 0]]))
    assert torch.allclose(out.weights, _t([[1.0, 1.5, 0.0]]))
    # tis_cap 1.2: min(rho, 1.2) = [1, 1.2, 1.2]; 1.5 and 3 exceed the cap -> capped 2/3
    out = rollout_correction(old, torch.zeros_like(old), torch.ones_like(old), "tis", "token", tis_cap=1.2)
    assert torch.allclose(out.weights, _t([[1.0, 1.2, 1.2]]))
    assert out.metrics["rollout_corr/capped_frac"] == pytest.approx(2 / 3)


GARBAGE = [float("nan"), float("-inf"), float("inf"), 1e9, -1e9]


@pytest.mark.parametrize("mode", CORRECTION_MODES)
@pytest.mark.parametrize("level", CORRECTION_LEVELS)
@pytest.mark.parametrize("where", ["old", "rollout", "both"])
def test_garbage_at_masked_positions_changes_nothing(mode: str, level: str, where: str) -> None:
    # 2x4 batch: padding at the end of row 0 and an observation token in the middle of row 1
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 1]], dtype=torch.bool)
    old = torch.tensor([[-0.5, -1.2, 0.0, 0.0], [-0.1, 0.0, -2.0, -0.7]])
    rollout = torch.tensor([[-0.9, -1.0, 0.0, 0.0], [-0.3, 0.0, -1.5, -0.4]])
    clean = rollout_correction(old, rollout, mask, mode=mode, level=level)
    for value in GARBAGE:
        dirty_old, dirty_rollout = old.clone(), rollout.clone()
        if where in ("old", "both"):
            dirty_old[~mask] = value
        if where in ("rollout", "both"):
            dirty_rollout[~mask] = -value if where == "both" else value
        dirty = rollout_correction(dirty_old, dirty_rollout, mask, mode=mode, level=level)
        assert torch.equal(dirty.weights, clean.weights), value
        assert torch.equal(dirty.keep, clean.keep), value
        assert dirty.metrics == clean.metrics, value
    assert all(math.isfinite(v) for v in clean.metrics.values())


def test_float_and_bool_masks_agree() -> None:
    old, rollout, mask = _example()
    a = rollout_correction(old, rollout, mask, "mis", "token")
    b = rollout_correction(old, rollout, mask.bool(), "mis", "token")
    assert torch.equal(a.weights, b.weights)
    assert torch.equal(a.keep, b.keep)
    assert a.metrics == b.metrics


@pytest.mark.parametrize("mode", CORRECTION_MODES)
@pytest.mark.parametrize("level", CORRECTION_LEVELS)
def test_no_model_token_gives_zero_metrics_and_weights(mode: str, level: str) -> None:
    old = torch.full((2, 3), float("nan"))
    rollout = torch.full((2, 3), float("-inf"))
    out = rollout_correction(old, rollout, torch.zeros(2, 3), mode=mode, level=level)
    assert torch.equal(out.weights, torch.zeros(2, 3))
    assert torch.equal(out.keep, torch.zeros(2, 3))
    assert out.metrics == dict.fromkeys(METRIC_KEYS, 0.0)


@pytest.mark.parametrize("level", CORRECTION_LEVELS)
def test_empty_row_gets_zero_weight_and_is_left_out_of_row_stats(level: str) -> None:
    # row 1 has no model token; row 0's log ratio ln 1.5 is the only row statistic
    old = torch.tensor([[LN(1.5), 0.0], [5.0, 5.0]], dtype=F64)
    mask = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    out = rollout_correction(old, torch.zeros_like(old), mask, "tis", level)
    assert torch.allclose(out.weights, _t([[1.5, 0.0], [0.0, 0.0]]))
    m = out.metrics
    assert m["rollout_corr/seq_log_ratio_std"] == 0.0
    assert m["rollout_corr/seq_log_ratio_min"] == pytest.approx(LN(1.5))
    assert m["rollout_corr/seq_log_ratio_max"] == pytest.approx(LN(1.5))


@pytest.mark.parametrize("level", CORRECTION_LEVELS)
def test_huge_log_ratio_is_clamped_not_overflowed(level: str) -> None:
    # d = +100 and -100 in float32: exp(100) overflows, exp(20) = 4.85e8 does not
    old = torch.tensor([[100.0, 0.0], [-100.0, 0.0]])
    rollout = torch.zeros_like(old)
    mask = torch.ones_like(old)
    for mode in CORRECTION_MODES:
        out = rollout_correction(old, rollout, mask, mode=mode, level=level)
        assert torch.isfinite(out.weights).all(), mode
        assert all(math.isfinite(v) for v in out.metrics.values()), mode
    wide = rollout_correction(old, rollout, mask, "mis", level, mis_low=0.0, mis_high=1e30)
    assert wide.weights.max().item() == pytest.approx(math.exp(20.0), rel=1e-6)
    # the metrics of |d| report the real gap, unclamped
    assert wide.metrics["rollout_corr/abs_diff_max"] == pytest.approx(100.0)


def test_weights_are_detached_float32_from_bf16_and_grad_inputs() -> None:
    old = torch.tensor([[-0.5, -1.0]], requires_grad=True)
    out = rollout_correction(old, torch.tensor([[-0.6, -1.0]]), torch.ones(1, 2), "tis")
    assert not out.weights.requires_grad
    assert out.weights.dtype == torch.float32
    bf = rollout_correction(
        old.detach().bfloat16(), torch.zeros(1, 2, dtype=torch.bfloat16), torch.ones(1, 2)
    )
    assert bf.weights.dtype == torch.float32
    assert bf.keep.dtype == torch.float32


# ---- noise injection: rollout = old + known Gaussian noise, so rho_t = exp(-noise_t) ----

SIGMA = 0.3
CAP = 2.0


def _noisy_batch(
    sigma: float = SIGMA, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """old log-probs of tokens sampled from random categoricals, rollout = old + noise, random lengths."""
    g = torch.Generator().manual_seed(seed)
    b, t, v = 64, 32, 50
    logp = torch.log_softmax(torch.randn(b, t, v, generator=g, dtype=F64), dim=-1)
    tokens = torch.multinomial(logp.exp().reshape(-1, v), 1, generator=g).reshape(b, t)
    old = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    noise = sigma * torch.randn(b, t, generator=g, dtype=F64)
    rollout = torch.where(mask, old + noise, torch.zeros_like(old))  # the engine pads with 0
    old = torch.where(mask, old, torch.full_like(old, float("-inf")))  # the trainer's padding: garbage
    return old, rollout, mask, noise


def test_noise_tis_token_weights_match_a_python_loop() -> None:
    old, rollout, mask, noise = _noisy_batch()
    out = rollout_correction(old, rollout, mask, "tis", "token", tis_cap=CAP)
    expected = torch.zeros(old.shape, dtype=torch.float32)
    for i in range(old.shape[0]):
        for j in range(old.shape[1]):
            if mask[i, j]:
                expected[i, j] = min(math.exp(old[i, j].item() - rollout[i, j].item()), CAP)
    assert torch.allclose(out.weights, expected, rtol=1e-6, atol=0)
    assert torch.equal(out.keep, mask.float())
    # rho > cap  <=>  -noise > ln cap  <=>  noise < -ln cap, counted from the noise alone
    noise_tokens = noise[mask]
    capped = (noise_tokens < -math.log(CAP)).double().mean().item()
    assert 0 < capped < 0.05  # sigma 0.3 puts ln 2 at ~2.3 sigma: a few percent, not none
    assert out.metrics["rollout_corr/capped_frac"] == pytest.approx(capped, abs=1e-12)
    # k1 = mean(rollout - old) = mean(noise); k3 = mean(e^-noise - 1 + noise)
    assert out.metrics["rollout_corr/kl_k1"] == pytest.approx(noise_tokens.mean().item(), rel=1e-9)
    k3 = (torch.exp(-noise_tokens) - 1 + noise_tokens).mean().item()
    assert out.metrics["rollout_corr/kl_k3"] == pytest.approx(k3, rel=1e-9)
    assert out.metrics["rollout_corr/abs_diff_mean"] == pytest.approx(
        noise_tokens.abs().mean().item(), rel=1e-9
    )
    # per-row sums of noise: the row statistics are those of -sum(noise)
    row_sums = -(noise * mask).sum(dim=-1)
    assert out.metrics["rollout_corr/seq_log_ratio_std"] == pytest.approx(row_sums.std(unbiased=False).item())
    assert out.metrics["rollout_corr/seq_log_ratio_max"] == pytest.approx(row_sums.max().item())


def test_noise_mis_token_keep_matches_the_range_of_the_noise() -> None:
    old, rollout, mask, noise = _noisy_batch()
    out = rollout_correction(old, rollout, mask, "mis", "token", mis_low=0.5, mis_high=2.0)
    rho = torch.exp(-noise)
    # no sample sits within 1e-9 of a bound, so the comparison below cannot flip on rounding
    assert ((rho - 0.5).abs().min() > 1e-9) and ((rho - 2.0).abs().min() > 1e-9)
    in_range = mask & (rho >= 0.5) & (rho <= 2.0)
    assert torch.equal(out.keep, in_range.float())
    dropped = 1 - in_range.sum().item() / mask.sum().item()
    assert 0 < dropped < 0.1
    assert out.metrics["rollout_corr/masked_frac"] == pytest.approx(dropped, abs=1e-12)
    assert torch.allclose(out.weights, torch.where(in_range, rho, 0.0).float(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("level", ["sequence", "geometric"])
def test_noise_mis_sequence_levels_drop_whole_rows(level: str) -> None:
    old, rollout, mask, noise = _noisy_batch()
    row_noise = (noise * mask).sum(dim=-1)
    if level == "geometric":
        row_noise = row_noise / mask.sum(dim=-1)
    row_rho = torch.exp(-row_noise)
    assert ((row_rho - 0.5).abs().min() > 1e-9) and ((row_rho - 2.0).abs().min() > 1e-9)
    row_kept = (row_rho >= 0.5) & (row_rho <= 2.0)
    out = rollout_correction(old, rollout, mask, "mis", level)
    assert torch.equal(out.keep, (mask & row_kept.unsqueeze(1)).float())
    if level == "sequence":
        # the sum over ~16 tokens has std ~1.2: many rows leave [0.5, 2], many stay
        assert 0 < row_kept.sum().item() < len(row_kept)
    else:
        # the mean shrinks the noise, so geometric keeps more rows than sequence does
        assert (
            row_kept.sum().item()
            > (rollout_correction(old, rollout, mask, "mis", "sequence").keep.any(1)).sum()
        )
    expected = torch.where(mask & row_kept.unsqueeze(1), row_rho.unsqueeze(1), 0.0).float()
    assert torch.allclose(out.weights, expected, rtol=1e-6, atol=0)
    dropped_tokens = (mask & ~row_kept.unsqueeze(1)).sum().item() / mask.sum().item()
    assert out.metrics["rollout_corr/masked_frac"] == pytest.approx(dropped_tokens, abs=1e-12)


@pytest.mark.parametrize("mode", CORRECTION_MODES)
@pytest.mark.parametrize("level", CORRECTION_LEVELS)
def test_zero_noise_means_no_correction(mode: str, level: str) -> None:
    old, rollout, mask, _ = _noisy_batch(sigma=0.0)
    out = rollout_correction(old, rollout, mask, mode=mode, level=level)
    assert torch.equal(out.weights, mask.float())
    assert torch.equal(out.keep, mask.float())
    m = out.metrics
    assert m["rollout_corr/capped_frac"] == 0.0
    assert m["rollout_corr/masked_frac"] == 0.0
    assert m["rollout_corr/kl_k1"] == 0.0
    assert m["rollout_corr/kl_k3"] == 0.0
    assert m["rollout_corr/abs_diff_max"] == 0.0
    assert m["rollout_corr/weight_mean"] == 1.0


# ---- errors ----


def test_unknown_mode_and_level_raise_naming_the_valid_ones() -> None:
    old, rollout, mask = _example()
    with pytest.raises(ValueError, match=r"'bogus'.*none, tis, mis"):
        rollout_correction(old, rollout, mask, mode="bogus")
    with pytest.raises(ValueError, match=r"'tokens'.*token, sequence, geometric"):
        rollout_correction(old, rollout, mask, level="tokens")


def test_shape_mismatch_names_both_shapes() -> None:
    old, rollout, mask = _example()
    with pytest.raises(ValueError, match=r"rollout_log_probs.*\(2, 2\).*old_log_probs.*\(2, 3\)"):
        rollout_correction(old, rollout[:, :2], mask)
    with pytest.raises(ValueError, match=r"response_mask.*\(1, 3\).*\(2, 3\)"):
        rollout_correction(old, rollout, mask[:1])
    with pytest.raises(ValueError, match=r"\(B, T\).*\(6,\)"):
        rollout_correction(old.flatten(), rollout.flatten(), mask.flatten())


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"tis_cap": 0.0}, "tis_cap"),
        ({"mis_low": 2.0, "mis_high": 1.0}, "mis_low"),
        ({"mis_low": -1.0}, "mis_low"),
    ],
)
def test_bad_bounds_raise(kwargs: dict, name: str) -> None:
    old, rollout, mask = _example()
    with pytest.raises(ValueError, match=name):
        rollout_correction(old, rollout, mask, **kwargs)


def test_correction_is_a_plain_dataclass() -> None:
    out = rollout_correction(*_example())
    assert isinstance(out, Correction)
    assert out.weights.shape == out.keep.shape == (2, 3)
