"""The optimizer's fused AdamW kernel against torch's per-parameter loop: the same update."""

from __future__ import annotations

import torch

from turnrl.config.schema import OptimConfig
from turnrl.workers.optim import Optimizer, fused_adamw_fits


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def test_fused_adamw_takes_the_same_steps_as_the_loop():
    cfg = OptimConfig(lr=1e-2, weight_decay=0.01, lr_warmup_steps=2)
    fused_model, loop_model = _model(0), _model(0)
    fused = Optimizer(fused_model, cfg)
    loop = Optimizer(loop_model, cfg)
    loop.opt.param_groups[0]["fused"] = None  # the per-parameter loop, torch's CPU default
    assert fused.opt.param_groups[0]["fused"] is True
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
    for _ in range(5):
        for model, opt in ((fused_model, fused), (loop_model, loop)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    moved = [
        (a - b).abs().max().item()
        for a, b in zip(fused_model.parameters(), _model(0).parameters(), strict=True)
    ]
    assert min(moved) > 1e-3  # five steps at lr 1e-2 moved every tensor
    for a, b in zip(fused_model.parameters(), loop_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_only_where_it_applies():
    assert fused_adamw_fits([torch.zeros(2, requires_grad=True)]) is True
    assert fused_adamw_fits([]) is None
    assert fused_adamw_fits([torch.zeros(2, device="meta")]) is None  # neither a CPU nor a CUDA tensor


def test_a_step_frees_the_gradients_it_spent():
    """After a step (taken or skipped) no gradient is held: between updates they would keep a
    second copy of the trainable weights' size alive through rollouts and validation. The step
    still used them: the weights moved by the update the gradient asked for."""
    model = _model(0)
    opt = Optimizer(model, OptimConfig(lr=1e-2))
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.ones(4, 8)).pow(2).mean().backward()
    assert all(p.grad is not None for p in model.parameters())
    out = opt.step()
    assert out["actor/grad_norm"] > 0
    assert all(p.grad is None for p in model.parameters())
    assert all((p - b).abs().max().item() > 0 for p, b in zip(model.parameters(), before, strict=True))
    model(torch.ones(4, 8)).pow(2).mean().backward()
    opt.step(finite_loss=False)  # skipped: nothing moves, nothing is kept either
    assert all(p.grad is None for p in model.parameters())
