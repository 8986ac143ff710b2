"""GiGPO's turn-level credit (turnrl/algorithms/turn_credit.py) against hand-worked numbers."""

import numpy as np
import pytest
import torch

from tests.support.advantages import compute_advantage
from turnrl.algorithms.advantages import grpo_outcome_advantage
from turnrl.algorithms.turn_credit import gigpo_advantage, turn_rloo_advantage, turn_spans
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


# -- step rewards and the leave-one-out estimator per turn ---------------------------------------------


def stepped():
    """One group of two episodes; ep0: three turns (states: prompt, 70, 71), score 1; ep1: two turns
    (states: prompt, 70), score 0. Step rewards (already weighted): ep0 0.2 0.4 0, ep1 0.2 0."""
    mask = torch.tensor([[1, 1, 0, 1, 0, 1, 0, 0], [1, 0, 1, 1, 0, 0, 0, 0]])
    ids = torch.tensor([[5, 6, 70, 8, 71, 9, 0, 0], [5, 70, 8, 9, 0, 0, 0, 0]])
    rewards = torch.zeros(2, 8)
    rewards[0, 5] = 1.0
    turn_rewards = np.empty(2, dtype=object)
    turn_rewards[0], turn_rewards[1] = [0.2, 0.4, 0.0], [0.2, 0.0]
    return rewards, mask, ids, np.array(["a", "a"], dtype=object), turn_rewards


def on_turns(rows: list[list[float]], mask: torch.Tensor) -> torch.Tensor:
    """Per-turn values laid on each row's model tokens (0 elsewhere), by the obvious loop."""
    out = torch.zeros(mask.shape, dtype=torch.float64)
    for i, row in enumerate(mask.tolist()):
        for (start, end), value in zip(turn_spans(row), rows[i], strict=True):
            out[i, start:end] = value
    return out


def test_gigpo_with_step_rewards_matches_the_hand_worked_example():
    rewards, mask, ids, uid, turn_rewards = stepped()
    adv, _ = gigpo_advantage(
        rewards, mask, ids, uid, step_weight=1.0, gamma=0.5, norm_by_std=False, turn_rewards=turn_rewards
    )
    # returns, gamma 0.5: ep0 G2 = 0 + 1 = 1, G1 = 0.4 + 0.5 * 1 = 0.9, G0 = 0.2 + 0.5 * 0.9 = 0.65;
    #   ep1 G1 = 0 + 0 = 0, G0 = 0.2 + 0.5 * 0 = 0.2
    # episode (Dr. GRPO): scores 1, 0 -> +0.5, -0.5
    # step: first turns (the prompt): 0.65, 0.2, mean 0.425 -> +0.225, -0.225
    #   after 70: 0.9, 0 -> +0.45, -0.45; after 71: ep0's third turn alone -> 0
    want = on_turns([[0.725, 0.95, 0.5], [-0.725, -0.95]], mask)
    assert torch.allclose(adv.double(), want, atol=1e-6)
    # without step rewards the same group credits less apart: G = 0.25, 0.5, 1 and 0, 0
    #   -> first turns +-0.125, after 70 +-0.25
    plain, _ = gigpo_advantage(rewards, mask, ids, uid, step_weight=1.0, gamma=0.5, norm_by_std=False)
    assert torch.allclose(plain.double(), on_turns([[0.625, 0.75, 0.5], [-0.625, -0.75]], mask), atol=1e-6)
    # with the std: every pair of two is +-1/sqrt(2), each term; the lone state 0
    normed, _ = gigpo_advantage(
        rewards, mask, ids, uid, step_weight=1.0, gamma=0.5, turn_rewards=turn_rewards
    )
    r = 0.5 / (0.5**0.5 + 1e-6)  # 0.225 / (0.318198 + eps) is the same number
    assert torch.allclose(normed.double(), on_turns([[2 * r, 2 * r, r], [-2 * r, -2 * r]], mask), atol=1e-5)
    assert bool((adv[mask == 0] == 0).all()) and bool((normed[mask == 0] == 0).all())


