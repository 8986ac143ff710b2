"""Outcome estimators (GRPO, Dr. GRPO, RLOO, REINFORCE++-baseline, ReMax) by hand and against loops."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch

from tests.support.advantages import compute_advantage
from turnrl.algorithms.advantages import (
    ADV_ESTIMATORS,
    grpo_outcome_advantage,
    reinforce_plus_plus_baseline_advantage,
    remax_advantage,
    rloo_outcome_advantage,
)

F64 = torch.float64


def t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def outcome_batch(scores: list[float], mask_rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards with each score on the last model token of its row, as the reward stage writes them."""
    mask = t(mask_rows)
    rewards = torch.zeros_like(mask)
    for i, score in enumerate(scores):
        model = mask[i].nonzero()
        if len(model):
            rewards[i, int(model[-1])] = score
    return rewards, mask


# ---------------------------------------------------------------- plain-loop references


def group_of(i: int, index: list) -> list[int]:
    return [j for j, uid in enumerate(index) if uid == index[i]]


def loop_grpo(scores: list[float], index: list, eps: float, norm: bool) -> list[float]:
    out = []
    for i, s in enumerate(scores):
        grp = [scores[j] for j in group_of(i, index)]
        if max(grp) == min(grp):
            out.append(0.0)
            continue
        centred = s - statistics.fmean(grp)
        out.append(centred / (statistics.stdev(grp) + eps) if norm else centred)
    return out


def loop_rloo(scores: list[float], index: list) -> list[float]:
    out = []
    for i, s in enumerate(scores):
        others = [scores[j] for j in group_of(i, index) if j != i]
        out.append(s - sum(others) / len(others))
    return out


def loop_rpp_baseline(
    scores: list[float], index: list, masks: list[list[int]], eps: float
) -> list[list[float]]:
    centred = [s - statistics.fmean([scores[j] for j in group_of(i, index)]) for i, s in enumerate(scores)]
    flat = [c for c, m in zip(centred, masks, strict=True) for k in m if k]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((x - mean) ** 2 for x in flat) / (len(flat) - 1) + eps)
    return [[(c - mean) / std if k else 0.0 for k in m] for c, m in zip(centred, masks, strict=True)]


def broadcast(per_seq: list[float], masks: list[list[int]]) -> torch.Tensor:
    return t([[v if k else 0.0 for k in m] for v, m in zip(per_seq, masks, strict=True)])


def random_groups(seed: int) -> tuple[list[float], list, list[list[int]]]:
    """12 responses of 4 prompts, interleaved uids, 0/1 and fractional scores, padding and obs gaps."""
    rng = np.random.default_rng(seed)
    index = ["p0", "p1", "p2", "p3"] * 3
    scores = [float(x) for x in rng.choice([0.0, 1.0, 0.5], size=12)]
    scores[3] = scores[7] = scores[11] = 1.0  # p3 is a flat group: all samples solved it
    masks = [[int(x) for x in rng.integers(0, 2, size=7)] for _ in range(12)]
    for m in masks:
        m[0] = 1  # every response has at least one model token
    return scores, index, masks


# ---------------------------------------------------------------- GRPO


