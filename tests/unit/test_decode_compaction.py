"""Finished rows leave the decode batch when the copy pays (`compaction_pays`), and the KV cache
keeps the rows that stay in place: the same generations, fewer copies.

Dropping finished rows at every finish copied the whole cache up to once a row; riding along costs
each finished row a row of every later step. The rule drops them once the row-steps ridden reach the
rows kept. The cases: the rule by hand, the in-place compaction against plain indexing, and greedy and
greedy and seeded generations equal to dropping at every finish, with fewer compactions.
"""

import pytest
import torch

from tests.support.generations import same
from turnrl.rollout import decode_loop
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.decode_loop import compaction_pays
from turnrl.rollout.hf import HFEngine
from turnrl.rollout.kv_cache import PreallocatedLayer

PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14, 15, 16, 17, 18], [19, 20], [21, 22, 23]]


def test_the_rule_by_hand():
    assert not compaction_pays(62, 63)  # one finished row, 62 steps ridden: still cheaper to ride
    assert compaction_pays(63, 63)  # ... the 63rd: it leaves
    assert compaction_pays(32, 32)  # half of 64 finished at once: they leave after one step
    assert compaction_pays(1, 0)  # every row finished: nothing to copy
    assert not compaction_pays(0, 5)


def test_rows_kept_in_place_equal_plain_indexing():
    layer = PreallocatedLayer(capacity=6)
    k, v = torch.randn(5, 2, 3, 4), torch.randn(5, 2, 3, 4)
    layer.update(k, v)
    storage = layer.keys.untyped_storage().data_ptr()
    layer.batch_select_indices(torch.tensor([0, 1, 3, 4]))  # row 2 leaves: rows 3 and 4 move up
    assert torch.equal(layer.keys, k[[0, 1, 3, 4]]) and torch.equal(layer.values, v[[0, 1, 3, 4]])
    assert layer.keys.untyped_storage().data_ptr() == storage  # no new buffer
    layer.batch_select_indices(torch.tensor([0, 1]))  # the last rows leave: nothing moves
    assert torch.equal(layer.keys, k[[0, 1]]) and layer.keys.untyped_storage().data_ptr() == storage
    k2, v2 = torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4)
    keys, values = layer.update(k2, v2)  # writing goes on in the kept rows' own storage
    assert torch.equal(keys, torch.cat([k[[0, 1]], k2], 2)) and torch.equal(
        values, torch.cat([v[[0, 1]], v2], 2)
    )
    layer.batch_select_indices(torch.tensor([1, 0, 0]))  # a new order with repeats: whole rows copied
    assert torch.equal(layer.keys, torch.cat([k[[1, 0, 0]], k2[[1, 0, 0]]], 2))


def counting(monkeypatch) -> list[int]:
    """The rows kept at each compaction (the real method still runs, once per layer)."""
    calls: list[int] = []
    select = PreallocatedLayer.batch_select_indices

    def spy(self, indices):
        calls.append(len(indices))
        return select(self, indices)

    monkeypatch.setattr(PreallocatedLayer, "batch_select_indices", spy)
    return calls


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_riding_rows_change_nothing_and_save_copies(tiny, monkeypatch, temperature):
    """The same ids, reasons and log-probs as dropping at every finish, greedy and seeded: riding rows
    draw nothing, so every draw goes to the row it went to before."""
    model, tok = tiny
    layers = model.config.num_hidden_layers
    engine = HFEngine(model, tok, batch_size=32, sync_every=1, kv_cache="preallocated")
    engine.eos_ids = engine.eos_ids | {10, 20}  # greedy rows of prompts 1 and 4 stop on their own
    p = SamplingParams(max_new_tokens=16, n=2, temperature=temperature, seed=5)
    limits = [16, 2, 9, 16, 1, 6, 11, 16, 3, 4, 5, 7]  # rows finish one or two at a time
    calls = counting(monkeypatch)
    lazy = engine.generate(PROMPTS, p, limits)
    lazy_compactions = len(calls) // layers
    calls.clear()
    monkeypatch.setattr(decode_loop, "compaction_pays", lambda ridden, kept: True)  # at every finish
    eager = engine.generate(PROMPTS, p, limits)
    eager_compactions = len(calls) // layers
    assert "length" in eager.finish_reasons
    if temperature == 0.0:
        assert "stop" in eager.finish_reasons
    same(lazy, eager)
    assert 0 < lazy_compactions < eager_compactions, (lazy_compactions, eager_compactions)
