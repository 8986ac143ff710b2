"""The actor's update: a NaN never reaches the weights; micro-batching equals one big batch."""

import numpy as np
import torch

from turnrl.batch import Batch
from turnrl.config.schema import ActorConfig
from turnrl.data.dataset import left_pad
from turnrl.rollout.base import Generation, assemble
from turnrl.workers.actor import Actor


def agent_like_batch(tokenizer, n=2):
    prompts = [tokenizer("What is 2 + 2?")["input_ids"], tokenizer("Hi")["input_ids"]]
    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    g = torch.Generator().manual_seed(1)
    responses = [torch.randint(5, 1000, (k,), generator=g).tolist() for k in (4, 6, 3, 5)]
    out = assemble(
        Batch(tensors={"input_ids": ids, "attention_mask": mask}),
        Generation(responses, [[0.0] * len(r) for r in responses], ["stop"] * 4),
        n,
        tokenizer.pad_token_id,
        6,
    )
    out["uid"] = np.array(["a", "a", "b", "b"], dtype=object)
    out["advantages"] = torch.tensor([[1.0] * 6, [-1.0] * 6, [0.5] * 6, [-0.5] * 6]) * out["response_mask"]
    return out


def test_nan_loss_skips_the_step_and_counts_it(tiny):
    model, tok = tiny
    actor = Actor(model, ActorConfig(lr=1e-2), temperature=1.0)
    batch = agent_like_batch(tok)
    batch["old_log_probs"], _ = actor.compute_log_prob(batch)
    batch["advantages"] = batch["advantages"].clone()
    batch["advantages"][0, 0] = float("nan")
    before = [p.detach().clone() for p in model.parameters()]
    metrics = actor.update(batch, mini_batch_responses=4, seed=0)
    assert metrics["actor/skipped_steps"] == 1.0
    assert "actor/pg_loss" not in metrics
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_micro_batches_accumulate_to_the_full_batch_gradient(tiny):
    model, tok = tiny
    batch = agent_like_batch(tok)
    grads = []
    for micro in (4, 1):
        actor = Actor(model, ActorConfig(lr=0.0, ppo_micro_batch_size=micro, grad_clip=0.0), temperature=1.0)
        batch["old_log_probs"], _ = actor.compute_log_prob(batch)
        actor.optim.step = lambda finite=True: {"actor/grad_norm": 0.0}  # keep the gradient for inspection
        actor.update(batch, mini_batch_responses=4, seed=0)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        model.zero_grad(set_to_none=True)
    # float32 sums in a different order: equal up to rounding
    assert ((grads[0] - grads[1]).norm() / grads[0].norm()).item() < 1e-4
