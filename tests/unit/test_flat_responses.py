"""Responses whose every advantage is 0 (a group of equal scores) add exactly 0 to the policy
gradient, so the update leaves them out of its passes: the same weights as running every response,
fewer rows through the model, and every loss that reads them (KL loss, entropy bonus, the
covariance modes, a user's loss) still runs them all."""

import torch

from tests.support.actors import agent_like_batch, make_actor
from turnrl.algorithms.core import flat_rows
from turnrl.config.schema import OptimConfig


def test_flat_rows_hand_worked():
    adv = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 7.0], [float("nan"), 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 0, 0]])
    # row 2's 7.0 sits on a masked position: flat; row 3's NaN is counted: not flat, so it is seen
    assert flat_rows(adv, mask).tolist() == [True, False, True, False]


def flat_batch(actor, flat_groups=("b",)):
    batch = agent_like_batch(actor.tokenizer)
    batch["old_log_probs"] = actor.compute_log_prob(batch)["log_probs"]
    for i, uid in enumerate(batch["uid"]):
        if uid in flat_groups:
            batch["advantages"][i] = 0.0
    return batch


def rows_through_the_model(actor) -> list[int]:
    """The rows of every forward from now on (a group's shared prompt once, then its responses)."""
    seen: list[int] = []
    actor.model.get_input_embeddings().register_forward_hook(lambda m, i, o: seen.append(o.shape[0]))
    return seen


def update_twice(flat_groups, **kw):
    """Two updates (the second moves AdamW's moments and decays the weights as well); the weights,
    the last metrics and the rows each forward ran."""
    actor = make_actor(optim=OptimConfig(lr=1e-2, weight_decay=0.1), **kw)
    actor.update(flat_batch(actor, ()), step=0)
    second = flat_batch(actor, flat_groups)
    seen = rows_through_the_model(actor)
    metrics, _ = actor.update(second, step=1)
    return [p.detach().clone() for p in actor.model.parameters()], metrics, seen


def close(a, b):
    return all(torch.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in zip(a, b, strict=True))


def gradient_and_rows(micro: int, **kw):
    """One update's gradient (kept: the step is skipped for inspection), its metrics, the rows run."""
    actor = make_actor(optim=OptimConfig(lr=0.0, grad_clip=0.0), ppo_micro_batch_size=micro, **kw)
    batch = flat_batch(actor)
    actor.optim.step = lambda finite=True: {"actor/grad_norm": 0.0}
    seen = rows_through_the_model(actor)
    metrics, _ = actor.update(batch, step=0)
    grad = torch.cat([p.grad.flatten() for p in actor.model.parameters() if p.grad is not None])
    return grad, metrics, seen


def test_leaving_flat_responses_out_gives_the_same_gradient():
    for micro in (4, 1):
        every, m_every, seen_every = gradient_and_rows(micro, skip_flat_responses=False)
        skipped, m_skip, seen_skip = gradient_and_rows(micro)
        # the same sums in another order (the mini-batch's denominators: a count of the kept rows
        # alone would double it)
        assert ((every - skipped).norm() / every.norm()).item() < 1e-5
        assert "actor/flat_responses" not in m_every and m_skip["actor/flat_responses"] == 0.5
        assert abs(m_skip["actor/pg_loss"] - m_every["actor/pg_loss"]) < 1e-6
        # half the rows: at 4 a pass, 2 prompts and 4 responses against group a's prompt and 2
        # responses; at 1 a pass, 4 responses against 2
        assert sum(seen_every) == {4: 6, 1: 4}[micro] and sum(seen_skip) == sum(seen_every) // 2


def test_an_all_flat_step_runs_nothing_and_still_decays_and_moves_the_moments():
    every, _, seen_every = update_twice(("a", "b"), skip_flat_responses=False)
    skipped, metrics, seen_skip = update_twice(("a", "b"))
    assert close(every, skipped)
    assert sum(seen_skip) == 0 and sum(seen_every) == 6
    assert metrics["actor/flat_responses"] == 1.0 and metrics["actor/pg_loss"] == 0.0
    assert "actor/entropy" not in metrics  # nothing ran to average
    # and the step did move the weights (momentum and decay), as the full path's did
    start = make_actor(optim=OptimConfig(lr=1e-2, weight_decay=0.1))
    start.update(flat_batch(start, ()), step=0)
    moved = [p.detach() for p in start.model.parameters()]
    assert not close(moved, skipped)


def test_losses_that_read_flat_responses_run_them_all():
    for kw in (
        {"use_kl_loss": True},
        {"entropy_coeff": 0.01},
        {"policy_loss_mode": "clip_cov"},
        {"policy_loss_mode": "kl_cov"},
    ):
        actor = make_actor(**kw)
        assert not actor.skips_flat, kw
    assert make_actor().skips_flat and make_actor(policy_loss_mode="gspo").skips_flat


def test_a_users_loss_runs_every_response(tmp_path):
    loss = tmp_path / "my_loss.py"
    loss.write_text("def fn(x):\n    return -x.advantages * x.log_prob\n")
    assert not make_actor(policy_loss_mode=f"{loss}:fn").skips_flat


def test_the_inspectors_step_runs_every_response():
    actor = make_actor(optim=OptimConfig(lr=1e-3))
    batch = flat_batch(actor)
    seen = rows_through_the_model(actor)
    _, diag = actor.update(batch, step=0, diagnostics=True)
    assert sum(seen) == 6 and diag["ratio"].shape[0] == 4
