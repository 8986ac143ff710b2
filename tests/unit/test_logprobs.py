import torch

from turnrl.batch import Batch
from turnrl.models.logprobs import prompt_groups, response_log_probs, shared_prefix_log_probs
from turnrl.rollout.base import Generation, assemble
from turnrl.tensors import left_pad


def naive_log_probs(model, input_ids, attention_mask, position_ids, r, temperature):
    """The slow obvious version: full logits, full float32 log-softmax."""
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
    ).logits.float()
    logp = torch.log_softmax(logits[:, -r - 1 : -1] / temperature, dim=-1)
    return logp.gather(-1, input_ids[:, -r:, None]).squeeze(-1)


def group_batch(tokenizer, n=3):
    prompts = [tokenizer("What is 2 + 2?")["input_ids"], tokenizer("Hi")["input_ids"]]
    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    gen_batch = Batch(tensors={"input_ids": ids, "attention_mask": mask})
    g = torch.Generator().manual_seed(0)
    responses = [torch.randint(5, 1000, (k,), generator=g).tolist() for k in (4, 6, 2, 5, 6, 1)]
    gen = Generation(responses, [[0.0] * len(r) for r in responses], ["stop"] * 6)
    return assemble(gen_batch, gen, n, tokenizer.pad_token_id, 6)


def test_chunked_log_probs_equal_full_log_softmax(tiny):
    model, tok = tiny
    b = group_batch(tok)
    args = (b["input_ids"], b["attention_mask"], b["position_ids"], 6)
    with torch.no_grad():
        ref = naive_log_probs(model, *args, 0.7)
        lp, ent = response_log_probs(model, *args, temperature=0.7, chunk_size=5)  # chunks split rows
    mask = b["response_mask"].bool()
    assert torch.allclose(lp[mask], ref[mask], atol=1e-5)
    assert (ent[mask] > 0).all()


def test_shared_prefix_matches_plain_forward_values_and_gradients(tiny):
    model, tok = tiny
    b = group_batch(tok)
    args = (b["input_ids"], b["attention_mask"], b["position_ids"], 6)
    mask = b["response_mask"]
    grads = []
    outs = []
    for fn in (response_log_probs, shared_prefix_log_probs):
        model.zero_grad()
        lp, ent = fn(model, *args, temperature=0.9)
        ((lp * mask).sum() + 0.1 * (ent * mask).sum()).backward()
        outs.append((lp.detach(), ent.detach()))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    m = mask.bool()
    assert torch.allclose(outs[0][0][m], outs[1][0][m], atol=1e-5)
    assert torch.allclose(outs[0][1][m], outs[1][1][m], atol=1e-5)
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-6)
    model.zero_grad()


def test_prompt_groups_find_repeats_anywhere_in_order_of_appearance():
    # rows 0, 1 and 4 share [1, 2]; rows 2 and 3 share [3, 4]; row 5 is alone. unique() would
    # order [0, 9] first; the prompt pass keeps the order in which prompts appear
    prompts = torch.tensor([[1, 2], [1, 2], [3, 4], [3, 4], [1, 2], [0, 9]])
    first, expand = prompt_groups(prompts)
    assert first.tolist() == [0, 2, 5]
    assert expand.tolist() == [0, 0, 1, 1, 0, 2]


def test_shared_prefix_matches_plain_forward_when_groups_are_interleaved(tiny):
    # the order length-sorted micro-batches produce: samples of the two prompts alternate
    model, tok = tiny
    b = group_batch(tok).index([0, 3, 1, 4, 5, 2])
    args = (b["input_ids"], b["attention_mask"], b["position_ids"], 6)
    m = b["response_mask"].bool()
    with torch.no_grad():
        plain, _ = response_log_probs(model, *args, temperature=0.9)
        shared, _ = shared_prefix_log_probs(model, *args, temperature=0.9)
    assert torch.allclose(plain[m], shared[m], atol=1e-5)


def test_recomputing_chunk_logits_gives_the_same_gradient(tiny, monkeypatch):
    # small batches keep their logits for backward; large ones recompute them chunk by chunk
    import turnrl.models.logprobs as lp_mod

    model, tok = tiny
    b = group_batch(tok)
    args = (b["input_ids"], b["attention_mask"], b["position_ids"], 6)
    mask = b["response_mask"]
    grads = []
    for limit in (0, 2**40):  # 0: always recompute
        monkeypatch.setattr(lp_mod, "KEEP_LOGITS_BYTES", limit)
        model.zero_grad()
        lp, _ = response_log_probs(model, *args, temperature=0.9, chunk_size=5)
        (lp * mask).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.equal(grads[0], grads[1])
    model.zero_grad()
