"""GAE and REINFORCE++ (the two token-level recursions), by hand and against plain-loop references.

The key property: observation tokens (mask 0 inside a response) are skipped, not treated as the end of
the episode (the defect fixed in verl PR #2337).
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.support.advantages import compute_advantage
from turnrl.algorithms.advantages import (
    gae_advantage,
    reinforce_plus_plus_advantage,
)

F64 = torch.float64


def t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


# ---------------------------------------------------------------- plain-loop references (one row at a time)


def loop_gae(
    rewards: list[float], values: list[float], mask: list[int], gamma: float, lam: float
) -> list[float]:
    """Textbook GAE on the model tokens only: compact, recurse, scatter back."""
    steps = [i for i, m in enumerate(mask) if m]
    adv = [0.0] * len(mask)
    gae, next_value = 0.0, 0.0
    for i in reversed(steps):
        delta = rewards[i] + gamma * next_value - values[i]
        gae = delta + gamma * lam * gae
        adv[i] = gae
        next_value = values[i]
    return adv


def loop_return_to_go(rewards: list[float], mask: list[int], gamma: float) -> list[float]:
    steps = [i for i, m in enumerate(mask) if m]
    out = [0.0] * len(mask)
    running = 0.0
    for i in reversed(steps):
        running = rewards[i] + gamma * running
        out[i] = running
    return out


def loop_whiten(rows: list[list[float]], masks: list[list[int]]) -> list[list[float]]:
    flat = [x for row, m in zip(rows, masks, strict=True) for x, k in zip(row, m, strict=True) if k]
    mean = sum(flat) / len(flat)
    var = sum((x - mean) ** 2 for x in flat) / (len(flat) - 1)
    return [
        [(x - mean) / math.sqrt(var + 1e-8) if k else 0.0 for x, k in zip(row, m, strict=True)]
        for row, m in zip(rows, masks, strict=True)
    ]


def random_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """6 rows of 9 tokens: observation gaps, trailing padding, one row with no model token at all."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(6, 9, generator=g, dtype=F64)
    values = torch.randn(6, 9, generator=g, dtype=F64)
    mask = t(
        [
            [1, 1, 1, 1, 1, 1, 1, 1, 1],
            [1, 1, 0, 0, 0, 1, 1, 0, 0],
            [1, 0, 1, 0, 1, 0, 1, 0, 1],
            [0, 0, 0, 0, 0, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0, 0, 0, 0],
            [0, 0, 1, 1, 0, 1, 1, 1, 0],
        ]
    )
    return rewards, values, mask


# ---------------------------------------------------------------- GAE


def test_gae_by_hand_gamma_lam_one() -> None:
    rewards, values, mask = t([[0.0, 0.0, 1.0]]), t([[0.5, 0.6, 0.7]]), t([[1, 1, 1]])
    adv, ret = gae_advantage(rewards, values, mask, gamma=1.0, lam=1.0, whiten=False)
    # t=2: delta = 1 + 0 - 0.7 = 0.3              A2 = 0.3
    # t=1: delta = 0 + 0.7 - 0.6 = 0.1            A1 = 0.1 + 0.3 = 0.4
    # t=0: delta = 0 + 0.6 - 0.5 = 0.1            A0 = 0.1 + 0.4 = 0.5
    assert torch.allclose(adv, t([[0.5, 0.4, 0.3]]))
    # returns = A + V = 1.0 everywhere (the Monte-Carlo return with gamma = lam = 1)
    assert torch.allclose(ret, t([[1.0, 1.0, 1.0]]))


def test_gae_by_hand_discounted() -> None:
    rewards, values, mask = t([[0.0, 0.0, 1.0]]), t([[0.5, 0.6, 0.7]]), t([[1, 1, 1]])
    adv, ret = gae_advantage(rewards, values, mask, gamma=0.9, lam=0.8, whiten=False)
    # gamma*lam = 0.72
    # t=2: delta = 1 - 0.7 = 0.3                          A2 = 0.3
    # t=1: delta = 0.9*0.7 - 0.6 = 0.03                   A1 = 0.03 + 0.72*0.3 = 0.246
    # t=0: delta = 0.9*0.6 - 0.5 = 0.04                   A0 = 0.04 + 0.72*0.246 = 0.21712
    assert torch.allclose(adv, t([[0.21712, 0.246, 0.3]]))
    # returns = A + V: 0.71712, 0.846, 1.0
    assert torch.allclose(ret, t([[0.71712, 0.846, 1.0]]))


def test_gae_observation_gap_gives_same_advantages_as_gap_removed() -> None:
    # model turn (2 tokens), tool observation (2 tokens, junk values/rewards), model turn (2 tokens), pad
    nan = float("nan")
    gapped_r = t([[0.0, 0.0, 5.0, 5.0, 0.0, 1.0, 0.0]])
    gapped_v = t([[0.2, 0.3, 99.0, nan, 0.4, 0.6, nan]])
    gapped_m = t([[1, 1, 0, 0, 1, 1, 0]])
    plain_r = t([[0.0, 0.0, 0.0, 1.0]])
    plain_v = t([[0.2, 0.3, 0.4, 0.6]])
    plain_m = t([[1, 1, 1, 1]])
    model = [0, 1, 4, 5]
    for whiten in (False, True):
        a_gap, r_gap = gae_advantage(gapped_r, gapped_v, gapped_m, gamma=0.95, lam=0.9, whiten=whiten)
        a_plain, r_plain = gae_advantage(plain_r, plain_v, plain_m, gamma=0.95, lam=0.9, whiten=whiten)
        assert torch.allclose(a_gap[0, model], a_plain[0]), whiten
        assert torch.allclose(r_gap[0, model], r_plain[0]), whiten
        # observation and padding positions get no advantage and no return
        assert a_gap[0, [2, 3, 6]].tolist() == [0.0, 0.0, 0.0]
        assert r_gap[0, [2, 3, 6]].tolist() == [0.0, 0.0, 0.0]


