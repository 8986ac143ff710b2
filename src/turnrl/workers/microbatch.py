"""Micro-batches that do not pay for padding: drop columns that are padding in every row."""

from __future__ import annotations

from collections.abc import Callable

import torch

from turnrl.batch import Batch

SEQUENCE_FIELDS = ("input_ids", "attention_mask", "position_ids")


def trim(batch: Batch) -> tuple[Batch, int]:
    """Drop all-padding left prompt columns and right response columns.

    Returns the trimmed batch and its response width; callers pad results back to the
    full width. Prompts are left-padded and responses right-padded, so both trims cut
    only columns that no row uses.
    """
    mask = batch["attention_mask"]
    full_r = batch["responses"].shape[1]
    prompt_w = mask.shape[1] - full_r
    used = mask.bool().any(dim=0)
    first = int(used[:prompt_w].nonzero()[0]) if used[:prompt_w].any() else prompt_w - 1
    resp_used = batch["response_mask"].bool().any(dim=0) | used[prompt_w:]
    r = int(resp_used.nonzero()[-1]) + 1 if resp_used.any() else 1
    keep = slice(first, prompt_w + r)
    out = Batch(dict(batch.tensors), dict(batch.non_tensors), dict(batch.meta))
    for key in SEQUENCE_FIELDS:
        out[key] = batch[key][:, keep]
    for key, value in batch.tensors.items():
        if key not in (*SEQUENCE_FIELDS, "prompts") and value.dim() == 2 and value.shape[1] == full_r:
            out[key] = value[:, :r]
    return out, r


def pad_right(x: torch.Tensor, width: int) -> torch.Tensor:
    if x.shape[1] == width:
        return x
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))


def forward_trimmed(
    mb: Batch, fn: Callable[[Batch, int], tuple[torch.Tensor, ...]]
) -> tuple[torch.Tensor, ...]:
    """Run `fn(trimmed_batch, response_width)` and pad its (B, r) outputs back to full width."""
    trimmed, r = trim(mb)
    width = mb["responses"].shape[1]
    return tuple(pad_right(o, width) for o in fn(trimmed, r))


def seq_args(b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return b["input_ids"], b["attention_mask"], b["position_ids"]
