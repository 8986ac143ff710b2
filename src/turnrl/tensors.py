"""Tensor helpers that every stage shares: the rollout engines, the data loader and the roles all
pad prompts the same way, so the helpers sit at the bottom of the package, below all of them."""

from __future__ import annotations

import torch


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad id lists into (ids, attention_mask) so every prompt ends at the same column."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        if s:
            ids[r, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[r, width - len(s) :] = 1
    return ids, mask


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Positions count real tokens only, so left padding does not shift them."""
    return (mask.cumsum(-1) - 1).clamp(min=0) * mask
