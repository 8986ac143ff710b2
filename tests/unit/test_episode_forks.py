"""An agent episode that forked at template drift gives several adjacent rows (`episode_row`,
`episode_last`): the group stage, the advantages, the mini-batches and validation count it once."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from turnrl.algorithms.advantages import (
    AdvantageInputs,
    compute_advantage,
    episode_advantage,
    resolve_estimator,
)
from turnrl.batch import Batch, episode_ends, episode_of_rows, first_episodes, split_episodes
from turnrl.trainer.stages import Scored, episodes_only, group_and_merge
from turnrl.workers.optim import epochs_of_mini_batches

# rows: episode A (rows 0, 1: it forked once), episode B (row 2), episode C (rows 3, 4), episode D (row 5)
LAST = np.array([False, True, True, False, True, True])


def forked(n_rows: int = 6, last: np.ndarray = LAST) -> Batch:
    return Batch({"responses": torch.arange(n_rows)}, {"episode_last": last.copy(), "uid": np.zeros(n_rows)})


def test_episode_bounds_and_owners():
    b = forked()
    assert episode_ends(b).tolist() == [2, 3, 5, 6]
    assert episode_of_rows(b).tolist() == [0, 0, 1, 2, 2, 3]
    assert first_episodes(b, 2)["responses"].tolist() == [0, 1, 2]
    assert first_episodes(b, 9)["responses"].tolist() == list(range(6)) and len(first_episodes(b, 0)) == 0
    plain = Batch({"responses": torch.arange(5)})  # no field: a row is an episode, exactly as before
    assert episode_of_rows(plain).tolist() == list(range(5))
    assert first_episodes(plain, 3)["responses"].tolist() == [0, 1, 2]


def test_mini_batches_never_split_an_episode():
    b = forked()
    assert [m["responses"].tolist() for m in split_episodes(b, 2)] == [[0, 1, 2], [3, 4, 5]]
    assert [m["responses"].tolist() for m in split_episodes(b, 3)] == [[0, 1, 2, 3, 4], [5]]
    plain = Batch({"responses": torch.arange(5)})
    assert [m["responses"].tolist() for m in split_episodes(plain, 2)] == [
        m["responses"].tolist() for m in plain.split(2)
    ]
    # the update loop: 4 episodes in mini-batches of 2 are 2 optimizer steps per epoch, forks or not
    calls: list[int] = []
    epochs_of_mini_batches(b, 2, 2, seed=0, step=lambda m: calls.append(len(m)) or {})
    assert len(calls) == 4 and sum(calls) == 12


def test_grpo_counts_a_forked_episode_once_in_its_group():
    # one group: episode A forked into rows 0-1 (reward 1), episode B is row 2 (reward 0).
    # per episode: scores [1, 0], mean 0.5, std (unbiased) sqrt(0.5) = 0.70711 -> A +0.70711, B -0.70711
    # (rows taken alone: [1, 1, 0], mean 0.667, std 0.57735 -> A +0.57735 twice, B -1.1547)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.float32)
    rewards = torch.zeros(3, 3)
    rewards[0, 1] = rewards[1, 2] = 1.0
    x = AdvantageInputs(rewards, mask, index=np.array([7, 7, 7], dtype=object))
    grpo = resolve_estimator("grpo")
    adv, ret = episode_advantage(grpo, x, np.array([False, True, True]))
    a = 0.5 / (np.sqrt(0.5) + 1e-6)
    assert adv[0].tolist() == pytest.approx([a, a, 0.0], abs=1e-6)
    assert adv[1].tolist() == pytest.approx([a, a, a], abs=1e-6)
    assert adv[2].tolist() == pytest.approx([-a, 0.0, 0.0], abs=1e-6)
    assert torch.equal(ret, adv)
    rows_alone, _ = compute_advantage(grpo, x)
    assert rows_alone[2, 0].item() == pytest.approx(-(2 / 3) / (np.sqrt(1 / 3) + 1e-6), abs=1e-5)


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_plus_plus", "gae"])
def test_without_forks_and_per_token_estimators_are_unchanged(name):
    g = torch.Generator().manual_seed(0)
    mask = (torch.rand(6, 5, generator=g) > 0.2).float()
    rewards = torch.rand(6, 5, generator=g) * mask
    x = AdvantageInputs(
        rewards, mask, index=np.array([0, 0, 0, 1, 1, 1], dtype=object), values=torch.rand(6, 5, generator=g)
    )
    est = resolve_estimator(name)
    want = compute_advantage(est, x)
    got = episode_advantage(est, x, np.ones(6, dtype=bool))
    assert all(torch.equal(w, h) for w, h in zip(want, got, strict=True))
    if not est.spec.per_sequence:  # a per-token estimator takes every fork as its own sequence
        got = episode_advantage(est, x, LAST)
        assert all(torch.equal(w, h) for w, h in zip(want, got, strict=True))


def test_group_stage_gives_each_fork_its_prompt():
    prompts = Batch(
        {"input_ids": torch.tensor([[1, 2], [3, 4]])}, {"index": np.array([10, 11], dtype=object)}
    )
    # n=2: episodes 0, 1 of prompt 10 and 2, 3 of prompt 11; episode 1 forked once
    rollout = Batch(
        {"responses": torch.arange(5).unsqueeze(1)},
        {"episode_row": np.array([0, 1, 1, 2, 3]), "episode_last": np.array([True, False, True, True, True])},
    )
    merged = group_and_merge(prompts, rollout, 2)
    assert merged["uid"].tolist() == [10, 10, 10, 11, 11]
    assert merged["input_ids"][:, 0].tolist() == [1, 1, 1, 3, 3]


def test_validation_keeps_one_row_per_episode():
    batch = forked()
    scores = [1.0, 1.0, 0.0, 0.5, 0.5, 0.25]
    extras = {"acc": [1, 1, 0, 1, 1, 0], "reward/errors": [0]}  # a count stays a count
    scored = episodes_only(Scored(batch, extras, {}, scores, [f"t{i}" for i in range(6)]))
    assert scored.scores == [1.0, 0.0, 0.5, 0.25] and scored.batch["responses"].tolist() == [1, 2, 4, 5]
    assert scored.extras == {"acc": [1, 0, 1, 0], "reward/errors": [0]}
    assert scored.texts == ["t1", "t2", "t4", "t5"]
