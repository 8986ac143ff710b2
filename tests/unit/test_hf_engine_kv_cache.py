"""The preallocated KV cache changes no number the engine returns, and `ignore_eos` fills every budget.

The preallocated cache hands attention views of the same keys and values the dynamic cache would
concatenate, so greedy ids are identical and sampled ids too (same seed, same logits); log-probs
agree to rounding. The cases exercise what touches the cache: n > 1 (cache repeated per sample),
rows finishing early (cache rows dropped), per-row budgets, and sync strides.
"""

import pytest
import torch

from tests.support.generations import same
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.rollout.kv_cache import PreallocatedLayer, preallocated_cache

PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14, 15, 16, 17, 18]]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("sync_every", [1, 4])
def test_preallocated_cache_gives_what_the_dynamic_cache_gives(tiny, temperature, sync_every):
    model, tok = tiny
    dyn = HFEngine(model, tok, batch_size=16, sync_every=sync_every, kv_cache="dynamic")
    pre = HFEngine(model, tok, batch_size=16, sync_every=sync_every, kv_cache="preallocated")
    assert pre.preallocate and not dyn.preallocate
    p = SamplingParams(max_new_tokens=12, n=2, temperature=temperature, seed=3)
    limits = [12, 3, 9, 12, 1, 6, 11, 12]
    ref = dyn.generate(PROMPTS, p, limits)
    frequent = ref.response_ids[0][2]  # an extra EOS id makes rows finish mid-batch
    for e in (dyn, pre):
        e.eos_ids = e.eos_ids | {frequent}
    ref = dyn.generate(PROMPTS, p, limits)
    assert "stop" in ref.finish_reasons  # rows were dropped from the cache mid-batch
    same(pre.generate(PROMPTS, p, limits), ref)


def test_ignore_eos_runs_every_row_to_its_budget(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok, batch_size=16)
    p = SamplingParams(max_new_tokens=10, n=2, temperature=0.0)
    free = engine.generate(PROMPTS, p)
    eos = free.response_ids[0][1]
    engine.eos_ids = engine.eos_ids | {eos}  # row 0 now stops early
    stopped = engine.generate(PROMPTS, p)
    first = free.response_ids[0].index(eos) + 1
    assert len(stopped.response_ids[0]) == first <= 2 and stopped.finish_reasons[0] == "stop"
    p.ignore_eos = True
    full = engine.generate(PROMPTS, p, [10, 10, 4, 4, 10, 10, 7, 7])
    assert [len(r) for r in full.response_ids] == [10, 10, 4, 4, 10, 10, 7, 7]
    assert set(full.finish_reasons) == {"length"}
    assert full.response_ids[0] == free.response_ids[0]  # the EOS token is kept and decoding goes on


def test_the_layer_writes_in_place_and_serves_views():
    layer = PreallocatedLayer(capacity=5)
    k1, v1 = torch.randn(2, 3, 2, 4), torch.randn(2, 3, 2, 4)
    keys, values = layer.update(k1, v1)
    assert keys.shape == (2, 3, 2, 4) and torch.equal(keys, k1) and torch.equal(values, v1)
    storage = keys.untyped_storage().data_ptr()
    k2, v2 = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)
    keys, values = layer.update(k2, v2)
    assert torch.equal(keys, torch.cat([k1, k2], dim=2)) and torch.equal(values, torch.cat([v1, v2], dim=2))
    assert keys.untyped_storage().data_ptr() == storage  # no copy of the cache per token
    assert layer.get_seq_length() == 3 and layer.get_mask_sizes(1) == (4, 0)
    layer.batch_repeat_interleave(2)
    layer.batch_select_indices(torch.tensor([0, 3]))  # rows (A, B) repeated to (A, A, B, B), keep A and B
    assert torch.equal(layer.keys, torch.cat([k1, k2], dim=2))
    with pytest.raises(RuntimeError, match="holds 5 tokens"):
        layer.update(torch.randn(2, 3, 3, 4), torch.randn(2, 3, 3, 4))


def test_cache_has_one_layer_per_decoder_layer(tiny):
    model, _ = tiny
    cache = preallocated_cache(model, 8)
    assert len(cache.layers) == model.config.num_hidden_layers


def test_fixed_shape_decode_gives_what_the_dynamic_path_gives(tiny):
    """The compiled path's step (fixed buffers, finished rows riding along, attention over the
    whole capacity under the mask), run eagerly: the same ids and log-probs as the plain loop.
    Greedy, because rows riding along change how many rows each random draw covers."""
    model, tok = tiny
    dyn = HFEngine(model, tok, batch_size=16, sync_every=4, kv_cache="dynamic")
    fixed = HFEngine(model, tok, batch_size=16, sync_every=4, compile_decode="eager")
    p = SamplingParams(max_new_tokens=12, n=2, temperature=0.0)
    limits = [12, 3, 9, 12, 1, 6, 11, 12]
    ref = dyn.generate(PROMPTS, p, limits)
    frequent = ref.response_ids[0][2]
    for e in (dyn, fixed):
        e.eos_ids = e.eos_ids | {frequent}
    ref = dyn.generate(PROMPTS, p, limits)
    assert "stop" in ref.finish_reasons
    same(fixed.generate(PROMPTS, p, limits), ref)
    same(
        fixed.generate(PROMPTS[:3], p, limits[:6]), dyn.generate(PROMPTS[:3], p, limits[:6])
    )  # a part-full bucket
    assert list(fixed.buckets) == [(16, 128)]  # one bucket served both calls
    # sampling, with no row finishing early: the same draws, so the same samples
    p = SamplingParams(max_new_tokens=12, n=2, temperature=1.0, seed=5, ignore_eos=True)
    same(fixed.generate(PROMPTS, p), dyn.generate(PROMPTS, p))


@pytest.mark.slow
def test_compiled_decode_gives_what_the_dynamic_path_gives(tiny):
    model, tok = tiny
    dyn = HFEngine(model, tok, batch_size=8, kv_cache="dynamic")
    compiled = HFEngine(model, tok, batch_size=8, compile_decode=True)
    p = SamplingParams(max_new_tokens=8, n=2, temperature=0.0)
    same(compiled.generate(PROMPTS, p), dyn.generate(PROMPTS, p))
    assert compiled.compile_seconds > 0


@pytest.mark.slow
def test_compiled_decode_from_the_bfloat16_copy(tiny):
    # the copy's packed layers hand compiled steps the plain product (inductor lowers oneDNN's
    # packed op only for weights frozen into the graph)
    model, tok = tiny
    eager = HFEngine(model, tok, batch_size=8, kv_cache="dynamic", dtype="bfloat16")
    compiled = HFEngine(model, tok, batch_size=8, compile_decode=True, dtype="bfloat16")
    p = SamplingParams(max_new_tokens=8, n=2, temperature=0.0)
    a, b = compiled.generate(PROMPTS, p), eager.generate(PROMPTS, p)
    assert a.response_ids == b.response_ids
    for x, y in zip(a.log_probs, b.log_probs, strict=True):
        assert torch.allclose(torch.tensor(x), torch.tensor(y), atol=0.05)  # bf16 rounding differs by fusion
    assert compiled.compile_seconds > 0