def test_gae_observation_is_not_an_episode_end() -> None:
    # gamma = lam = 1, reward 1 at the end: every model token before the observation still sees it.
    rewards, values = t([[0.0, 0.0, 0.0, 1.0]]), t([[0.0, 0.0, 0.0, 0.0]])
    adv, _ = gae_advantage(rewards, values, t([[1, 0, 0, 1]]), gamma=1.0, lam=1.0, whiten=False)
    # treating the gap as terminal would give A0 = 0 instead of 1
    assert adv.tolist() == [[1.0, 0.0, 0.0, 1.0]]


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (0.5, 0.0)])
def test_gae_vectorised_matches_loop(gamma: float, lam: float) -> None:
    rewards, values, mask = random_batch(seed=3)
    adv, ret = gae_advantage(rewards, values, mask, gamma=gamma, lam=lam, whiten=False)
    rows = [
        loop_gae(r.tolist(), v.tolist(), [int(x) for x in m.tolist()], gamma, lam)
        for r, v, m in zip(rewards, values, mask, strict=True)
    ]
    assert torch.allclose(adv, t(rows))
    assert torch.allclose(ret, (t(rows) + values) * mask)
    # whitened version against the loop's numbers whitened by hand
    whitened, _ = gae_advantage(rewards, values, mask, gamma=gamma, lam=lam)
    masks = [[int(x) for x in m.tolist()] for m in mask]
    assert torch.allclose(whitened, t(loop_whiten(rows, masks)))


def test_gae_whitened_advantages_have_zero_mean_unit_std_over_valid_tokens() -> None:
    rewards, values, mask = random_batch(seed=5)
    adv, _ = gae_advantage(rewards, values, mask, gamma=1.0, lam=0.95)
    valid = adv[mask.bool()]
    assert valid.mean().item() == pytest.approx(0.0, abs=1e-9)
    assert valid.std().item() == pytest.approx(1.0, abs=1e-6)
    assert adv[~mask.bool()].abs().sum().item() == 0.0


def test_gae_fully_masked_row_and_float32_have_no_nan() -> None:
    rewards, values, mask = (x.float() for x in random_batch(seed=7))
    adv, ret = compute_advantage("gae", token_level_rewards=rewards, response_mask=mask, values=values)
    assert adv.dtype == torch.float32
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert adv[3].abs().sum().item() == 0.0 and ret[3].abs().sum().item() == 0.0
    all_masked = torch.zeros_like(mask)
    adv, ret = gae_advantage(rewards, values, all_masked, gamma=1.0, lam=1.0)
    assert adv.abs().sum().item() == 0.0 and ret.abs().sum().item() == 0.0


def test_gae_does_not_track_gradients() -> None:
    values = t([[0.5, 0.6]]).requires_grad_()
    adv, ret = gae_advantage(t([[0.0, 1.0]]), values, t([[1, 1]]), gamma=1.0, lam=1.0)
    assert not adv.requires_grad and not ret.requires_grad


def test_gae_shape_mismatch_names_the_tensor() -> None:
    with pytest.raises(ValueError, match="values has shape"):
        gae_advantage(t([[0.0, 1.0]]), t([[0.5, 0.6, 0.7]]), t([[1, 1]]), gamma=1.0, lam=1.0)


def test_compute_advantage_gae_requires_values() -> None:
    with pytest.raises(ValueError, match="values"):
        compute_advantage("gae", token_level_rewards=t([[1.0]]), response_mask=t([[1]]))


# ---------------------------------------------------------------- REINFORCE++


def test_reinforce_plus_plus_by_hand_with_observation_gap() -> None:
    rewards = t([[0.0, 7.0, 0.0, 1.0]])  # the 7.0 sits on an observation token and must be ignored
    mask = t([[1, 0, 1, 1]])
    adv, ret = reinforce_plus_plus_advantage(rewards, mask, gamma=0.5)
    # return-to-go over model tokens: G3 = 1, G2 = 0 + 0.5*1 = 0.5, G0 = 0 + 0.5*0.5 = 0.25
    assert torch.allclose(ret, t([[0.25, 0.0, 0.5, 1.0]]))
    # whiten [0.25, 0.5, 1]: mean 0.58333, unbiased var (0.11111 + 0.00694 + 0.17361)/2 = 0.14583,
    # std 0.38188 -> deviations [-0.33333, -0.08333, 0.41667] / 0.38188 = [-0.87287, -0.21822, 1.09109]
    assert torch.allclose(adv, t([[-0.87287, 0.0, -0.21822, 1.09109]]), atol=1e-5)


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_plus_plus_matches_loop(gamma: float) -> None:
    rewards, _, mask = random_batch(seed=11)
    adv, ret = compute_advantage(
        "reinforce_plus_plus", token_level_rewards=rewards, response_mask=mask, gamma=gamma
    )
    masks = [[int(x) for x in m.tolist()] for m in mask]
    rows = [loop_return_to_go(r.tolist(), m, gamma) for r, m in zip(rewards, masks, strict=True)]
    assert torch.allclose(ret, t(rows))
    assert torch.allclose(adv, t(loop_whiten(rows, masks)))
    assert torch.isfinite(adv).all()
