"""The policy-loss modes beyond PPO clip and GSPO (`actor.policy_loss_mode`): CISPO, SAPO, GMPO and the
covariance-based entropy control of Clip-Cov and KL-Cov, each by hand and against a slow obvious version."""

from __future__ import annotations

import math

import pytest
import torch

from tests.support.losses import policy_loss
from turnrl.algorithms.core import agg_loss
from turnrl.algorithms.losses import POLICY_LOSS_MODES
from turnrl.config import ConfigError, load_config

F64 = torch.float64
NEW_MODES = ("cispo", "sapo", "gmpo", "clip_cov", "kl_cov")
E = math.exp


def t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def run(mode: str, old, lp, adv, mask, **kwargs):
    """Loss, metrics (floats) and d loss / d log_prob."""
    lp = lp.clone().requires_grad_()
    loss, metrics = policy_loss(
        old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask, mode=mode, **kwargs
    )
    (grad,) = torch.autograd.grad(loss, lp)
    return loss.item(), {k: v.item() for k, v in metrics.items()}, grad


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- CISPO


def test_cispo_by_hand() -> None:
    # old log-probs -1 everywhere; log-ratios x, so r = e^x and log pi = -1 + x
    x = t([[0.5, -0.5, 0.1], [0.2, 7.0, -0.3]])
    old = torch.full((2, 3), -1.0, dtype=F64)
    adv = t([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    mask = t([[1, 1, 1], [1, 0, 1]])
    loss, m, grad = run("cispo", old, old + x, adv, mask)
    # r = 1.648721, 0.606531, 1.105171 | 1.221403, (masked), 0.740818
    # w = clip(r, 0.8, 1.2) = 1.2, 0.8, 1.105171 | 1.2, 0.8 (detached)
    # loss_t = -w A log pi: -1.2*1*(-0.5) = 0.6, -0.8*1*(-1.5) = 1.2, -1.105171*1*(-0.9) = 0.994654,
    #                       -1.2*(-2)*(-0.8) = -1.92, -0.8*(-2)*(-1.3) = -2.08
    # token-mean over 5: (0.6 + 1.2 + 0.994654 - 1.92 - 2.08) / 5 = -0.241069
    assert loss == pytest.approx((0.6 + 1.2 + 0.9 * E(0.1) - 1.92 - 2.08) / 5)
    # d/dlog pi_t = -w A / 5: every token keeps a gradient, even the four outside [0.8, 1.2]
    assert torch.allclose(grad, t([[-0.24, -0.16, -E(0.1) / 5], [0.48, 0.0, 0.32]]))
    assert m["pg_clipfrac"] == pytest.approx(4 / 5)  # 1.648721, 0.606531, 1.221403, 0.740818 outside
    assert m["pg_clipfrac_lower"] == 0.0  # no dual clip
    # PPO would give the clipped first token (A > 0, r > 1.2) no gradient at all
    _, _, ppo_grad = run("vanilla", old, old + x, adv, mask)
    assert ppo_grad[0, 0] == 0.0 and grad[0, 0] != 0.0


def test_cispo_without_lower_bound() -> None:
    # clip_ratio_low = 1 (the paper: no lower bound): r = e^-0.5 = 0.606531 keeps its own weight
    # loss = -0.606531 * 1 * (-1.5) = 0.909796; gradient -0.606531
    loss, m, grad = run("cispo", t([[-1.0]]), t([[-1.5]]), t([[1.0]]), t([[1]]), clip_ratio_low=1.0)
    assert loss == pytest.approx(1.5 * E(-0.5))
    assert grad.item() == pytest.approx(-E(-0.5))
    assert m["pg_clipfrac"] == 0.0
    with pytest.raises(ValueError, match=r"clip_ratio_low must be in \[0, 1\) for vanilla"):
        run("vanilla", t([[-1.0]]), t([[-1.5]]), t([[1.0]]), t([[1]]), clip_ratio_low=1.0)


# ---------------------------------------------------------------- SAPO


@pytest.mark.parametrize(
    ("x", "adv", "loss", "grad", "attenuation"),
    [
        # r = e^0.5 = 1.648721, A = +1, tau = 1: s = sigmoid(0.648721) = 0.656722, f = 4 s = 2.626889,
        # f'(r) = 4 s (1 - s) = 0.901753, d loss / d log pi = -A f'(r) r = -1.486739, attenuation 0.098247
        (0.5, 1.0, -2.626889, -1.486739, 0.098247),
        # A = -1 -> tau = 1.05: s = sigmoid(1.05 * 0.648721 = 0.681157) = 0.663997, f = 4 s / 1.05 = 2.529512,
        # f' = 4 s (1 - s) = 0.892420, gradient +0.892420 * 1.648721 = 1.471352
        (0.5, -1.0, 2.529512, 1.471352, 0.107580),
        # r = e^-0.5 = 0.606531, A = -1, tau = 1.05: s = sigmoid(-0.413143) = 0.398159, f = 1.516795,
        # f' = 0.958513, gradient 0.958513 * 0.606531 = 0.581368
        (-0.5, -1.0, 1.516795, 0.581368, 0.041487),
        # r = 1, A = +1: s = 0.5, f = 2, f' = 1 -> gradient -1 (vanilla PG's), no attenuation
        (0.0, 1.0, -2.0, -1.0, 0.0),
    ],
)
def test_sapo_by_hand(x: float, adv: float, loss: float, grad: float, attenuation: float) -> None:
    got, m, g = run("sapo", t([[-1.0]]), t([[-1.0 + x]]), t([[adv]]), t([[1]]))
    assert got == pytest.approx(loss, abs=1e-6)
    assert g.item() == pytest.approx(grad, abs=1e-6)
    assert m["pg_clipfrac"] == pytest.approx(attenuation, abs=1e-6)  # the mean gate attenuation 1 - f'(r)
    assert m["pg_clipfrac_lower"] == 0.0


@pytest.mark.parametrize(("tau_pos", "tau_neg"), [(1.0, 1.05), (0.3, 4.0)])
def test_sapo_on_policy_gradient_is_vanilla_pg(tau_pos: float, tau_neg: float) -> None:
    # f'(1) = 4 * 0.5 * 0.5 = 1 for any tau: at r = 1 the gradient is -A / n_valid, as vanilla PPO's
    g = seeded(3)
    old = -torch.rand(3, 4, generator=g, dtype=F64)
    adv = torch.randn(3, 4, generator=g, dtype=F64)
    mask = t([[1, 1, 1, 1], [1, 1, 0, 0], [0, 1, 1, 1]])
    taus = {"sapo_tau_pos": tau_pos, "sapo_tau_neg": tau_neg}
    _, m, sapo_grad = run("sapo", old, old.clone(), adv, mask, **taus)
    _, _, pg_grad = run("vanilla", old, old.clone(), adv, mask)
    assert torch.allclose(sapo_grad, pg_grad)
    assert torch.allclose(sapo_grad, -adv * mask / 9)
    assert m["pg_clipfrac"] == 0.0


# ---------------------------------------------------------------- GMPO


def gmpo_example():
    old = torch.zeros(2, 3, dtype=F64)
    lp = t([[0.5, -0.5, 0.1], [0.2, 7.0, -0.6]])  # = log-ratios
    adv = t([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    mask = t([[1, 1, 1], [1, 0, 1]])
    return old, lp, adv, mask


def test_gmpo_by_hand() -> None:
    old, lp, adv, mask = gmpo_example()
    kw = {"clip_ratio_low": 0.4, "clip_ratio_high": 0.4}  # the paper's range, in log space
    # row 0, A = +1: min(l, 0.4) -> 0.4 (clipped), -0.5 (kept: pessimistic), 0.1; mean 0 -> ratio 1,
    #   loss_0 = -1 * 1 = -1
    # row 1, A = -2: max(l, -0.4) -> 0.2, (masked 7.0), -0.4 (clipped); mean -0.1 -> ratio e^-0.1 = 0.904837,
    #   loss_1 = 2 * 0.904837 = 1.809675
    loss, m, grad = run("gmpo", old, lp, adv, mask, loss_agg_mode="seq-mean-token-mean", **kw)
    # seq-mean-token-mean (the paper's mean over sequences): (-1 + 1.809675) / 2 = 0.404837
    assert loss == pytest.approx((-1 + 2 * E(-0.1)) / 2)
    # d/dl_t = 1/2 * (-A_i ratio_i) / |o_i| on unclipped tokens: row 0 -1/6; row 1 2 * 0.904837 / 2 / 2 = 0.452419
    assert torch.allclose(grad, t([[0.0, -1 / 6, -1 / 6], [E(-0.1) / 2, 0.0, 0.0]]))
    assert m["pg_clipfrac"] == pytest.approx(2 / 5)  # 0.5 in row 0 and -0.6 in row 1
    # token-mean puts loss_i on each of row i's model tokens: (3 * -1 + 2 * 1.809675) / 5 = 0.123870
    loss, _, _ = run("gmpo", old, lp, adv, mask, **kw)
    assert loss == pytest.approx((-3 + 4 * E(-0.1)) / 5)


def test_gmpo_zero_advantage_clips_nothing_and_has_no_gradient() -> None:
    loss, m, grad = run("gmpo", torch.zeros(1, 2, dtype=F64), t([[3.0, -3.0]]), t([[0.0, 0.0]]), t([[1, 1]]))
    assert loss == 0.0 and m["pg_clipfrac"] == 0.0
    assert torch.equal(grad, torch.zeros(1, 2, dtype=F64))


# ---------------------------------------------------------------- Clip-Cov and KL-Cov


def cov_example():
    """Current log-probs lp, log-ratios x (old = lp - x), advantages +2 (row 0) and -2 (row 1)."""
    lp = t([[-0.1, -2.0, -0.5], [-0.3, -3.1, -9.0]])
    x = t([[0.1, 0.0, 0.5], [-0.1, -0.2, 0.0]])
    adv = t([[2.0, 2.0, 2.0], [-2.0, -2.0, -2.0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    # valid means: lp -6.0 / 5 = -1.2, A (6 - 4) / 5 = 0.4
    # cov = (lp + 1.2)(A - 0.4): row 0 1.1*1.6 = 1.76, -0.8*1.6 = -1.28, 0.7*1.6 = 1.12
    #                            row 1 0.9*(-2.4) = -2.16, -1.9*(-2.4) = 4.56
    # PPO token losses (clip 0.2): -2*1.105171 = -2.210342, -2, -2*1.2 = -2.4 (r = 1.648721 clipped),
    #                              2*0.904837 = 1.809675, 2*0.818731 = 1.637462
    return lp - x, lp, adv, mask


def test_clip_cov_by_hand() -> None:
    old, lp, adv, mask = cov_example()
    # candidates: cov in [1, 5] and not already clipped: (0,0) 1.76, (1,1) 4.56; (0,2) 1.12 is PPO-clipped.
    # round(0.4 * 5) = 2 tokens -> both detached
    loss, m, grad = run("clip_cov", old, lp, adv, mask, clip_cov_ratio=0.4, generator=seeded())
    vanilla, vm, vgrad = run("vanilla", old, lp, adv, mask)
    # the value is kept: (-2.210342 - 2 - 2.4 + 1.809675 + 1.637462) / 5 = -0.632641
    assert (
        loss == pytest.approx(vanilla) == pytest.approx((-2 * E(0.1) - 4.4 + 2 * E(-0.1) + 2 * E(-0.2)) / 5)
    )
    # vanilla gradient -A r / 5: -0.442068, -0.4, 0 (clipped) | 0.361935, 0.327492; detached tokens -> 0
    assert torch.allclose(vgrad, t([[-2 * E(0.1) / 5, -0.4, 0.0], [2 * E(-0.1) / 5, 2 * E(-0.2) / 5, 0.0]]))
    assert torch.allclose(grad, t([[0.0, -0.4, 0.0], [2 * E(-0.1) / 5, 0.0, 0.0]]))
    assert m["pg_covfrac"] == pytest.approx(2 / 5)
    assert m["pg_clipfrac"] == vm["pg_clipfrac"] == pytest.approx(1 / 5)
    # the defaults (ratio 2e-4: round(0.001) = 0 tokens) leave this small batch vanilla
    _, m, grad = run("clip_cov", old, lp, adv, mask)
    assert torch.equal(grad, vgrad) and m["pg_covfrac"] == 0.0


def test_clip_cov_draws_at_random_with_the_generator() -> None:
    old, lp, adv, mask = cov_example()
    # round(0.2 * 5) = 1 of the two candidates (0,0), (1,1); its gradient becomes 0
    picks = set()
    for seed in range(16):
        grads = [
            run("clip_cov", old, lp, adv, mask, clip_cov_ratio=0.2, generator=seeded(seed))[2] for _ in "ab"
        ]
        assert torch.equal(grads[0], grads[1])  # same seed, same draw
        zeroed = {(i, j) for i, j in ((0, 0), (1, 1)) if grads[0][i, j] == 0.0}
        assert len(zeroed) == 1
        picks |= zeroed
    assert picks == {(0, 0), (1, 1)}
    # the covariance window picks the candidates: [2, 5] leaves (1,1) alone
    _, m, grad = run("clip_cov", old, lp, adv, mask, clip_cov_ratio=0.4, clip_cov_lb=2.0, generator=seeded())
    assert grad[1, 1] == 0.0 and grad[0, 0] != 0.0 and m["pg_covfrac"] == pytest.approx(1 / 5)


def test_kl_cov_by_hand() -> None:
    old, lp, adv, mask = cov_example()
    # round(0.4 * 5) = 2 tokens of largest cov: (1,1) 4.56 and (0,0) 1.76 get -A r + |log r|:
    #   (0,0): -2 * 1.105171 + 0.1 = -2.110342; (1,1): 2 * 0.818731 + 0.2 = 1.837462
    # others PPO: -2, -2.4, 1.809675 -> (-2.110342 - 2 - 2.4 + 1.809675 + 1.837462) / 5 = -0.572641
    loss, m, grad = run("kl_cov", old, lp, adv, mask, kl_cov_ratio=0.4)
    assert loss == pytest.approx((-2 * E(0.1) + 0.1 - 4.4 + 2 * E(-0.1) + 2 * E(-0.2) + 0.2) / 5)
    # penalised gradient (-A r + sign(log r)) / 5: (0,0) (-2.210342 + 1) / 5 = -0.242068,
    # (1,1) (1.637462 - 1) / 5 = 0.127492; the rest as vanilla
    want = t([[(1 - 2 * E(0.1)) / 5, -0.4, 0.0], [2 * E(-0.1) / 5, (2 * E(-0.2) - 1) / 5, 0.0]])
    assert torch.allclose(grad, want)
    assert m["pg_covfrac"] == pytest.approx(2 / 5)
    assert m["pg_clipfrac"] == pytest.approx(1 / 5)  # (0,2) still clipped by PPO
    # round(0.6 * 5) = 3 adds (0,2) (cov 1.12): its clip is replaced, -2 * 1.648721 + 0.5 = -2.797443, and it
    # gets a gradient again: (-3.297443 + 1) / 5 = -0.459489
    loss, m, grad = run("kl_cov", old, lp, adv, mask, kl_cov_ratio=0.6, kl_cov_coef=1.0)
    assert loss == pytest.approx(
        (-2 * E(0.1) + 0.1 - 2 - 2 * E(0.5) + 0.5 + 2 * E(-0.1) + 2 * E(-0.2) + 0.2) / 5
    )
    assert grad[0, 2].item() == pytest.approx((1 - 2 * E(0.5)) / 5)
    assert m["pg_covfrac"] == pytest.approx(3 / 5) and m["pg_clipfrac"] == 0.0
    # coef 0: the selected tokens are plain unclipped PG
    _, _, grad = run("kl_cov", old, lp, adv, mask, kl_cov_ratio=0.6, kl_cov_coef=0.0)
    assert grad[0, 2].item() == pytest.approx(-2 * E(0.5) / 5)


# ---------------------------------------------------------------- slow obvious versions


def random_inputs(seed: int = 0):
    g = seeded(seed)
    old = -2 * torch.rand(3, 5, generator=g, dtype=F64)
    lp = old + 0.4 * torch.randn(3, 5, generator=g, dtype=F64)
    adv = torch.randn(3, 1, generator=g, dtype=F64).expand(3, 5) + 0.1 * torch.randn(
        3, 5, generator=g, dtype=F64
    )
    mask = t([[1, 1, 1, 1, 1], [1, 1, 0, 1, 0], [1, 0, 0, 0, 0]])
    return old, lp, adv, mask


def valid(mask):
    return [(i, j) for i in range(mask.shape[0]) for j in range(mask.shape[1]) if mask[i, j]]


def naive_ppo(r, a, low=0.2, high=0.2, c=3.0):
    """One token's PPO loss with dual clip, and whether it carries no gradient (clipped or dual)."""
    u, k = -a * r, -a * r.clamp(1 - low, 1 + high)
    loss, stopped = (k, True) if k > u else (u, False)
    if a < 0 and loss > -a * c:
        return -a * c * torch.ones((), dtype=F64), True
    return loss, stopped


def naive_covs(lp, adv, mask):
    cells = valid(mask)
    mean_lp = sum(lp[i, j].item() for i, j in cells) / len(cells)
    mean_a = sum(adv[i, j].item() for i, j in cells) / len(cells)
    return {(i, j): (lp[i, j].item() - mean_lp) * (adv[i, j].item() - mean_a) for i, j in cells}


def naive(mode, old, lp, adv, mask, **kw):
    """Token-mean (seq-mean-token-mean for gmpo) loss, one token at a time."""
    low, high = kw.get("clip_ratio_low", 0.2), kw.get("clip_ratio_high", 0.2)
    cells = valid(mask)
    if mode == "gmpo":
        rows = []
        for i in range(mask.shape[0]):
            js = [j for j in range(mask.shape[1]) if mask[i, j]]
            if not js:
                continue
            a = sum(adv[i, j].item() for j in js) / len(js)
            s = (a > 0) - (a < 0)
            ls = [lp[i, j] - old[i, j] for j in js]
            # sgn(A) * min(sgn(A) * l, sgn(A) * clamp(l, -low, high)), as in the paper's code
            lc = [s * torch.minimum(s * x, s * x.clamp(-low, high)) for x in ls]
            rows.append(-a * torch.exp(sum(lc) / len(lc)))
        return sum(rows) / len(rows)
    covs = naive_covs(lp, adv, mask)
    top = sorted(cells, key=lambda c: -covs[c])[: int(kw.get("kl_cov_ratio", 0) * len(cells) + 0.5)]
    total = 0
    for i, j in cells:
        a, x = adv[i, j].item(), lp[i, j] - old[i, j]
        r = torch.exp(x)
        if mode == "cispo":
            w = min(max(r.item(), 1 - low), 1 + high)  # a plain float: no gradient through the weight
            total = total - w * a * lp[i, j]
        elif mode == "sapo":
            tau = kw["sapo_tau_pos"] if a > 0 else kw["sapo_tau_neg"]
            total = total - a * 4 / tau / (1 + torch.exp(-tau * (r - 1)))
        elif mode == "clip_cov":  # fraction 1: every candidate is detached
            loss, stopped = naive_ppo(r, a, low, high)
            lb, ub = kw["clip_cov_lb"], kw["clip_cov_ub"]
            total = total + (loss.detach() if lb <= covs[i, j] <= ub and not stopped else loss)
        else:  # kl_cov
            total = total + (
                -a * r + kw["kl_cov_coef"] * x.abs() if (i, j) in top else naive_ppo(r, a, low, high)[0]
            )
    return total / len(cells)


SLOW_CASES = {
    "cispo": {"clip_ratio_high": 0.3},
    "sapo": {"sapo_tau_pos": 0.7, "sapo_tau_neg": 1.3},
    "gmpo": {"clip_ratio_low": 0.15, "clip_ratio_high": 0.1, "loss_agg_mode": "seq-mean-token-mean"},
    "clip_cov": {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0, "clip_cov_ub": 0.3},
    "kl_cov": {"kl_cov_ratio": 0.3, "kl_cov_coef": 0.5},
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mode", NEW_MODES)
def test_matches_the_slow_version(mode: str, seed: int) -> None:
    old, lp, adv, mask = random_inputs(seed)
    kw = SLOW_CASES[mode]
    lp_fast = lp.clone().requires_grad_()
    fast, m = policy_loss(
        old_log_prob=old, log_prob=lp_fast, advantages=adv, response_mask=mask, mode=mode, **kw
    )
    lp_slow = lp.clone().requires_grad_()
    opts = {k: v for k, v in kw.items() if k != "loss_agg_mode"}
    slow = naive(mode, old, lp_slow, adv, mask, **opts)
    assert fast.item() == pytest.approx(slow.item(), rel=1e-10)
    (g_fast,) = torch.autograd.grad(fast, lp_fast)
    (g_slow,) = torch.autograd.grad(slow, lp_slow)
    assert torch.allclose(g_fast, g_slow, atol=1e-12)
    if mode in ("cispo", "gmpo"):  # some tokens clipped, some not
        assert 0.0 < m["pg_clipfrac"].item() < 1.0
    if mode in ("clip_cov", "kl_cov"):  # the case does something, and not to every token
        assert 0.0 < m["pg_covfrac"].item() < 1.0


# ---------------------------------------------------------------- shared behaviour of every new mode


OPTIONS = {
    "cispo": {},
    "sapo": {},
    "gmpo": {"clip_ratio_low": 0.4, "clip_ratio_high": 0.4},
    "clip_cov": {"clip_cov_ratio": 0.5, "clip_cov_lb": 0.0, "clip_cov_ub": 10.0},
    "kl_cov": {"kl_cov_ratio": 0.3},
}


def call(mode, old, lp, adv, mask, **kw):
    extra = {"generator": seeded()} if mode == "clip_cov" else {}
    return policy_loss(
        old_log_prob=old,
        log_prob=lp,
        advantages=adv,
        response_mask=mask,
        mode=mode,
        **OPTIONS[mode],
        **extra,
        **kw,
    )


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("mode", NEW_MODES)
def test_observation_tokens_get_exactly_zero_gradient(mode: str, agg: str) -> None:
    old, lp, adv, mask = random_inputs()
    lp = lp.requires_grad_()
    loss, _ = call(mode, old, lp, adv, mask, loss_agg_mode=agg)
    (grad,) = torch.autograd.grad(loss, lp)
    assert torch.all(grad[mask == 0] == 0.0)
    assert torch.any(grad[mask == 1] != 0.0)
    # anything (NaN, -inf, huge) at masked positions changes nothing
    poisoned = [x.clone() for x in (old, lp.detach(), adv)]
    for x, v in zip(poisoned, (float("nan"), -float("inf"), 1e30), strict=True):
        x[mask == 0] = v
    lp2 = poisoned[1].requires_grad_()
    loss2, _ = call(mode, poisoned[0], lp2, poisoned[2], mask, loss_agg_mode=agg)
    (grad2,) = torch.autograd.grad(loss2, lp2)
    assert loss2.item() == pytest.approx(loss.item(), rel=1e-12)
    assert torch.equal(grad2, grad)


@pytest.mark.parametrize("mode", NEW_MODES)
def test_weights_multiply_each_token_loss(mode: str) -> None:
    old, lp, adv, mask = random_inputs()
    # gmpo's tokens share one sequence loss: per-row weights keep its gradient a plain rescale too
    rows = mode == "gmpo"
    w = (0.5 + torch.rand(3, 1 if rows else 5, generator=seeded(9), dtype=F64)).expand(3, 5)
    lp1, lp2 = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    plain, pm = call(mode, old, lp1, adv, mask, per_token=True)
    weighted, wm = call(mode, old, lp2, adv, mask, per_token=True, weights=w)
    assert torch.allclose(wm["loss_mat"], pm["loss_mat"] * w)
    assert weighted.item() == pytest.approx(agg_loss(pm["loss_mat"] * w, mask, "token-mean").item())
    (g1,) = torch.autograd.grad(plain, lp1)
    (g2,) = torch.autograd.grad(weighted, lp2)
    assert torch.allclose(g2, g1 * w)
    for key in ("ratio", "clip_active", "dual_active"):  # what the step inspector reads
        assert wm[key].shape == mask.shape


@pytest.mark.parametrize("mode", NEW_MODES)
def test_all_masked_row_and_all_masked_batch(mode: str) -> None:
    old, lp, adv, mask = random_inputs()
    mask = mask.clone()
    mask[1] = 0
    for agg in ("token-mean", "seq-mean-token-mean"):
        lp_all = lp.clone().requires_grad_()
        loss, _ = call(mode, old, lp_all, adv, mask, loss_agg_mode=agg)
        (grad,) = torch.autograd.grad(loss, lp_all)
        assert torch.all(grad[1] == 0.0) and torch.isfinite(grad).all()
        # the same as the batch without that row
        keep = [0, 2]
        alone, _ = call(mode, old[keep], lp[keep], adv[keep], mask[keep], loss_agg_mode=agg)
        assert loss.item() == pytest.approx(alone.item(), rel=1e-12)
    zero = torch.zeros(2, 3, dtype=F64, requires_grad=True)
    loss, metrics = call(
        mode, torch.zeros(2, 3, dtype=F64), zero, torch.ones(2, 3, dtype=F64), torch.zeros(2, 3)
    )
    assert loss.item() == 0.0 and all(v.item() == 0.0 for v in metrics.values())


@pytest.mark.parametrize("adv", [1.0, -1.0])
@pytest.mark.parametrize("mode", NEW_MODES)
def test_huge_log_ratio_stays_finite(mode: str, adv: float) -> None:
    for x in (1000.0, -1000.0):
        lp = t([[x - 1.0, -1.0]]).requires_grad_()
        loss, metrics = call(mode, t([[-1.0, -1.0]]), lp, t([[adv, adv]]), t([[1, 1]]))
        (grad,) = torch.autograd.grad(loss, lp)
        assert math.isfinite(loss.item()) and torch.isfinite(grad).all()
        assert all(math.isfinite(v.item()) for v in metrics.values())


def test_unknown_mode_lists_every_mode() -> None:
    with pytest.raises(ValueError, match="'bogus'") as info:
        run("bogus", t([[0.0]]), t([[0.0]]), t([[1.0]]), t([[1]]))
    assert str(info.value).count("\n") == 0
    assert str(info.value).endswith("valid modes: " + ", ".join(POLICY_LOSS_MODES))
    assert set(NEW_MODES) <= set(POLICY_LOSS_MODES)


# ---------------------------------------------------------------- config


def test_config_defaults_and_checks() -> None:
    actor = load_config(None, ["actor.policy_loss_mode=kl_cov"]).actor
    assert (actor.sapo_tau_pos, actor.sapo_tau_neg) == (1.0, 1.05)
    assert (actor.clip_cov_ratio, actor.clip_cov_lb, actor.clip_cov_ub) == (2e-4, 1.0, 5.0)
    assert (actor.kl_cov_ratio, actor.kl_cov_coef) == (2e-3, 1.0)
    load_config(None, ["actor.policy_loss_mode=cispo", "actor.clip_ratio_low=1.0"])
    load_config(None, ["actor.policy_loss_mode=gmpo", "actor.clip_ratio_low=1.5"])
    bad = {
        "actor.sapo_tau_neg=0": "'actor.sapo_tau_neg' must be > 0",
        "actor.kl_cov_ratio=1.5": r"'actor.kl_cov_ratio' must be in \[0, 1\]",
        "actor.clip_ratio_low=1.0": "'actor.clip_ratio_low'=1.0 leaves no ratio",
    }
    for override, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            load_config(None, [override])
    with pytest.raises(ConfigError, match=r"'actor\.clip_cov_lb'=6\.0 is above 'actor\.clip_cov_ub'=5\.0"):
        load_config(None, ["actor.policy_loss_mode=clip_cov", "actor.clip_cov_lb=6"])
