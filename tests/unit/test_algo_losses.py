"""PPO / GSPO policy loss, clipped value loss and entropy, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from tests.support.losses import policy_loss
from turnrl.algorithms.core import LOSS_AGG_MODES, agg_denominator
from turnrl.algorithms.losses import POLICY_LOSS_MODES, entropy_from_logits, value_loss

F64 = torch.float64


def t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def one_token(log_ratio: float, adv: float, **kwargs: object) -> tuple[float, dict[str, float], float]:
    """Loss, metrics and d loss / d log_prob for a single token with the given log-ratio and advantage."""
    lp = t([[log_ratio]]).requires_grad_()
    loss, metrics = policy_loss(
        old_log_prob=t([[0.0]]), log_prob=lp, advantages=t([[adv]]), response_mask=t([[1]]), **kwargs
    )
    loss.backward()
    assert lp.grad is not None
    return loss.item(), {k: v.item() for k, v in metrics.items()}, lp.grad.item()


# ---------------------------------------------------------------- the shared worked example


def test_worked_example_ratio_one() -> None:
    old = t([[-0.12, -0.08, -0.15, -0.10, -0.05, -0.02]])
    adv = t([[0.13, 0.10, 0.08, 0.05, 0.03, 0.05]])
    lp = old.clone().requires_grad_()
    loss, metrics = policy_loss(old_log_prob=old, log_prob=lp, advantages=adv, response_mask=torch.ones(1, 6))
    # ratio 1 everywhere: surrogate = mean(A) = 0.44 / 6 = 0.07333, loss -0.07333
    assert loss.item() == pytest.approx(-0.44 / 6)
    assert metrics["pg_clipfrac"].item() == 0.0
    assert metrics["pg_clipfrac_lower"].item() == 0.0
    assert metrics["ppo_kl"].item() == 0.0
    loss.backward()
    # d(-A_t * ratio_t / 6) / d lp_t = -A_t / 6 at ratio 1
    assert lp.grad is not None
    assert torch.allclose(lp.grad, -adv / 6)


# ---------------------------------------------------------------- PPO clip, by hand


@pytest.mark.parametrize(
    ("log_ratio", "adv", "expected_loss", "clipped", "grad"),
    [
        # ratio e^0.5 = 1.6487 > 1 + 0.2, A = +1 -> clipped objective 1.2, loss -1.2, no gradient
        (0.5, 1.0, -1.2, 1.0, 0.0),
        # ratio e^-0.5 = 0.6065 < 0.8, A = +1 -> min(0.6065, 0.8) = 0.6065 (unclipped), loss -0.6065
        (-0.5, 1.0, -math.exp(-0.5), 0.0, -math.exp(-0.5)),
        # ratio 1.6487, A = -1 -> min(-1.6487, -1.2) = -1.6487 (unclipped; below dual bound 3), loss 1.6487
        (0.5, -1.0, math.exp(0.5), 0.0, math.exp(0.5)),
        # ratio 0.6065, A = -1 -> min(-0.6065, -0.8) = -0.8 (clipped), loss 0.8
        (-0.5, -1.0, 0.8, 1.0, 0.0),
        # inside the range: ratio e^0.1 = 1.10517, A = +2 -> loss -2.21034
        (0.1, 2.0, -2 * math.exp(0.1), 0.0, -2 * math.exp(0.1)),
    ],
)
def test_ppo_clip_by_hand(
    log_ratio: float, adv: float, expected_loss: float, clipped: float, grad: float
) -> None:
    loss, metrics, g = one_token(log_ratio, adv)
    assert loss == pytest.approx(expected_loss)
    assert metrics["pg_clipfrac"] == clipped
    assert metrics["pg_clipfrac_lower"] == 0.0
    # d(-A * e^x)/dx = -A * ratio when unclipped
    assert g == pytest.approx(grad)
    assert metrics["ppo_kl"] == pytest.approx(-log_ratio)


def test_dual_clip_with_negative_advantage() -> None:
    # ratio e^1.5 = 4.4817, A = -1: PPO term max(4.4817, 1.2) = 4.4817 > c * |A| = 3 -> loss capped at 3
    loss, metrics, g = one_token(1.5, -1.0, clip_ratio_c=3.0)
    assert loss == pytest.approx(3.0)
    assert metrics["pg_clipfrac_lower"] == 1.0
    assert metrics["pg_clipfrac"] == 0.0
    assert g == 0.0
    # without dual clip the loss is the raw 4.4817 with gradient 4.4817
    loss, metrics, g = one_token(1.5, -1.0, clip_ratio_c=None)
    assert loss == pytest.approx(math.exp(1.5))
    assert metrics["pg_clipfrac_lower"] == 0.0
    assert g == pytest.approx(math.exp(1.5))
    # A = -2 scales the bound: 2 * 4.4817 = 8.963 > 2 * 3 = 6 -> 6
    assert one_token(1.5, -2.0, clip_ratio_c=3.0)[0] == pytest.approx(6.0)


def test_dual_clip_leaves_positive_advantages_alone() -> None:
    # ratio 4.4817, A = +1 -> ordinary clip: 1.2, loss -1.2; the dual bound is for A < 0 only
    loss, metrics, _ = one_token(1.5, 1.0, clip_ratio_c=3.0)
    assert loss == pytest.approx(-1.2)
    assert metrics["pg_clipfrac"] == 1.0 and metrics["pg_clipfrac_lower"] == 0.0


def test_dual_clip_must_exceed_one() -> None:
    with pytest.raises(ValueError, match="clip_ratio_c"):
        one_token(0.0, 1.0, clip_ratio_c=1.0)


def test_clip_higher_asymmetry() -> None:
    # ratio 1.25 (log 0.22314), A = +1: symmetric 0.2 clips to 1.2; clip-higher 0.28 lets it through
    sym_loss, sym_metrics, _ = one_token(math.log(1.25), 1.0)
    high_loss, high_metrics, high_grad = one_token(math.log(1.25), 1.0, clip_ratio_high=0.28)
    assert sym_loss == pytest.approx(-1.2) and sym_metrics["pg_clipfrac"] == 1.0
    assert high_loss == pytest.approx(-1.25) and high_metrics["pg_clipfrac"] == 0.0
    assert high_grad == pytest.approx(-1.25)
    # ratio e^0.3 = 1.34986 > 1.28 -> clipped at 1.28
    assert one_token(0.3, 1.0, clip_ratio_high=0.28)[0] == pytest.approx(-1.28)
    # the lower bound is unchanged: ratio 0.75, A = -1 -> clipped to 0.8 with either upper bound
    assert one_token(math.log(0.75), -1.0, clip_ratio_high=0.28)[0] == pytest.approx(0.8)
    # and an independent lower bound: clip_ratio_low 0.1 -> 0.9
    assert one_token(math.log(0.75), -1.0, clip_ratio_low=0.1)[0] == pytest.approx(0.9)


def test_clipfrac_counts_valid_tokens_only() -> None:
    # tokens: clipped (e^0.5, A=+1), unclipped (ratio 1), padding with a huge ratio
    loss, metrics = policy_loss(
        old_log_prob=t([[0.0, 0.0, 0.0]]),
        log_prob=t([[0.5, 0.0, 30.0]]),
        advantages=t([[1.0, 1.0, 1.0]]),
        response_mask=t([[1, 1, 0]]),
    )
    # (-1.2 + -1.0) / 2 = -1.1; 1 of 2 valid tokens clipped
    assert loss.item() == pytest.approx(-1.1)
    assert metrics["pg_clipfrac"].item() == pytest.approx(0.5)
    # ppo_kl = mean(old - new) over valid = (-0.5 + 0) / 2
    assert metrics["ppo_kl"].item() == pytest.approx(-0.25)


@pytest.mark.parametrize("mode", POLICY_LOSS_MODES)
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
def test_policy_loss_padding_with_inf_and_nan_stays_finite(mode: str, agg: str) -> None:
    inf, nan = float("inf"), float("nan")
    lp = t([[-0.5, -inf, -inf], [-inf, -inf, -inf]]).requires_grad_()
    loss, metrics = policy_loss(
        old_log_prob=t([[-0.4, -inf, nan]]).expand(2, 3),
        log_prob=lp,
        advantages=t([[1.0, nan, inf], [nan, nan, nan]]),
        response_mask=t([[1, 0, 0], [0, 0, 0]]),
        loss_agg_mode=agg,
        mode=mode,
    )
    loss.backward()
    assert math.isfinite(loss.item())
    assert all(math.isfinite(v.item()) for v in metrics.values())
    assert lp.grad is not None and torch.isfinite(lp.grad).all()
    # only the one valid token gets a gradient: ratio e^-0.1 = 0.90484, A = +1, unclipped
    assert lp.grad[0, 0].item() != 0.0
    assert lp.grad.abs().sum().item() == pytest.approx(abs(lp.grad[0, 0].item()))


def test_policy_loss_gradient_accumulation_matches_full_batch() -> None:
    g = torch.Generator().manual_seed(2)
    old = -torch.rand(4, 6, generator=g, dtype=F64)
    lp = (old + 0.3 * torch.randn(4, 6, generator=g, dtype=F64)).requires_grad_()
    adv = torch.randn(4, 6, generator=g, dtype=F64)
    mask = t([[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0], [1, 1, 0, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    full, _ = policy_loss(old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask)
    (full_grad,) = torch.autograd.grad(full, lp)
    total = agg_denominator(mask, "token-mean")  # 13 tokens over both micro-batches
    acc = torch.zeros_like(lp)
    for rows in (slice(0, 1), slice(1, 4)):
        part, _ = policy_loss(
            old_log_prob=old[rows],
            log_prob=lp[rows],
            advantages=adv[rows],
            response_mask=mask[rows],
            loss_denominator=total,
        )
        acc += torch.autograd.grad(part, lp)[0]
    assert torch.allclose(acc, full_grad)


def test_policy_loss_fully_masked_is_zero() -> None:
    lp = torch.zeros(2, 3, requires_grad=True)
    loss, metrics = policy_loss(
        old_log_prob=torch.zeros(2, 3),
        log_prob=lp,
        advantages=torch.ones(2, 3),
        response_mask=torch.zeros(2, 3),
    )
    assert loss.item() == 0.0
    assert all(v.item() == 0.0 for v in metrics.values())


def test_policy_loss_unknown_mode_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="'grpo'") as info:
        one_token(0.0, 1.0, mode="grpo")
    for name in POLICY_LOSS_MODES:
        assert name in str(info.value)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        one_token(0.0, 1.0, loss_agg_mode="sum")


def test_log_ratio_is_clamped_before_exp() -> None:
    # log-ratio 1000 would overflow to inf; clamped at 20 -> ratio e^20, A = -1, no dual clip -> loss e^20
    loss, _, _ = one_token(1000.0, -1.0, clip_ratio_c=None)
    assert loss == pytest.approx(math.exp(20.0))


# ---------------------------------------------------------------- GSPO


def test_gspo_sequence_ratio_by_hand() -> None:
    old = t([[0.0, 0.0, 0.0, 0.0]])
    # token log-ratios 0.3, -0.1, 0.1 on model tokens (the 5.0 is padding) -> mean 0.1
    lp = t([[0.3, -0.1, 0.1, 5.0]]).requires_grad_()
    mask = t([[1, 1, 1, 0]])
    loss, metrics = policy_loss(
        old_log_prob=old, log_prob=lp, advantages=t([[1.0, 1.0, 1.0, 1.0]]), response_mask=mask, mode="gspo"
    )
    # s = e^0.1 = 1.10517 inside [0.8, 1.2]; every token's objective is A * s -> loss -1.10517
    assert loss.item() == pytest.approx(-math.exp(0.1))
    assert metrics["pg_clipfrac"].item() == 0.0
    loss.backward()
    # each token carries value s and the gradient of its own log-prob: d/dlp_t = -A * s / 3 = -0.36839
    assert lp.grad is not None
    assert torch.allclose(lp.grad, t([[-math.exp(0.1) / 3] * 3 + [0.0]]))
    # vanilla PPO clips per token instead: e^0.3 = 1.34986 -> 1.2, e^-0.1 = 0.90484, e^0.1 = 1.10517
    # -> -(1.2 + 0.90484 + 1.10517) / 3 = -1.07000
    vanilla, _ = policy_loss(old_log_prob=old, log_prob=lp, advantages=torch.ones(1, 4), response_mask=mask)
    assert vanilla.item() == pytest.approx(-(1.2 + math.exp(-0.1) + math.exp(0.1)) / 3)


def test_gspo_clips_whole_sequences() -> None:
    old = torch.zeros(2, 2, dtype=F64)
    # row 0: mean log-ratio 0.1 -> s = 1.10517 > 1 + 0.05 -> clipped, both tokens; row 1: mean 0 -> s = 1
    lp = t([[0.3, -0.1], [0.2, -0.2]])
    adv = t([[1.0, 1.0], [-1.0, -1.0]])
    loss, metrics = policy_loss(
        old_log_prob=old,
        log_prob=lp,
        advantages=adv,
        response_mask=torch.ones(2, 2),
        clip_ratio_low=0.05,
        clip_ratio_high=0.05,
        mode="gspo",
    )
    # token losses: -1.05, -1.05, +1, +1 -> token-mean -0.025
    assert loss.item() == pytest.approx(-0.025)
    assert metrics["pg_clipfrac"].item() == pytest.approx(0.5)


# ---------------------------------------------------------------- value loss


def test_value_loss_clipping_by_hand() -> None:
    vpreds = t([[1.0, 0.6, 1.0]])
    values = t([[0.5, 0.5, 0.5]])
    returns = t([[1.2, 0.0, 0.0]])
    mask = torch.ones(1, 3)
    loss, metrics = value_loss(
        vpreds=vpreds, values=values, returns=returns, response_mask=mask, cliprange_value=0.2
    )
    # tok 0: clipped V = 0.5 + 0.2 = 0.7; (1.0-1.2)^2 = 0.04 vs (0.7-1.2)^2 = 0.25 -> 0.5*0.25 = 0.125 (clip)
    # tok 1: 0.6 within 0.5 +- 0.2; both (0.6-0)^2 = 0.36 -> 0.18
    # tok 2: clipped V = 0.7; (1.0-0)^2 = 1.0 vs 0.49 -> 0.5*1.0 = 0.5 (unclipped is larger)
    # token-mean = (0.125 + 0.18 + 0.5) / 3 = 0.26833
    assert loss.item() == pytest.approx(0.805 / 3)
    assert metrics["vf_clipfrac"].item() == pytest.approx(1 / 3)
    assert metrics["vpred_mean"].item() == pytest.approx(2.6 / 3)
    # no clipping: 0.5 * (0.04 + 0.36 + 1.0) / 3 = 0.23333
    plain, plain_metrics = value_loss(
        vpreds=vpreds, values=values, returns=returns, response_mask=mask, cliprange_value=None
    )
    assert plain.item() == pytest.approx(0.7 / 3)
    assert plain_metrics["vf_clipfrac"].item() == 0.0


def test_value_loss_gradient_and_padding() -> None:
    vpreds = t([[1.0, 0.6, float("nan")]]).requires_grad_()
    loss, _ = value_loss(
        vpreds=vpreds,
        values=t([[0.5, 0.5, float("nan")]]),
        returns=t([[1.2, 0.0, float("inf")]]),
        response_mask=t([[1, 1, 0]]),
        cliprange_value=0.2,
    )
    loss.backward()
    # tok 0 clipped: no gradient through vpred. tok 1: d(0.5*(v-0)^2/2)/dv = v/2 = 0.3. padding: 0
    assert vpreds.grad is not None
    assert torch.allclose(vpreds.grad, t([[0.0, 0.3, 0.0]]))


# ---------------------------------------------------------------- entropy


@pytest.mark.parametrize("vocab", [2, 7, 50_000])
def test_entropy_of_uniform_is_log_v(vocab: int) -> None:
    logits = torch.full((2, 3, vocab), 3.5)
    assert torch.allclose(entropy_from_logits(logits), torch.full((2, 3), math.log(vocab)), atol=1e-5)


def test_entropy_is_stable_for_huge_and_masked_logits() -> None:
    # two equal huge logits: log 2; one finite logit among -inf: 0; no NaN anywhere
    logits = torch.tensor([[1e4, 1e4, -1e4], [0.0, float("-inf"), float("-inf")]])
    logits.requires_grad_()
    out = entropy_from_logits(logits)
    assert torch.allclose(out, torch.tensor([math.log(2), 0.0]), atol=1e-6)
    out.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_entropy_gradient_matches_categorical() -> None:
    logits = torch.randn(3, 6, generator=torch.Generator().manual_seed(1), dtype=F64, requires_grad=True)
    (ours,) = torch.autograd.grad(entropy_from_logits(logits).sum(), logits)
    (ref,) = torch.autograd.grad(torch.distributions.Categorical(logits=logits).entropy().sum(), logits)
    assert torch.allclose(ours, ref)


def test_entropy_matches_categorical_and_upcasts_half_precision() -> None:
    logits = torch.randn(4, 5, 11, generator=torch.Generator().manual_seed(0)) * 3
    expected = torch.distributions.Categorical(logits=logits).entropy()
    assert torch.allclose(entropy_from_logits(logits), expected, atol=1e-5)
    half = entropy_from_logits(logits.bfloat16())
    assert half.dtype == torch.float32
    assert torch.allclose(half, expected, atol=5e-2)


def test_importance_weights_scale_each_tokens_loss() -> None:
    # ratio 1 everywhere (log_prob = old): token losses are -A = [-0.5, -0.25, +1.0]
    # TIS weights [2, 0.5, 1] -> weighted [-1.0, -0.125, 1.0], token-mean = -0.125 / 3 = -0.041667
    # the gradient of token t is -A_t * w_t * ratio_t = [-1.0, -0.125, 1.0] / 3
    old = t([[-1.0, -2.0, -0.5]])
    adv = t([[0.5, 0.25, -1.0]])
    lp = old.clone().requires_grad_()
    w = t([[2.0, 0.5, 1.0]])
    loss, _ = policy_loss(
        old_log_prob=old, log_prob=lp, advantages=adv, response_mask=torch.ones(1, 3), weights=w
    )
    loss.backward()
    assert loss.item() == pytest.approx(-0.125 / 3)
    assert lp.grad is not None
    assert lp.grad.tolist()[0] == pytest.approx([-1.0 / 3, -0.125 / 3, 1.0 / 3])
    # weights of 1 change nothing
    plain, _ = policy_loss(old_log_prob=old, log_prob=old, advantages=adv, response_mask=torch.ones(1, 3))
    ones, _ = policy_loss(
        old_log_prob=old,
        log_prob=old,
        advantages=adv,
        response_mask=torch.ones(1, 3),
        weights=torch.ones(1, 3),
    )
    assert ones.item() == plain.item()
