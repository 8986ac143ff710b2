import numpy as np
import pytest
import torch

from turnrl.batch import Batch


def make(n: int = 2) -> Batch:
    return Batch(
        tensors={"input_ids": torch.arange(n * 3).view(n, 3)},
        non_tensors={"index": [f"u{i}" for i in range(n)], "ground_truth": [str(i) for i in range(n)]},
        meta={"temperature": 1.0},
    )


def test_repeat_interleaved_gives_seed_example_uids():
    # the seeds' example: bs=2, n=2, interleaved -> [u0, u0, u1, u1]
    b = make(2).repeat(2, interleave=True)
    assert list(b["index"]) == ["u0", "u0", "u1", "u1"]
    assert b["input_ids"][:, 0].tolist() == [0, 0, 3, 3]


def test_repeat_tiled():
    b = make(2).repeat(2, interleave=False)
    assert list(b["index"]) == ["u0", "u1", "u0", "u1"]


def test_select_pop_and_missing_key():
    b = make()
    popped = b.pop(["input_ids"])
    assert "input_ids" in popped and "input_ids" not in b
    assert len(b) == 2 and len(popped) == 2
    with pytest.raises(KeyError, match="no field"):
        b.select(["nope"])


def test_union_adds_and_refuses_conflicts():
    a = make()
    other = Batch(tensors={"rm_scores": torch.ones(2)})
    a.union(other)
    assert torch.equal(a["rm_scores"], torch.ones(2))
    a.union(Batch(tensors={"rm_scores": torch.ones(2)}))  # equal values are fine
    with pytest.raises(ValueError, match=r"conflict.*rm_scores"):
        a.union(Batch(tensors={"rm_scores": torch.zeros(2)}))
    with pytest.raises(ValueError, match=r"conflict.*ground_truth"):
        a.union(Batch(non_tensors={"ground_truth": ["x", "y"]}))
    with pytest.raises(ValueError, match="length"):
        a.union(Batch(tensors={"rm_scores": torch.ones(3)}))


def test_reorder_index_split_chunk_concat():
    b = make(4)
    r = b.reorder([3, 2, 1, 0])
    assert list(r["index"]) == ["u3", "u2", "u1", "u0"]
    assert r["input_ids"][0].tolist() == [9, 10, 11]
    with pytest.raises(ValueError, match="permutation"):
        b.reorder([0, 0, 1, 2])
    assert [len(p) for p in b.split(3)] == [3, 1]
    assert [list(p["index"]) for p in b.chunk(2)] == [["u0", "u1"], ["u2", "u3"]]
    with pytest.raises(ValueError, match="equal pieces"):
        b.chunk(3)
    back = Batch.concat(b.chunk(2))
    assert torch.equal(back["input_ids"], b["input_ids"]) and list(back["index"]) == list(b["index"])
    with pytest.raises(ValueError, match="same fields"):
        Batch.concat([b, b.select(["input_ids"])])
    assert list(b.index(np.array([1, 3]))["ground_truth"]) == ["1", "3"]


def test_mismatched_lengths_rejected_and_object_fields_kept():
    with pytest.raises(ValueError, match="disagree"):
        Batch(tensors={"rm_scores": torch.zeros(2)}, non_tensors={"index": [1, 2, 3]})
    # dict/list-valued fields (ground truths like {"target": [...]}) survive every operation
    b = Batch(non_tensors={"ground_truth": [{"target": ["a"]}, {"target": ["b", "c"]}]})
    assert b.repeat(2)["ground_truth"][1] == {"target": ["a"]}
