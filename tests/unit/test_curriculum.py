"""`data.sampler=curriculum` (turnrl.data.curriculum): the skip rule by hand, then the loader: full
batches, skipping, revisiting, seeded, resumable; and its config."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from turnrl.batch import Batch
from turnrl.config import ConfigError, load_config
from turnrl.config.schema import CurriculumConfig, DataConfig
from turnrl.data.curriculum import (
    RIGHT,
    VARIED,
    WRONG,
    CurriculumLoader,
    GroupWatch,
    group_outcomes,
    make_loader,
    should_skip,
)
from turnrl.data.dataset import DataError, Example
from turnrl.data.loader import StatefulLoader


def examples(n: int) -> list[Example]:
    return [Example([1, 2 + i], "t", str(i), {}, i, [{"role": "user", "content": str(i)}]) for i in range(n)]


def loader(n: int = 10, bs: int = 3, seed: int = 7, **cfg: float) -> CurriculumLoader:
    return CurriculumLoader(examples(n), bs, 0, seed, CurriculumConfig(**cfg))  # type: ignore[arg-type]


def indexes(batch: Batch) -> list[int]:
    return [int(i) for i in batch["index"]]


def outcome(index: int) -> list[float]:
    """A fixed group of 4 scores per prompt: multiples of 3 all right, 1 mod 3 all wrong (with format
    credit: all 0.1), the rest varied."""
    return [[1.0] * 4, [0.1] * 4, [0.0, 1.0, 0.1, 1.0]][index % 3]


def feed(ld: CurriculumLoader, batch: Batch) -> None:
    uids = [i for i in indexes(batch) for _ in range(4)]
    ld.observe(uids, [s for i in indexes(batch) for s in outcome(i)])


# -- the rule, by hand ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("history", "window", "skip"),
    [
        ("", 2, False),  # never seen
        ("R", 2, False),  # seen fewer than `window` times
        ("RR", 2, True),  # all right twice
        ("WW", 2, True),  # all wrong twice
        ("RW", 2, True),  # flat either way: no signal in either
        ("VR", 2, False),  # the older group had a signal
        ("RV", 2, False),  # the newer one had
        ("W", 1, True),
        ("V", 1, False),
        ("VRR", 2, True),  # a longer history (the window shrank on resume): the last `window` count
        ("RRV", 3, False),
        ("RWR", 3, True),
    ],
)
def test_skip_rule(history, window, skip):
    assert should_skip(history, window) is skip


def test_group_outcomes_flat_means_equal_scores():
    uids = [5, 5, 5, 7, 7, 7, 9, 9, 9, 11, 11, 11]
    scores = [1.0, 1.0, 1.0, 0.1, 0.1, 0.1, 0.0, 0.1, 0.0, 0.5, 0.5 + 1e-9, 0.5]
    # all right; all wrong with the same format credit; wrong answers differing in format credit
    # (GRPO learns the format from them: varied); equal within 1e-8
    assert group_outcomes(uids, scores, 1.0) == {"5": RIGHT, "7": WRONG, "9": VARIED, "11": WRONG}
    assert group_outcomes(uids, scores, 0.5)["11"] == RIGHT  # the threshold tells right from wrong
    assert list(group_outcomes(["b", "a", "b", "a"], [0, 0, 0, 0], 1.0)) == ["b", "a"]  # first seen first
    assert group_outcomes([1, 1], [-1.0, -1.0], -1.0) == {"1": RIGHT}  # scores may be negative


# -- the loader ----------------------------------------------------------------------------------


def test_without_history_it_walks_the_plain_order():
    plain = [i for b in StatefulLoader(examples(10), 3, 0, seed=7).epoch_batches() for i in indexes(b)]
    cur = loader()
    got = [i for b in cur.epoch_batches() for i in indexes(b)]
    # the plain loader drops the partial last batch; the curriculum's last batch ends in epoch 1
    assert got[:9] == plain and len(got) == 12 and cur.epoch == 1
    assert len(cur) == 3 and cur.take_metrics()["data/curriculum/skipped"] == 0


def test_batches_are_full_distinct_and_skip_flat_prompts():
    cur = loader(n=12, bs=3, window=1, revisit_prob=0.0)
    first = [b for _ in range(2) for b in cur.epoch_batches()]  # two epochs, observing every batch
    for b in first:
        feed(cur, b)
    # every prompt was seen once: only the varied ones (2 mod 3) are left in the pool
    assert cur.take_metrics()["data/curriculum/pool"] == 4
    drawn = []
    for _ in range(6):
        b = next(cur.epoch_batches())
        assert len(b) == 3 and len(set(indexes(b))) == 3
        drawn += indexes(b)
    assert {i % 3 for i in drawn} == {2}  # flat prompts never come back with revisit_prob 0
    m = cur.take_metrics()
    assert m["data/curriculum/skipped"] > 0 and m["data/curriculum/revisited"] == 0
    assert m["data/curriculum/mastered"] == 4  # 0, 3, 6, 9: all right; 1, 4, 7, 10: all wrong


def test_a_dry_pool_still_fills_every_batch():
    cur = loader(n=5, bs=3, window=1, revisit_prob=0.0)
    cur.observe(list(range(5)), [1.0] * 5)  # groups of one: all flat, every prompt out of the pool
    for _ in range(7):
        b = next(cur.epoch_batches())
        assert len(b) == 3 and len(set(indexes(b))) == 3  # across epoch ends too
    assert cur.take_metrics()["data/curriculum/pool"] == 0
    cur.observe([2, 2], [0.0, 1.0])  # prompt 2 is back: a pool smaller than a batch comes first in it
    for _ in range(5):
        assert 2 in indexes(next(cur.epoch_batches()))


def test_revisit_coin():
    def walk(p: float, seed: int = 7) -> tuple[list[list[int]], dict[str, float]]:
        cur = loader(n=30, bs=3, seed=seed, window=1, revisit_prob=p)
        cur.observe(list(range(0, 30, 2)), [0.0] * 15)  # the even prompts are out of the pool
        out = [indexes(next(cur.epoch_batches())) for _ in range(20)]
        return out, cur.take_metrics()

    _, m1 = walk(1.0)
    assert m1["data/curriculum/skipped"] == 0 and m1["data/curriculum/revisited"] == 30  # 2 epochs
    never, m0 = walk(0.0)
    assert m0["data/curriculum/revisited"] == 0 and all(i % 2 for b in never for i in b)
    half, m = walk(0.5)
    assert m["data/curriculum/revisited"] > 0 and m["data/curriculum/skipped"] > 0
    assert any(i % 2 == 0 for b in half for i in b)
    assert walk(0.5) == (half, m)  # seeded: the same coins again
    assert walk(0.5, seed=8)[0] != half


def test_state_round_trip_resumes_exactly():
    """Stop mid-epoch (through JSON, as a checkpoint does), restore into a fresh loader: it draws
    what the uninterrupted one draws, observations included."""

    def step(ld: CurriculumLoader, it) -> list[int]:
        b = next(it)
        feed(ld, b)
        return indexes(b)

    def stream(ld: CurriculumLoader):
        while True:
            yield from ld.epoch_batches()

    straight = loader(n=11, bs=3, window=2, revisit_prob=0.3)
    it = stream(straight)
    want = [step(straight, it) for _ in range(25)]

    first = loader(n=11, bs=3, window=2, revisit_prob=0.3)
    it = stream(first)
    got = [step(first, it) for _ in range(13)]
    first.take_metrics()
    state = json.loads(json.dumps(first.state_dict()))
    assert state["history"] and state["sampler"] == "curriculum"
    resumed = loader(n=11, bs=3, window=2, revisit_prob=0.3)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == first.state_dict()
    it = stream(resumed)
    got += [step(resumed, it) for _ in range(12)]
    assert got == want
    assert resumed.state_dict() == straight.state_dict() | {"counters": resumed.state_dict()["counters"]}


def test_state_is_a_copy():
    cur = loader()
    state = cur.state_dict()
    cur.observe([1, 1], [1.0, 1.0])
    assert state["history"] == {} and cur.history == {"1": RIGHT}


def test_a_plain_loaders_state_resumes_as_curriculum():
    cur = loader(n=10, bs=3)
    cur.load_state_dict({"epoch": 2, "position": 1, "seed": 7})  # a plain run's: 1 batch into epoch 2
    plain = StatefulLoader(examples(10), 3, 0, seed=7)
    plain.load_state_dict({"epoch": 2, "position": 1, "seed": 7})
    assert indexes(next(cur.epoch_batches())) == indexes(next(plain.epoch_batches()))
    assert (cur.epoch, cur.position, cur.history) == (2, 6, {})


def test_too_few_prompts():
    with pytest.raises(DataError, match="fewer than one batch"):
        loader(n=2, bs=3)


def test_group_watch_metrics_and_make_loader():
    def scored(uids: list[int], scores: list[float]) -> Batch:
        return Batch(
            tensors={"token_level_scores": torch.tensor(scores).unsqueeze(-1).repeat(1, 2) / 2},
            non_tensors={"uid": np.array(uids, dtype=object)},
        )

    cfg = DataConfig(train_batch_size=3)
    plain = GroupWatch(make_loader(cfg, examples(10), 0, 1))
    plain.observe(scored([0, 0, 1, 1], [1.0, 1.0, 0.0, 1.0]))
    plain.observe(scored([2, 2], [0.0, 0.0]))  # a second (DAPO) round of the same step
    assert plain.metrics() == {"data/flat_groups": 2 / 3}
    assert plain.metrics() == {}  # per step

    cfg.sampler, cfg.curriculum = "curriculum", CurriculumConfig(window=1)
    ld = make_loader(cfg, examples(10), 0, 1)
    assert isinstance(ld, CurriculumLoader)
    watch = GroupWatch(ld)
    watch.observe(scored([0, 0, 1, 1], [1.0, 1.0, 0.0, 1.0]))
    assert ld.history == {"0": RIGHT, "1": VARIED}
    m = watch.metrics()
    assert m["data/flat_groups"] == m["data/curriculum/flat_groups"] == 0.5
    assert m["data/curriculum/pool"] == 9 and m["data/curriculum/mastered"] == 1


# -- config ----------------------------------------------------------------------------------------


def test_config_keys_and_checks():
    cfg = load_config(
        None, ["data.sampler=curriculum", "data.curriculum.window=3", "data.curriculum.revisit_prob=0"]
    )
    assert (cfg.data.sampler, cfg.data.curriculum.window, cfg.data.curriculum.revisit_prob) == (
        "curriculum",
        3,
        0,
    )
    with pytest.raises(ConfigError, match=r"unknown 'data.sampler' 'easy'; valid: plain, curriculum"):
        load_config(None, ["data.sampler=easy"])
    with pytest.raises(ConfigError, match=r"'data.curriculum.revisit_prob' must be in \[0, 1\]"):
        load_config(None, ["data.curriculum.revisit_prob=1.5"])
    with pytest.raises(ConfigError, match=r"'data.curriculum.window' must be >= 1"):
        load_config(None, ["data.curriculum.window=0"])
    with pytest.raises(ConfigError, match=r"rollout\.n >= 2"):
        load_config(
            None, ["data.sampler=curriculum", "rollout.n=1", "algorithm.adv_estimator=reinforce_plus_plus"]
        )
