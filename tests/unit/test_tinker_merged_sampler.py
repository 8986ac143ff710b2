"""A sampler's adapter merged into a copy of the base (`Backbone.merged`): the same outputs as the
adapter applied, the base and its tied input embeddings untouched, the copy dropped with its adapter."""

from __future__ import annotations

import copy

import torch

from turnrl.tinker.backbone import Backbone
from turnrl.tinker.registry import LoraSpec


def test_the_merged_copy_computes_what_the_adapter_computes(tiny):
    model, tok = tiny
    model = copy.deepcopy(model)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.get_input_embeddings().weight  # tied, as the embedded model's are
    base = Backbone(model, tok, "tiny-random", "")
    base.add_adapter("s1", base.lora_config(LoraSpec(rank=4)), seed=0)
    with torch.no_grad():  # a trained adapter: lora_B is no longer zero
        for p in base.parameters("s1"):
            p.copy_(torch.randn_like(p) * 0.05)
    embeddings = model.get_input_embeddings().weight.detach().clone()
    ids = torch.tensor([[3, 14, 15, 92, 65]])
    with torch.no_grad(), base.active("s1") as net:
        adapted = net(input_ids=ids).logits
    with torch.no_grad(), base.active(None) as net:
        plain = net(input_ids=ids).logits
    merged = base.merged("s1")
    with torch.no_grad():
        out = merged(input_ids=ids).logits
    torch.testing.assert_close(out, adapted, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(out, plain, atol=1e-3)  # the adapter does change the outputs
    assert torch.equal(model.get_input_embeddings().weight, embeddings)  # the base's inputs untouched
    assert torch.equal(merged.get_input_embeddings().weight, embeddings)  # and the copy's
    assert base.merged("s1") is merged  # kept while its adapter lives
    base.remove_adapter("s1")
    assert base._merged is None
