"""The prompt's keys and values copied out of the preallocated cache once when decoding starts
(`kv_cache.freeze`), so that a bfloat16 decode step's products read contiguous tensors instead of
copying the cache's strided view at every step.

The cases: attention reading the frozen copy equals reading the cache (and reads the copy: the
cache's own positions are spoiled); the copy follows the cache's rows through compaction, a new
order and repeats; the engine freezes exactly where it pays (a bfloat16 CPU cache) and, forced to in
float32, returns the same generations as without.
"""

import pytest
import torch

from tests.support.generations import same
from turnrl.rollout import attention, hf
from turnrl.rollout.attention import grouped_decode_attention
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.rollout.kv_cache import PreallocatedLayer, freeze, freeze_pays

PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14, 15, 16, 17, 18], [19, 20], [21, 22, 23]]


@pytest.mark.parametrize("shared", [0, 4])
def test_attention_over_the_frozen_copy_equals_attention_over_the_cache(shared: int):
    g = torch.Generator().manual_seed(3)
    b, heads, kv, t, d, prompt = (
        5,
        6,
        2,
        15,
        8,
        11,
    )  # positions shared..prompt frozen, prompt..t sampled since
    q = torch.randn(b, heads, 1, d, generator=g)
    k, v = torch.randn(b, kv, t, d, generator=g), torch.randn(b, kv, t, d, generator=g)
    k[:, :, :shared], v[:, :, :shared] = k[:1, :, :shared], v[:1, :, :shared]
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[2, ..., shared : shared + 3] = False  # padding inside the frozen block
    want = grouped_decode_attention(q, k, v, mask, 0.3, shared)
    frozen = (k[:, :, shared:prompt].clone(), v[:, :, shared:prompt].clone())
    k[:, :, shared:prompt], v[:, :, shared:prompt] = 99.0, -99.0  # the cache's copy is never read
    got = grouped_decode_attention(q, k, v, mask, 0.3, shared, frozen)
    assert torch.allclose(got, want, atol=1e-6)


def _filled_layer(rows: int) -> tuple[PreallocatedLayer, torch.Tensor, torch.Tensor]:
    layer = PreallocatedLayer(capacity=9)
    k, v = torch.randn(rows, 2, 5, 4), torch.randn(rows, 2, 5, 4)
    layer.update(k, v)
    return layer, k, v


def _frozen_matches(layer: PreallocatedLayer, start: int, end: int) -> bool:
    assert layer.frozen is not None
    fk, fv = layer.frozen
    return (
        fk.is_contiguous()
        and torch.equal(fk, layer.keys[:, :, start:end])
        and torch.equal(fv, layer.values[:, :, start:end])
    )


def test_the_frozen_copy_follows_the_rows():
    layer, k, _ = _filled_layer(5)
    layer.freeze(2)
    assert layer.frozen_start == 2 and _frozen_matches(layer, 2, 5)
    layer.update(torch.randn(5, 2, 1, 4), torch.randn(5, 2, 1, 4))  # a decode step: the copy stays as it was
    assert _frozen_matches(layer, 2, 5)
    layer.batch_select_indices(torch.tensor([0, 2, 4]))  # compaction in place
    assert _frozen_matches(layer, 2, 5) and torch.equal(layer.frozen[0], k[[0, 2, 4], :, 2:])
    layer.batch_select_indices(torch.tensor([2, 0, 0]))  # a new order with repeats
    assert _frozen_matches(layer, 2, 5) and torch.equal(layer.frozen[0], k[[4, 0, 0], :, 2:])
    layer.batch_repeat_interleave(2)
    assert _frozen_matches(layer, 2, 5) and layer.frozen[0].shape[0] == 6


def test_freeze_returns_each_layers_copy_and_pays_only_in_reduced_precision():
    layers = [_filled_layer(3)[0] for _ in range(2)]
    cache = type("Cache", (), {"layers": layers})()
    assert not freeze_pays(cache)  # float32: its products read the strided view without a copy
    frozen_of = freeze(cache, 1)
    start, fk, fv = frozen_of(1)
    assert (
        start == 1
        and torch.equal(fk, layers[1].keys[:, :, 1:])
        and torch.equal(fv, layers[1].values[:, :, 1:])
    )
    half = PreallocatedLayer(capacity=4)
    half.update(torch.randn(2, 1, 2, 4, dtype=torch.bfloat16), torch.randn(2, 1, 2, 4, dtype=torch.bfloat16))
    assert freeze_pays(type("Cache", (), {"layers": [half]})())
    assert not freeze_pays(
        type("Cache", (), {"layers": [PreallocatedLayer(capacity=4)]})()
    )  # nothing written


@pytest.fixture
def frozen_seen(monkeypatch) -> list[bool]:
    """Whether each decode attention call was handed a frozen copy."""
    seen: list[bool] = []
    plain = attention.grouped_decode_attention

    def spy(query, key, value, mask, scaling, shared=0, frozen=None):
        seen.append(frozen is not None)
        return plain(query, key, value, mask, scaling, shared, frozen)

    monkeypatch.setattr(attention, "grouped_decode_attention", spy)
    return seen


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_the_engine_forced_to_freeze_in_float32_generates_the_same(
    tiny, frozen_seen, monkeypatch, temperature
):
    model, tok = tiny
    system = list(range(30, 42))  # a shared system prompt: the frozen block starts after it
    prompts = [system + row for row in PROMPTS]
    limits = [3, 9, 5, 12, 7, 2]  # rows finish at different steps: compaction moves the frozen rows
    p = SamplingParams(max_new_tokens=12, n=2, temperature=temperature, seed=4, ignore_eos=True)
    plain = HFEngine(model, tok, batch_size=16).generate(prompts, p, [x for x in limits for _ in range(2)])
    assert frozen_seen and not any(frozen_seen)  # float32 on a CPU: not frozen
    frozen_seen.clear()
    monkeypatch.setattr(hf, "freeze_pays", lambda cache: True)
    forced = HFEngine(model, tok, batch_size=16).generate(prompts, p, [x for x in limits for _ in range(2)])
    assert frozen_seen and all(frozen_seen)
    same(forced, plain)


def test_a_bfloat16_engine_freezes_and_samples_as_without(tiny, frozen_seen, monkeypatch):
    model, tok = tiny
    half = type(model)(model.config).to(torch.bfloat16).eval()
    half.load_state_dict(model.state_dict())
    prompts = [list(range(30, 42)) + row for row in PROMPTS]
    p = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    frozen = HFEngine(half, tok, batch_size=16).generate(prompts, p)
    assert frozen_seen and all(frozen_seen)
    monkeypatch.setattr(hf, "freeze_pays", lambda cache: False)
    plain = HFEngine(half, tok, batch_size=16).generate(prompts, p)
    # bfloat16 sums the blocks' products in another order: log-probs agree to its rounding, up to
    # the first token where a near tie could go the other way
    for a, b, la, lb in zip(
        frozen.response_ids, plain.response_ids, frozen.log_probs, plain.log_probs, strict=True
    ):
        agree = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
        assert agree >= 1
        assert torch.allclose(torch.tensor(la[:agree]), torch.tensor(lb[:agree]), atol=2e-2)
