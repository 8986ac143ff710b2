"""The leave-one-out estimator per turn (`turn_rloo`) is unbiased when the policy decides how many
turns an episode takes; baselines averaged over the turns of one index are not (verl RFC #7244).

A toy agent with an explicit softmax policy, three decisions and four possible episodes:

    turn 0: answer (R = 0.2, ends)                or search (step reward 0.5)
    turn 1: answer (R = 0.6, ends)                or search again (step reward 0.25)
    turn 2: answer x (R = 1, ends)                or answer y (R = 0, ends)

Every group of n = 3 episodes (4^3 = 64 of them) is enumerated with its probability, so each
estimator's expected gradient is exact, not sampled: E[grad] = grad_theta sum_groups P(group)
* (1/n) sum_i sum_k log pi(a_ik) * A_ik, with P(group) and A held fixed. The true gradient of the
objective the estimators target, J = E[(1 + omega) R + omega sum_k r_k] (gamma = 1), comes from
autograd on J's closed form.
"""

import itertools

import numpy as np
import torch

from turnrl.algorithms.turn_credit import turn_rloo_advantage, turn_spans

EPISODES = [  # (actions per turn, step reward per turn, score R)
    ((0,), (0.0,), 0.2),
    ((1, 0), (0.5, 0.0), 0.6),
    ((1, 1, 0), (0.5, 0.25, 0.0), 1.0),
    ((1, 1, 1), (0.5, 0.25, 0.0), 0.0),
]
THETA = [[0.3, -0.2], [0.1, 0.4], [-0.5, 0.2]]  # logits per turn over its two actions
N, OMEGA = 3, 1.0


def log_probs(theta: torch.Tensor, actions: tuple[int, ...]) -> torch.Tensor:
    """log pi(a_k | turn k) of each turn of an episode."""
    return torch.stack([torch.log_softmax(theta[k], -1)[a] for k, a in enumerate(actions)])


def true_gradient(theta: torch.Tensor) -> torch.Tensor:
    theta = theta.detach().requires_grad_(True)
    j = sum(
        log_probs(theta, acts).sum().exp() * ((1 + OMEGA) * score + OMEGA * sum(steps))
        for acts, steps, score in EPISODES
    )
    (grad,) = torch.autograd.grad(j, theta)
    return grad


def as_batch(group: tuple[int, ...]):
    """The group as response rows: one token per turn, one observation token between turns."""
    width = 2 * max(len(EPISODES[e][0]) for e in group) - 1
    mask = torch.zeros(len(group), width, dtype=torch.float64)
    rewards = torch.zeros(len(group), width, dtype=torch.float64)
    turn_rewards = np.empty(len(group), dtype=object)
    for i, e in enumerate(group):
        acts, steps, score = EPISODES[e]
        mask[i, 0 : 2 * len(acts) - 1 : 2] = 1.0
        rewards[i, 2 * len(acts) - 2] = score
        turn_rewards[i] = list(steps)
    return rewards, mask, turn_rewards


def ours(group: tuple[int, ...]) -> list[list[float]]:
    """turn_rloo's advantage of each turn, read off its token."""
    rewards, mask, turn_rewards = as_batch(group)
    adv, _ = turn_rloo_advantage(rewards, mask, np.zeros(len(group), dtype=object), OMEGA, 1.0, turn_rewards)
    return [[float(adv[i, s]) for s, _ in turn_spans(row)] for i, row in enumerate(mask.tolist())]


def returns(e: int) -> list[float]:
    _, steps, score = EPISODES[e]
    return [sum(steps[k:]) + score for k in range(len(steps))]


def per_index_mean(group: tuple[int, ...]) -> list[list[float]]:
    """The baseline averaged over every turn of index k in the group, the episode's own included
    (and the same for the episode term)."""
    scores = [EPISODES[e][2] for e in group]
    out = []
    for e in group:
        row = []
        for k, g in enumerate(returns(e)):
            at_k = [returns(f)[k] for f in group if len(returns(f)) > k]
            row.append(EPISODES[e][2] - np.mean(scores) + OMEGA * (g - np.mean(at_k)))
        out.append(row)
    return out


def per_index_summed(group: tuple[int, ...]) -> list[list[float]]:
    """Per-index normalised rewards summed over the episode's remaining turns (MT-GRPO's shape): the
    reward after turn j (its step reward, plus R after the last turn) minus its index's mean."""

    def after(e: int, j: int) -> float:
        acts, steps, score = EPISODES[e]
        return steps[j] + (score if j == len(acts) - 1 else 0.0)

    scores = [EPISODES[e][2] for e in group]
    out = []
    for e in group:
        turns = len(EPISODES[e][0])
        centred = [
            after(e, j) - np.mean([after(f, j) for f in group if len(EPISODES[f][0]) > j])
            for j in range(turns)
        ]
        out.append([EPISODES[e][2] - np.mean(scores) + OMEGA * sum(centred[k:]) for k in range(turns)])
    return out


def expected_gradient(theta: torch.Tensor, estimator) -> torch.Tensor:
    theta = theta.detach().requires_grad_(True)
    total = torch.zeros((), dtype=torch.float64)
    for group in itertools.product(range(len(EPISODES)), repeat=N):
        lps = [log_probs(theta, EPISODES[e][0]) for e in group]
        p = torch.stack([lp.sum() for lp in lps]).sum().exp().detach()
        adv = estimator(group)
        total = (
            total
            + p
            * sum((lp * torch.tensor(a, dtype=torch.float64)).sum() for lp, a in zip(lps, adv, strict=True))
            / N
        )
    (grad,) = torch.autograd.grad(total, theta)
    return grad


def test_turn_rloo_is_unbiased_and_per_index_baselines_are_not():
    theta = torch.tensor(THETA, dtype=torch.float64)
    truth = true_gradient(
        theta
    )  # d/d(logit 0, logit 1) per turn: -0.2668 0.2668, 0.0264 -0.0264, 0.0962 -0.0962
    got = expected_gradient(theta, ours)
    assert torch.allclose(got, truth, atol=1e-12)  # exact: an enumeration, not a sample
    # per_index_mean: -0.1779 0.1779, 0.0171 -0.0171, 0.0417 -0.0417 (turn k scaled by about 1 - 1/m_k);
    # per_index_summed: -0.0855 0.0855, 0.0272 -0.0272, 0.0417 -0.0417
    for biased in (per_index_mean, per_index_summed):
        off = expected_gradient(theta, biased)
        assert float((off - truth).norm()) > 0.3 * float(truth.norm()), biased.__name__
        # and not a rescaled true gradient either: each turn's decision is scaled by another factor
        ratios = (off[:, 0] / truth[:, 0]).tolist()
        assert max(ratios) - min(ratios) > 0.2, (biased.__name__, ratios)
