"""Credit per model turn for multi-turn episodes: GiGPO (Feng et al. 2025, "Group-in-Group Policy
Optimization for LLM Agent Training", arXiv 2505.10978) and a leave-one-out estimator per turn,
`turn_rloo`, both optionally fed with step rewards from the tools.

A turn is a maximal run of model tokens (mask 1) in the response; episode i has K_i of them. R_i is
the episode's score (its summed token rewards); r_ik is the step reward of turn k (the tools' reward
for the call(s) it made, `rollout.multi_turn.step_rewards`, already times the rollout's
`step_reward_weight`; 0 without step rewards). With the discount gamma, turn k's return is

    G_ik = sum_{j=k}^{K_i-1} gamma^(j-k) * r_ij  +  gamma^(K_i-1-k) * R_i

i.e. G_i,K-1 = r_i,K-1 + R_i and G_ik = r_ik + gamma * G_i,k+1: a step reward counts for its own turn
and, discounted, for the turns before it (ROLL's step rewards, and StepSearch's, Wang et al. 2025,
arXiv 2505.15107, enter the return the same way). Without step rewards G_ik = gamma^(K_i-1-k) * R_i.

GiGPO (`gigpo_advantage`). An outcome estimator gives every turn of an episode one advantage; GiGPO
adds a step-level relative advantage over the turns that acted from the same state (an *anchor
state*): what the environment showed just before the turn, the prompt for a first turn, the
observation tokens (the maximal mask-0 run) right before a later turn, within one prompt's group
(`uid`). Per token of turn k of episode i:

    A = A_episode(i) + step_weight * A_step(i, k)
    A_episode(i) = (R_i - mean_group R) / (std_group R + eps)                  (GRPO)
    A_step(i, k) = (G_ik - mean_state G) / (std_state G + eps)   over the turns of one state

A state reached by one turn only has no comparison: its A_step is 0 (as is any state whose
returns are all equal). `norm_by_std=False` drops both divisions (Dr. GRPO).

Leave-one-out per turn (`turn_rloo_advantage`). Per token of turn k of episode i of a group of n:

    A = (R_i - mean_{j != i} R_j) + step_weight * (G_ik - b_ik)
    b_ik = mean of G_jk over the other episodes j != i of the group with K_j > k;
           where none has, b_i,k-1 (the nearest earlier turn index another episode reached)

No division by a standard deviation (it would depend on the episode's own return). Unbiased: the n
episodes of a group are sampled independently given the prompt, and b_ik and the episode term's
baseline are functions of the *other* episodes alone. So given episode i's history h_ik up to turn
k, E[grad log pi(a_ik | h_ik) * b_ik | h_ik] = E[b_ik] * E[grad log pi(a_ik | h_ik) | h_ik] = 0,
whether or not turn k exists (K_i > k is decided by h_ik, i.e. by the episode's earlier actions),
and the expected gradient is that of sum_k grad log pi(a_ik) * (R_i + step_weight * G_ik): with
gamma = 1, grad E[(1 + step_weight) * R + step_weight * sum_k r_k]. A baseline averaged over *all*
the turns of index k, the episode's own included, is not: its share 1/m_k of the episode's own
return (m_k the turns of index k in the group) scales that turn's credit by 1 - 1/m_k, and m_k
depends on how many episodes the policy kept going to turn k; likewise summing per-index
normalised rewards over an episode's remaining turns subtracts as many baselines as the episode
has turns left, a number its own actions decide (verl RFC #7244). tests/unit/test_turn_credit_toy.py
checks both by enumerating every group of a toy softmax policy.

Observation tokens and padding get exactly 0 in both. GiGPO's returns (never read: no critic) equal
its advantages; `turn_rloo`'s are G_ik on the tokens of turn k.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from numbers import Real

import numpy as np
import torch
from torch import Tensor

from turnrl.algorithms.groups import group_ids, group_stats

TurnRewards = np.ndarray | Sequence[Sequence[float]]
"""Per row, the step rewards of its model turns in order (the batch's `turn_rewards`)."""


def turn_spans(mask_row: Sequence[int]) -> list[tuple[int, int]]:
    """The maximal runs of 1s in one response's mask, as [start, end) pairs: the model turns."""
    spans, start = [], None
    for t, m in enumerate(mask_row):
        if m and start is None:
            start = t
        elif not m and start is not None:
            spans.append((start, t))
            start = None
    if start is not None:
        spans.append((start, len(mask_row)))
    return spans


def turn_of_token(response_mask: Tensor) -> tuple[Tensor, Tensor]:
    """(turn index of every token, -1 before the first turn; turns per row), vectorised: a turn
    starts at a model token whose predecessor is not one."""
    model = response_mask != 0
    before = torch.zeros_like(model)
    before[:, 1:] = model[:, :-1]
    starts = model & ~before
    return starts.long().cumsum(-1) - 1, starts.sum(-1)


def spread(per_turn: Tensor, response_mask: Tensor, like: Tensor) -> Tensor:
    """Each turn's value on its model tokens, exactly 0 on observations and padding."""
    turn, _ = turn_of_token(response_mask)
    if per_turn.shape[1] == 0:
        return torch.zeros_like(like)
    values = per_turn.gather(1, turn.clamp(min=0, max=per_turn.shape[1] - 1))
    return torch.where(response_mask != 0, values, torch.zeros_like(values)).to(like.dtype)


def step_reward_table(turn_rewards: TurnRewards | None, turns: Tensor, where: str) -> Tensor:
    """(B, max turns) float64 step rewards, 0 past each row's turns; checked: one finite number per
    model turn (a mismatch is a bug between the rollout and the batch, said in one line)."""
    size = (len(turns), int(turns.max()) if len(turns) else 0)
    table = torch.zeros(size, dtype=torch.float64)
    if turn_rewards is None:
        return table
    if len(turn_rewards) != len(turns):
        raise ValueError(f"{where}: turn_rewards has {len(turn_rewards)} rows for a batch of {len(turns)}")
    for i, row in enumerate(turn_rewards):
        values = list(row)
        if len(values) != int(turns[i]):
            raise ValueError(
                f"{where}: turn_rewards[{i}] has {len(values)} values for {int(turns[i])} model turns "
                "(one step reward per turn)"
            )
        for v in values:
            if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(float(v)):
                raise ValueError(f"{where}: turn_rewards[{i}] holds {v!r}; a step reward is a finite number")
        table[i, : len(values)] = torch.tensor([float(v) for v in values], dtype=torch.float64)
    return table


def turn_returns(scores: Tensor, step_rewards: Tensor, turns: Tensor, gamma: float) -> Tensor:
    """G_ik (module docstring) for every row and turn, (B, max turns), 0 past a row's turns;
    vectorised over rows, backwards over turns: G = r + carry, then carry = gamma * G, where the
    carry starts as the score R (undiscounted at the last turn)."""
    out = torch.zeros_like(step_rewards)
    carry = scores.to(torch.float64).clone()
    for k in range(step_rewards.shape[1] - 1, -1, -1):
        live = k < turns
        g = step_rewards[:, k] + carry
        out[:, k] = torch.where(live, g, torch.zeros_like(g))
        carry = torch.where(live, gamma * g, carry)
    return out


def turn_baseline(returns: Tensor, turns: Tensor, codes: Tensor, n_groups: int) -> Tensor:
    """b_ik (module docstring), (B, max turns): the mean return at turn index k of the *other*
    episodes of the group that reached it, else the row's b at k-1; 0 past a row's turns."""
    width = returns.shape[1]
    reached = (torch.arange(width)[None, :] < turns[:, None]).to(returns.dtype)
    own = returns * reached
    total = torch.zeros(n_groups, width, dtype=returns.dtype).index_add_(0, codes, own)
    count = torch.zeros(n_groups, width, dtype=returns.dtype).index_add_(0, codes, reached)
    others_total, others = total[codes] - own, count[codes] - reached
    base = torch.where(others > 0, others_total / others.clamp(min=1), torch.full_like(own, math.nan))
    for k in range(1, width):  # no other episode got this far: the nearest earlier index
        base[:, k] = torch.where(torch.isnan(base[:, k]), base[:, k - 1], base[:, k])
    return torch.nan_to_num(base, nan=0.0) * reached


def _check_shapes(where: str, **tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1:
        said = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"{where}: {said} must have one shape")


def _state_before(ids: Sequence[int], mask: Sequence[int], start: int) -> tuple[int, ...]:
    """The observation right before the turn starting at `start`: the mask-0 tokens ending there
    (empty for the first turn: its state is the prompt, shared by the whole group)."""
    t = start
    while t > 0 and not mask[t - 1]:
        t -= 1
    return tuple(ids[t:start])


def _relative(values: Tensor, norm_by_std: bool, eps: float) -> Tensor:
    """(v - mean) / (unbiased std + eps) over one set; 0 for a set of one or of equal values."""
    if values.numel() < 2 or bool((values == values[0]).all()):
        return torch.zeros_like(values)
    centred = values - values.mean()
    return centred / (values.std() + eps) if norm_by_std else centred


def gigpo_advantage(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    responses: Tensor,
    index: np.ndarray | Sequence[object],
    step_weight: float = 1.0,
    gamma: float = 0.95,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
    turn_rewards: TurnRewards | None = None,
) -> tuple[Tensor, Tensor]:
    """GiGPO's advantages (module docstring): ``(advantages, returns)``, both (B, T).
    `turn_rewards`: per row, its turns' step rewards (None: none)."""
    where = "gigpo_advantage"
    _check_shapes(
        where, token_level_rewards=token_level_rewards, response_mask=response_mask, responses=responses
    )
    scores = (token_level_rewards * response_mask).sum(-1).to(torch.float64)
    size, total, std, _ = group_stats(scores, index, where)
    mean = total / size
    episode = (scores - mean) / (std + epsilon) if norm_by_std else scores - mean

    _, turns = turn_of_token(response_mask)
    returns = turn_returns(scores, step_reward_table(turn_rewards, turns, where), turns, gamma).tolist()
    masks, ids = response_mask.tolist(), responses.tolist()
    uids = list(np.asarray(index, dtype=object).reshape(-1))
    # step groups: (uid, state) -> the (row, turn) pairs that acted from it
    members: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for i, row in enumerate(masks):
        for k, (start, _) in enumerate(turn_spans(row)):
            members[(uids[i], _state_before(ids[i], row, start))].append((i, k))
    step = torch.zeros(len(masks), len(returns[0]) if returns else 0, dtype=torch.float64)
    for turns_of_state in members.values():
        values = torch.tensor([returns[i][k] for i, k in turns_of_state], dtype=torch.float64)
        for (i, k), rel in zip(turns_of_state, _relative(values, norm_by_std, epsilon).tolist(), strict=True):
            step[i, k] = rel
    adv = spread(episode[:, None] + step_weight * step, response_mask, token_level_rewards)
    return adv, adv.clone()


def turn_rloo_advantage(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: np.ndarray | Sequence[object],
    step_weight: float = 1.0,
    gamma: float = 1.0,
    turn_rewards: TurnRewards | None = None,
) -> tuple[Tensor, Tensor]:
    """The leave-one-out estimator per turn (module docstring): ``(advantages, returns)``, both
    (B, T); the returns are G_ik on the tokens of turn k."""
    where = "turn_rloo_advantage"
    _check_shapes(where, token_level_rewards=token_level_rewards, response_mask=response_mask)
    scores = (token_level_rewards * response_mask).sum(-1).to(torch.float64)
    size, total, _, flat = group_stats(scores, index, where)
    episode = torch.where(flat, torch.zeros_like(scores), scores - (total - scores) / (size - 1))
    _, turns = turn_of_token(response_mask)
    returns = turn_returns(scores, step_reward_table(turn_rewards, turns, where), turns, gamma)
    codes, n_groups = group_ids(index, len(scores), where)
    base = turn_baseline(returns, turns, codes, n_groups)
    adv = spread(episode[:, None] + step_weight * (returns - base), response_mask, token_level_rewards)
    return adv, spread(returns, response_mask, token_level_rewards)
