"""How a batch is cut across data-parallel ranks and put back together.

The invariant every dispatch keeps: **the samples of one prompt (one `uid`) go to one rank,
whole.** Group estimators (GRPO, RLOO) need every sample of a group to compute a baseline,
and the trainer's forward shares a group's prompt pass across its samples; a group cut in two
would silently give each half its own baseline and pay for the prompt twice. Balancing by
tokens therefore moves whole groups, never single rows.

Shards hold their rows in the original order, and `gather` puts the ranks' results back in
the order of the batch that was dispatched, so callers never see the permutation.
"""

from __future__ import annotations

import heapq

import numpy as np
import torch

from turnrl.batch import Batch


def group_rows(uids: np.ndarray | list[object]) -> list[list[int]]:
    """Row indices of each uid group, groups in order of first appearance."""
    groups: dict[object, list[int]] = {}
    for i, u in enumerate(uids):
        groups.setdefault(u, []).append(i)
    return list(groups.values())


def balanced_partition(weights: list[int], k: int, equal_size: bool = True) -> list[list[int]]:
    """Split items (here: uid groups, weighted by tokens) into k parts of nearly equal total weight.

    Longest-processing-time first: heaviest item to the lightest part (max part <= 4/3 of the
    optimum, Graham 1969). With `equal_size` a part takes at most ceil(items / k) items, so
    ranks run the same number of forward passes (sharded models need every rank in every
    collective). Items in each part are returned in ascending order.
    """
    if k < 1:
        raise ValueError(f"cannot partition into {k} parts")
    cap = -(-len(weights) // k) if equal_size else len(weights)
    parts: list[list[int]] = [[] for _ in range(k)]
    heap = [(0, p) for p in range(k)]  # (load, part)
    order = sorted(range(len(weights)), key=lambda i: (-weights[i], i))
    for i in order:
        full = []
        load, p = heapq.heappop(heap)
        while len(parts[p]) >= cap:  # full parts leave the heap for good
            full.append((load, p))
            load, p = heapq.heappop(heap)
        parts[p].append(i)
        heapq.heappush(heap, (load + weights[i], p))
    return [sorted(p) for p in parts]


def shard_rows(batch: Batch, k: int) -> list[list[int]]:
    """Row indices per rank: whole uid groups, balanced by attended tokens."""
    if k == 1:
        return [list(range(len(batch)))]
    groups = group_rows(batch["uid"]) if "uid" in batch else [[i] for i in range(len(batch))]
    tokens = batch["attention_mask"].sum(-1) if "attention_mask" in batch else torch.ones(len(batch))
    weights = [int(tokens[g].sum()) for g in groups]
    return [[row for gi in part for row in groups[gi]] for part in balanced_partition(weights, k)]


def imbalance(batch: Batch, shards: list[list[int]]) -> float:
    """Tokens of the fullest rank over the mean (1.0 = perfect)."""
    tokens = batch["attention_mask"].sum(-1)
    loads = [float(tokens[s].sum()) for s in shards]
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean else 1.0


def scatter(batch: Batch, shards: list[list[int]]) -> list[Batch]:
    return [batch.index(rows) for rows in shards]


def gather(results: list[Batch], shards: list[list[int]]) -> Batch:
    """Concatenate the ranks' results and restore the dispatched batch's row order."""
    if len(results) == 1:
        return results[0]
    order = torch.tensor([row for s in shards for row in s])
    return Batch.concat(results).reorder(torch.argsort(order))
