"""Token-budget micro-batches (`use_dynamic_bsz`): the partition is the hand-worked one, every pass
stays within its budget, results come back in the batch's own order, and the update's gradient
and the log-probs equal those of fixed-size micro-batches."""

import numpy as np
import pytest
import torch

from tests.support.actors import agent_like_batch, make_actor
from turnrl.batch import Batch
from turnrl.config.schema import Config, OptimConfig
from turnrl.trainer.stages import old_log_probs_from_rollout
from turnrl.workers import parallel
from turnrl.workers.microbatch import restore_order, row_lengths, split_rows, token_budget_split


def lengths_batch(prompts: list[int], responses: list[int], width: int = 4) -> Batch:
    """Rows with the given real prompt / response lengths: left-padded prompts, right-padded responses."""
    p_w = max(prompts)
    rows = []
    for p, r in zip(prompts, responses, strict=True):
        rows.append([0] * (p_w - p) + [1] * p + [1] * r + [0] * (width - r))
    mask = torch.tensor(rows)
    resp = mask[:, p_w:]
    return Batch(tensors={"attention_mask": mask, "responses": resp.clone(), "response_mask": resp.clone()})


def test_row_lengths_count_prompt_and_used_response_columns():
    b = lengths_batch([3, 1, 2], [4, 0, 2])
    prompt, response = row_lengths(b)
    assert prompt.tolist() == [3, 1, 2] and response.tolist() == [4, 0, 2]


def test_budget_split_hand_worked():
    # totals (prompt + response): 7, 1, 4, 6, 3 -> longest first: rows 0 (3+4), 3 (2+4), 2 (2+2),
    # 4 (1+2), 1 (1+0). Budget 14, cost = rows x (longest prompt + longest response):
    #   [0]: 1 x 7 = 7; + row 3: 2 x (3 + 4) = 14 <= 14; + row 2: 3 x 7 = 21 > 14 -> cut
    #   [2]: 1 x 4 = 4; + row 4: 2 x (2 + 2) = 8; + row 1: 3 x 4 = 12 <= 14
    b = lengths_batch([3, 1, 2, 2, 1], [4, 0, 2, 4, 2])
    order, sizes = token_budget_split(b, 14, "k")
    assert order.tolist() == [0, 3, 2, 4, 1]
    assert sizes == [2, 3]


def test_budget_split_respects_the_budget_and_partitions_every_row():
    g = torch.Generator().manual_seed(3)
    prompts = torch.randint(1, 20, (40,), generator=g).tolist()
    responses = torch.randint(0, 30, (40,), generator=g).tolist()
    b = lengths_batch(prompts, responses, width=30)
    parts, order = split_rows(b, 0, 120, "k")
    assert sorted(order.tolist()) == list(range(40))
    assert sum(len(p) for p in parts) == 40
    for part in parts:
        p, r = row_lengths(part)
        assert len(part) * (int(p.max()) + int(r.max())) <= 120 or len(part) == 1


def test_a_row_longer_than_the_budget_names_the_key():
    b = lengths_batch([5, 1], [6, 1], width=6)
    with pytest.raises(
        ValueError, match=r"actor\.ppo_max_token_len_per_gpu=10 is smaller than one sequence .* \(11 tokens\)"
    ):
        token_budget_split(b, 10, "actor.ppo_max_token_len_per_gpu")


def test_restore_order_inverts_the_split_order():
    x = torch.arange(5)[:, None] * 10
    order = torch.tensor([3, 0, 4, 1, 2])
    assert restore_order(x[order], order).flatten().tolist() == [0, 10, 20, 30, 40]


def test_log_probs_by_token_budget_equal_fixed_micro_batches():
    fixed = make_actor(log_prob_micro_batch_size=1)
    dynamic = make_actor(use_dynamic_bsz=True, log_prob_max_token_len_per_gpu=40)
    batch = agent_like_batch(fixed.tokenizer)
    a, b = fixed.compute_log_prob(batch), dynamic.compute_log_prob(batch)
    m = batch["response_mask"].bool()
    # rows came back in the batch's order, not the length order they were computed in
    assert torch.allclose(a["log_probs"][m], b["log_probs"][m], atol=1e-5)
    assert torch.allclose(a["entropys"][m], b["entropys"][m], atol=1e-5)
    parts, order = split_rows(batch, 0, 40, "k")
    assert len(parts) > 1 and order.tolist() != list(range(len(batch)))  # the test exercises a reorder


