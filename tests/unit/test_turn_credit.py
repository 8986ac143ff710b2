"""GiGPO's turn-level credit (turnrl/algorithms/turn_credit.py) against hand-worked numbers."""

import numpy as np
import pytest
import torch

from tests.support.advantages import compute_advantage
from turnrl.algorithms.advantages import grpo_outcome_advantage
from turnrl.algorithms.turn_credit import gigpo_advantage, turn_spans
from turnrl.config import ConfigError, load_config


def test_turn_spans_are_the_runs_of_model_tokens():
    assert turn_spans([1, 1, 0, 0, 1, 1]) == [(0, 2), (4, 6)]
    assert turn_spans([1, 0, 1, 0, 0, 0]) == [(0, 1), (2, 3)]
    assert turn_spans([0, 0]) == []


def episodes():
    # group a: ep0 and ep1 see the same observation (70 71) before their second turn; ep0 scores 1.
    # ep2 answers in one turn. Group b: ep3 and ep4 see different observations (50 / 51).
    mask = torch.tensor(
        [
            [1, 1, 0, 0, 1, 1],
            [1, 1, 0, 0, 1, 0],
            [1, 1, 1, 0, 0, 0],
            [1, 0, 1, 0, 0, 0],
            [1, 0, 1, 0, 0, 0],
        ]
    )
    ids = torch.tensor(
        [
            [5, 6, 70, 71, 8, 9],
            [5, 7, 70, 71, 8, 0],
            [5, 6, 6, 0, 0, 0],
            [1, 50, 2, 0, 0, 0],
            [1, 51, 2, 0, 0, 0],
        ]
    )
    rewards = torch.zeros(5, 6)
    rewards[0, 5] = 1.0
    rewards[3, 2] = 1.0
    return rewards, mask, ids, np.array(["a", "a", "a", "b", "b"], dtype=object)


def test_gigpo_matches_the_hand_worked_example():
    rewards, mask, ids, uid = episodes()
    adv, ret = gigpo_advantage(rewards, mask, ids, uid, step_weight=1.0, gamma=0.95)
    # episode (GRPO), group a: scores 1 0 0, mean 1/3, unbiased std sqrt(1/3) = 0.577350
    #   -> 1.154701, -0.577350, -0.577350; group b: 1 0 -> 0.707107, -0.707107
    # step, group a, first turns (state: the prompt): returns 0.95^1 * 1 = 0.95, 0.95 * 0, 0.95^0 * 0
    #   mean 0.316667, std sqrt((0.633333^2 + 2 * 0.316667^2) / 2) = 0.548483 -> 1.154701, -0.577350, -0.577350
    # step, group a, second turns of ep0 and ep1 (state: 70 71): returns 1, 0 -> 0.707107, -0.707107
    # step, group b: first turns: 0.95, 0 -> 0.707107, -0.707107; second turns: two states of one turn -> 0
    want = torch.tensor(
        [
            [2.309401, 2.309401, 0, 0, 1.861808, 1.861808],  # 1.154701 + 1.154701 | 1.154701 + 0.707107
            [-1.154701, -1.154701, 0, 0, -1.284457, 0],  # -0.577350 - 0.577350 | -0.577350 - 0.707107
            [-1.154701, -1.154701, -1.154701, 0, 0, 0],
            [1.414214, 0, 0.707107, 0, 0, 0],  # 0.707107 + 0.707107 | 0.707107 + 0
            [-1.414214, 0, -0.707107, 0, 0, 0],
        ]
    )
    assert torch.allclose(adv, want, atol=1e-5)
    assert torch.equal(ret, adv)
    assert bool((adv[mask == 0] == 0).all())  # observations and padding: exactly 0


def test_without_the_step_term_it_is_grpo_and_single_turn_doubles_it():
    rewards, mask, ids, uid = episodes()
    grpo, _ = grpo_outcome_advantage(rewards, mask, uid)
    adv, _ = gigpo_advantage(rewards, mask, ids, uid, step_weight=0.0)
    assert torch.allclose(adv, grpo)
    # single-turn responses: every turn's state is the prompt and its return the score itself,
    # so the step term equals the episode term: (1 + omega) x GRPO
    single = torch.tensor([[1, 1, 1, 0]] * 4)
    r = torch.zeros(4, 4)
    r[0, 2], r[2, 2] = 1.0, 0.5
    ids4 = torch.arange(16).reshape(4, 4)
    uid4 = np.array(["p", "p", "p", "p"], dtype=object)
    got, _ = gigpo_advantage(r, single, ids4, uid4, step_weight=0.5)
    assert torch.allclose(got, 1.5 * grpo_outcome_advantage(r, single, uid4)[0], atol=1e-6)


def test_compute_advantage_dispatches_gigpo_and_dr_grpo_drops_the_std():
    rewards, mask, ids, uid = episodes()
    adv, _ = compute_advantage(
        "gigpo", token_level_rewards=rewards, response_mask=mask, index=uid, responses=ids,
        gigpo=(1.0, 0.95), norm_adv_by_std_in_grpo=False,
    )  # fmt: skip
    # ep0: episode 1 - 1/3 = 0.666667, first-turn step 0.95 - 0.316667 = 0.633333, second 1 - 0.5 = 0.5
    assert adv[0, 0].item() == pytest.approx(0.666667 + 0.633333, abs=1e-5)
    assert adv[0, 4].item() == pytest.approx(0.666667 + 0.5, abs=1e-5)
    with pytest.raises(ValueError, match="responses"):
        compute_advantage("gigpo", token_level_rewards=rewards, response_mask=mask, index=uid)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("algorithm.gigpo.step_weight=-1", "algorithm.gigpo.step_weight"),
        ("algorithm.gigpo.gamma=0", "algorithm.gigpo.gamma"),
        ("algorithm.gigpo.gamma=1.5", "algorithm.gigpo.gamma"),
        ("algorithm.gigpo.omega=1", "omega"),
    ],
)
def test_bad_gigpo_settings_are_one_line_naming_the_key(override, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        load_config(None, ["algorithm.adv_estimator=gigpo", override])
    assert "\n" not in str(err.value)


def test_gigpo_needs_a_group():
    with pytest.raises(ConfigError, match=r"rollout\.n"):
        load_config(None, ["algorithm.adv_estimator=gigpo", "rollout.n=1"])
