"""Rewarded sessions as the trainer's batch, worked by hand: one row per recorded sample, the
session's reward on its last model token, a `uid` per group, stale groups set apart whole."""

from __future__ import annotations

import torch

from turnrl.live.rows import group_batch, oldest_version, split_stale
from turnrl.live.store import Session


def session(sid: str, reward: float, samples: list[dict]) -> Session:
    s = Session(sid, "alice", "calc", 0.0, 0.0, state="taken", reward=reward)
    s.record = {"samples": samples, "prompt_key": "P", "calls": len(samples)}
    return s


def sample(prompt: list[int], ids: list[int], mask: list[int], versions: list[int]) -> dict:
    return {"prompt": prompt, "ids": ids, "mask": mask, "log_probs": [-0.5 * m for m in mask],
            "versions": versions, "turns": 1, "truncated": False}  # fmt: skip


def test_a_group_becomes_rows_with_the_reward_on_the_last_model_token():
    a = session("a", 1.0, [sample([1, 2, 3], [7, 8, 9, 10], [1, 1, 0, 1], [0, 0, 0, 1])])
    # b's client rewrote its history: two samples (forks), both with b's reward
    b = session("b", 0.0, [sample([1, 2], [7], [1], [1]), sample([4, 5, 6, 7], [9, 9], [1, 0], [2, 2])])
    c = session("c", 0.5, [sample([3], [5, 6], [1, 1], [2, 2])])
    batch = group_batch([[a, b], [c]], step=7, pad_id=0, response_length=5)
    assert list(batch["uid"]) == ["live-7-0"] * 3 + ["live-7-1"]
    assert list(batch["episode_last"]) == [True, False, True, True]
    want = torch.zeros(4, 5)
    want[0, 3] = 1.0  # a: the last model token is the 4th (the 3rd is an observation)
    want[3, 1] = 0.5  # c: its second token
    assert torch.equal(batch["token_level_scores"], want)  # b's rows: 0.0 wherever it lands
    assert batch["response_mask"][0].tolist() == [1, 1, 0, 1, 0]
    assert batch["responses"][2].tolist() == [9, 9, 0, 0, 0]
    assert batch["input_ids"].shape == (4, 4 + 5)  # the longest prompt, left-padded, then the budget
    assert batch["input_ids"][0, :4].tolist() == [0, 1, 2, 3]
    assert batch["rollout_policy_version"].tolist() == [0, 1, 2, 2]
    assert list(batch["data_source"]) == ["live/calc"] * 4


def test_stale_groups_go_whole():
    old = session("old", 1.0, [sample([1], [5, 6], [1, 1], [3, 5])])  # one token of version 3
    new = session("new", 0.0, [sample([1], [5], [1], [5])])
    obs = session(
        "obs", 0.0, [sample([1], [5, 6], [1, 0], [5, 2])]
    )  # an observation's version does not count
    assert oldest_version(old) == 3 and oldest_version(obs) == 5
    fresh, stale = split_stale([[old, new], [obs, new]], version=6, max_lag=2)
    assert stale == [[old, new]] and fresh == [[obs, new]]
    fresh, stale = split_stale([[old, new]], version=5, max_lag=2)
    assert fresh == [[old, new]] and stale == []
