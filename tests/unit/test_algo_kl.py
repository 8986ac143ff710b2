"""KL estimators, controllers, KL-in-reward and the KL loss, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from turnrl.algorithms.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_in_reward,
    kl_loss,
    kl_penalty,
    make_kl_controller,
)

F64 = torch.float64


def t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


# The shared worked example: one response of 6 model tokens.
OLD = [-0.12, -0.08, -0.15, -0.10, -0.05, -0.02]
REF = [-0.15, -0.10, -0.18, -0.12, -0.08, -0.03]


# log_prob, ref_log_prob -> d = lp - ref
LP = [-1.0, -2.0, -0.7]
RF = [-1.5, -1.0, -0.7]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # d = 0.5, -1, 0
        ("k1", [0.5, -1.0, 0.0]),
        ("abs", [0.5, 1.0, 0.0]),
        # d^2 / 2 = 0.125, 0.5, 0
        ("k2", [0.125, 0.5, 0.0]),
        # exp(ref - lp) - (ref - lp) - 1: e^-0.5 + 0.5 - 1 = 0.60653 - 0.5 = 0.10653; e^1 - 1 - 1 = 0.71828
        ("k3", [0.10653, 0.71828, 0.0]),
    ],
)
def test_kl_estimators_by_hand(kind: str, expected: list[float]) -> None:
    assert torch.allclose(kl_penalty(t(LP), t(RF), kind), t(expected), atol=1e-5)


@pytest.mark.parametrize(("alias", "name"), [("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3")])
def test_kl_aliases(alias: str, name: str) -> None:
    assert torch.equal(kl_penalty(t(LP), t(RF), alias), kl_penalty(t(LP), t(RF), name))


def test_k3_is_clamped_to_ten_and_never_overflows() -> None:
    # ref - lp = 30: e^30 - 31 would be ~1e13; clamped to 10. ref - lp = -50: e^-50 + 50 - 1 = 49 -> 10
    out = kl_penalty(torch.tensor([-40.0, -0.0]), torch.tensor([-10.0, -50.0]), "k3")
    assert out.tolist() == [10.0, 10.0]
    assert torch.isfinite(kl_penalty(torch.tensor([-1e4]), torch.tensor([0.0]), "k3")).all()


def test_k3_is_nonnegative_and_close_to_k2_for_nearby_policies() -> None:
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(1000, generator=g, dtype=F64) * 0.01 - 1.0
    ref = lp + torch.randn(1000, generator=g, dtype=F64) * 0.01
    k3 = kl_penalty(lp, ref, "k3")
    assert (k3 >= 0).all()
    # k3 = e^-d + d - 1 = d^2/2 - d^3/6 + ...: relative gap to k2 ~ |d|/3, here |d| < 0.06
    assert torch.allclose(k3, kl_penalty(lp, ref, "k2"), rtol=0.03, atol=0.0)


def test_unknown_kl_estimator_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="'k4'") as info:
        kl_penalty(t(LP), t(RF), "k4")
    for name in KL_ESTIMATORS:
        assert name in str(info.value)


def test_kl_penalty_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="ref_log_prob has shape"):
        kl_penalty(t([[0.0, 0.0]]), t([[0.0]]), "k1")


# ---------------------------------------------------------------- KL in reward


def test_worked_example_kl_in_reward() -> None:
    scores = t([[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]])
    mask = torch.ones_like(scores)
    # k1 per token = old - ref = [0.03, 0.02, 0.03, 0.02, 0.03, 0.01]
    assert torch.allclose(kl_penalty(t([OLD]), t([REF]), "k1"), t([[0.03, 0.02, 0.03, 0.02, 0.03, 0.01]]))
    rewards, metrics = apply_kl_in_reward(scores, t([OLD]), t([REF]), mask, kl_coef=0.01, kind="k1")
    # score - 0.01 * kl: -0.0003, -0.0002, -0.0003, -0.0002, -0.0003, 1 - 0.0001 = 0.9999
    expected = t([[-0.0003, -0.0002, -0.0003, -0.0002, -0.0003, 0.9999]])
    assert torch.allclose(rewards, expected, atol=1e-12)
    # mean KL = 0.14 / 6 = 0.023333
    assert metrics["critic/kl"] == pytest.approx(0.14 / 6)
    assert metrics["critic/kl_coeff"] == 0.01


def test_kl_in_reward_masks_observations_and_averages_per_sequence() -> None:
    nan = float("nan")
    # row 0: kl 0.1, 0.3 on model tokens and an observation token with junk log-probs
    # row 1: kl 0.5 then padding; row 2: no model token at all
    old = t([[0.1, 9.0, 0.3], [0.5, nan, nan], [nan, nan, nan]])
    ref = t([[0.0, 0.0, 0.0], [0.0, nan, nan], [nan, nan, nan]])
    mask = t([[1, 0, 1], [1, 0, 0], [0, 0, 0]])
    scores = t([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    rewards, metrics = apply_kl_in_reward(scores, old, ref, mask, kl_coef=0.1, kind="k1")
    # 1 - 0.1*0.3 = 0.97; 1 - 0.1*0.5 = 0.95; no penalty where mask is 0
    assert torch.allclose(rewards, t([[-0.01, 0.0, 0.97], [0.95, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    # per-sequence means 0.2 and 0.5 -> 0.35 (the token mean would be 0.3; the empty row is skipped)
    assert metrics["critic/kl"] == pytest.approx(0.35)


def test_kl_in_reward_does_not_track_gradients() -> None:
    old = t([[0.1]]).requires_grad_()
    rewards, _ = apply_kl_in_reward(t([[1.0]]), old, t([[0.0]]), t([[1]]), kl_coef=0.1, kind="k3")
    assert not rewards.requires_grad


# ---------------------------------------------------------------- KL loss


def test_kl_loss_worked_example_and_gradient() -> None:
    lp = t([OLD]).requires_grad_()
    loss = kl_loss(lp, t([REF]), torch.ones(1, 6), kind="k1", loss_agg_mode="token-mean")
    # mean of [0.03, 0.02, 0.03, 0.02, 0.03, 0.01] = 0.14 / 6
    assert loss.item() == pytest.approx(0.14 / 6)
    loss.backward()
    # d/dlp of mean(lp - ref) = 1/6 per token
    assert lp.grad is not None
    assert torch.allclose(lp.grad, torch.full((1, 6), 1 / 6, dtype=F64))


def test_kl_loss_k3_gradient_by_hand() -> None:
    lp = t([[-1.0]]).requires_grad_()
    loss = kl_loss(lp, t([[-1.5]]), t([[1]]), kind="low_var_kl", loss_agg_mode="token-mean")
    loss.backward()
    # k3 = e^(ref-lp) - (ref-lp) - 1; d/dlp = -e^(ref-lp) + 1 = 1 - e^-0.5 = 0.39347
    assert lp.grad is not None
    assert lp.grad.item() == pytest.approx(1 - math.exp(-0.5))


def test_kl_loss_with_padding_has_finite_loss_and_gradient() -> None:
    lp = t([[-0.5, float("-inf")], [float("-inf"), float("-inf")]]).requires_grad_()
    ref = t([[-1.0, float("-inf")], [0.0, float("nan")]])
    mask = t([[1, 0], [0, 0]])
    for kind in ("k1", "abs", "k2", "k3"):
        loss = kl_loss(lp, ref, mask, kind=kind, loss_agg_mode="seq-mean-token-mean")
        (grad,) = torch.autograd.grad(loss, lp)
        assert math.isfinite(loss.item()), kind
        assert torch.isfinite(grad).all(), kind
        assert grad[1].abs().sum().item() == 0.0 and grad[0, 1].item() == 0.0


# ---------------------------------------------------------------- controllers


def test_fixed_controller_never_moves() -> None:
    ctl = FixedKLController(0.05)
    ctl.update(current_kl=100.0, n_steps=1000)
    assert ctl.value == 0.05


@pytest.mark.parametrize(
    ("current_kl", "expected"),
    [
        # 9/6 - 1 = 0.5 -> clipped to 0.2; 0.1 * (1 + 0.2 * 256/10000) = 0.1 * 1.00512
        (9.0, 0.100512),
        # 3/6 - 1 = -0.5 -> clipped to -0.2; 0.1 * (1 - 0.00512)
        (3.0, 0.099488),
        # 6.6/6 - 1 = 0.1 (inside the clip); 0.1 * (1 + 0.1 * 0.0256)
        (6.6, 0.100256),
        # on target: unchanged
        (6.0, 0.1),
    ],
)
def test_adaptive_controller_by_hand(current_kl: float, expected: float) -> None:
    ctl = AdaptiveKLController(init_kl_coef=0.1, target_kl=6.0, horizon=10000)
    ctl.update(current_kl=current_kl, n_steps=256)
    assert ctl.value == pytest.approx(expected, rel=1e-12)


def test_adaptive_controller_compounds_over_updates() -> None:
    ctl = make_kl_controller("adaptive", init_kl_coef=0.2, target_kl=0.1, horizon=100)
    for _ in range(2):
        ctl.update(current_kl=1.0, n_steps=50)
    # error clipped to 0.2 both times: 0.2 * 1.1 * 1.1 = 0.242
    assert ctl.value == pytest.approx(0.242)


def test_make_kl_controller_validation() -> None:
    assert isinstance(make_kl_controller("fixed", 0.01), FixedKLController)
    with pytest.raises(ValueError, match="target_kl and horizon"):
        make_kl_controller("adaptive", 0.01, target_kl=0.1)
    with pytest.raises(ValueError, match="fixed, adaptive"):
        make_kl_controller("pid", 0.01)
    with pytest.raises(ValueError, match="target_kl must be > 0"):
        AdaptiveKLController(0.01, 0.0, 10)
    with pytest.raises(ValueError, match="horizon must be > 0"):
        AdaptiveKLController(0.01, 0.1, 0)