def test_grpo_by_hand() -> None:
    rewards, mask = outcome_batch([1.0, 0.0, 0.0], [[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    adv, ret = grpo_outcome_advantage(rewards, mask, np.array(["q", "q", "q"]), epsilon=0.0)
    # mean 1/3; deviations 2/3, -1/3, -1/3; unbiased var (4/9 + 1/9 + 1/9)/2 = 1/3, std 0.57735
    # -> 0.66667/0.57735 = 1.15470, -0.33333/0.57735 = -0.57735, broadcast to model tokens only
    expected = t([[1.15470, 1.15470, 0.0], [-0.57735] * 3, [-0.57735, 0.0, 0.0]])
    assert torch.allclose(adv, expected, atol=1e-5)
    assert torch.equal(ret, adv)


def test_dr_grpo_does_not_divide_by_std() -> None:
    rewards, mask = outcome_batch([1.0, 0.0, 0.0], [[1, 1], [1, 1], [1, 1]])
    adv, _ = compute_advantage(
        "grpo", token_level_rewards=rewards, response_mask=mask, index=np.array([7, 7, 7]),
        norm_adv_by_std_in_grpo=False,
    )  # fmt: skip
    # score - mean: 1 - 1/3 = 0.66667, 0 - 1/3 = -0.33333
    assert torch.allclose(adv, t([[2 / 3, 2 / 3], [-1 / 3, -1 / 3], [-1 / 3, -1 / 3]]))


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_zero_variance_group_is_exactly_zero(norm: bool) -> None:
    # 0.1 is not representable: in float64 the mean of three 0.1s is off by one ulp (1.4e-17) and so is
    # the std (1.7e-17); with epsilon=0 their ratio would be a spurious advantage of -0.8
    index = np.array(["a", "a", "a", "b", "b"])
    for dtype in (torch.float64, torch.float32):
        rewards = torch.tensor([[0.1], [0.1], [0.1], [1.0], [0.0]], dtype=dtype)
        mask = torch.ones_like(rewards)
        for eps in (0.0, 1e-6):
            adv, _ = grpo_outcome_advantage(rewards, mask, index, epsilon=eps, norm_adv_by_std=norm)
            assert torch.equal(adv[:3], torch.zeros(3, 1, dtype=dtype))
            assert not torch.isnan(adv).any()
            # the other group is unaffected: +-0.5 / (std 0.70711 + eps) = +-0.70711 (+-0.5 without std)
            expected = 0.70711 if norm else 0.5
            assert adv[3].item() == pytest.approx(expected, abs=1e-5)
            assert adv[4].item() == pytest.approx(-expected, abs=1e-5)


def test_grpo_group_of_one_is_an_error_naming_the_uid() -> None:
    rewards, mask = outcome_batch([1.0, 0.0, 1.0], [[1], [1], [1]])
    with pytest.raises(ValueError, match=r"'lonely'.*single response"):
        grpo_outcome_advantage(rewards, mask, np.array(["g", "g", "lonely"], dtype=object))


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_matches_loop(norm: bool) -> None:
    scores, index, masks = random_groups(seed=1)
    rewards, mask = outcome_batch(scores, masks)
    adv, _ = grpo_outcome_advantage(rewards, mask, np.array(index, dtype=object), norm_adv_by_std=norm)
    expected = broadcast(loop_grpo(scores, index, 1e-6, norm), masks)
    assert torch.allclose(adv, expected)
    assert adv[3].abs().sum().item() == 0.0  # p3 is flat


def test_grpo_score_is_the_sum_over_the_response() -> None:
    # a shaped reward spread over tokens: scores are 0.25 + 0.75 = 1 and 0
    rewards = t([[0.25, 0.0, 0.75], [0.0, 0.0, 0.0]])
    adv, _ = grpo_outcome_advantage(rewards, torch.ones_like(rewards), np.array([0, 0]), epsilon=0.0)
    # +-0.5 / std 0.70711 = +-0.70711
    assert torch.allclose(adv, t([[0.70711] * 3, [-0.70711] * 3]), atol=1e-5)


def test_grpo_accepts_int_str_and_object_uids_alike() -> None:
    scores, _, masks = random_groups(seed=2)
    rewards, mask = outcome_batch(scores, masks)
    codes = [0, 1, 2, 3] * 3
    by_int = grpo_outcome_advantage(rewards, mask, np.array(codes))[0]
    by_str = grpo_outcome_advantage(rewards, mask, np.array([f"uid-{c}" for c in codes]))[0]
    by_obj = grpo_outcome_advantage(rewards, mask, np.array([f"uid-{c}" for c in codes], dtype=object))[0]
    assert torch.equal(by_int, by_str) and torch.equal(by_str, by_obj)


def test_grpo_index_length_mismatch_and_missing_index() -> None:
    rewards, mask = outcome_batch([1.0, 0.0], [[1], [1]])
    with pytest.raises(ValueError, match="index has 3 entries but the batch has 2"):
        grpo_outcome_advantage(rewards, mask, np.array([0, 0, 0]))
    with pytest.raises(ValueError, match="index"):
        compute_advantage("grpo", token_level_rewards=rewards, response_mask=mask)


# ---------------------------------------------------------------- RLOO


def test_rloo_by_hand() -> None:
    rewards, mask = outcome_batch([1.0, 0.0, 0.0, 3.0, 1.0], [[1, 1], [1, 0], [1, 1], [1, 1], [1, 1]])
    adv, _ = rloo_outcome_advantage(rewards, mask, np.array(["a", "a", "a", "b", "b"]))
    # group a: 1 - (0+0)/2 = 1; 0 - (1+0)/2 = -0.5 (twice). group b: 3 - 1 = 2; 1 - 3 = -2
    assert torch.allclose(adv, t([[1.0, 1.0], [-0.5, 0.0], [-0.5, -0.5], [2.0, 2.0], [-2.0, -2.0]]))


def test_rloo_matches_loop_and_rejects_groups_of_one() -> None:
    scores, index, masks = random_groups(seed=4)
    rewards, mask = outcome_batch(scores, masks)
    adv, ret = rloo_outcome_advantage(rewards, mask, np.array(index))
    assert torch.allclose(adv, broadcast(loop_rloo(scores, index), masks))
    assert torch.equal(ret, adv)
    with pytest.raises(ValueError, match="single response"):
        rloo_outcome_advantage(rewards[:2], mask[:2], np.array(index[:2]))


# ---------------------------------------------------------------- REINFORCE++-baseline


def test_reinforce_plus_plus_baseline_by_hand() -> None:
    rewards, mask = outcome_batch([1.0, 0.0, 2.0, 2.0], [[1, 1]] * 4)
    adv, _ = reinforce_plus_plus_baseline_advantage(
        rewards, mask, np.array(["a", "a", "b", "b"]), epsilon=0.0
    )
    # centred by group mean: 0.5, -0.5, 0, 0 -> per token [0.5,0.5,-0.5,-0.5,0,0,0,0]
    # batch mean 0, unbiased var 4*0.25/7 = 1/7, std 0.37796 -> 0.5/0.37796 = 1.32288
    assert torch.allclose(adv, t([[1.32288] * 2, [-1.32288] * 2, [0.0] * 2, [0.0] * 2]), atol=1e-5)


def test_reinforce_plus_plus_baseline_matches_loop() -> None:
    scores, index, masks = random_groups(seed=6)
    rewards, mask = outcome_batch(scores, masks)
    adv, _ = compute_advantage(
        "reinforce_plus_plus_baseline", token_level_rewards=rewards, response_mask=mask,
        index=np.array(index), epsilon=1e-6,
    )  # fmt: skip
    assert torch.allclose(adv, t(loop_rpp_baseline(scores, index, masks, 1e-6)))


# ---------------------------------------------------------------- ReMax


def test_remax_by_hand() -> None:
    rewards, mask = outcome_batch([1.0, 0.0], [[1, 1, 0], [1, 0, 1]])
    adv, ret = remax_advantage(rewards, t([0.25, 0.5]), mask)
    # 1 - 0.25 = 0.75; 0 - 0.5 = -0.5; returns are the raw scores
    assert torch.allclose(adv, t([[0.75, 0.75, 0.0], [-0.5, 0.0, -0.5]]))
    assert torch.allclose(ret, t([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))


def test_remax_matches_loop_and_validates_baselines() -> None:
    scores, _, masks = random_groups(seed=8)
    rewards, mask = outcome_batch(scores, masks)
    baselines = torch.linspace(0.0, 1.0, 12, dtype=F64)
    adv, _ = compute_advantage(
        "remax", token_level_rewards=rewards, response_mask=mask, reward_baselines=baselines
    )
    expected = broadcast([s - b for s, b in zip(scores, baselines.tolist(), strict=True)], masks)
    assert torch.allclose(adv, expected)
    with pytest.raises(ValueError, match="reward_baselines"):
        compute_advantage("remax", token_level_rewards=rewards, response_mask=mask)
    with pytest.raises(ValueError, match=r"reward_baselines must have shape \(12,\)"):
        remax_advantage(rewards, baselines[:3], mask)


# ---------------------------------------------------------------- dispatcher and edge cases


def test_compute_advantage_unknown_estimator_lists_valid_names() -> None:
    rewards, mask = outcome_batch([1.0, 0.0], [[1], [1]])
    with pytest.raises(ValueError, match="'gpro'") as info:
        compute_advantage("gpro", token_level_rewards=rewards, response_mask=mask, index=np.array([0, 0]))
    for name in ADV_ESTIMATORS:
        assert name in str(info.value)


@pytest.mark.parametrize("estimator", ADV_ESTIMATORS)
def test_every_estimator_is_finite_and_zero_off_mask_with_an_empty_row(estimator: str) -> None:
    scores = [1.0, 0.0, 0.5, 0.5]
    masks = [[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    rewards, mask = outcome_batch(scores, masks)
    rewards = rewards.float()
    adv, ret = compute_advantage(
        estimator, token_level_rewards=rewards, response_mask=mask.float(), index=np.array([0, 0, 1, 1]),
        values=torch.full_like(rewards, 0.3), reward_baselines=torch.full((4,), 0.5), gamma=0.9, lam=0.9,
        old_log_probs=torch.full_like(rewards, -1.0), teacher_log_prob=torch.full_like(rewards, -2.0),  # opd
        responses=torch.arange(16).reshape(4, 4),  # gigpo
    )  # fmt: skip
    assert adv.shape == ret.shape == (4, 4)
    assert adv.dtype == torch.float32
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    off = mask == 0
    assert adv[off].abs().sum().item() == 0.0 and ret[off].abs().sum().item() == 0.0
    assert adv[1].abs().sum().item() == 0.0
