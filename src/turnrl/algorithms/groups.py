"""Per-prompt group statistics for the outcome estimators.

A group is the set of responses sharing a ``uid`` (the samples of one prompt, ``rollout.n`` of them).
Group ids may be any hashable value (str, int, numpy scalar); they need not be contiguous in the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor


def group_ids(index: np.ndarray | Sequence[object] | None, batch_size: int, where: str) -> tuple[Tensor, int]:
    """Map arbitrary hashable group ids (uids) to 0..G-1, in order of first appearance."""
    if index is None:
        raise ValueError(
            f"{where}: index (the uid of each response's prompt) is required for group baselines"
        )
    ids = list(np.asarray(index, dtype=object).reshape(-1))
    if len(ids) != batch_size:
        raise ValueError(f"{where}: index has {len(ids)} entries but the batch has {batch_size} responses")
    mapping: dict[object, int] = {}
    try:
        codes = [mapping.setdefault(uid, len(mapping)) for uid in ids]
    except TypeError as exc:
        raise ValueError(f"{where}: index entries must be hashable (str/int uids): {exc}") from exc
    return torch.tensor(codes, dtype=torch.long), len(mapping)


def group_stats(
    scores: Tensor, index: np.ndarray | Sequence[object] | None, where: str
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-response group size, group sum, unbiased group std and an all-equal flag (float64, shape (B,)).

    A group of one has no baseline: its advantage would be 0 (GRPO, REINFORCE++-baseline) or undefined
    (RLOO), so the response would silently train on nothing; that is an error.
    """
    codes, n_groups = group_ids(index, scores.shape[0], where)
    codes = codes.to(scores.device)
    s = scores.to(torch.float64)
    size = torch.zeros(n_groups, dtype=torch.float64, device=s.device).index_add_(
        0, codes, torch.ones_like(s)
    )
    if bool((size < 2).any()):
        lonely = np.asarray(index, dtype=object).reshape(-1)[(size[codes] < 2).cpu().numpy()]
        raise ValueError(
            f"{where}: group {lonely[0]!r} has a single response; group baselines need >= 2 samples per "
            "prompt (set rollout.n >= 2 and keep the same uid for a prompt's samples)"
        )
    total = torch.zeros_like(size).index_add_(0, codes, s)
    mean = total / size
    sq = torch.zeros_like(size).index_add_(0, codes, (s - mean[codes]) ** 2)
    std = torch.sqrt(sq / (size - 1))
    high = torch.full_like(size, -torch.inf).scatter_reduce(0, codes, s, reduce="amax")
    low = torch.full_like(size, torch.inf).scatter_reduce(0, codes, s, reduce="amin")
    # Compared exactly (not via std == 0) because a float mean of equal scores can be off by one ulp.
    flat = high == low
    return size[codes], total[codes], std[codes], flat[codes]