def test_turn_rloo_matches_the_hand_worked_example():
    rewards, mask, _, uid, turn_rewards = stepped()
    adv, ret = turn_rloo_advantage(rewards, mask, uid, step_weight=1.0, gamma=0.5, turn_rewards=turn_rewards)
    # returns as above: ep0 0.65 0.9 1, ep1 0.2 0
    # episode (leave-one-out): 1 - 0 = +1, 0 - 1 = -1
    # ep0: b0 = ep1's G0 = 0.2 -> 0.45; b1 = ep1's G1 = 0 -> 0.9; turn 2: no other episode got there,
    #      b2 = b1 = 0 -> 1.0
    # ep1: b0 = 0.65 -> -0.45; b1 = 0.9 -> -0.9
    want = on_turns([[1.45, 1.9, 2.0], [-1.45, -1.9]], mask)
    assert torch.allclose(adv.double(), want, atol=1e-6)
    assert torch.allclose(ret.double(), on_turns([[0.65, 0.9, 1.0], [0.2, 0.0]], mask), atol=1e-6)
    assert bool((adv[mask == 0] == 0).all()) and bool((ret[mask == 0] == 0).all())
    # step_weight 0 is RLOO; one turn per episode and no step rewards make it (1 + omega) RLOO
    rloo, _ = compute_advantage("rloo", token_level_rewards=rewards, response_mask=mask, index=uid)
    assert torch.allclose(turn_rloo_advantage(rewards, mask, uid, step_weight=0.0)[0], rloo)
    single = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    r = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])
    uid3 = np.array([7, 7, 7], dtype=object)
    got, _ = turn_rloo_advantage(r, single, uid3, step_weight=0.5)
    want = compute_advantage("rloo", token_level_rewards=r, response_mask=single, index=uid3)[0]
    assert torch.allclose(got, 1.5 * want)


def slow_returns(score: float, steps: list[float], gamma: float) -> list[float]:
    """G_k straight from its definition: sum_{j>=k} gamma^(j-k) r_j + gamma^(K-1-k) R."""
    k_turns = len(steps)
    return [
        sum(gamma ** (j - k) * steps[j] for j in range(k, k_turns)) + gamma ** (k_turns - 1 - k) * score
        for k in range(k_turns)
    ]


def slow_turn_rloo(rewards, mask, uid, step_weight, gamma, turn_rewards) -> torch.Tensor:
    """turn_rloo by the obvious loops: for every turn, walk over the other episodes of its group."""
    spans = [turn_spans(row) for row in mask.tolist()]
    scores = [float((rewards[i] * mask[i]).sum()) for i in range(len(spans))]
    g = [slow_returns(scores[i], list(turn_rewards[i]), gamma) for i in range(len(spans))]
    per_turn = []
    for i in range(len(spans)):
        others = [j for j in range(len(spans)) if j != i and uid[j] == uid[i]]
        episode = scores[i] - sum(scores[j] for j in others) / len(others)
        row, base = [], 0.0
        for k in range(len(spans[i])):
            reached = [g[j][k] for j in others if len(spans[j]) > k]
            base = sum(reached) / len(reached) if reached else base  # else the earlier index's
            row.append(episode + step_weight * (g[i][k] - base))
        per_turn.append(row)
    return on_turns(per_turn, mask)


def random_episodes(seed: int, rows: int = 9, width: int = 14):
    """Random multi-turn masks (some rows without a model token), scores and step rewards, 3 groups."""
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(rows, width, generator=gen) < 0.6).long()
    mask[0] = 0  # an empty response
    rewards = torch.zeros(rows, width)
    rewards[:, -1] = torch.rand(rows, generator=gen)  # the score: the sum over model tokens
    turn_rewards = np.empty(rows, dtype=object)
    for i, row in enumerate(mask.tolist()):
        turn_rewards[i] = torch.rand(len(turn_spans(row)), generator=gen).tolist()
    uid = np.array([i % 3 for i in range(rows)], dtype=object)
    return rewards, mask, torch.randint(1, 50, (rows, width), generator=gen), uid, turn_rewards


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_vectorised_paths_match_the_obvious_loops(seed):
    rewards, mask, ids, uid, turn_rewards = random_episodes(seed)
    adv, ret = turn_rloo_advantage(rewards, mask, uid, step_weight=0.7, gamma=0.9, turn_rewards=turn_rewards)
    want = slow_turn_rloo(rewards, mask * 1.0, uid, 0.7, 0.9, turn_rewards)
    assert torch.allclose(adv.double(), want, atol=1e-5)
    scores = (rewards * mask).sum(-1).tolist()
    slow_g = [slow_returns(scores[i], list(turn_rewards[i]), 0.9) for i in range(len(scores))]
    assert torch.allclose(ret.double(), on_turns(slow_g, mask), atol=1e-5)
    # gigpo's per-turn spread and returns against the loop: with step_weight 0 it is per-row GRPO
    g_adv, _ = gigpo_advantage(rewards, mask, ids, uid, 0.0, 0.9, turn_rewards=turn_rewards)
    assert torch.allclose(g_adv, grpo_outcome_advantage(rewards * mask, mask, uid)[0], atol=1e-6)
    for out in (adv, ret, g_adv):
        assert bool((out[mask == 0] == 0).all())


