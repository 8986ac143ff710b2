"""The supervised losses: hand-worked numbers, a slow obvious version, and micro-batches that add up to
the one-big-batch loss and gradient (on the real tiny model)."""

import math

import pytest
import torch

from turnrl.config.supervised_schema import RMConfig, SFTConfig
from turnrl.models.loader import load_tokenizer
from turnrl.supervised.batches import right_pad
from turnrl.supervised.chat import Tokenized
from turnrl.supervised.losses import bradley_terry, pair_loss, sft_loss
from turnrl.supervised.rm import RMObjective, sequence_rewards
from turnrl.supervised.rm_data import Pair
from turnrl.supervised.sft import SFTObjective

CPU = torch.device("cpu")


def test_bradley_terry_hand_worked():
    # margin  1: -log sigma(1)  = log(1 + e^-1) = 0.313262
    # margin -2: -log sigma(-2) = log(1 + e^2)  = 2.126928
    # margin  0: -log sigma(0)  = log 2         = 0.693147
    loss, margin = bradley_terry(torch.tensor([1.5, -1.0, 0.25]), torch.tensor([0.5, 1.0, 0.25]))
    assert margin.tolist() == [1.0, -2.0, 0.0]
    assert loss.tolist() == pytest.approx([0.313262, 2.126928, 0.693147], abs=1e-6)
    # a step of 4 pairs, this micro-batch holds 3 of them: (0.313262 + 2.126928 + 0.693147) / 4 = 0.783334
    assert pair_loss(
        torch.tensor([1.5, -1.0, 0.25]), torch.tensor([0.5, 1.0, 0.25]), 4
    ).item() == pytest.approx(0.783334, abs=1e-6)
    # large margins stay finite: -log sigma(-100) = 100 (+ e^-100)
    assert bradley_terry(torch.tensor([-100.0]), torch.tensor([0.0]))[0].item() == pytest.approx(100.0)


def test_sft_loss_is_over_the_steps_tokens():
    # micro-batch tokens log p = -1, -2 in a step of 4 assistant tokens: (1 + 2) / 4 = 0.75
    assert sft_loss(torch.tensor([-1.0, -2.0]), 4).item() == 0.75


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def conversations(tok) -> list[Tokenized]:
    """Three conversations of different lengths with masks that start mid-row and have holes."""
    out = []
    for n, (start, holes) in enumerate([(3, []), (10, [12, 13]), (5, [20])]):
        ids = tok(
            " ".join(["word", "other", "thing"][k % 3] for k in range(8 + 7 * n)), add_special_tokens=False
        )["input_ids"]
        mask = [int(j >= start and j not in holes) for j in range(len(ids))]
        out.append(Tokenized(ids, mask))
    return out


def slow_sft_loss(model, examples: list[Tokenized]) -> torch.Tensor:
    """One row at a time, no padding, full-vocabulary log-softmax: the obvious version."""
    total, count = torch.zeros(()), 0
    for e in examples:
        ids = torch.tensor([e.ids])
        logp = model(input_ids=ids).logits.float().log_softmax(-1)[0, :-1]
        token_logp = logp.gather(-1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(e.mask[1:], dtype=torch.bool)
        total = total - token_logp[mask].sum()
        count += int(mask.sum())
    return total / count


def grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def accumulate(objective, model, examples, micro: int) -> tuple[float, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    units = objective.units(examples)
    total = 0.0
    for k in range(0, len(examples), micro):
        loss, _ = objective.loss(model, examples[k : k + micro], units, CPU)
        loss.backward()
        total += loss.item()
    return total, grads(model)


def test_sft_micro_batches_add_up_to_one_big_batch_and_the_slow_loss(tok):
    cfg = SFTConfig()
    cfg.model.path = "tiny-random"
    objective = SFTObjective(cfg, tok)
    model = objective.build(CPU, seed=0)
    examples = conversations(tok)
    assert objective.units(examples) == sum(sum(e.mask) for e in examples)

    model.zero_grad(set_to_none=True)
    slow = slow_sft_loss(model, examples)
    slow.backward()
    slow_grads = grads(model)
    big, big_grads = accumulate(objective, model, examples, micro=3)
    for micro in (1, 2):
        loss, g = accumulate(objective, model, examples, micro)
        assert loss == pytest.approx(big, rel=1e-6)
        for a, b in zip(g, big_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)  # float sums in another order
    assert big == pytest.approx(slow.item(), rel=1e-6)
    for a, b in zip(big_grads, slow_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_rm_scores_are_read_at_the_last_token_as_transformers_reads_them(tok):
    cfg = RMConfig()
    cfg.model.path = "tiny-random"
    objective = RMObjective(cfg, tok)
    assert objective.pad_id != tok.eos_token_id  # else transformers would read one token early
    model = objective.build(CPU, seed=0).eval()
    seqs = [[*e.ids, tok.eos_token_id] for e in conversations(tok)]
    ids, mask = right_pad(seqs, objective.pad_id)
    with torch.no_grad():
        ours = sequence_rewards(model, ids, mask)
        theirs = model(input_ids=ids, attention_mask=mask).logits[:, 0]  # finds the end by pad_token_id
        alone = torch.stack([model(input_ids=torch.tensor([s])).logits[0, 0] for s in seqs])
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours, alone, rtol=1e-5, atol=1e-6)


def test_rm_micro_batches_add_up_to_one_big_batch(tok):
    cfg = RMConfig()
    cfg.model.path = "tiny-random"
    objective = RMObjective(cfg, tok)
    model = objective.build(CPU, seed=0)
    c = conversations(tok)
    pairs = [Pair(c[0].ids, c[1].ids), Pair(c[2].ids, c[0].ids[:5]), Pair(c[1].ids[:9], c[2].ids)]
    big, big_grads = accumulate(objective, model, pairs, micro=3)
    # the slow version: one sequence at a time, the mean of -log sigma over the pairs
    with torch.no_grad():
        r = [
            (sequence_rewards(model, torch.tensor([p.chosen]), torch.ones(1, len(p.chosen), dtype=torch.long)),
             sequence_rewards(model, torch.tensor([p.rejected]), torch.ones(1, len(p.rejected), dtype=torch.long)))
            for p in pairs
        ]  # fmt: skip
    slow = sum(math.log1p(math.exp(-(a - b).item())) for a, b in r) / 3
    assert big == pytest.approx(slow, rel=1e-5)
    loss, g = accumulate(objective, model, pairs, micro=1)
    assert loss == pytest.approx(big, rel=1e-6)
    for a, b in zip(g, big_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)  # float sums in another order
