"""Credit per model turn for multi-turn episodes: GiGPO (Feng et al. 2025, "Group-in-Group Policy
Optimization for LLM Agent Training", arXiv 2505.10978).

An outcome estimator gives every turn of an episode the same advantage, so a turn that searched
again and a turn that stopped too early share one number. GiGPO adds a second, step-level
relative advantage: turns that acted from the same state (an *anchor state*) are compared with one
another by their discounted returns.

Here a state is what the environment showed just before the turn: the prompt for a first turn,
the observation tokens (the maximal mask-0 run) right before a later turn, both within one prompt's
group (`uid`). A turn is a maximal run of model tokens (mask 1) in the response. With the episode's
score R (its summed token rewards) and K turns, turn k's return is gamma^(K-1-k) * R: the reward sits
at the end, so later turns are closer to it. Then, per token of turn k of episode i:

    A = A_episode(i) + step_weight * A_step(i, k)
    A_episode(i) = (R_i - mean_group R) / (std_group R + eps)                  (GRPO)
    A_step(i, k) = (G_ik - mean_state G) / (std_state G + eps)   over the turns of one state

A state reached by one turn only has no comparison: its A_step is 0 (as is any state whose
returns are all equal). `norm_by_std=False` drops both divisions (Dr. GRPO). Observation tokens
and padding get exactly 0. The returns (never read: no critic) equal the advantages.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from turnrl.algorithms.groups import group_stats


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
) -> tuple[Tensor, Tensor]:
    """GiGPO's advantages (module docstring): ``(advantages, returns)``, both (B, T)."""
    where = "gigpo_advantage"
    if not (token_level_rewards.shape == response_mask.shape == responses.shape):
        raise ValueError(
            f"{where}: token_level_rewards {tuple(token_level_rewards.shape)}, response_mask "
            f"{tuple(response_mask.shape)} and responses {tuple(responses.shape)} must have one shape"
        )
    scores = (token_level_rewards * response_mask).sum(-1).to(torch.float64)
    size, total, std, _ = group_stats(scores, index, where)
    mean = total / size
    episode = (scores - mean) / (std + epsilon) if norm_by_std else scores - mean

    masks, ids = response_mask.tolist(), responses.tolist()
    uids = list(np.asarray(index, dtype=object).reshape(-1))
    spans = [turn_spans(row) for row in masks]
    # step groups: (uid, state) -> the (row, turn) pairs that acted from it, and their returns
    members: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    returns: dict[tuple[int, int], float] = {}
    for i, row_spans in enumerate(spans):
        k_turns = len(row_spans)
        for k, (start, _) in enumerate(row_spans):
            members[(uids[i], _state_before(ids[i], masks[i], start))].append((i, k))
            returns[(i, k)] = gamma ** (k_turns - 1 - k) * float(scores[i])
    step: dict[tuple[int, int], float] = {}
    for turns in members.values():
        rel = _relative(torch.tensor([returns[t] for t in turns], dtype=torch.float64), norm_by_std, epsilon)
        step.update(zip(turns, rel.tolist(), strict=True))

    adv = torch.zeros_like(token_level_rewards, dtype=torch.float64)
    for i, row_spans in enumerate(spans):
        for k, (start, end) in enumerate(row_spans):
            adv[i, start:end] = float(episode[i]) + step_weight * step[(i, k)]
    adv = adv.to(token_level_rewards.dtype) * response_mask.to(token_level_rewards.dtype)
    return adv, adv.clone()
