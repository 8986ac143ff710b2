"""HFEngine's host syncs every `sync_every` steps (the GPU path) give what syncing every step gives.

Greedy decoding makes the outputs comparable token for token: rows that finished keep riding in the
batch (masked) until the next sync, and that must change nothing the caller sees."""

import copy

import torch

from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine

PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14, 15, 16, 17, 18]]


def same(a, b) -> None:
    """Same ids and reasons; log-probs equal up to rounding (another batch size, another matmul)."""
    assert (a.response_ids, a.finish_reasons) == (b.response_ids, b.finish_reasons)
    for x, y in zip(a.log_probs, b.log_probs, strict=True):
        assert torch.allclose(torch.tensor(x), torch.tensor(y), atol=1e-5)


def engines(model, tok, every=(1, 3, 8)):
    return [HFEngine(model, tok, batch_size=16, sync_every=k) for k in every]


def test_greedy_is_the_same_whatever_the_sync_stride(tiny):
    model, tok = tiny
    p = SamplingParams(max_new_tokens=14, n=2, temperature=0.0)
    limits = [14, 3, 9, 14, 1, 6, 11, 14]
    first, *rest = engines(model, tok)
    ref = first.generate(PROMPTS, p, limits)
    # make the run interesting: a token greedy emits mid-response becomes an extra EOS id
    frequent = ref.response_ids[0][4]
    for e in [first, *rest]:
        e.eos_ids = e.eos_ids | {frequent}
    ref = first.generate(PROMPTS, p, limits)
    assert "stop" in ref.finish_reasons and "length" in ref.finish_reasons
    for e in rest:
        same(e.generate(PROMPTS, p, limits), ref)


def test_stop_strings_cut_at_the_same_token_whatever_the_stride(tiny):
    model, tok = tiny
    p = SamplingParams(max_new_tokens=16, n=1, temperature=0.0)
    first, *rest = engines(model, tok)
    free = first.generate(PROMPTS, p)
    # a stop string completed by the 6th token of row 1 (decoded on its own)
    stop = tok.decode(free.response_ids[1][5:6]).strip() or tok.decode(free.response_ids[1][5:6])
    p.stop = [stop]
    ref = first.generate(PROMPTS, p)
    assert ref.finish_reasons[1] == "stop" and len(ref.response_ids[1]) <= 6
    for i, ids in enumerate(ref.response_ids):
        assert ids == free.response_ids[i][: len(ids)]  # a prefix of the free run
        if ref.finish_reasons[i] == "stop":
            assert stop in tok.decode(ids[-16:]) and stop not in tok.decode(ids[-16:-1])
    for e in rest:
        same(e.generate(PROMPTS, p), ref)


def test_sampled_log_probs_are_the_models_with_a_stride(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok, batch_size=16, sync_every=5)
    p = SamplingParams(max_new_tokens=12, n=3, temperature=0.7, seed=3)
    limits = [12, 4, 7] * 4
    out = engine.generate(PROMPTS, p, limits)
    for row, (ids, lps, limit) in enumerate(zip(out.response_ids, out.log_probs, limits, strict=True)):
        assert 1 <= len(ids) == len(lps) <= limit
        prompt = PROMPTS[row // 3]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float() / 0.7
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(lps), want, atol=1e-4), row


def test_sampling_from_a_copy_keeps_serving_the_synced_weights(tiny):
    """`sample_from_copy`: the trainer may change the policy while the engine serves; the engine
    samples the weights of its last `sync_weights` until the next one."""
    model, tok = tiny
    model = copy.deepcopy(model)  # the fixture's model is shared: change a copy
    engine = HFEngine(model, tok, batch_size=16)
    p = SamplingParams(max_new_tokens=8, n=1, temperature=0.0)
    before = engine.generate(PROMPTS, p)
    engine.sample_from_copy()
    same(engine.generate(PROMPTS, p), before)
    with torch.no_grad():  # the trainer's update, on the policy itself
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.5)
    same(engine.generate(PROMPTS, p), before)  # still the served weights
    engine.sync_weights(1)
    after = engine.generate(PROMPTS, p)
    same(after, HFEngine(model, tok, batch_size=16).generate(PROMPTS, p))  # now the policy's own
    assert after.response_ids != before.response_ids and after.policy_version == 1
