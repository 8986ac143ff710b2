"""The decode step's fast parts against the slow obvious versions.

- `sample_tokens` draws by inverse CDF: hand-worked lookups, zero-probability entries never drawn,
  frequencies that match the distribution, log-probs equal to a float64 log-softmax.
- `grouped_decode_attention` equals SDPA over repeated key/value heads with the same mask, and
  reading the shared prefix's keys and values once (from row 0) equals reading every row's copy.
- `HFEngine` with the grouped attention returns the same ids as with transformers' own attention
  and log-probs equal to a plain full-sequence forward over prompt + response; with prompts that
  share a system prompt, the decode steps read it once and the log-probs still equal that forward.
- The bfloat16 rollout copy follows the policy at `sync_weights` and stays close to it.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from turnrl.rollout.attention import grouped_decode_attention
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.rollout.sampling import inverse_cdf, sample_tokens

PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]


def test_inverse_cdf_hand_worked():
    # weights [0.2, 0, 0.5, 0.3] -> cumulative [0.2, 0.2, 0.7, 1.0]
    cum = torch.tensor([[0.2, 0.2, 0.7, 1.0]]).repeat(4, 1)
    u = torch.tensor([0.1, 0.2, 0.69, 0.95])
    assert inverse_cdf(cum, u).tolist() == [0, 2, 2, 3]  # 0.2 is past the first interval; index 1 is empty
    # unnormalised weights [2, 0, 5, 3] (total 10): u scales by the total, same picks
    assert inverse_cdf(cum * 10, u).tolist() == [0, 2, 2, 3]


def test_inverse_cdf_never_runs_past_the_last_positive_entry():
    cum = torch.tensor([[0.25, 1.0, 1.0, 1.0]])  # entries 2, 3 have zero weight
    just_below_one = torch.tensor([1.0 - 2**-24])
    assert inverse_cdf(cum, just_below_one).tolist() == [1]


def test_sampled_frequencies_match_the_distribution():
    # 4 entries with probabilities [0.1, 0.2, 0.3, 0.4]: 40,000 draws; each count within 5 sigma
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    logits = probs.log().repeat(40_000, 1)
    gen = torch.Generator().manual_seed(0)
    token, _ = sample_tokens(logits, 1.0, 0, 1.0, gen)
    counts = torch.bincount(token, minlength=4).double()
    for k in range(4):
        n, p = 40_000, float(probs[k])
        assert abs(counts[k] - n * p) < 5 * math.sqrt(n * p * (1 - p))


def test_temperature_reshapes_the_draw_and_the_log_prob():
    # logits ln[1, 3] at temperature 0.5 -> weights [1, 9] -> p = [0.1, 0.9]
    logits = torch.tensor([[0.0, math.log(3.0)]]).repeat(20_000, 1)
    token, logp = sample_tokens(logits, 0.5, 0, 1.0, torch.Generator().manual_seed(1))
    share = float(token.float().mean())
    assert abs(share - 0.9) < 5 * math.sqrt(0.9 * 0.1 / 20_000)
    expected = torch.where(token == 1, math.log(0.9), math.log(0.1))
    assert torch.allclose(logp, expected.float(), atol=1e-6)


@pytest.mark.parametrize("top_k, top_p", [(2, 1.0), (0, 0.4), (3, 0.6)])
def test_filtered_entries_are_never_drawn(top_k, top_p):
    # p = [0.5, 0.3, 0.15, 0.05]: top-2 keeps {0, 1}; top-p 0.4 keeps {0}; top-3 then top-p 0.6 keeps {0, 1}
    keep = {(2, 1.0): {0, 1}, (0, 0.4): {0}, (3, 0.6): {0, 1}}[(top_k, top_p)]
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log().repeat(5_000, 1)
    token, logp = sample_tokens(logits, 1.0, top_k, top_p, torch.Generator().manual_seed(2))
    assert set(token.tolist()) == keep
    # the log-prob stays the unrestricted one, as the trainer computes it
    assert torch.allclose(logp, logits.log_softmax(-1).gather(-1, token[:, None]).squeeze(-1), atol=1e-6)


def test_log_probs_match_a_float64_log_softmax():
    logits = torch.randn(64, 49_152, generator=torch.Generator().manual_seed(3)) * 4
    token, logp = sample_tokens(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(4))
    truth = logits.double().log_softmax(-1).gather(-1, token[:, None]).squeeze(-1)
    assert (logp.double() - truth).abs().max() < 2e-6


def test_grouped_attention_hand_worked():
    # keys [[1, 0], [0, 1]], values [[1, 2], [3, 4]], query [ln 3, 0]: weights [3/4, 1/4] -> [1.5, 2.5]
    q = torch.tensor([math.log(3.0), 0.0]).view(1, 1, 1, 2)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).view(1, 1, 2, 2)
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).view(1, 1, 2, 2)
    out = grouped_decode_attention(q, k, v, None, 1.0)
    assert out.shape == (1, 1, 1, 2) and torch.allclose(out.view(2), torch.tensor([1.5, 2.5]))
    masked = grouped_decode_attention(q, k, v, torch.tensor([False, True]).view(1, 1, 1, 2), 1.0)
    assert torch.allclose(masked.view(2), torch.tensor([3.0, 4.0]))  # only the second position


def test_grouped_attention_equals_sdpa_over_repeated_heads():
    g = torch.Generator().manual_seed(5)
    b, heads, kv, t, d = 6, 9, 3, 11, 8
    q = torch.randn(b, heads, 1, d, generator=g)
    k, v = torch.randn(b, kv, t, d, generator=g), torch.randn(b, kv, t, d, generator=g)
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[0, ..., :4] = False  # left padding on two rows
    mask[3, ..., :7] = False
    ref = F.scaled_dot_product_attention(
        q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), attn_mask=mask, scale=0.3
    )
    out = grouped_decode_attention(q, k, v, mask, 0.3)
    assert torch.allclose(out, ref.transpose(1, 2), atol=1e-6)


def test_shared_prefix_read_once_hand_worked():
    # two rows, one head; position 0 is shared (key [1, 0], value [1, 2]), position 1 is each row's:
    # row 0 key [0, 1] value [3, 4], row 1 key [0, 1] value [5, 6]; query [ln 3, 0] in both rows
    # -> weights [3/4, 1/4] -> row 0 [1.5, 2.5], row 1 [0.75 + 1.25, 1.5 + 1.5] = [2.0, 3.0]
    q = torch.tensor([math.log(3.0), 0.0]).view(1, 1, 1, 2).repeat(2, 1, 1, 1)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).view(1, 1, 2, 2).repeat(2, 1, 1, 1)
    v = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [5.0, 6.0]]]).view(2, 1, 2, 2)
    k[1, :, 0], v[1, :, 0] = 99.0, -99.0  # row 1's copy of the shared position is never read
    out = grouped_decode_attention(q, k, v, None, 1.0, shared=1)
    assert torch.allclose(out.view(2, 2), torch.tensor([[1.5, 2.5], [2.0, 3.0]]))


def test_reading_the_shared_prefix_once_equals_reading_every_copy():
    g = torch.Generator().manual_seed(6)
    b, heads, kv, t, d, shared = 5, 9, 3, 13, 8, 6
    q = torch.randn(b, heads, 1, d, generator=g)
    k, v = torch.randn(b, kv, t, d, generator=g), torch.randn(b, kv, t, d, generator=g)
    k[:, :, :shared], v[:, :, :shared] = k[:1, :, :shared], v[:1, :, :shared]  # copied, as the engine does
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[1, ..., shared : shared + 3] = False  # padding of the cached block sits after the shared one
    every = grouped_decode_attention(q, k, v, mask, 0.3)
    once = grouped_decode_attention(q, k, v, mask, 0.3, shared=shared)
    assert torch.allclose(once, every, atol=1e-6)
    # one batch of shape (b, kv, t, d) sliced from a longer buffer, as the preallocated cache hands it
    buffer_k, buffer_v = torch.zeros(b, kv, t + 4, d), torch.zeros(b, kv, t + 4, d)
    buffer_k[:, :, :t], buffer_v[:, :, :t] = k, v
    sliced = grouped_decode_attention(q, buffer_k[:, :, :t], buffer_v[:, :, :t], mask, 0.3, shared=shared)
    assert torch.allclose(sliced, every, atol=1e-6)


@pytest.fixture
def shared_seen(monkeypatch) -> list[int]:
    """The `shared` count every decode attention call is given, in order."""
    import turnrl.rollout.attention as attention

    seen: list[int] = []
    plain = attention.grouped_decode_attention

    def spy(query, key, value, mask, scaling, shared=0, frozen=None):
        seen.append(shared)
        return plain(query, key, value, mask, scaling, shared, frozen)

    monkeypatch.setattr(attention, "grouped_decode_attention", spy)
    return seen


def test_engine_reads_a_shared_system_prompt_once_and_log_probs_match_a_full_forward(tiny, shared_seen):
    model, tok = tiny
    seen = shared_seen
    system = list(range(20, 44))  # 24 tokens every prompt starts with
    prompts = [system + row for row in PROMPTS]
    p = SamplingParams(max_new_tokens=8, n=2, temperature=0.8, seed=9)
    out = HFEngine(model, tok, batch_size=16).generate(prompts, p)
    assert seen and set(seen) == {24}  # every decode step, every layer, was told of the 24 shared positions
    for row, (ids, lps) in enumerate(zip(out.response_ids, out.log_probs, strict=True)):
        want = _recomputed_log_probs(model, prompts[row // 2], ids, 0.8)
        assert torch.allclose(torch.tensor(lps), want, atol=1e-4)
    seen.clear()
    HFEngine(model, tok, batch_size=16, share_prefix=False).generate(prompts, p)
    assert seen and set(seen) == {0}  # no shared layout, nothing read once


def test_a_sliding_window_model_keeps_the_plain_layout(tiny, shared_seen):
    # the shared prefix's layout pads between the prefix and each row's own tokens, and a sliding
    # window counts padded columns (rows of other lengths saw fewer real tokens: log-probs 1.5e-2 off
    # a full forward); a sliding-window cache also drops its oldest positions, the shared ones first.
    # Such a model gets the plain left-padded layout: nothing shared, nothing read once, log-probs
    # equal to a full forward
    from transformers import Qwen3Config, Qwen3ForCausalLM

    _, tok = tiny
    seen = shared_seen
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=8,
        use_sliding_window=True, layer_types=["sliding_attention", "full_attention"],
        attn_implementation="sdpa",
    )  # fmt: skip
    model = Qwen3ForCausalLM(config).eval()
    prompts = [list(range(20, 44)) + row for row in PROMPTS]  # 24 shared tokens, past the window
    out = HFEngine(model, tok, batch_size=16).generate(
        prompts, SamplingParams(max_new_tokens=6, temperature=0.0)
    )
    assert seen and set(seen) == {0}
    for row, (ids, lps) in enumerate(zip(out.response_ids, out.log_probs, strict=True)):
        want = _recomputed_log_probs(model, prompts[row], ids, 1.0)
        assert torch.allclose(torch.tensor(lps), want, atol=1e-4)


def _recomputed_log_probs(model, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


@pytest.mark.parametrize("kv_cache", ["preallocated", "dynamic"])
def test_engine_ids_and_log_probs_match_the_plain_attention_and_a_full_forward(tiny, kv_cache):
    model, tok = tiny
    assert model.config._attn_implementation == "sdpa"  # the engine swaps in the grouped products
    p = SamplingParams(max_new_tokens=10, n=2, temperature=0.8, seed=7)
    fast = HFEngine(model, tok, batch_size=16, kv_cache=kv_cache).generate(PROMPTS, p)
    model.set_attn_implementation("eager")  # transformers' own decode path; the engine leaves it alone
    try:
        plain = HFEngine(model, tok, batch_size=16, kv_cache=kv_cache).generate(PROMPTS, p)
    finally:
        model.set_attn_implementation("sdpa")
    assert fast.response_ids == plain.response_ids and fast.finish_reasons == plain.finish_reasons
    assert model.config._attn_implementation == "sdpa"  # restored after sampling
    for row, (ids, lps) in enumerate(zip(fast.response_ids, fast.log_probs, strict=True)):
        assert len(ids) > 0
        want = _recomputed_log_probs(model, PROMPTS[row // 2], ids, 0.8)
        assert torch.allclose(torch.tensor(lps), want, atol=1e-4)


def test_bfloat16_rollout_copy_follows_the_policy_at_sync(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok, batch_size=16, dtype="bfloat16")
    assert engine.source is model and engine.model is not model
    assert next(engine.model.parameters()).dtype == torch.bfloat16
    assert next(model.parameters()).dtype == torch.float32  # the policy itself is untouched
    rotary = dict(engine.model.named_buffers())
    assert all(b.dtype == torch.float32 for n, b in rotary.items() if "inv_freq" in n)
    p = SamplingParams(max_new_tokens=8, n=2, temperature=1.0, seed=3)
    out = engine.generate(PROMPTS, p)
    for row, (ids, lps) in enumerate(zip(out.response_ids, out.log_probs, strict=True)):
        gap = (torch.tensor(lps) - _recomputed_log_probs(model, PROMPTS[row // 2], ids, 1.0)).abs()
        assert gap.max() < 0.1  # bfloat16 rounding, not another policy
    head = engine.model.get_output_embeddings().weight
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(2.0)  # an "update"
    try:
        before = head.clone()
        assert torch.equal(head, before)  # no sync yet: the copy is the old policy
        engine.sync_weights(1)
        want = model.get_output_embeddings().weight.to(torch.bfloat16)
        assert torch.equal(head, want) and not torch.equal(head, before)
    finally:
        with torch.no_grad():
            model.get_output_embeddings().weight.div_(2.0)


def test_same_precision_makes_no_copy(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok, dtype="float32")
    assert engine.copy is None and engine.model is model
    with pytest.raises(ValueError, match=r"rollout\.dtype='float8'"):
        HFEngine(model, tok, dtype="float8")


def test_the_prefill_hands_the_head_one_contiguous_row_per_prompt(tiny):
    # a strided (B, 1, H) slice makes torch's CPU linear copy the head's weight once per row
    # (bf16, 16 rows, SmolLM2-135M's head: 1.2 s against 6 ms); the engine indexes the last position
    model, tok = tiny
    seen: list[tuple[tuple[int, ...], bool]] = []
    head = model.get_output_embeddings()
    hook = head.register_forward_pre_hook(
        lambda m, args: seen.append((tuple(args[0].shape), args[0].is_contiguous()))
    )
    try:
        HFEngine(model, tok, batch_size=16).generate(PROMPTS, SamplingParams(max_new_tokens=2, seed=1))
    finally:
        hook.remove()
    assert seen[0] == ((3, 1, model.config.hidden_size), True)  # the prefill: the last position only
    assert all(contiguous for _, contiguous in seen)


def test_packed_linear_equals_f_linear_bit_for_bit():
    from turnrl.rollout.packed_linear import PackedLinear, can_pack, pack_linears

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.Linear(96, 32, bias=False)).bfloat16()
    if not can_pack(net, torch.bfloat16):
        pytest.skip("this CPU has no oneDNN bfloat16 support")
    x = torch.randn(5, 7, 64).bfloat16()  # any row count, not only the hint's
    want = net(x)
    layers = pack_linears(net, rows_hint=16)
    assert len(layers) == 2 and all(isinstance(m, PackedLinear) for m in net)
    assert torch.equal(net(x), want)
    with torch.no_grad():
        net[0].weight.mul_(2.0)  # a refresh writes the weight in place: the packed layout is stale
    assert torch.equal(net(x), want)
    layers[0].pack()
    assert not torch.equal(net(x), want)
    assert torch.equal(
        net(x),
        torch.nn.functional.linear(torch.nn.functional.linear(x, net[0].weight, net[0].bias), net[1].weight),
    )


def test_the_packed_copy_samples_what_the_plain_copy_samples(tiny, monkeypatch):
    import turnrl.rollout.rollout_copy as rollout_copy

    model, tok = tiny
    packed = HFEngine(model, tok, batch_size=16, dtype="bfloat16")
    if not packed.copy.packed:
        pytest.skip("this CPU has no oneDNN bfloat16 support")
    monkeypatch.setattr(rollout_copy, "can_pack", lambda module, dtype: False)
    plain = HFEngine(model, tok, batch_size=16, dtype="bfloat16")
    assert not plain.copy.packed
    p = SamplingParams(max_new_tokens=8, n=2, temperature=1.0, seed=5)
    a, b = packed.generate(PROMPTS, p), plain.generate(PROMPTS, p)
    assert a.response_ids == b.response_ids and a.log_probs == b.log_probs
    head = model.get_output_embeddings().weight
    saved = head.detach().clone()  # the fixture is shared: put back its very bits afterwards
    with torch.no_grad():
        head.mul_(3.0)  # an update, then a sync
    try:
        packed.sync_weights(1)
        plain.sync_weights(1)
        c, d = packed.generate(PROMPTS, p), plain.generate(PROMPTS, p)
        assert c.log_probs == d.log_probs and c.log_probs != a.log_probs  # repacked at the sync
    finally:
        with torch.no_grad():
            head.copy_(saved)


def test_a_frozen_model_packed_in_float32_samples_what_the_plain_one_does(tiny):
    from turnrl.evaluate.run import pack_frozen
    from turnrl.models.loader import load_model
    from turnrl.rollout.packed_linear import PackedLinear

    model, tok = tiny
    frozen, _ = load_model(
        "tiny-random", torch.device("cpu"), seed=0
    )  # the fixture's weights, its own module
    frozen.eval().requires_grad_(False)
    layers = pack_frozen(frozen, 16)
    if not layers:
        pytest.skip("oneDNN does not run on this CPU")
    assert layers == sum(isinstance(m, PackedLinear) for m in frozen.modules())
    assert layers == sum(type(m) is torch.nn.Linear for m in model.modules())  # every one, the head too
    # oneDNN sums in another order than the BLAS, so a near tie may go the other way on another
    # processor: each sampled token's log-prob is checked against the plain model's full forward
    p = SamplingParams(max_new_tokens=10, n=2, temperature=0.8, seed=3)
    out = HFEngine(frozen, tok, batch_size=16).generate(PROMPTS, p)
    for row, (ids, lps) in enumerate(zip(out.response_ids, out.log_probs, strict=True)):
        assert len(ids) > 0
        want = _recomputed_log_probs(model, PROMPTS[row // 2], ids, 0.8)
        assert torch.allclose(torch.tensor(lps), want, atol=1e-4)
