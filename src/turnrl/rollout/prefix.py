"""Prompt prefixes prefilled once: the one every row of a batch shares, and each row's own earlier
turn.

An agent's prompts all begin with the same system prompt and worked example, and every later turn
of an episode re-sends its whole conversation: on the search task a turn's prompt is 280-1,300
tokens, about 250 of them shared by every row and most of the rest already run in the episode's
previous turn. The engine runs the shared prefix for one row and copies its keys and values to
every row (`shared_prefix_length`); with a `prefix_store.PrefixStore` it also takes, for each row,
the keys and values its previous turn left (the prompt and the tokens it sampled), and prefills
only what is new: the observation and the next turn's opening.

For copied keys and values to serve every row, the batch is laid out in three blocks of columns:

    [the shared prefix | each row's cached tokens, right-aligned | each row's new tokens, left-padded]

with the padding masked out in the middle. Positions count real tokens only
(`position_ids_from_mask`), so every token keeps the position it has in the plain left-padded
layout and the model computes the same function of the same tokens.
"""

from __future__ import annotations

import torch

MIN_SHARED = 16
"""Below this many tokens the extra one-row forward costs more than the prefill it saves."""


def shared_prefix_length(rows: list[list[int]], min_shared: int = MIN_SHARED) -> int:
    """The longest prefix all `rows` share, leaving each at least one token of its own (the prefill
    needs each row's last position); 0 when that is under `min_shared` or there is one row."""
    if len(rows) < 2:
        return 0
    first, limit = rows[0], min(len(r) for r in rows) - 1
    k = 0
    while k < limit and all(r[k] == first[k] for r in rows):
        k += 1
    return k if k >= min_shared else 0


def prefix_layout(
    rows: list[list[int]], shared: int, pad_id: int, cached: list[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention_mask) of the three blocks: the first `shared` tokens (the same in every row),
    then row i's tokens `shared .. cached[i]` right-aligned (None: no row has any), then the rest
    left-padded so that every row ends at the last column. Hand-worked in the tests."""
    cached = cached or [shared] * len(rows)
    width_cached = max(c - shared for c in cached)
    width_new = max(len(r) - c for r, c in zip(rows, cached, strict=True))
    b = len(rows)
    ids = torch.full((b, shared + width_cached + width_new), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (row, c) in enumerate(zip(rows, cached, strict=True)):
        ids[i, :shared], mask[i, :shared] = torch.tensor(row[:shared], dtype=torch.long), 1
        if c > shared:
            end = shared + width_cached
            ids[i, end - (c - shared) : end] = torch.tensor(row[shared:c], dtype=torch.long)
            mask[i, end - (c - shared) : end] = 1
        if len(row) > c:
            ids[i, -(len(row) - c) :] = torch.tensor(row[c:], dtype=torch.long)
            mask[i, -(len(row) - c) :] = 1
    return ids, mask
