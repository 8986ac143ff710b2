"""The actor role: builds its own policy, a NaN never reaches the weights, micro-batching equals
one big batch, and its state round-trips through the directory it is given."""

import torch

from tests.support.actors import agent_like_batch, make_actor
from turnrl.config.schema import OptimConfig


def test_actor_builds_the_same_start_policy_as_the_loader(tiny):
    model, _ = tiny  # load_model("tiny-random", seed=0)
    actor = make_actor()
    for (name, p), q in zip(model.named_parameters(), actor.model.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_nan_loss_skips_the_step_and_counts_it():
    actor = make_actor(optim=OptimConfig(lr=1e-2))
    batch = agent_like_batch(actor.tokenizer)
    batch["old_log_probs"] = actor.compute_log_prob(batch)["log_probs"]
    batch["advantages"] = batch["advantages"].clone()
    batch["advantages"][0, 0] = float("nan")
    before = [p.detach().clone() for p in actor.model.parameters()]
    metrics, _ = actor.update(batch, step=0)
    assert metrics["actor/skipped_steps"] == 1.0
    assert "actor/pg_loss" not in metrics
    assert all(torch.equal(a, b) for a, b in zip(before, actor.model.parameters(), strict=True))


def test_micro_batches_accumulate_to_the_full_batch_gradient():
    grads = []
    for micro in (4, 1):
        actor = make_actor(optim=OptimConfig(lr=0.0, grad_clip=0.0), ppo_micro_batch_size=micro)
        batch = agent_like_batch(actor.tokenizer)
        batch["old_log_probs"] = actor.compute_log_prob(batch)["log_probs"]
        actor.optim.step = lambda finite=True: {"actor/grad_norm": 0.0}  # keep the gradient for inspection
        actor.update(batch, step=0)
        grads.append(torch.cat([p.grad.flatten() for p in actor.model.parameters() if p.grad is not None]))
    # float32 sums in a different order: equal up to rounding
    assert ((grads[0] - grads[1]).norm() / grads[0].norm()).item() < 1e-4


def test_diagnostics_are_returned_as_data_only_when_asked():
    actor = make_actor(optim=OptimConfig(lr=1e-3))
    batch = agent_like_batch(actor.tokenizer)
    batch["old_log_probs"] = actor.compute_log_prob(batch)["log_probs"]
    _, none = actor.update(batch, step=0)
    assert none is None
    _, diag = actor.update(batch, step=1, diagnostics=True)
    assert {"ratio", "clipped", "dual_clipped", "pg_loss", "log_probs"} <= set(diag.keys())
    assert diag["ratio"].shape == batch["responses"].shape  # one micro-batch of 4 = the whole batch
    # the first update moved the policy: the ratio is no longer exactly 1 on model tokens
    assert (diag["ratio"][batch["response_mask"] > 0] != 1.0).any()


def test_save_and_load_restore_weights_optimizer_and_schedule(tmp_path):
    actor = make_actor(optim=OptimConfig(lr=1e-3, lr_warmup_steps=4))
    batch = agent_like_batch(actor.tokenizer)
    batch["old_log_probs"] = actor.compute_log_prob(batch)["log_probs"]
    actor.update(batch, step=0)
    actor.save(tmp_path / "actor")
    fresh = make_actor(optim=OptimConfig(lr=1e-3, lr_warmup_steps=4))
    fresh.load(tmp_path / "actor")
    for p, q in zip(actor.model.parameters(), fresh.model.parameters(), strict=True):
        assert torch.equal(p, q)
    # the schedule continues (warm-up step 2 of 4: lr = 1e-3 * 2/4), it does not restart
    assert fresh.optim.opt.param_groups[0]["lr"] == actor.optim.opt.param_groups[0]["lr"] == 5e-4
    a, _ = actor.update(batch, step=1)
    b, _ = fresh.update(batch, step=1)
    assert a == b  # same weights, same Adam moments, same RNG: the same next step, bit for bit
