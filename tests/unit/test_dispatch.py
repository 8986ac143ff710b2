"""The worker-group seam: balanced dispatch never splits a uid group, and results come back in
the original row order, through real roles."""

import numpy as np
import pytest
import torch

from turnrl.batch import Batch
from turnrl.config.schema import ModelConfig, RefConfig, RolloutConfig
from turnrl.rollout.base import Generation, assemble
from turnrl.tensors import left_pad
from turnrl.workers.dispatch import balanced_partition, gather, imbalance, scatter, shard_rows
from turnrl.workers.group import LocalGroup
from turnrl.workers.handles import ReferenceHandle
from turnrl.workers.reference import Reference


def test_longest_first_partition_by_hand():
    # weights 5,4,3,3,3 into 2 parts of at most 3 items, heaviest first to the lightest part:
    # 5->A(5) 4->B(4) 3->B(7) 3->A(8) 3->B(10): A={0,3}=8, B={1,2,4}=10
    assert balanced_partition([5, 4, 3, 3, 3], 2) == [[0, 3], [1, 2, 4]]
    # without the size cap the last 3 still goes to the lighter part: the same here
    assert balanced_partition([5, 4, 3, 3, 3], 2, equal_size=False) == [[0, 3], [1, 2, 4]]
    # the cap binds: 10,1,1,1 -> without it the 10 stands alone and the three 1s share a part
    assert balanced_partition([10, 1, 1, 1], 2, equal_size=False) == [[0], [1, 2, 3]]
    assert balanced_partition([10, 1, 1, 1], 2) == [[0, 3], [1, 2]]


def random_batch(rng: np.random.Generator, groups: int) -> Batch:
    sizes = rng.integers(1, 6, size=groups)  # uneven group sizes (dynamic sampling can leave those)
    uids = np.array([f"u{g}" for g, s in enumerate(sizes) for _ in range(s)], dtype=object)
    rows = len(uids)
    lengths = rng.integers(1, 50, size=rows)
    mask = (torch.arange(50)[None, :] < torch.as_tensor(lengths)[:, None]).long()
    return Batch(tensors={"attention_mask": mask}, non_tensors={"uid": uids, "index": list(range(rows))})


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_dispatch_keeps_uid_groups_whole_and_restores_order(k):
    rng = np.random.default_rng(k)
    for _ in range(50):
        batch = random_batch(rng, groups=int(rng.integers(k, 12)))
        shards = shard_rows(batch, k)
        assert sorted(r for s in shards for r in s) == list(range(len(batch)))  # every row once
        owner = {}
        for rank, rows in enumerate(shards):
            for r in rows:
                assert owner.setdefault(batch["uid"][r], rank) == rank  # a group never spans two ranks
        back = gather(scatter(batch, shards), shards)
        assert list(back["index"]) == list(batch["index"]) and list(back["uid"]) == list(batch["uid"])
        # balanced up to one group: no rank is heavier than the mean plus the heaviest group
        tokens = batch["attention_mask"].sum(-1)
        heaviest = max(int(tokens[batch["uid"] == u].sum()) for u in set(batch["uid"]))
        mean = float(tokens.sum()) / k
        assert imbalance(batch, shards) * mean <= mean + heaviest


def scored_batch(tok) -> Batch:
    prompts = [tok(t)["input_ids"] for t in ("What is 2 + 2?", "Hi", "Name a colour.")]
    ids, mask = left_pad(prompts, tok.pad_token_id)
    g = torch.Generator().manual_seed(0)
    responses = [torch.randint(5, 1000, (int(k),), generator=g).tolist() for k in (3, 7, 5, 2, 6, 4)]
    out = assemble(
        Batch(tensors={"input_ids": ids, "attention_mask": mask}),
        Generation(responses, [[0.0] * len(r) for r in responses], ["stop"] * 6),
        2,
        tok.pad_token_id,
        7,
    )
    out["uid"] = np.array([0, 0, 1, 1, 2, 2], dtype=object)
    return out


def test_two_local_ranks_compute_what_one_computes(tiny):
    _, tok = tiny
    make = lambda: Reference(RefConfig(), ModelConfig(path="tiny-random"), RolloutConfig(), seed=0)  # noqa: E731
    batch = scored_batch(tok)
    one = ReferenceHandle(LocalGroup([make()])).compute_ref_log_prob(batch)["ref_log_prob"]
    two = ReferenceHandle(LocalGroup([make(), make()])).compute_ref_log_prob(batch)["ref_log_prob"]
    # on model tokens (padding positions hold whatever the trimmed forward left there, and are
    # masked everywhere); each rank trims its own padding, so equal up to float rounding
    m = batch["response_mask"]
    torch.testing.assert_close(two * m, one * m, atol=1e-5, rtol=1e-5)
    assert (one * batch["response_mask"]).abs().sum() > 0


def test_unknown_method_names_the_role(tiny):
    group = LocalGroup([Reference(RefConfig(), ModelConfig(path="tiny-random"), RolloutConfig(), seed=0)])
    with pytest.raises(AttributeError, match="role Reference has no method 'compute_values'"):
        group.call("compute_values", scored_batch(tiny[1]))
