"""LoRA on the output layer (`model.target_modules` naming `lm_head`): the chunked log-probs the
trainer computes include the adapter, as sampling does, and its tensors receive gradients."""

from __future__ import annotations

import copy

import pytest
import torch

from turnrl.models import logprobs
from turnrl.models.loader import apply_lora
from turnrl.models.logprobs import response_log_probs


@pytest.mark.parametrize("recompute", [False, True])
def test_the_head_adapter_is_in_the_log_probs_and_trained(tiny, monkeypatch, recompute):
    if recompute:  # the backward recomputes each chunk's logits (the path of large micro-batches)
        monkeypatch.setattr(logprobs, "KEEP_LOGITS_BYTES", 0)
    base, _ = tiny
    model = apply_lora(copy.deepcopy(base), 4, 8, ["q_proj", "v_proj", "lm_head"])
    with torch.no_grad():  # a trained adapter: lora_B no longer zero
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.05)
    ids = torch.tensor([[5, 17, 33, 2, 40, 41, 9]])
    mask = torch.ones_like(ids)
    positions = torch.arange(ids.shape[1]).unsqueeze(0)
    for chunk in (1024, 2):  # one chunk, and several
        lp, _ = response_log_probs(model, ids, mask, positions, response_length=3, chunk_size=chunk)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[:, -4:-1].float()
        want = torch.log_softmax(logits, -1).gather(-1, ids[:, -3:, None]).squeeze(-1)
        torch.testing.assert_close(lp, want, atol=1e-5, rtol=1e-5)
    lp.sum().backward()
    head_lora = [p for n, p in model.named_parameters() if "lm_head" in n and "lora_" in n]
    assert head_lora and all(p.grad is not None and p.grad.abs().sum() > 0 for p in head_lora)