def test_map_micro_batches_returns_rows_in_batch_order():
    batch = lengths_batch([3, 1, 2, 2, 1], [4, 0, 2, 4, 2])
    # a (B, T_resp) field whose every row holds the row's number
    batch["rollout_token_versions"] = torch.arange(5)[:, None].expand(5, 4).clone()
    (out,) = parallel.map_micro_batches(batch, 2, lambda mb: (mb["rollout_token_versions"] * 2,), 14, "k")
    assert out[:, 0].tolist() == [0, 2, 4, 6, 8]


def test_update_by_token_budget_equals_fixed_micro_batches():
    grads, metrics = [], []
    for kw in ({"ppo_micro_batch_size": 4}, {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 30}):
        actor = make_actor(optim=OptimConfig(lr=0.0, grad_clip=0.0), **kw)
        batch = agent_like_batch(actor.tokenizer)
        batch["old_log_probs"] = actor.compute_log_prob(batch)["log_probs"]
        actor.optim.step = lambda finite=True: {"actor/grad_norm": 0.0}  # keep the gradient for inspection
        metrics.append(actor.update(batch, step=0)[0])
        grads.append(torch.cat([p.grad.flatten() for p in actor.model.parameters() if p.grad is not None]))
    assert ((grads[0] - grads[1]).norm() / grads[0].norm()).item() < 1e-4
    assert metrics[0]["actor/pg_loss"] == pytest.approx(metrics[1]["actor/pg_loss"], abs=1e-6)
    assert metrics[0]["actor/entropy"] == pytest.approx(metrics[1]["actor/entropy"], rel=1e-5)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, True),  # the default: in-process engine, one rank, sync
        ({"bypass": "false"}, False),
        ({"bypass": True}, True),  # a YAML/CLI boolean
        ({"mode": "tis"}, False),  # a correction needs the trainer's own log-probs
        ({"engine": "server"}, False),  # another process's numbers, two mini-batches: recompute
        ({"engine": "server", "one_mini_batch": True}, True),  # on-policy: one epoch, one mini-batch
        ({"engine": "server", "one_mini_batch": True, "epochs": 2}, False),
        ({"ranks": 2}, False),  # rank 0 samples from a full copy with its own numerics
        ({"async": 1}, False),
        ({"async": 0}, True),  # async with staleness 0 is the synchronous loop
        ({"rollout_dtype": "bfloat16"}, False),  # a lower-precision copy: not the trainer's numbers
        ({"rollout_dtype": "bfloat16", "one_mini_batch": True}, True),  # on-policy: the ratio corrects
    ],
)
def test_auto_bypass_rule(settings, expected):
    cfg = Config()
    rc = cfg.algorithm.rollout_correction
    rc.bypass = settings.get("bypass", "auto")
    rc.mode = settings.get("mode", "none")
    cfg.rollout.engine = settings.get("engine", "hf")
    cfg.actor.ppo_epochs = settings.get("epochs", 1)
    if settings.get("one_mini_batch"):
        cfg.actor.ppo_mini_batch_size = cfg.data.train_batch_size
    cfg.trainer.n_gpus_per_node = settings.get("ranks", 1)
    cfg.rollout.dtype = settings.get("rollout_dtype", "")
    if "async" in settings:
        cfg.trainer.mode, cfg.trainer.max_staleness = "async", settings["async"]
    assert old_log_probs_from_rollout(cfg) is expected


def test_uid_column_survives_the_reorder():
    batch = lengths_batch([3, 1, 2], [4, 0, 2])
    batch["uid"] = np.array(["a", "b", "c"], dtype=object)
    parts, order = split_rows(batch, 0, 100, "k")
    assert [u for p in parts for u in p["uid"]] == [["a", "b", "c"][i] for i in order.tolist()]


@pytest.mark.parametrize(
    ("model_dtype", "rollout_dtype", "expected"),
    [
        ("auto", "float32", True),  # auto is float32 on a CPU: the same weights, no copy
        ("float32", "float32", True),
        ("auto", "bfloat16", False),
        ("bfloat16", "bfloat16", True),
    ],
)
def test_auto_bypass_compares_resolved_precisions(model_dtype, rollout_dtype, expected):
    cfg = Config()
    cfg.trainer.device = "cpu"
    cfg.model.dtype, cfg.rollout.dtype = model_dtype, rollout_dtype
    cfg.actor.ppo_mini_batch_size = cfg.data.train_batch_size // 2  # not on-policy: only the module rule
    assert old_log_probs_from_rollout(cfg) is expected
