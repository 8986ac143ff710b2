"""Micro-batches that do not pay for padding: drop columns that are padding in every row, and
(`use_dynamic_bsz`) group rows of similar length under a token budget instead of a row count."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

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


def trimmed_log_probs(
    model: Any, mb: Batch, device: torch.device, temperature: float, chunk_size: int, share_prompts: bool
) -> tuple[torch.Tensor, ...]:
    """(log_probs, entropy) of one micro-batch's responses through `model.response_log_probs`,
    on its trimmed columns, padded back to the full response width."""
    return forward_trimmed(
        mb.to(device),
        lambda b, r: model.response_log_probs(*seq_args(b), r, temperature, chunk_size, share_prompts),
    )


def row_lengths(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt, response) tokens of each row that a trimmed forward must cover: prompts are
    left-padded, responses right-padded (an agent's observations are attended, so they count)."""
    mask = batch["attention_mask"].bool()
    full_r = batch["responses"].shape[1]
    prompt = mask[:, :-full_r].sum(1) if mask.shape[1] > full_r else torch.zeros(len(mask), dtype=torch.long)
    used = mask[:, -full_r:] | batch["response_mask"].bool()
    cols = torch.arange(1, full_r + 1).expand_as(used)
    response = (cols * used).max(1).values  # the last used column, 1-based (0: empty)
    return prompt, response


def token_budget_split(batch: Batch, max_tokens: int, key: str) -> tuple[torch.Tensor, list[int]]:
    """Sort rows longest first and cut them into consecutive micro-batches whose padded size,
    rows x (longest prompt + longest response) after `trim`, stays within `max_tokens`.

    Returns the row order and the micro-batch sizes in that order. A row longer than the budget
    is an error naming `key`: it could not be computed at all.
    """
    prompt, response = row_lengths(batch)
    total = prompt + response
    longest = int(total.max()) if len(total) else 0
    if longest > max_tokens:
        raise ValueError(
            f"{key}={max_tokens} is smaller than one sequence of the batch ({longest} tokens): "
            f"raise it to at least the longest prompt + response"
        )
    order = torch.sort(total, descending=True, stable=True).indices
    sizes: list[int] = []
    rows = p_max = r_max = 0
    for i in order.tolist():
        p, r = max(p_max, int(prompt[i])), max(r_max, int(response[i]))
        if rows and (rows + 1) * (p + r) > max_tokens:
            sizes.append(rows)
            rows, p, r = 0, int(prompt[i]), int(response[i])
        rows, p_max, r_max = rows + 1, p, r
    if rows:
        sizes.append(rows)
    return order, sizes


def split_rows(
    batch: Batch, size: int, max_tokens: int = 0, key: str = ""
) -> tuple[list[Batch], torch.Tensor | None]:
    """Micro-batches of `size` rows, or with `max_tokens` > 0 of similar-length rows under that
    token budget. The second value is the row order of the micro-batches' concatenation (None:
    the batch's own order); `restore_order` undoes it."""
    if not max_tokens or not len(batch):
        return batch.split(size) if len(batch) else [], None
    order, sizes = token_budget_split(batch, max_tokens, key)
    ordered = batch.index(order)
    ends = list(itertools.accumulate(sizes))
    return [ordered.index(slice(e - n, e)) for e, n in zip(ends, sizes, strict=True)], order


def restore_order(x: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """Rows computed in `order` back to the batch's own order."""
    if order is None:
        return x
    out = torch.empty_like(x)
    out[order.to(x.device)] = x
    return out
