"""The Tinker service's batched `forward_backward` against the obvious version, one datum at a time:
the same log-probs, losses and accumulated gradients (to rounding), for data of several lengths
spread over several padded passes, with a loss that reads per-token inputs."""

import copy

import numpy as np
import pytest
import torch

from turnrl.models.loader import model_directory
from turnrl.tinker import training
from turnrl.tinker.backbone import Backbone
from turnrl.tinker.protobuf import DatumIn, ForwardBackwardIn
from turnrl.tinker.registry import LoraSpec, TrainingModel


def data(lengths: list[int]) -> list[DatumIn]:
    g = torch.Generator().manual_seed(0)
    out = []
    for n in lengths:
        tokens = torch.randint(5, 400, (n + 1,), generator=g).tolist()
        adv = torch.randn(n, generator=g).numpy().astype(np.float32)
        logprobs = -torch.rand(n, generator=g).numpy().astype(np.float32)
        inputs = {"target_tokens": np.array(tokens[1:]), "advantages": adv, "logprobs": logprobs}
        out.append(DatumIn(tokens[:-1], inputs))
    return out


@pytest.fixture
def client(tiny):
    model, tok = tiny
    backbone = Backbone(copy.deepcopy(model), tok, "tiny-random", str(model_directory("tiny-random")))
    lora = LoraSpec(rank=4, seed=0)
    backbone.add_adapter("a", backbone.lora_config(lora), seed=0)
    for p in backbone.parameters("a"):  # LoRA's B starts at 0: move it so every gradient is non-trivial
        torch.nn.init.normal_(p, std=0.05)
    return backbone, TrainingModel("m", "s", "tiny-random", "a", lora=lora, ready=True)


def run(backbone, model, req, one_by_one):
    spec = training.loss_spec(req.loss_fn)
    cfg = training.loss_config(spec, req.loss_fn, req.config)
    for p in backbone.parameters(model.adapter):
        p.grad = None
    out = training.forward_backward(backbone, model, req, spec, cfg, one_by_one=one_by_one)
    return out, [p.grad.clone() for p in backbone.parameters(model.adapter)]


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling"])
def test_batched_passes_equal_one_datum_at_a_time(client, monkeypatch, loss_fn):
    backbone, model = client
    monkeypatch.setattr(training, "TOKENS_PER_PASS", 64)  # several passes: 13 x 4 = 52 per pass at most
    lengths = [7, 13, 3, 11, 9, 5, 12, 8]
    assert len(training._passes(data(lengths), [0] * len(lengths))) > 1
    req = ForwardBackwardIn("m", 1, loss_fn, {}, False, data(lengths))
    # what would be encoded, as it is: each datum's arrays and the summed loss
    monkeypatch.setattr(training, "encode_forward_backward", lambda outputs, metrics: (outputs, metrics))
    (fast, fast_loss), fast_grads = run(backbone, model, req, one_by_one=False)
    (slow, slow_loss), slow_grads = run(backbone, model, req, one_by_one=True)
    assert abs(fast_loss["loss:sum"] - slow_loss["loss:sum"]) < 1e-4 * max(1.0, abs(slow_loss["loss:sum"]))
    assert len(fast) == len(slow) == len(lengths)
    for x, y in zip(fast, slow, strict=True):
        for key in ("logprobs", "elementwise_loss"):
            np.testing.assert_allclose(x[key], y[key], atol=1e-5)
    for a, b in zip(fast_grads, slow_grads, strict=True):  # float32 sums in another order
        assert (a - b).abs().max() <= 1e-4 * b.abs().max(), (a - b).abs().max()


def test_passes_by_hand():
    passes = training._passes([DatumIn([1] * n, {}) for n in [10, 10, 30, 5]], [0] * 4)
    assert passes == [[0, 1, 2, 3]]  # 4 x 30 padded tokens fit the default budget


def test_passes_cut_at_the_budget(monkeypatch):
    monkeypatch.setattr(training, "TOKENS_PER_PASS", 40)
    passes = training._passes([DatumIn([1] * n, {}) for n in [10, 10, 30, 5, 50]], [0] * 5)
    assert passes == [[0, 1], [2], [3], [4]]  # 3 x 30 > 40; 30 + 5 -> 2 x 30 > 40; 50 alone


def grouped(prompts: list[list[int]], per_prompt: int, loss_fn: str) -> list[DatumIn]:
    """RL-shaped data: each prompt sampled `per_prompt` times; the prompt's positions silent (weight 0
    for cross_entropy, advantage 0 for the others), each sample's tokens its own advantage."""
    g = torch.Generator().manual_seed(1)
    out = []
    for prompt in prompts:
        for _ in range(per_prompt):
            sampled = torch.randint(
                5, 400, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g
            ).tolist()
            tokens = prompt + sampled
            n = len(tokens) - 1
            silent = np.array([0.0] * (len(prompt) - 1) + [1.0] * len(sampled), dtype=np.float32)
            inputs = {"target_tokens": np.array(tokens[1:])}
            if loss_fn == "cross_entropy":
                inputs["weights"] = silent
            else:
                adv = float(torch.randn(1, generator=g))
                inputs["advantages"] = (silent * adv).astype(np.float32)
                inputs["logprobs"] = -torch.rand(n, generator=g).numpy().astype(np.float32)
            out.append(DatumIn(tokens[:-1], inputs))
    return out


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling", "ppo"])
def test_shared_prompts_run_once_and_give_the_one_by_one_numbers(client, monkeypatch, loss_fn):
    backbone, model = client
    prompts = [list(range(20, 31)), list(range(40, 47)), list(range(60, 73))]
    batch = grouped(prompts, 3, loss_fn)
    req = ForwardBackwardIn("m", 1, loss_fn, {}, False, batch)
    assert {training.silent_prefix(d, loss_fn) for d in batch} == {10, 6, 12}  # the prompt's positions
    monkeypatch.setattr(training, "encode_forward_backward", lambda outputs, metrics: (outputs, metrics))
    seen = []
    hook = backbone.model.get_decoder().embed_tokens.register_forward_hook(
        lambda m, a, o: seen.append(a[0].shape)
    )
    try:
        (fast, fast_loss), fast_grads = run(backbone, model, req, one_by_one=False)
    finally:
        hook.remove()
    assert seen[0][0] == 3  # the trunk saw each of the 3 prompts once, not 9 times
    (slow, slow_loss), slow_grads = run(backbone, model, req, one_by_one=True)
    assert abs(fast_loss["loss:sum"] - slow_loss["loss:sum"]) < 1e-4 * max(1.0, abs(slow_loss["loss:sum"]))
    for x, y in zip(fast, slow, strict=True):
        for key in ("logprobs", "elementwise_loss"):
            np.testing.assert_allclose(x[key], y[key], atol=1e-5)
    for a, b in zip(fast_grads, slow_grads, strict=True):
        assert (a - b).abs().max() <= 1e-4 * b.abs().max(), (a - b).abs().max()