def test_turn_rewards_that_do_not_fit_the_turns_are_one_line():
    rewards, mask, ids, uid, _ = stepped()
    short = np.empty(2, dtype=object)
    short[0], short[1] = [0.2, 0.4], [0.2, 0.0]
    with pytest.raises(ValueError, match=r"turn_rewards\[0\] has 2 values for 3 model turns"):
        turn_rloo_advantage(rewards, mask, uid, turn_rewards=short)
    bad = np.empty(2, dtype=object)
    bad[0], bad[1] = [0.2, float("nan"), 0.0], [0.2, 0.0]
    with pytest.raises(ValueError, match=r"gigpo_advantage: turn_rewards\[0\] holds nan"):
        gigpo_advantage(rewards, mask, ids, uid, turn_rewards=bad)


def test_the_trainer_hands_turn_rewards_to_the_estimator():
    from turnrl.algorithms.advantages import resolve_estimator
    from turnrl.batch import Batch
    from turnrl.trainer.stages import advantages

    rewards, mask, ids, uid, turn_rewards = stepped()
    batch = Batch(
        {"token_level_rewards": rewards, "response_mask": mask.float(), "responses": ids},
        {"uid": uid, "turn_rewards": turn_rewards},
    )
    cfg = load_config(None, ["algorithm.adv_estimator=turn_rloo", "rollout.multi_turn.enable=true"])
    cfg.algorithm.gigpo.gamma = 0.5
    advantages(batch, cfg, resolve_estimator("turn_rloo", cfg.algorithm))
    assert torch.allclose(
        batch["advantages"].double(), on_turns([[1.45, 1.9, 2.0], [-1.45, -1.9]], mask), atol=1e-6
    )


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["rollout.multi_turn.step_rewards=true"], r"'rollout\.multi_turn\.step_rewards=true' .* single-turn"),
        (
            ["rollout.multi_turn.enable=true", "rollout.multi_turn.step_rewards=true"],
            r"'rollout\.multi_turn\.step_rewards=true' but 'algorithm\.adv_estimator=grpo' does not read "
            r"step rewards: set it to gigpo or turn_rloo",
        ),
        (["algorithm.adv_estimator=turn_rloo", "rollout.n=4"], r"'algorithm\.adv_estimator=turn_rloo' .* single-turn"),
        (
            ["algorithm.adv_estimator=gigpo", "rollout.multi_turn.enable=true", "rollout.multi_turn.step_rewards=true",
             "rollout.multi_turn.step_reward_weight=0"],
            r"'rollout\.multi_turn\.step_reward_weight' must be > 0",
        ),
        (
            ["algorithm.adv_estimator=turn_rloo", "rollout.multi_turn.enable=true",
             "rollout.multi_turn.step_reward_weight=inf"],
            r"'rollout\.multi_turn\.step_reward_weight' must be finite",
        ),
        (["algorithm.adv_estimator=turn_rloo", "rollout.multi_turn.enable=true", "algorithm.gigpo.gamma=0"],
         r"'algorithm\.gigpo\.gamma'"),
        (["algorithm.adv_estimator=turn_rloo", "rollout.multi_turn.enable=true", "rollout.n=1"], r"rollout\.n"),
    ],
)  # fmt: skip
def test_bad_turn_credit_settings_are_one_line_naming_the_key(overrides, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        load_config(None, overrides)
    assert "\n" not in str(err.value)


def test_step_rewards_with_a_reader_load():
    for est in ("gigpo", "turn_rloo"):
        cfg = load_config(
            None,
            [
                f"algorithm.adv_estimator={est}",
                "rollout.multi_turn.enable=true",
                "rollout.multi_turn.step_rewards=true",
            ],
        )
        assert cfg.rollout.multi_turn.step_rewards and cfg.rollout.multi_turn.step_reward_weight == 0.1
